#!/usr/bin/python3
"""bench/conv_vs_torch.py - the convolutions of one resnet18 / mobilenet_v2 training step
(128x128, batch 32 by default), gradmesh's CPU kernels (bench/conv_layers.c) against
PyTorch's F.conv2d forward + backward with the same thread count, in the same run.

Until the model graph has the families, this is the layer-level view of issue 20's CPU
speed target: convolution is most of a step's time.  Each layer runs forward, then
backward (dW always, dx unless it is the first layer), one warm-up then the median of
REPS; a layer that repeats in the network (resnet18's 3x3 64->64 four times) is timed
once and counted as often as it occurs.  PyTorch runs NCHW (its default, what
torchvision's models use), gradmesh NHWC; both fp32, no bias (batch norm follows).

usage: bench/conv_vs_torch.py BINARY [--threads 1,2] [--reps 3] [--batch 32] [--size 128]
       [--models resnet18,mobilenet_v2] [--clock wall|cpu]
Prints per layer ms (gradmesh, torch) and, per model and thread count, the totals and
the ratio torch / gradmesh (> 1: gradmesh faster).
"""
import argparse
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def resnet18(n, s):
    """(name, n, h, w, c, oc, k, stride, pad, groups, need_dx, count)"""
    L = [("conv1", n, s, s, 3, 64, 7, 2, 3, 1, 0, 1)]
    h = (s + 2 * 3 - 7) // 2 + 1
    h = (h + 2 - 3) // 2 + 1  # max pool 3x3/2 pad 1
    c = 64
    for i, oc in enumerate((64, 128, 256, 512)):
        st = 1 if i == 0 else 2
        oh = (h + 2 - 3) // st + 1
        L.append((f"l{i+1}.0.conv1", n, h, h, c, oc, 3, st, 1, 1, 1, 1))
        L.append((f"l{i+1}.x.conv3x3", n, oh, oh, oc, oc, 3, 1, 1, 1, 1, 3))
        if st != 1 or c != oc:
            L.append((f"l{i+1}.0.downsample", n, h, h, c, oc, 1, st, 0, 1, 1, 1))
        h, c = oh, oc
    return L


def mobilenet_v2(n, s):
    L = [("features0", n, s, s, 3, 32, 3, 2, 1, 1, 0, 1)]
    h = (s + 2 - 3) // 2 + 1
    c = 32
    agg = {}
    for bi, (t, oc, reps, st0) in enumerate(
        ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
         (6, 320, 1, 1))):
        for r in range(reps):
            st = st0 if r == 0 else 1
            hid = c * t
            oh = (h + 2 - 3) // st + 1
            layers = []
            if t != 1:
                layers.append(("pw_expand", n, h, h, c, hid, 1, 1, 0, 1, 1))
            layers.append(("dw", n, h, h, hid, hid, 3, st, 1, hid, 1))
            layers.append(("pw_project", n, oh, oh, hid, oc, 1, 1, 0, 1, 1))
            for ly in layers:
                key = ly[1:]
                name = f"b{bi}.{ly[0]}.{ly[4]}x{ly[2]}"
                if key in agg:
                    agg[key][1] += 1
                else:
                    agg[key] = [name, 1]
            h, c = oh, oc
    for key, (name, cnt) in agg.items():
        L.append((name,) + key + (cnt,))
    L.append(("features18", n, h, h, c, 1280, 1, 1, 0, 1, 1, 1))
    return L


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}


CLOCK = time.perf_counter


def torch_layer(ly, reps):
    name, n, h, w, c, oc, k, st, pad, g, need_dx, _ = ly
    x = torch.randn(n, c, h, w, requires_grad=bool(need_dx))
    wt = torch.randn(oc, c // g, k, k, requires_grad=True)
    fw, bw = [], []
    for r in range(reps + 1):
        t0 = CLOCK()
        y = F.conv2d(x, wt, None, st, pad, 1, g)
        t1 = CLOCK()
        dy = torch.ones_like(y) if r == 0 else dy
        y.backward(dy)
        t2 = CLOCK()
        if r > 0:
            fw.append((t1 - t0) * 1e3)
            bw.append((t2 - t1) * 1e3)
        wt.grad = None
        if need_dx:
            x.grad = None
    fw.sort()
    bw.sort()
    return fw[len(fw) // 2], bw[len(bw) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: process CPU time, far less inflated by a loaded machine (at "
                    "2 threads it counts spinning workers too)")
    a = ap.parse_args()
    global CLOCK
    if a.clock == "cpu":
        CLOCK = time.process_time
        os.environ["GM_BENCH_CLOCK"] = "cpu"
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"# torch {torch.__version__}, batch {a.batch}, {a.size}x{a.size}, {a.clock} clock, "
          f"load {load}")
    for model in a.models.split(","):
        layers = MODELS[model](a.batch, a.size)
        for th in (int(t) for t in a.threads.split(",")):
            torch.set_num_threads(th)
            spec = "".join(" ".join(str(v) for v in ly[:11]) + "\n" for ly in layers)
            out = subprocess.run([a.binary, str(th), str(a.reps)], input=spec, text=True,
                                 capture_output=True, check=True).stdout
            gm = {}
            for line in out.splitlines():
                f = line.split()
                if f[0] == "peak_ws_bytes":
                    ws = int(f[1])
                elif f[0] == "blas_core":
                    core = f[1]
                else:
                    gm[f[0]] = (float(f[1]), float(f[2]))
            tot_g = tot_t = 0.0
            print(f"\n{model}, {th} thread(s): layer  count  gradmesh fwd+bwd ms  torch ms  ratio")
            for ly in layers:
                tf, tb = torch_layer(ly, a.reps)
                gf, gb = gm[ly[0]]
                cnt = ly[11]
                tot_g += cnt * (gf + gb)
                tot_t += cnt * (tf + tb)
                print(f"  {ly[0]:24s} x{cnt}  {gf:7.1f}+{gb:7.1f}  {tf:7.1f}+{tb:7.1f}  "
                      f"{(tf + tb) / (gf + gb):5.2f}")
            print(f"{model} {th}T convolutions: gradmesh {tot_g:.0f} ms, torch {tot_t:.0f} ms, "
                  f"ratio torch/gradmesh {tot_t / tot_g:.2f} (workspace {ws / 2**20:.1f} MiB, "
                  f"OpenBLAS {core})")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
