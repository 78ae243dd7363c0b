#!/usr/bin/python3
"""torchvision side of tests/unit/test_families.c.

usage: torchvision_ref.py DIR MODEL C H W STEPS BATCH LR [FREEZE]
Reads DIR/images.u8 (N, C, H, W), DIR/labels.u8, DIR/init.safetensors (what gradmesh
started from: tools/torchvision_weights.py's seeded random init) and DIR/ours.safetensors
(gradmesh's model after STEPS steps: parameters and batch norm buffers), and writes:
  ref_eval0.f32    eval-mode logits of the first BATCH images, at init
  ref_losses.f64   the loss of each SGD step (train mode, batch norm included; the C
                   side's batches: sample (s * BATCH + i) * 37 % N)
  grad0_<name>.f32 every trainable parameter's gradient in the first step (FREEZE: module
                   prefixes, as [model] freeze: those do not train and their batch norms
                   use their running statistics)
  final_<name>.f32 every state_dict entry after the steps, as float32
  dev32.txt        "grad0_<name> D" and "final_<name> D" lines: how far torchvision's
                   own float32 run is from the float64 one (relative L2; for final_,
                   of the update from init), the yardstick for gradmesh's fp32
Exits non-zero when ours.safetensors does not load into torchvision's model with
strict=True.  Dropout is set to p = 0 on both sides (its masks cannot match).  torchvision runs in
float64 here: the reference is the exact computation, not a second fp32 rounding of it.
The optimizer is SGD, momentum 0.9, weight decay 5e-3 (not Nesterov).
"""
import importlib.util
import os
import sys

import numpy as np
import torch
import torchvision

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "tvw", os.path.join(here, "..", "..", "tools", "torchvision_weights.py"))
tvw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tvw)


def covered(prefixes, module):
    """gradmesh's freeze rule: a module name or a dotted prefix of one"""
    return any(module == p or module.startswith(p + ".") or (p.endswith(".") and
               module.startswith(p)) for p in prefixes)


def run(model, init, x, y, first, steps, B, lr, dtype, freeze=()):
    """eval logits, losses, first-step gradients and final state_dict of one torchvision run;
    freeze: module prefixes whose parameters do not train and whose batch norms use their
    running statistics (eval mode), as gradmesh's [model] freeze"""
    net = tvw.build(model, init[f"{tvw.HEADS[model]}.weight"].shape[0])
    net.load_state_dict(tvw.to_torchvision_dict(net, init), strict=True)
    net = net.to(dtype)
    for mod in net.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    net.eval()
    with torch.no_grad():
        ev = net(first.to(dtype)).numpy().astype(np.float32)
    net.train()
    for name, mod in net.named_modules():
        if freeze and covered(freeze, name):
            mod.eval()
    for name, p in net.named_parameters():
        p.requires_grad = not covered(freeze, name.rsplit(".", 1)[0])
    opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=lr, momentum=0.9,
                          weight_decay=5e-3)
    losses, grads, N = [], {}, x.shape[0]
    for s in range(steps):
        idx = torch.tensor([((s * B + i) * 37) % N for i in range(B)])
        loss = torch.nn.functional.cross_entropy(net(x[idx].to(dtype) / 255.0), y[idx])
        opt.zero_grad()
        loss.backward()
        if s == 0:
            grads = {n: p.grad.detach().double().numpy().copy() for n, p in net.named_parameters()
                     if p.grad is not None}
        opt.step()
        losses.append(loss.item())
    final = {n: t.detach().double().numpy().copy() for n, t in net.state_dict().items()}
    return ev, losses, grads, final


def rel(a, b, floor_n):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-5 * np.sqrt(floor_n)))


def main():
    d, model = sys.argv[1], sys.argv[2]
    c, h, w, steps, B = (int(a) for a in sys.argv[3:8])
    lr = float(sys.argv[8])
    freeze = tuple(sys.argv[9].split()) if len(sys.argv) > 9 else ()
    if "backbone" in freeze:  # every module but the head
        net = tvw.build(model, 10)
        freeze = tuple(n.rsplit(".", 1)[0] for n, _ in net.named_parameters()
                       if not n.startswith(tvw.HEADS[model] + "."))
    torch.set_num_threads(1)
    x = torch.from_numpy(np.fromfile(f"{d}/images.u8", np.uint8).reshape(-1, c, h, w))
    y = torch.from_numpy(np.fromfile(f"{d}/labels.u8", np.uint8).astype(np.int64))
    init = tvw.read_safetensors(f"{d}/init.safetensors")
    first = x[:B].double() / 255.0
    ev, losses, grads, final = run(model, init, x, y, first, steps, B, lr, torch.float64, freeze)
    ev.tofile(f"{d}/ref_eval0.f32")
    np.array(losses, np.float64).tofile(f"{d}/ref_losses.f64")
    for name, g in grads.items():
        g.astype(np.float32).tofile(f"{d}/grad0_{name}.f32")
    for name, t in final.items():
        t.astype(np.float32).tofile(f"{d}/final_{name}.f32")
    # torchvision's own float32 run, against the float64 one: how far fp32 rounding alone
    # moves each gradient, update and buffer of this model on this data
    _, _, g32, f32 = run(model, init, x, y, first, steps, B, lr, torch.float32, freeze)
    with open(f"{d}/dev32.txt", "w") as out:
        for name, g in grads.items():
            out.write(f"grad0_{name} {rel(g32[name], g, g.size):.6g}\n")
        for name, t in final.items():
            base = init[name].double().numpy() if name in grads else 0  # parameters: updates
            out.write(f"final_{name} {rel(f32[name] - base, t - base, t.size):.6g}\n")
    # gradmesh's checkpoint back into torchvision, strictly
    ours = tvw.read_safetensors(f"{d}/ours.safetensors")
    back = tvw.build(model, ours[f"{tvw.HEADS[model]}.weight"].shape[0])
    back.load_state_dict(tvw.to_torchvision_dict(back, ours), strict=True)


if __name__ == "__main__":
    main()
