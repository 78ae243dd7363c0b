#!/usr/bin/env bash
# tests/integration/docs.sh - the documents say what the code does, where a script can check it:
# - README's job-key table names every key of the job parser (train/job.c's K_* table), each in
#   its section's row;
# - docs/NETWORK.md numbers the join steps 0, 1, 2, ... with no gap;
# - every place that lists doctor's --model names every model (train/job.c's model_names):
#   `doctor --help`, gradmesh(1), docs/*.md, the completion;
# - `make install` into a scratch DESTDIR installs README.md with the documents it links to:
#   every relative link of the installed README and docs resolves there.
# - the bash completion completes job ids (cancel, jobs --follow), node ids (revoke, role) and
#   checkpoint ids (checkpoint export) from what the agent answers (a stand-in gradmesh that
#   prints an agent's JSON), and passes the line's --config on;
# (The demo's accuracy against README's: tests/integration/demo_readme.sh.)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

# --- the job-key table ----------------------------------------------------------------------------
sed -n 's/^ *K_[A-Z0-9]*("\([a-z]*\)", "\([a-z_0-9]*\)".*/\1 \2/p' train/job.c >"$WORK/keys"
[ "$(wc -l <"$WORK/keys")" -ge 30 ] || fail "found only $(wc -l <"$WORK/keys") keys in train/job.c"
missing=()
while read -r sec key; do
    row=$(grep "^| \`\[$sec\]\` |" README.md) || { missing+=("[$sec] (no row)"); continue; }
    grep -q "\`$key\`" <<<"$row" || missing+=("[$sec] $key")
done <"$WORK/keys"
[ ${#missing[@]} -eq 0 ] || fail "README's job-key table lacks: ${missing[*]}"
pass "README's job-key table names all $(wc -l <"$WORK/keys") keys of train/job.c"

# --- NETWORK.md's join steps --------------------------------------------------------------------------
steps=$(awk '/^## Join/ {on = 1; next} /^## / {on = 0} on' docs/NETWORK.md | sed -n 's/^\([0-9]\)\. .*/\1/p' | tr -d '\n')
[ "$steps" = "01234" ] || fail "NETWORK.md numbers the join steps $steps"
pass "NETWORK.md's join steps are 0-4"

# --- doctor --model lists every model -----------------------------------------------------------------
models=$(awk '/model_names\[\] = \{/ {on = 1} on {print} /NULL\};/ {if (on) exit}' train/job.c |
    sed 's/.*{//; s/NULL};.*//' | tr -d '",' | tr -s ' \n' ' ')
[ -n "$models" ] || fail "no model_names in train/job.c"
"$GM" doctor --help >"$WORK/doctor.help"
{
    echo "doctor --help:$(tr '\n' ' ' <"$WORK/doctor.help")"
    echo "gradmesh.1:$(awk '/^\.SS doctor/ {on = 1; next} /^\.S[SH] / {on = 0} on' docs/man/gradmesh.1 | tr '\n' ' ')"
    echo "completion:$(grep -A1 -- '--model)' completion/gradmesh | tr '\n' ' ')"
    grep -H -- "doctor.*--model" README.md docs/*.md
} >"$WORK/model-lists"
while IFS= read -r line; do
    for m in $models; do
        grep -qw "$m" <<<"$line" || fail "does not list model $m: $line"
    done
done <"$WORK/model-lists"
pass "doctor's --model lists $(echo $models) in $(wc -l <"$WORK/model-lists") places"

# --- make install: README and the documents it links to ---------------------------------------------
if [ -x ./gradmesh ]; then
    # -o gradmesh: install the binary as built, never rebuild it here
    make -s -o gradmesh install DESTDIR="$WORK/root" PREFIX=/usr >"$WORK/install.log" 2>&1 ||
        fail "make install: $(tail -5 "$WORK/install.log")"
    doc=$WORK/root/usr/share/doc/gradmesh
    [ -f "$doc/README.md" ] || fail "no README.md in $doc"
    n=0
    for f in "$doc/README.md" "$doc"/docs/*.md; do
        for link in $(grep -o '](\([^)#]*\)' "$f" | sed 's/^](//' | grep -v '^[a-z]*:' | sort -u); do
            [ -n "$link" ] || continue
            [ -e "$(dirname "$f")/$link" ] || fail "installed $(basename "$f") links to $link, which is not installed"
            n=$((n + 1))
        done
    done
    [ $n -ge 5 ] || fail "only $n relative links checked"
    pass "make install: README.md and the $n documents its and their relative links name are installed"
else
    echo "no ./gradmesh: make install not checked"
fi

# --- completion of job, node and checkpoint ids ---------------------------------------------------
mkdir -p "$WORK/bin"
cat >"$WORK/bin/gradmesh" <<'STUB'
#!/bin/sh
# a stand-in for the agent's answers; records its arguments
echo "$*" >>"${0%/*}/calls"
case "$1 $2" in
"jobs --json") printf '{\n  "jobs": [\n    {\n      "id": "0123456789abcdef",\n      "links": [{"node": "b2"}]\n    },\n    {\n      "id": "fedcba9876543210"\n    }\n  ]\n}\n' ;;
"members --json") echo '{"chief": "a1", "members": [{"node": "a1", "role": "voter"}, {"node": "b2", "role": "spare"}], "revoked": [{"node": "x9"}]}' ;;
"checkpoint list") echo '[{"id": "0a1b2c3d4e5f6a7b-600", "step": 600}, {"id": "0a1b2c3d4e5f6a7b-624", "step": 624}]' ;;
esac
STUB
chmod +x "$WORK/bin/gradmesh"
comp() { # comp WORD...: the completions of the last word, as bash gives them
    PATH="$WORK/bin:$PATH" bash -c '. completion/gradmesh; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _gradmesh
        printf "%s\n" "${COMPREPLY[@]}"' _ "$@" | sort | tr '\n' ' '
}
[ "$(comp gradmesh cancel "")" = "0123456789abcdef fedcba9876543210 " ] || fail "cancel ID completes to: $(comp gradmesh cancel "")"
[ "$(comp gradmesh jobs --follow f)" = "fedcba9876543210 " ] || fail "jobs --follow ID completes to: $(comp gradmesh jobs --follow f)"
[ "$(comp gradmesh revoke "")" = "a1 b2 x9 " ] || fail "revoke NODE completes to: $(comp gradmesh revoke "")"
[ "$(comp gradmesh role b)" = "b2 " ] || fail "role NODE completes to: $(comp gradmesh role b)"
[ "$(comp gradmesh role b2 v)" = "voter " ] || fail "role NODE ROLE completes to: $(comp gradmesh role b2 v)"
[ "$(comp gradmesh checkpoint export "")" = "0a1b2c3d4e5f6a7b-600 0a1b2c3d4e5f6a7b-624 latest " ] ||
    fail "checkpoint export ID completes to: $(comp gradmesh checkpoint export "")"
rm -f "$WORK/bin/calls"
comp gradmesh cancel --config /etc/gradmesh/lab.conf "" >/dev/null
grep -qx "jobs --json --config /etc/gradmesh/lab.conf" "$WORK/bin/calls" || fail "completion dropped --config: $(cat "$WORK/bin/calls")"
pass "completion: job ids (cancel, jobs --follow), node ids (revoke, role), checkpoint ids (export), with the line's --config"
