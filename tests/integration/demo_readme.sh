#!/usr/bin/env bash
# tests/integration/demo_readme.sh - `make demo` (tests/demo.sh) prints the test accuracy that
# README.md quotes for it: the run is deterministic (seed 1, fixed global batch and order), so
# the figure in README must be the one the demo prints, to the hundredth.  BLAS kernels of
# another CPU family may sum in another order; then this fails and says both figures.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash
need_fashion_mnist
need_numpy

readme=$(sed -n 's/.*the final test accuracy (\([0-9.]*\)% with seed 1).*/\1/p' README.md)
[ -n "$readme" ] || fail "README quotes no demo accuracy (\"the final test accuracy (NN.NN% with seed 1)\")"
bash tests/demo.sh "$GM" >"$WORK/demo.log" 2>&1 || { tail -20 "$WORK/demo.log"; fail "the demo failed"; }
printed=$(sed -n 's/^job [0-9a-f]* done: test accuracy \([0-9.]*\)%.*/\1/p' "$WORK/demo.log")
[ -n "$printed" ] || fail "the demo printed no accuracy: $(tail -5 "$WORK/demo.log")"
[ "$printed" = "$readme" ] || fail "the demo prints $printed%, README says $readme%"
pass "the demo prints $printed%, as README says"
