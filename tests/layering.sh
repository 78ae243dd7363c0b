#!/usr/bin/env bash
# tests/layering.sh - the one-way arrows of docs/ARCHITECTURE.md, checked on every include.
#
# Modules, bottom up:   common < crypto < discovery < train < agent
# agent/'s rooms:       net < service < core < mesh < cluster < jobs < (root) < cli
#   - a file may include only files of its own module or room, or of one below it;
#   - nothing in a room includes the composition root (agent/agent.h, views.h, drain.h) or cli/;
#   - inside the root, views.c and drain.c include no root header but their own: agent.c
#     calls them, they never call back;
#   - train/ is independent of crypto/ and discovery/: it includes common/ and train/ only.
#   - with a build (GM_BUILD, default build/), no object of a room uses a symbol that an object
#     of a room above defines: calls through a hand-written declaration are caught too.
# Every offending include is printed as FILE:LINE: INCLUDE (why), and the script exits 1.
# Usage: bash tests/layering.sh [ROOT]   (ROOT: the tree to check, default the repository's)
#        bash tests/layering.sh --selftest  (the check fails on a copy with upward includes)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = --selftest ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$here" && cp -r --parents $(git ls-files -- common crypto discovery train agent) "$tmp"/)
    bash "$0" "$tmp" >/dev/null || { echo "selftest: the clean copy fails"; exit 1; }
    n=0
    for bad in "agent/net/frame.h|agent/jobs/job.h|points up" \
        "agent/cluster/chief.c|agent/agent.h|points up" \
        "agent/views.c|agent/drain.h|inside the root" \
        "train/trainer.c|crypto/tls.h|train/ uses only common/" \
        "common/log.c|train/job.h|points up" \
        "agent/jobs/job.c|job_partition.c|calls up"; do
        IFS='|' read -r file inc why <<<"$bad"
        cp "$tmp/$file" "$tmp/$file.orig"
        if [ "$why" = "calls up" ]; then # a call from the spine to a file above it
            printf 'static void probe(void) { jobs_step_down(NULL, NULL, ""); }\n' >>"$tmp/$file"
            inc=jobs_step_down
        else
            printf '#include "%s"\n' "$inc" >>"$tmp/$file"
        fi
        out=$(bash "$0" "$tmp")
        rc=$?
        mv "$tmp/$file.orig" "$tmp/$file"
        if [ $rc -ne 1 ] || ! grep -qF "$file:" <<<"$out" || ! grep -qE "(#include \"$inc\"|$inc) \($why" <<<"$out"; then
            echo "selftest: an include of $inc from $file was not refused (exit $rc): $out"
            exit 1
        fi
        echo "refused as expected: $(grep -F "$file:" <<<"$out")"
        n=$((n + 1))
    done
    echo "selftest: $n upward includes refused, the clean copy passes"
    exit 0
fi

root=${1:-$here}
cd "$root" || exit 2

rooms=(net service core mesh cluster jobs root cli)

