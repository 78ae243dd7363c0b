#!/usr/bin/env python3
"""tests/integration/dist_tools.py - helpers for the distributed-training tests.

  subset SRC DST NTRAIN NTEST [rotate=K]
        the first NTRAIN training and NTEST test samples of the IDX dataset in SRC (gzip or
        plain), written uncompressed to DST; rotate=K moves the first K training samples
        to the end (the same samples in another order)
  diff A B
        two safetensors files with the same tensor names and shapes: one line per tensor
        (max |a-b|, ||a-b|| / ||a||), then "max <largest |a-b|>" and
        "rel <largest relative L2 difference of a tensor>"
  step INIT A B
        the steps A - INIT and B - INIT (weights after one step from the same INIT), all
        tensors as one vector: "step_rel <||(A-INIT) - (B-INIT)|| / ||A-INIT||>"
  unweighted INIT FULL PART F
        FULL took one SGD step on a whole batch, PART the same step on its first fraction F
        of the samples (the share of rank 0): how far the unweighted mean of the two ranks'
        steps (rank 1's derived as (FULL - F PART) / (1 - F)) is from FULL, relative to
        ||FULL - INIT||: "unweighted_rel <value>" (what a reduction that ignored the shares
        would be off by)
  sha256 FILE
        the parameter hash agent/jobs/rank.h defines (event=job-final-hash): SHA-256 over every
        tensor as little-endian float32, tensors in name order
"""
import gzip
import json
import os
import struct
import sys


def read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise SystemExit(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return dims, data[4 + 4 * ndim :]


def find(src, name):
    for cand in (name, name + ".gz"):
        p = os.path.join(src, cand)
        if os.path.exists(p):
            return p
    raise SystemExit(f"{src}: no {name}[.gz]")


def write_idx(path, dims, body):
    with open(path, "wb") as f:
        f.write(struct.pack(">HBB", 0, 0x08, len(dims)))
        f.write(struct.pack(">" + "I" * len(dims), *dims))
        f.write(body)


def subset(src, dst, ntrain, ntest, rotate=0):
    os.makedirs(dst, exist_ok=True)
    for split, n in (("train", ntrain), ("t10k", ntest)):
        for kind, idx in (("images", 3), ("labels", 1)):
            name = f"{split}-{kind}-idx{idx}-ubyte"
            dims, body = read_idx(find(src, name))
            if dims[0] < n:
                raise SystemExit(f"{name}: {dims[0]} samples, fewer than {n}")
            per = 1
            for d in dims[1:]:
                per *= d
            body = body[: n * per]
            if split == "train" and rotate:
                body = body[rotate * per :] + body[: rotate * per]
            write_idx(os.path.join(dst, name), (n,) + tuple(dims[1:]), body)


def diff(a, b):
    import numpy as np
    from safetensors.numpy import load_file

    ta, tb = load_file(a), load_file(b)
    if sorted(ta) != sorted(tb):
        raise SystemExit(f"tensor names differ: {sorted(ta)} vs {sorted(tb)}")
    worst = worst_rel = 0.0
    for k in sorted(ta):
        if ta[k].shape != tb[k].shape:
            raise SystemExit(f"{k}: shape {ta[k].shape} vs {tb[k].shape}")
        a, b = ta[k].astype(np.float64), tb[k].astype(np.float64)
        d = float(np.max(np.abs(a - b)))
        r = float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30))
        if not (np.isfinite(d) and np.isfinite(r)):
            raise SystemExit(f"{k}: not finite")
        print(f"{k} max_abs {d:.3e} rel_l2 {r:.3e}")
        worst, worst_rel = max(worst, d), max(worst_rel, r)
    print(f"max {worst:.6e}")
    print(f"rel {worst_rel:.6e}")


def _flat_steps(init, *runs):
    import numpy as np
    from safetensors.numpy import load_file

    t0 = load_file(init)
    out = []
    for r in runs:
        t = load_file(r)
        if sorted(t) != sorted(t0):
            raise SystemExit(f"{r}: tensor names differ from {init}")
        out.append(np.concatenate([(t[k].astype(np.float64) - t0[k]).ravel() for k in sorted(t0)]))
    return out


def step(init, a, b):
    import numpy as np

    da, db = _flat_steps(init, a, b)
    n = np.linalg.norm(da)
    if not n > 0:
        raise SystemExit(f"{a}: no step from {init}")
    print(f"step_rel {np.linalg.norm(da - db) / n:.6e}")


def unweighted(init, full, part, f):
    import numpy as np

    dfull, dpart = _flat_steps(init, full, part)
    rest = (dfull - f * dpart) / (1 - f)
    print(f"unweighted_rel {np.linalg.norm(0.5 * (dpart + rest) - dfull) / np.linalg.norm(dfull):.6e}")


def sha256(path):
    import hashlib

    from safetensors.numpy import load_file

    t = load_file(path)
    print(hashlib.sha256(b"".join(t[k].astype("<f4").tobytes() for k in sorted(t))).hexdigest())


def main():
    if len(sys.argv) in (6, 7) and sys.argv[1] == "subset":
        rot = 0
        if len(sys.argv) == 7:
            if not sys.argv[6].startswith("rotate="):
                raise SystemExit(__doc__)
            rot = int(sys.argv[6][len("rotate=") :])
        subset(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), rot)
    elif len(sys.argv) == 3 and sys.argv[1] == "sha256":
        sha256(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "step":
        step(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 6 and sys.argv[1] == "unweighted":
        unweighted(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    elif len(sys.argv) == 4 and sys.argv[1] == "diff":
        diff(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
