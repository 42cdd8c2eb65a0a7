# shellcheck shell=bash
# What the scripts that regenerate our bindings (scripts/regen-*-bindings.sh) share; sourced
# by them, from the workspace's root.
#
#   pinned_bindgen                  sets $bindgen to a bindgen-cli of $BINDGEN_VERSION: the one on
#                                   PATH if it is that version, else one installed (once) under
#                                   target/tools/. The output depends on bindgen's version, so
#                                   every regeneration uses the same one.
#   retype_anonymous_enums IN OUT   copies bindgen's output IN to OUT with each constant of an
#                                   anonymous C enum typed by its integer type instead of a
#                                   numbered alias (`_bindgen_ty_4`), whose numbers shift
#                                   whenever the headers gain or lose an anonymous enum; fails if
#                                   one is left.
#   write_bindings FILE OUT         formats FILE (rustfmt) and moves it to OUT.

BINDGEN_VERSION=0.73.2

# shellcheck disable=SC2034 # $bindgen is read by the script that sourced this file
pinned_bindgen() {
    if command -v bindgen >/dev/null 2>&1 &&
        [ "$(bindgen --version 2>/dev/null)" = "bindgen $BINDGEN_VERSION" ]; then
        bindgen=bindgen
        return
    fi
    local root=target/tools/bindgen-cli-$BINDGEN_VERSION
    if [ ! -x "$root/bin/bindgen" ]; then
        echo "installing bindgen-cli $BINDGEN_VERSION into $root ..."
        cargo install --quiet --locked --root "$root" bindgen-cli --version "=$BINDGEN_VERSION"
    fi
    bindgen=$root/bin/bindgen
}

retype_anonymous_enums() { # in, out
    local retype=() alias type
    while read -r alias type; do
        retype+=(-e "s/^\(pub const [A-Za-z0-9_]*\): $alias = /\1: $type = /")
    done < <(sed -n 's/^pub type \(_bindgen_ty_[0-9]*\) = \(.*\);$/\1 \2/p' "$1")
    sed "${retype[@]}" -e '/^pub type _bindgen_ty_[0-9]* = /d' "$1" >"$2"
    if grep -n ': _bindgen_ty_[0-9]* = \|^pub type _bindgen_ty_' "$2"; then
        echo "error: constants left with a numbered enum type (above)" >&2
        return 1
    fi
}

write_bindings() { # file, out
    rustfmt --edition 2021 "$1"
    mv "$1" "$2"
    echo "wrote $2 ($(wc -l <"$2") lines)"
}
