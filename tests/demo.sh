#!/usr/bin/env bash
# make demo: train LeNet-5 on Fashion-MNIST on this machine (2 epochs, about
# half a minute), then load the weights in Python and check the accuracy with
# an independent NumPy forward pass.  Output under runs/demo/.
# (When the cluster layer lands this becomes the distributed demo on loopback.)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./gradmesh}
out=runs/demo
mkdir -p "$out"
sed -e 's/^epochs .*/epochs  = 2/' -e "s|^out .*|out     = $out/fmnist-lenet5.safetensors|" \
    docs/jobs/fmnist-lenet5.ini >"$out/job.ini"
echo "== gradmesh train --local $out/job.ini"
"$bin" train --local "$out/job.ini" --summary-json "$out/summary.json"
echo
echo "== summary ($out/summary.json)"
cat "$out/summary.json"
echo
echo "== the weights in Python (safetensors + NumPy forward pass)"
python3 tests/integration/eval_checkpoint.py "$out/fmnist-lenet5.safetensors" \
    /usr/share/datasets/fashion-mnist
