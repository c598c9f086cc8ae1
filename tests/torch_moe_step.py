#!/usr/bin/env python3
"""PyTorch fixture for one training step of a tiny mixture-of-experts GPT.

Writes forge/train/testdata/torch_moe_step.safetensors, read by
forge/train/moe_parity_test.go. The model is tests/torch_train_step.py's
(RMSNorm, interleaved-pair RoPE, causal attention, tied head) at
V128 d32 L2 H2 T16, with every block's MLP a mixture of E=4 SwiGLU
experts of hidden 48, top-2, written here from the definition in
forge/nn/moe.go and computed densely (every expert on every token, the
unselected ones weighted by zero):

    p      = softmax(h @ Wr.T)                        (N, E)
    top    = the k largest p per token (torch.topk; the fixture asserts
             no near-ties, so the tie rule does not matter)
    g      = p[top] / sum(p[top])                     renormalised gates
    y      = sum_j g_j * expert_{top_j}(h)
    aux    = E * sum_e f_e * P_e,  f_e = count_e / (N k) (constant),
             P_e = mean_n p[n, e]
    loss   = cross_entropy + coef * sum_blocks aux

then backward, global-norm clipping (active), torch.optim.AdamW (lr 3e-4,
betas 0.9/0.95, eps 1e-8, weight decay 0.1 on rank >= 2 tensors).
Initial weights: the SplitMix64 hash of tests/torch_train_step.py.

Usage: /usr/bin/python3 tests/torch_moe_step.py   (Debian's python3-torch)
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import torch_train_step as base  # noqa: E402  (hash_init, rms, write_safetensors)

V, C, L, H, FF, T, B = 128, 32, 2, 2, 48, 16, 2
E, K, COEF = 4, 2, 0.05
D = C // H
CLIP = 0.5
OUT = os.path.join(os.path.dirname(__file__), "..", "forge", "train", "testdata", "torch_moe_step.safetensors")


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
            (p + "mlp.router.weight", (E, C), 0.02 * 20),  # a router that prefers: wide gaps between probabilities
        ]
        for e in range(E):
            q = p + f"mlp.experts.{e}."
            specs += [(q + "w_gate.weight", (FF, C), 0.02), (q + "w_up.weight", (FF, C), 0.02), (q + "w_down.weight", (C, FF), res)]
    specs.append(("norm_f.weight", (C,), 0))
    return specs


def rope(x):
    inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = (torch.arange(x.shape[2], dtype=torch.float64)[:, None] * inv[None, :]).float()
    cos, sin = ang.cos(), ang.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def moe(P, p, h, counts):
    x = h.reshape(-1, C)                                   # (N, C)
    N = x.shape[0]
    probs = (x @ P[p + "mlp.router.weight"].T).softmax(-1)  # (N, E)
    vals, top = probs.detach().sort(-1, descending=True)
    gap = (vals[:, K - 1] - vals[:, K]).min().item()
    assert gap > 1e-4, f"near-tie in the router: gap {gap}"
    mask = torch.zeros(N, E).scatter_(1, top[:, :K], 1.0)
    pm = probs * mask
    g = pm / pm.sum(-1, keepdim=True)
    y = torch.zeros_like(x)
    for e in range(E):
        q = p + f"mlp.experts.{e}."
        ye = (F.silu(x @ P[q + "w_gate.weight"].T) * (x @ P[q + "w_up.weight"].T)) @ P[q + "w_down.weight"].T
        y = y + ye * g[:, e:e + 1]
    f = mask.sum(0) / (N * K)
    counts.append([int(c) for c in mask.sum(0).tolist()])
    aux = E * (f * probs.mean(0)).sum()
    return y.reshape(h.shape), aux


def loss_fn(P, ids, tgt, counts):
    x = P["wte.weight"][ids]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    aux = 0.0
    for i in range(L):
        p = f"blocks.{i}."
        h = base.rms(x, P[p + "norm1.weight"])
        q, k, v = (h @ P[p + "attn.wqkv.weight"].T).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        q, k = rope(q), rope(k)
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(D)).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, C) @ P[p + "attn.wo.weight"].T
        y, a = moe(P, p, base.rms(x, P[p + "norm2.weight"]), counts)
        x = x + y
        aux = aux + a
    logits = base.rms(x, P["norm_f.weight"]) @ P["wte.weight"].T
    ce = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    return ce + COEF * aux, ce, aux


def main():
    torch.set_num_threads(1)
    P = {}
    for idx, (name, shape, std) in enumerate(param_specs()):
        P[name] = (torch.ones(shape) if std == 0 else base.hash_init(idx, shape, std)).requires_grad_()
    g = torch.Generator().manual_seed(3)
    data = torch.randint(0, V, (B, T + 1), generator=g)
    ids, tgt = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    counts = []
    loss, ce, aux = loss_fn(P, ids, tgt, counts)
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
    meta = {"loss": repr(loss.item()), "cross_entropy": repr(ce.item()), "aux_sum": repr(float(aux)),
            "grad_norm": repr(norm), "clip": repr(CLIP), "coef": repr(COEF), "tokens": json.dumps(counts),
            "torch": torch.__version__, "script": "tests/torch_moe_step.py"}
    base.write_safetensors(OUT, tensors, meta)
    print(json.dumps({"out": os.path.normpath(OUT), "loss": loss.item(), "aux": float(aux), "grad_norm": norm,
                      "tokens": counts, "params": sum(p.numel() for p in P.values())}))


if __name__ == "__main__":
    main()
