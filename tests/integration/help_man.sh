#!/usr/bin/env bash
# tests/integration/help_man.sh - `gradmesh VERB --help`, the man page's section for VERB and
# the bash completion name the same options, and the verb's parser accepts each of them.
# Also: every verb answers --help with exit 0 on stdout, `gradmesh --help` lists every verb,
# and a usage error points to --help with exit 2.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

export GRADMESH_CONFIG=$WORK/absent.conf   # nothing here may touch /etc/gradmesh
MAN=docs/man/gradmesh.1
verbs=$(sed -n 's/^\.SS \([a-z]*\)$/\1/p' "$MAN")
[ "$(echo $verbs)" = "init join leave agent token status peers doctor members revoke role submit jobs cancel checkpoint train version" ] ||
    fail "man page verbs: $(echo $verbs)"

# options of a man page section: \-\-name tokens between ".SS VERB" and the next .SS/.SH
man_opts() {
    awk -v v="$1" '/^\.S[SH] / { on = ($0 == ".SS " v) ; next } on' "$MAN" |
        sed 's/\\-/-/g' | grep -o -- '--[a-z][a-z-]*' | grep -vx -- '--help' | sort -u
}
help_opts() { "$GM" "$1" --help | grep -o -- '--[a-z][a-z-]*' | grep -vx -- '--help' | sort -u; }
comp_opts() {
    bash -c '. completion/gradmesh; COMP_WORDS=(gradmesh '"$1"' x --); COMP_CWORD=3; _gradmesh
             printf "%s\n" "${COMPREPLY[@]}"' | grep -vx -- '--help' | sort -u
}

"$GM" --help >"$WORK/help.txt" || fail "gradmesh --help exit $?"
for v in $verbs; do
    grep -q "^  $v " "$WORK/help.txt" || fail "gradmesh --help does not list $v"
    "$GM" "$v" --help >"$WORK/$v.help" 2>"$WORK/$v.err" || fail "$v --help exit $?"
    [ -s "$WORK/$v.err" ] && fail "$v --help wrote to stderr: $(cat "$WORK/$v.err")"
    grep -q "^usage: gradmesh $v " "$WORK/$v.help" || fail "$v --help has no usage line"
    h=$(help_opts "$v"); m=$(man_opts "$v"); c=$(comp_opts "$v")
    [ -n "$h" ] || fail "$v --help names no option"
    [ "$h" = "$m" ] || fail "$v: --help and man page differ: help[$(echo $h)] man[$(echo $m)]"
    [ "$h" = "$c" ] || fail "$v: --help and completion differ: help[$(echo $h)] completion[$(echo $c)]"
    for o in $h; do
        "$GM" "$v" "$o" </dev/null >/dev/null 2>"$WORK/o.err"
        grep -q "unrecognized option" "$WORK/o.err" && fail "$v --help lists $o, the parser refuses it"
    done
    "$GM" "$v" --no-such-option >/dev/null 2>"$WORK/o.err"; rc=$?
    [ $rc -eq 2 ] || fail "$v --no-such-option exit $rc, want 2"
    grep -q "Try 'gradmesh $v --help'" "$WORK/o.err" || fail "$v usage error does not point to --help"
    pass "$v: --help, man page and completion agree on $(echo $h | wc -w) options"
done
"$GM" help train | grep -q "^usage: gradmesh train" || fail "gradmesh help train"
"$GM" nosuchverb >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown verb exit"
pass "gradmesh --help lists every verb; unknown verbs exit 2"
