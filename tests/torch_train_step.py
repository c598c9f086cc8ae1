#!/usr/bin/env python3
"""PyTorch fixture for one full training step of the `tiny` GPT.

Writes forge/train/testdata/torch_step.safetensors, read by
forge/train/parity_test.go. The model is the `tiny` architecture of
configs/tiny.json (V512 d128 L4 H4, SwiGLU 512, RMSNorm eps 1e-5,
interleaved-pair RoPE θ=10000, causal attention, tied embedding head),
written here from its definition with Forge's parameter names and layouts
(Linear weights (out, in)). The step is: forward, mean cross-entropy,
backward, global-norm clipping (max norm chosen below the initial norm so
clipping is active), torch.optim.AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on tensors of rank >= 2 only).

Initial weights come from a counter-based hash both sides compute exactly
(SplitMix64 of (parameter index, element index), 24-bit uniform), so only
the batch, the loss, the gradients, the clip norm and the updated weights
are stored.

Usage: /usr/bin/python3 tests/torch_train_step.py   (Debian's python3-torch)
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

V, C, L, H, FF, T, B = 512, 128, 4, 4, 512, 32, 2
D = C // H
EPS = 1e-5
CLIP = 1.0
OUT = os.path.join(os.path.dirname(__file__), "..", "forge", "train", "testdata", "torch_step.safetensors")

M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix(x):
    """SplitMix64 finaliser on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def hash_init(index, shape, std):
    """Uniform with standard deviation std: (u − 0.5)·2·√3·std, u on a 2^-24 grid."""
    n = int(np.prod(shape))
    key = (np.uint64(index) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
    u = (splitmix(key) >> np.uint64(40)).astype(np.float64) / float(1 << 24)
    w = (u - 0.5) * (2 * math.sqrt(3) * std)
    return torch.from_numpy(w.astype(np.float32).reshape(shape))


def param_specs():
    """(name, shape, std) in Forge's order; std 0 means ones (norm weights)."""
    res = 0.02 / math.sqrt(2 * L)
    specs = [("wte.weight", (V, C), 0.02)]
    for i in range(L):
        p = f"blocks.{i}."
        specs += [
            (p + "norm1.weight", (C,), 0),
            (p + "attn.wqkv.weight", (3 * C, C), 0.02),
            (p + "attn.wo.weight", (C, C), res),
            (p + "norm2.weight", (C,), 0),
            (p + "mlp.w_gate.weight", (FF, C), 0.02),
            (p + "mlp.w_up.weight", (FF, C), 0.02),
            (p + "mlp.w_down.weight", (C, FF), res),
        ]
    specs.append(("norm_f.weight", (C,), 0))
    return specs


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x):
    # x (B, H, T, D): pairs (2i, 2i+1) rotate by t·10000^(-2i/D).
    inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = (torch.arange(x.shape[2], dtype=torch.float64)[:, None] * inv[None, :]).float()
    cos, sin = ang.cos(), ang.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def loss_fn(P, ids, tgt):
    x = P["wte.weight"][ids]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i in range(L):
        p = f"blocks.{i}."
        h = rms(x, P[p + "norm1.weight"])
        q, k, v = (h @ P[p + "attn.wqkv.weight"].T).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        q, k = rope(q), rope(k)
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(D)).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, C) @ P[p + "attn.wo.weight"].T
        h = rms(x, P[p + "norm2.weight"])
        x = x + (F.silu(h @ P[p + "mlp.w_gate.weight"].T) * (h @ P[p + "mlp.w_up.weight"].T)) @ P[p + "mlp.w_down.weight"].T
    logits = rms(x, P["norm_f.weight"]) @ P["wte.weight"].T
    return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    P = {}
    for idx, (name, shape, std) in enumerate(param_specs()):
        P[name] = (torch.ones(shape) if std == 0 else hash_init(idx, shape, std)).requires_grad_()
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, V, (B, T + 1), generator=g)
    ids, tgt = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    loss = loss_fn(P, ids, tgt)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in P.items()}
    norm = torch.nn.utils.clip_grad_norm_(list(P.values()), CLIP).item()
    assert norm > CLIP, f"clipping inactive: norm {norm}"
    decay = [p for p in P.values() if p.ndim >= 2]
    rest = [p for p in P.values() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    opt.step()

    tensors = {"ids": ids.int(), "targets": tgt.int()}
    for n in P:
        tensors["grad." + n] = grads[n]  # before clipping
        tensors["updated." + n] = P[n].detach()
    meta = {"loss": repr(loss.item()), "grad_norm": repr(norm), "clip": repr(CLIP), "torch": torch.__version__,
            "script": "tests/torch_train_step.py"}
    write_safetensors(OUT, tensors, meta)
    print(json.dumps({"out": os.path.normpath(OUT), "loss": loss.item(), "grad_norm": norm, "params": sum(p.numel() for p in P.values())}))


def write_safetensors(path, tensors, meta):
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        dt = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        b = t.numpy().astype("<" + t.numpy().dtype.str[1:]).tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
