#!/usr/bin/env python3
"""PyTorch fixture for quantisation-aware training (gpt.Config "quant").

Writes forge/train/testdata/torch_qat.safetensors, read by
forge/train/qat_parity_test.go. The quantisers are written here from
their definitions (forge/quant.go states the same ones):

    int8     per row of an (out, in) weight: s = clamp(max|w|, 1e-8) / 127,
             r = round(clamp(w / s, -127, 127))
    ternary  whole matrix (BitNet b1.58 absmean): s = mean|w| + 1e-5,
             r = round(clamp(w / s, -1, 1))
    q = r * s, round = torch.round (halves to even)

with a straight-through estimator written as a custom autograd Function
(forward exactly q, backward the identity) rather than w + (q - w).detach(),
whose forward is not q in float. The ternary scale's eps is added in
float64 and rounded once to float32, as Forge's AddScalar does.

Cases:
  linear.<mode>.*   an (8, 24) Linear with bias: levels, scale, q, the
                    output y = x q^T + b for a (5, 24) x, and the gradients
                    of sum(y * R) for w (through the STE), b and x.
  gpt.<mode>.*      the GPT of tests/torch_train_step.py (its hash-initialised
                    weights), shrunk to V128 d64 L2 H4 SwiGLU 192, T16 B2 so
                    the fixture stays under 1 MB, with every block Linear
                    fake-quantised: the loss and every gradient.

Usage: /usr/bin/python3 tests/torch_qat.py   (Debian's python3-torch; `make golden`)
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train_step as ts  # noqa: E402  (the tiny GPT, hash init, writer)

# A smaller GPT than torch_train_step's tiny: its functions read these.
ts.V, ts.C, ts.L, ts.H, ts.FF, ts.T, ts.B = 128, 64, 2, 4, 192, 16, 2
ts.D = ts.C // ts.H

OUT = os.path.join(os.path.dirname(__file__), "..", "forge", "train", "testdata", "torch_qat.safetensors")


def quantize(w, mode):
    if mode == "int8":
        s = w.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8) / 127
        r = torch.round(torch.clamp(w / s, -127, 127))
    else:
        s = (w.abs().mean().double() + 1e-5).float()
        r = torch.round(torch.clamp(w / s, -1, 1))
    return r, s


class FakeQuant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, mode):
        r, s = quantize(w, mode)
        return r * s

    @staticmethod
    def backward(ctx, g):
        return g, None


def fq(w, mode):
    return FakeQuant.apply(w, mode)


def linear_cases(tensors, mode):
    w = ts.hash_init(100, (8, 24), 0.05)
    with torch.no_grad():
        # Exact ties w/s = k + 1/2 on row 1 for int8 (its s is fixed by the
        # row's max, which these do not change).
        s1 = w[1].abs().max() / 127
        w[1, 3], w[1, 4] = 2.5 * s1, -0.5 * s1
    w.requires_grad_()
    b = ts.hash_init(101, (8,), 0.1).requires_grad_()
    x = ts.hash_init(102, (5, 24), 1.0).requires_grad_()
    R = ts.hash_init(103, (5, 8), 1.0)
    y = x @ fq(w, mode).T + b
    (y * R).sum().backward()
    r, s = quantize(w.detach(), mode)
    p = f"linear.{mode}."
    tensors.update({p + "w": w.detach(), p + "b": b.detach(), p + "x": x.detach(), p + "upstream": R,
                    p + "levels": r, p + "scale": s.reshape(-1), p + "q": r * s, p + "y": y.detach(),
                    p + "grad.w": w.grad, p + "grad.b": b.grad, p + "grad.x": x.grad})


def gpt_loss(P, ids, tgt, mode):
    B, T, C, H, D, L, V = ts.B, ts.T, ts.C, ts.H, ts.D, ts.L, ts.V
    x = P["wte.weight"][ids]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i in range(L):
        p = f"blocks.{i}."
        W = {k: fq(P[p + k], mode) for k in ("attn.wqkv.weight", "attn.wo.weight", "mlp.w_gate.weight",
                                              "mlp.w_up.weight", "mlp.w_down.weight")}
        h = ts.rms(x, P[p + "norm1.weight"])
        q, k, v = (h @ W["attn.wqkv.weight"].T).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        q, k = ts.rope(q), ts.rope(k)
        att = ((q @ k.transpose(-2, -1)) / (D ** 0.5)).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, C) @ W["attn.wo.weight"].T
        h = ts.rms(x, P[p + "norm2.weight"])
        x = x + (F.silu(h @ W["mlp.w_gate.weight"].T) * (h @ W["mlp.w_up.weight"].T)) @ W["mlp.w_down.weight"].T
    logits = ts.rms(x, P["norm_f.weight"]) @ P["wte.weight"].T  # the tied head is not quantised
    return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


def gpt_cases(tensors, meta, mode):
    P = {}
    for idx, (name, shape, std) in enumerate(ts.param_specs()):
        P[name] = (torch.ones(shape) if std == 0 else ts.hash_init(idx, shape, std)).requires_grad_()
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, ts.V, (ts.B, ts.T + 1), generator=g)
    ids, tgt = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    loss = gpt_loss(P, ids, tgt, mode)
    loss.backward()
    tensors["gpt.ids"], tensors["gpt.targets"] = ids.int(), tgt.int()
    for n, p in P.items():
        tensors[f"gpt.{mode}.grad.{n}"] = p.grad
    meta[f"gpt.{mode}.loss"] = repr(loss.item())
    return loss.item()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tensors, meta = {}, {"torch": torch.__version__, "script": "tests/torch_qat.py"}
    out = {}
    for mode in ("int8", "ternary"):
        linear_cases(tensors, mode)
        out[mode] = gpt_cases(tensors, meta, mode)
    ts.write_safetensors(OUT, tensors, meta)
    print(json.dumps({"out": os.path.normpath(OUT), "loss": out}))


if __name__ == "__main__":
    main()