# The rank of an include target or a source file: "module" or "agent/<room>".
rank_of() { # path -> prints a number, or nothing for a path outside the layered tree
    case $1 in
    common/*) echo 0 ;;
    crypto/*) echo 1 ;;
    discovery/*) echo 2 ;;
    train/*) echo 3 ;;
    agent/*/*)
        local r i
        r=${1#agent/}; r=${r%%/*}
        for i in "${!rooms[@]}"; do
            [ "${rooms[$i]}" = "$r" ] && { echo $((10 + i)); return; }
        done
        echo 99 ;; # an unknown room: always an error (below)
    agent/*) echo $((10 + 6)) ;; # the composition root
    esac
}

layer_name() { # path -> "train/", "agent/jobs/", "agent/ (the root)"
    case $1 in
    agent/*/*) local r=${1#agent/}; echo "agent/${r%%/*}/" ;;
    agent/*) echo "agent/ (the root)" ;;
    *) echo "${1%%/*}/" ;;
    esac
}

bad=0
report() { # file line include why
    echo "$1:$2: #include \"$3\" ($4)"
    bad=1
}

while IFS= read -r f; do
    from=$(rank_of "$f")
    [ -n "$from" ] || continue
    if [ "$from" = 99 ]; then
        echo "$f: agent/ sub-folder not in the room order (${rooms[*]}); add it to tests/layering.sh"
        bad=1
        continue
    fi
    while IFS=: read -r line inc; do
        inc=${inc#*\"}; inc=${inc%%\"*}
        to=$(rank_of "$inc")
        [ -n "$to" ] || continue # system and third-party headers
        if [ "$to" -gt "$from" ]; then
            report "$f" "$line" "$inc" "points up: $(layer_name "$f") may not use $(layer_name "$inc")"
        elif [ "$from" = 3 ] && [ "$to" -ne 0 ] && [ "$to" -ne 3 ]; then
            report "$f" "$line" "$inc" "train/ uses only common/"
        elif [ "$from" -ge 10 ] && [ "$from" -lt 16 ] && [ "$to" -eq 16 ]; then
            report "$f" "$line" "$inc" "a room includes the composition root"
        elif [ "$from" -eq 16 ] && [ "$to" -eq 16 ] && [ "$f" != agent/agent.c ] &&
            [ "${inc%.h}" != "${f%.[ch]}" ]; then
            report "$f" "$line" "$inc" "inside the root only agent.c uses the others"
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f")
done < <(
    git ls-files -- 'common/*.[ch]' 'crypto/*.[ch]' 'discovery/*.[ch]' 'train/*.[ch]' \
        'train/*.cu' 'agent/*.[ch]' 2>/dev/null || find common crypto discovery train agent \
        -name '*.[ch]' -o -name '*.cu'
)
# Inside the job room, the files share agent/jobs/job_int.h; its prototypes are grouped under a
# "/* job_x.c */" line per file, bottom up, and a file may call only the jobs_ functions of the
# files listed before it (or its own).
ji=agent/jobs/job_int.h
if [ -f "$ji" ]; then
    order=$(grep -o '^/\* job[a-z_]*\.c \*/$' "$ji" | sed 's#^/\* ##; s# \*/$##')
    k=0
    for f in $order; do
        k=$((k + 1))
        later=$(echo $order | cut -d' ' -f$((k + 1))- -s)
        for g in $later; do
            for fn in $(awk -v g="/* $g */" '$0 == g {on = 1; next} /^\/\* job/ {on = 0} on' "$ji" |
                grep -o 'jobs_[a-z_0-9]*(' | tr -d '('); do
                hit=$(grep -n "\b$fn\b" "agent/jobs/$f" | head -n 1)
                [ -n "$hit" ] || continue
                echo "agent/jobs/$f:${hit%%:*}: $fn (calls up: $f may not use $g, above it in $ji)"
                bad=1
            done
        done
    done
fi

# Calls, from the objects of a build (when there is one: make test builds first): no object
# of a room uses a symbol defined by an object of a room above it, whatever declared it.
objs=${GM_BUILD:-build}/agent
if [ -d "$objs" ] && [ "$root" = "$here" ]; then
    calls=$(find "$objs" -name '*.o' -print0 | xargs -0 -r nm -A 2>/dev/null | awk -v b="$objs/" \
        -v order="${rooms[*]}" '
        BEGIN { n = split(order, o, " "); for (i = 1; i <= n; i++) rk[o[i]] = i }
        function rank(f,   r, parts) { # build/agent/ROOM/x.o -> its room; build/agent/x.o: root
            r = substr(f, length(b) + 1)
            if (split(r, parts, "/") == 1) return rk["root"]
            return (parts[1] in rk) ? rk[parts[1]] : 99
        }
        { f = $1; sub(/:.*/, "", f) }
        NF == 3 && $2 ~ /^[TDBR]$/ { def[$3] = f }
        NF == 3 && $2 == "U" { use[f, $3] = 1 }
        END {
            for (k in use) {
                split(k, a, SUBSEP)
                if ((a[2] in def) && rank(def[a[2]]) > rank(a[1]))
                    printf "%s: uses %s, defined in %s (a room above)\n", a[1], a[2], def[a[2]]
            }
        }')
    if [ -n "$calls" ]; then
        echo "$calls"
        bad=1
    fi
fi

[ $bad -eq 0 ] && echo "layering: every include points down (${rooms[*]}); the job room's files call down"
exit $bad
