#!/usr/bin/env bash
# tests/integration/demo_readme.sh - `make demo` (tests/demo.sh) prints the test accuracy that
# README.md quotes for it: the run is deterministic (seed 1, fixed global batch and order), so
# the figure in README must be the one the demo prints, to the hundredth.  OpenBLAS's kernels
# of each CPU family sum in their own order, so README quotes one figure per family (AVX2:
# Haswell or Zen; SkylakeX; Cooperlake) and the one for the kernels this machine runs
# (OPENBLAS_VERBOSE=2 names them) must be printed; another family fails, saying so.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash
need_fashion_mnist
need_numpy

text=$(tr '\n' ' ' <README.md | tr -s ' ')
core=$(OPENBLAS_VERBOSE=2 "$GM" version 2>&1 | sed -n 's/^Core: //p' | head -n 1)
case $core in
Haswell | Zen) pat='the final test accuracy (\([0-9.]*\)% with seed 1 where OpenBLAS runs its AVX2 kernels' ;;
SkylakeX) pat=' \([0-9.]*\)% with its SkylakeX kernels' ;;
Cooperlake) pat=' \([0-9.]*\)% with its Cooperlake ones' ;;
*) fail "OpenBLAS runs its '$core' kernels here; README quotes the demo's accuracy for Haswell/Zen, SkylakeX and Cooperlake only" ;;
esac
readme=$(sed -n "s/.*$pat.*/\1/p" <<<"$text")
[ -n "$readme" ] || fail "README quotes no demo accuracy for OpenBLAS's $core kernels"
bash tests/demo.sh "$GM" >"$WORK/demo.log" 2>&1 || { tail -20 "$WORK/demo.log"; fail "the demo failed"; }
printed=$(sed -n 's/^job [0-9a-f]* done: test accuracy \([0-9.]*\)%.*/\1/p' "$WORK/demo.log")
[ -n "$printed" ] || fail "the demo printed no accuracy: $(tail -5 "$WORK/demo.log")"
[ "$printed" = "$readme" ] || fail "the demo prints $printed%, README says $readme% for OpenBLAS's $core kernels"
pass "the demo prints $printed%, as README says for OpenBLAS's $core kernels"
