#!/usr/bin/python3
"""Independent NumPy (float64) reference of LeNet-5 forward + backward, in
PyTorch layout (NCHW activations, conv weights (OC, IC, KH, KW), linear
weights (OUT, IN) over C,H,W flattening).  Used by tests/unit/test_model.c.

usage: lenet_ref.py DIR N   reads DIR/x.f32 (N,1,28,28), DIR/y.i32 and
DIR/<param>.f32; writes DIR/ref_loss.f64, DIR/ref_logits.f32 and
DIR/ref_grad_<param>.f32 (float32, PyTorch layout).
"""
import sys

import numpy as np

d, n = sys.argv[1], int(sys.argv[2])
shapes = {"conv1.weight": (6, 1, 5, 5), "conv1.bias": (6,), "conv2.weight": (16, 6, 5, 5),
          "conv2.bias": (16,), "fc1.weight": (120, 400), "fc1.bias": (120,),
          "fc2.weight": (84, 120), "fc2.bias": (84,), "fc3.weight": (10, 84), "fc3.bias": (10,)}
P = {k: np.fromfile(f"{d}/{k}.f32", dtype=np.float32).reshape(s).astype(np.float64)
     for k, s in shapes.items()}
x = np.fromfile(f"{d}/x.f32", dtype=np.float32).reshape(n, 1, 28, 28).astype(np.float64)
y = np.fromfile(f"{d}/y.i32", dtype=np.int32)


def patches(a, k):
    """(N,C,H,W) -> (N, OH, OW, C, k, k) views of every k x k window."""
    N, C, H, W = a.shape
    oh, ow = H - k + 1, W - k + 1
    out = np.empty((N, oh, ow, C, k, k))
    for i in range(k):
        for j in range(k):
            out[:, :, :, :, i, j] = a[:, :, i:i + oh, j:j + ow].transpose(0, 2, 3, 1)
    return out


def conv_fwd(a, w, b, pad):
    ap = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    pt = patches(ap, w.shape[2])
    out = np.einsum("nhwckl,ockl->nohw", pt, w) + b[None, :, None, None]
    return out, ap, pt


def conv_bwd(dout, ap, pt, w, pad):
    dw = np.einsum("nohw,nhwckl->ockl", dout, pt)
    db = dout.sum(axis=(0, 2, 3))
    k = w.shape[2]
    dap = np.zeros_like(ap)
    oh, ow = dout.shape[2], dout.shape[3]
    g = np.einsum("nohw,ockl->nchwkl", dout, w)
    for i in range(k):
        for j in range(k):
            dap[:, :, i:i + oh, j:j + ow] += g[:, :, :, :, i, j]
    H, W = ap.shape[2] - 2 * pad, ap.shape[3] - 2 * pad
    return dw, db, dap[:, :, pad:pad + H, pad:pad + W]


def pool_fwd(a):
    N, C, H, W = a.shape
    r = a[:, :, :H // 2 * 2, :W // 2 * 2].reshape(N, C, H // 2, 2, W // 2, 2)
    out = r.max(axis=(3, 5))
    # first maximum in row-major window order, as PyTorch
    win = r.transpose(0, 1, 2, 4, 3, 5).reshape(N, C, H // 2, W // 2, 4)
    arg = win.argmax(axis=4)
    return out, arg


def pool_bwd(dout, arg, shape):
    N, C, H, W = shape
    da = np.zeros(shape)
    oh, ow = dout.shape[2], dout.shape[3]
    for p in range(4):
        sel = (arg == p) * dout
        da[:, :, (p // 2):oh * 2:2, (p % 2):ow * 2:2] += sel
    return da


relu = lambda a: np.maximum(a, 0)

# forward
c1, ap1, pt1 = conv_fwd(x, P["conv1.weight"], P["conv1.bias"], 2)
r1 = relu(c1)
p1, a1 = pool_fwd(r1)
c2, ap2, pt2 = conv_fwd(p1, P["conv2.weight"], P["conv2.bias"], 0)
r2 = relu(c2)
p2, a2 = pool_fwd(r2)
f = p2.reshape(n, -1)
h1 = f @ P["fc1.weight"].T + P["fc1.bias"]
g1 = relu(h1)
h2 = g1 @ P["fc2.weight"].T + P["fc2.bias"]
g2 = relu(h2)
z = g2 @ P["fc3.weight"].T + P["fc3.bias"]
zs = z - z.max(axis=1, keepdims=True)
lse = np.log(np.exp(zs).sum(axis=1))
loss = np.mean(lse - zs[np.arange(n), y])

# backward
dz = np.exp(zs) / np.exp(zs).sum(axis=1, keepdims=True)
dz[np.arange(n), y] -= 1
dz /= n
G = {"fc3.weight": dz.T @ g2, "fc3.bias": dz.sum(0)}
dg2 = dz @ P["fc3.weight"]
dh2 = dg2 * (h2 > 0)
G["fc2.weight"], G["fc2.bias"] = dh2.T @ g1, dh2.sum(0)
dg1 = dh2 @ P["fc2.weight"]
dh1 = dg1 * (h1 > 0)
G["fc1.weight"], G["fc1.bias"] = dh1.T @ f, dh1.sum(0)
df = (dh1 @ P["fc1.weight"]).reshape(p2.shape)
dr2 = pool_bwd(df, a2, r2.shape)
dc2 = dr2 * (c2 > 0)
G["conv2.weight"], G["conv2.bias"], dp1 = conv_bwd(dc2, ap2, pt2, P["conv2.weight"], 0)
dr1 = pool_bwd(dp1, a1, r1.shape)
dc1 = dr1 * (c1 > 0)
G["conv1.weight"], G["conv1.bias"], _ = conv_bwd(dc1, ap1, pt1, P["conv1.weight"], 2)

np.array([loss], dtype=np.float64).tofile(f"{d}/ref_loss.f64")
z.astype(np.float32).tofile(f"{d}/ref_logits.f32")
for k, g in G.items():
    g.astype(np.float32).tofile(f"{d}/ref_grad_{k}.f32")
