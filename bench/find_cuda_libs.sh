#!/usr/bin/env bash
# Where cuBLAS and cuDNN are on this machine, for bench/gpu_check.sh: one line per library,
# "SONAME DIR" (found) or "SONAME -" (not found), and exit 0 when all were found, else 1.
#   bench/find_cuda_libs.sh [SONAME...]   default: libcublasLt.so.13 libcublas.so.13 libcudnn.so.9
# Looked for, in order (the first place that has the file wins):
#   1. CUDA_LIBDIR (default /usr/local/cuda/lib64: an apt or runfile toolkit);
#   2. the directories of LD_LIBRARY_PATH;
#   3. ld.so.cache (`ldconfig -p`, read whole into a variable: `ldconfig -p | grep -q` under
#      pipefail reads a present library as missing whenever grep exits first and ldconfig
#      dies of SIGPIPE), only where the file it names exists;
#   4. PyTorch's wheels, in every sys.path / site-packages directory of PYTHON, python3 and
#      /usr/bin/python3: SITE/nvidia/*/lib/SONAME covers both layouts, the CUDA 12 wheels'
#      (nvidia/cublas/lib, nvidia/cudnn/lib) and the CUDA 13 ones' (nvidia/cu13/lib), and
#      SITE/torch/lib/SONAME (builds that carry their own copy);
#   5. `find FIND_ROOTS -xdev -name SONAME` (default FIND_ROOTS: /; at most FIND_SECONDS, 60).
# LDCONFIG (default ldconfig) names the cache reader (tests/integration/gpu_check_sim.sh
# passes `true` to leave this machine's cache out).
set -uo pipefail
libs=("$@")
[ ${#libs[@]} -gt 0 ] || libs=(libcublasLt.so.13 libcublas.so.13 libcudnn.so.9)

cache=$(${LDCONFIG:-ldconfig} -p 2>/dev/null || true)
sites=$(
    for py in ${PYTHON:-} python3 /usr/bin/python3; do
        command -v "$py" >/dev/null 2>&1 || continue
        timeout 60 "$py" - 2>/dev/null <<'PY' || true
import site, sys
dirs = list(sys.path)
try:
    dirs += site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
for d in dirs:
    if d:
        print(d)
PY
    done | awk '!seen[$0]++'
)

find_one() { # soname -> dir on stdout, or nothing
    local d f
    for d in ${CUDA_LIBDIR:-/usr/local/cuda/lib64} $(tr : " " <<<"${LD_LIBRARY_PATH:-}"); do
        [ -e "$d/$1" ] && { echo "$d"; return; }
    done
    while read -r f; do
        [ -n "$f" ] && [ -e "$f" ] && { dirname "$f"; return; }
    done < <(awk -v so="$1" '$1 == so { print $NF }' <<<"$cache")
    while IFS= read -r d; do
        [ -d "$d" ] || continue
        for f in "$d"/nvidia/*/lib/"$1" "$d"/torch/lib/"$1"; do
            [ -e "$f" ] && { dirname "$f"; return; }
        done
    done <<<"$sites"
    f=$(timeout "${FIND_SECONDS:-60}" find ${FIND_ROOTS:-/} -xdev -name "$1" \( -type f -o -type l \) \
        2>/dev/null | head -1)
    [ -n "$f" ] && dirname "$f"
}

rc=0
for l in "${libs[@]}"; do
    d=$(find_one "$l")
    if [ -n "$d" ]; then
        echo "$l $d"
    else
        echo "$l -"
        rc=1
    fi
done
exit $rc
