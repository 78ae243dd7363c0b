#!/usr/bin/env bash
# tests/integration/model_init.sh - `gradmesh train --local` from torchvision
# weights (issue 20): [model] init, freeze = backbone, the head drawn afresh
# for another class count, and the refusals of "Bad input".
#
#   tools/torchvision_weights.py resnet18 (seeded random init, 1000 classes)
#        |
#        v
#   a 3-class photo folder (PNG, 40x40, resized to 32) --train--> out.safetensors
#        |                                                            |
#        +------------------------ torchvision loads it, strict=True <+
#
# Checks:
#  - fine-tuning with freeze = backbone: exit 0; the summary says 1539 of
#    11178051 parameters train (fc: 3 x 512 + 3); the log says the head was
#    drawn afresh (1000 -> 3 classes); every tensor but fc.* is bit for bit the
#    file's (weights and batch norm statistics: frozen batch norms use their
#    running statistics); the result loads into torchvision with strict=True;
#  - refusals, each one line on stderr naming the file, tensor or key, exit 78,
#    and nothing written (no weights, no TensorBoard run): weights of another
#    family (resnet34), a truncated file, a tensor of the wrong shape (a
#    1-channel folder against the 3-channel stem), a freeze prefix that matches
#    nothing, an image_size vgg16 cannot take, a missing file.
# Skips (77) without /usr/bin/python3's torchvision or PIL.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

PY=/usr/bin/python3
$PY -c 'import torchvision, PIL' 2>/dev/null || { echo "skip: needs python3-torchvision and PIL"; exit 77; }
GMX=$(realpath "$GM")

$PY - "$WORK/photos" <<'PYEOF' || fail "make the photo folder"
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(1)
for c in range(3):
    os.makedirs(f"{sys.argv[1]}/class{c}", exist_ok=True)
    for i in range(40):
        a = rng.integers(0, 120, (40, 40, 3), dtype=np.uint8)
        a[:, :, c] += 120  # the class is the dominant colour
        Image.fromarray(a).save(f"{sys.argv[1]}/class{c}/{i}.png")
PYEOF
$PY tools/torchvision_weights.py resnet18 --seed 2 --out "$WORK/r18.safetensors" || fail "converter"
$PY tools/torchvision_weights.py resnet34 --classes 3 --out "$WORK/r34.safetensors" || fail "converter"
head -c 3000000 "$WORK/r18.safetensors" >"$WORK/trunc.safetensors"

job() { # model init freeze image_size channels -> $WORK/job.ini
    cat >"$WORK/job.ini" <<JOBEOF
[job]
name = ft
model = $1
epochs = 2
seed = 4
out = $WORK/out/ft.safetensors
[model]
init = $2
freeze = $3
[data]
kind = folder
dir = $WORK/photos
image_size = $4
channels = $5
[optim]
name = sgd
lr = 0.05
momentum = 0.9
batch = 16
JOBEOF
}

mkdir -p "$WORK/run" "$WORK/out"
job resnet18 "$WORK/r18.safetensors" backbone 32 3
(cd "$WORK/run" && "$GMX" train --local "$WORK/job.ini") >"$WORK/ft.log" 2>&1 || fail "fine-tune run"
grep -q 'event=start .* params=11178051 trainable=1539 frozen=11176512 ' "$WORK/ft.log" ||
    fail "trainable / frozen counts"
grep -q 'event=init-head .* head=fc.weight file_classes=1000 classes=3 ' "$WORK/ft.log" ||
    fail "the head is not re-initialised with a log line"
$PY - "$WORK/r18.safetensors" "$WORK/out/ft.safetensors" <<'PYEOF' || fail "frozen tensors moved, or torchvision refuses the result"
import importlib.util, sys
import torch, torchvision
spec = importlib.util.spec_from_file_location("tvw", "tools/torchvision_weights.py")
tvw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tvw)
a, b = tvw.read_safetensors(sys.argv[1]), tvw.read_safetensors(sys.argv[2])
assert set(a) == set(b), set(a) ^ set(b)
moved = [k for k in a if not k.startswith("fc.") and not torch.equal(a[k], b[k])]
assert not moved, moved
assert not torch.equal(a["fc.weight"][:3], b["fc.weight"]), "the head did not train"
m = torchvision.models.resnet18(num_classes=3)
m.load_state_dict(tvw.to_torchvision_dict(m, b), strict=True)
PYEOF

refuse() { # expected stderr line (exact), then the job arguments
    local want=$1; shift
    job "$@"
    rm -rf "$WORK/run" "$WORK/out"; mkdir -p "$WORK/run" "$WORK/out"
    (cd "$WORK/run" && "$GMX" train --local "$WORK/job.ini") >"$WORK/bad.log" 2>&1
    local rc=$?
    [ $rc = 78 ] || fail "exit $rc, not 78, for: $want"
    [ "$(cat "$WORK/bad.log")" = "$want" ] || fail "stderr '$(cat "$WORK/bad.log")', not '$want'"
    [ -z "$(find "$WORK/run" "$WORK/out" -mindepth 1)" ] || fail "files written for: $want"
}
refuse "error: $WORK/r34.safetensors: [model] init: the file does not fit resnet18 (PyTorch names and shapes); 96 unexpected: layer1.2.conv1.weight, layer1.2.bn1.weight, layer1.2.bn1.bias, layer1.2.bn1.running_mean, ..." \
    resnet18 "$WORK/r34.safetensors" backbone 32 3
refuse "error: $WORK/trunc.safetensors: not a valid safetensors file: tensor 'layer3.0.conv1.weight': data_offsets [2740008, 3919656] outside the 2989000 data bytes" \
    resnet18 "$WORK/trunc.safetensors" backbone 32 3
refuse "error: $WORK/r18.safetensors: [model] init: the file does not fit resnet18 (PyTorch names and shapes); 1 mis-shaped: conv1.weight [64, 1, 7, 7], file [64, 3, 7, 7]" \
    resnet18 "$WORK/r18.safetensors" backbone 32 1
refuse "error: $WORK/job.ini:9: [model] freeze: 'layer5' matches no module (a module name such as 'fc', or a dotted prefix of one, or 'backbone')" \
    resnet18 "$WORK/r18.safetensors" "conv1 layer5" 32 3
refuse "error: $WORK/job.ini:13: [data] image_size = 16: vgg16 takes images of at least 32x32 (five 2x2 max-pools), not 16x16" \
    vgg16 "$WORK/r18.safetensors" backbone 16 3
refuse "error: $WORK/none.safetensors: cannot read: No such file or directory" \
    resnet18 "$WORK/none.safetensors" backbone 32 3
echo "ok: fine-tune from torchvision weights with a frozen backbone; 6 refusals"
