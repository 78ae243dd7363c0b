#!/usr/bin/python3
"""bench/models_vs_torch.py - one whole training step (forward in train mode, softmax
cross-entropy, backward, SGD momentum 0.9; fp32) of resnet18 and mobilenet_v2, gradmesh
(bench/model_step.c) against torchvision 0.14's model on PyTorch 1.13 with the same thread
count, in the same run.

Each (model, threads) pair runs ROUNDS rounds; a round runs gradmesh in one process, then
PyTorch in another (alternating, so a change in the machine's load hits both), each doing
WARMUP untimed steps then STEPS timed ones on a fixed random batch (1000 classes, as
torchvision's default head).  Per side: the median step over all rounds, in wall-clock time
and in process CPU time (all threads; a loaded machine inflates wall time far more than CPU
time, and at 2 threads CPU time also counts the workers' spinning), and the peak RSS of its
process (getrusage maxrss: the whole process, libraries included, the largest of the rounds).

With --device cuda both sides train on the GPU (gradmesh's model_step from a CUDA build):
fp32 without TF32 on both (gradmesh never uses it; PyTorch is told not to), PyTorch with
cudnn.benchmark (searched algorithms, as gradmesh's cudnnFind), each step timed to the end
of the GPU's work (torch.cuda.synchronize; gm_cuda_sync).  gradmesh's step includes its
batch's upload from pinned memory, as in training; PyTorch's batch stays on the GPU.  CPU
time and RSS then mean little.

usage: bench/models_vs_torch.py BINARY [--threads 1,2] [--models resnet18,mobilenet_v2]
       [--size 128] [--batch 32] [--warmup 2] [--steps 3] [--rounds 2] [--device cpu|cuda]
       bench/models_vs_torch.py --torch-worker FAMILY THREADS SIZE BATCH WARMUP STEPS [DEVICE]
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def torch_worker(family, threads, size, batch, warmup, steps, device="cpu"):
    import torch
    import torchvision

    torch.set_num_threads(threads)
    torch.manual_seed(1)
    cuda = device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, family)(weights=None).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = (torch.rand(batch, 3, size, size) * 2 - 1).to(device)
    y = torch.tensor([(i * 37) % 1000 for i in range(batch)]).to(device)
    loss_fn = torch.nn.CrossEntropyLoss()
    for s in range(warmup + steps):
        if cuda:
            torch.cuda.synchronize()
        w0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        w1, c1 = time.perf_counter(), time.process_time()
        if s >= warmup:
            print(f"step {(w1 - w0) * 1e3:.3f} {(c1 - c0) * 1e3:.3f}", flush=True)
    print(f"peak_rss_kib {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
    print(f"torch_config mkldnn={torch.backends.mkldnn.is_available()} "
          f"threads={torch.get_num_threads()}")


def run(cmd, env=None):
    p = subprocess.run(cmd, text=True, capture_output=True, env=env)
    if p.returncode != 0:
        sys.exit(f"models_vs_torch: {' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-2000:]}")
    out = p.stdout
    wall, cpu, rss, extra = [], [], 0, ""
    for line in out.splitlines():
        f = line.split()
        if f[0] == "step":
            wall.append(float(f[1]))
            cpu.append(float(f[2]))
        elif f[0] == "peak_rss_kib":
            rss = int(f[1])
        else:
            extra = line
    return wall, cpu, rss, extra


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-worker":
        a = sys.argv[2:]
        torch_worker(a[0], *(int(v) for v in a[1:6]), *a[6:7])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a = ap.parse_args()
    core = os.environ.get("OPENBLAS_CORETYPE", "(unset: OpenBLAS picks by CPU)")
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"# batch {a.batch}, {a.size}x{a.size}, SGD momentum 0.9, fp32, {a.device}; "
          f"OPENBLAS_CORETYPE={core}; load {load}")
    print("# model threads | gradmesh wall ms, cpu ms, RSS MiB | torch wall ms, cpu ms, RSS MiB"
          " | ratio torch/gradmesh wall, cpu")
    args = [str(a.size), str(a.batch), str(a.warmup), str(a.steps), a.device]
    # GM_LD_LIBRARY_PATH: libraries for gradmesh's binary alone (bench/gpu_check.sh's bundle),
    # never for PyTorch's process
    gm_env = None
    if os.environ.get("GM_LD_LIBRARY_PATH"):
        gm_env = dict(os.environ, LD_LIBRARY_PATH=os.environ["GM_LD_LIBRARY_PATH"])
    for model in a.models.split(","):
        for th in (int(t) for t in a.threads.split(",")):
            gw, gc, tw, tc = [], [], [], []
            grss = trss = 0
            for _ in range(a.rounds):
                w, c, rss, gextra = run([a.binary, model, str(th)] + args, gm_env)
                gw += w
                gc += c
                grss = max(grss, rss)
                w, c, rss, textra = run([sys.executable, os.path.abspath(__file__),
                                         "--torch-worker", model, str(th)] + args)
                tw += w
                tc += c
                trss = max(trss, rss)
            g_w, g_c = statistics.median(gw), statistics.median(gc)
            t_w, t_c = statistics.median(tw), statistics.median(tc)
            print(f"{model:12s} {th}T | gradmesh {g_w:7.0f} {g_c:7.0f} {grss / 1024:6.0f} MiB"
                  f" | torch {t_w:7.0f} {t_c:7.0f} {trss / 1024:6.0f} MiB"
                  f" | ratio {t_w / g_w:5.2f} {t_c / g_c:5.2f}"
                  f"  [{gextra}; {textra}; n={len(gw)}]", flush=True)


if __name__ == "__main__":
    main()
