# Sourced by the comparison scripts: keeps a run in the results record (docs/results/, one page
# per topic with its runs beside it; docs/results/README.md describes the layout).
#
#   record_option <label>      the value of --record: checks it and remembers it
#   record_begin <topic>       before the runs: the run's directory, docs/results/<topic>/
#                              <today>-<label>/, must not exist yet (no work lost at the end)
#   record_end <out>           after the runs: copies <out>'s tables (results.tsv, modes.tsv,
#                              stopped.tsv when a run was stopped, summary.txt) and charts there
#
# Without --record nothing is kept outside target/.
record_label=""
record_dir=""

record_option() {
    case "$1" in
        '' | -* | *[!a-z0-9-]*)
            echo "--record takes a label of lower-case letters, digits and hyphens (e.g. latency-fast), not '$1'" >&2
            exit 2
            ;;
    esac
    record_label="$1"
}

record_begin() {
    [ -n "$record_label" ] || return 0
    record_dir="docs/results/$1/$(date -u +%F)-$record_label"
    if [ -e "$record_dir" ]; then
        echo "$record_dir exists already: pick another --record label" >&2
        exit 2
    fi
}

record_end() {
    [ -n "$record_dir" ] || return 0
    local out="$1" f
    mkdir -p "$record_dir"
    for f in results.tsv modes.tsv summary.txt; do
        [ ! -s "$out/$f" ] || cp "$out/$f" "$record_dir/"
    done
    # stopped.tsv only when it lists a run (beyond its header line).
    [ ! -e "$out/stopped.tsv" ] || [ "$(wc -l <"$out/stopped.tsv")" -le 1 ] ||
        cp "$out/stopped.tsv" "$record_dir/"
    for f in "$out"/*.png; do
        [ ! -e "$f" ] || cp "$f" "$record_dir/"
    done
    echo "recorded in $record_dir: describe it on docs/results/$(basename "$(dirname "$record_dir")").md" >&2
}
