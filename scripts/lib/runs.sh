# Sourced by the benchmark scripts that compare libraries run by run: a time limit on every run,
# and a probe of the host's mode around each bench of each round.
#
#   runs_init <out>            reads OSU_RUN_TIMEOUT, starts <out>/stopped.tsv and <out>/modes.tsv
#   "${limit[@]}" cmd ...      runs cmd under the limit (an empty array when there is none)
#   run_ended <status> <round> <bench> <impl>
#                              after a run: a run the limit stopped is noted and reported, any
#                              other failure ends the script with its status
#   note_mode <round> <bench> <before> <after>
#   runs_report                prints the modes, and the stopped runs if any
#   busy_start <how> / busy_stop
#                              one busy process for the length of a run: a spinning `yes`
#                              pinned to rank 1's core (pinned) or left to the scheduler (free);
#                              nothing when <how> is empty
#   option_sets <sets>         splits a bench's options at ';' into the array option_sets (blank
#                              sets left out): one run each, one after the other
#
# Every run is stopped after OSU_RUN_TIMEOUT seconds (default 600; 0 = never): with more ranks
# than cores, a library can fall into a way of waiting that takes tens of minutes for one run
# (MPICH 4.0.2 at 4 ranks on 2 cores did). The sizes a stopped run printed are kept; the run is
# listed in <out>/stopped.tsv and named again at the end, so a missing size is never silent.
#
# This project's host switches between two modes every few minutes (its two vCPUs land on
# cores that share more or less; 8-byte latency is about 0.07 µs in one and 0.29 in the other,
# for every library). The scripts bracket each bench of each round with a probe of the mode,
# ch4's 8-byte shared-memory latency between two ranks, so that rounds can be told apart and a
# round that changed mode half-way can be left out: <out>/modes.tsv.

runs_init() {
    runs_out="$1"
    run_timeout="${OSU_RUN_TIMEOUT:-600}"
    case "$run_timeout" in
        '' | *[!0-9]*) echo "OSU_RUN_TIMEOUT takes whole seconds, not '$run_timeout'" >&2; exit 2 ;;
    esac
    # SIGTERM first: every launcher here forwards it to its ranks; SIGKILL 10 s later if not.
    limit=(timeout --kill-after=10 "$run_timeout")
    [ "$run_timeout" != 0 ] || limit=()
    printf 'round\tbench\timpl\tseconds\n' >"$runs_out/stopped.tsv"
    printf 'round\tbench\tbefore_us\tafter_us\n' >"$runs_out/modes.tsv"
}

run_ended() {
    local status="$1" round="$2" bench="$3" impl="$4"
    # timeout(1) exits 124 when it stopped the run (137 when SIGKILL was needed).
    if [ "$status" = 124 ] || [ "$status" = 137 ]; then
        echo "round $round: $impl $bench stopped after ${run_timeout} s; the sizes it printed are kept" >&2
        printf '%s\t%s\t%s\t%s\n' "$round" "$bench" "$impl" "$run_timeout" >>"$runs_out/stopped.tsv"
    elif [ "$status" != 0 ]; then
        echo "round $round: $impl $bench failed (exit $status)" >&2
        exit "$status"
    fi
}

note_mode() {
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "${3:-?}" "${4:-?}" >>"$runs_out/modes.tsv"
}

runs_report() {
    echo "The host's mode around each round's runs (ch4's 8 B latency in µs, before and after):" >&2
    column -t "$runs_out/modes.tsv" >&2
    if [ "$(wc -l <"$runs_out/stopped.tsv")" -gt 1 ]; then
        echo "Runs stopped by OSU_RUN_TIMEOUT (their missing sizes are not in the medians):" >&2
        column -t "$runs_out/stopped.tsv" >&2
    fi
}

busy_pid=""
busy_start() {
    case "$1" in
        pinned) taskset -c 1 yes >/dev/null & busy_pid=$! ;;
        free) yes >/dev/null & busy_pid=$! ;;
        '') ;;
        *) echo "--busy takes pinned or free, not '$1'" >&2; exit 2 ;;
    esac
}
busy_stop() {
    [ -z "$busy_pid" ] || { kill "$busy_pid" 2>/dev/null; wait "$busy_pid" 2>/dev/null || true; }
    busy_pid=""
}
trap busy_stop EXIT

option_sets() {
    local all set
    IFS=';' read -r -a all <<<"$1"
    option_sets=()
    for set in "${all[@]}"; do
        [ -z "${set// /}" ] || option_sets+=("$set")
    done
}
