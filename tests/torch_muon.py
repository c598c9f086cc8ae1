#!/usr/bin/env python3
"""Float64 reference for forge/optim's Muon.

Regenerate with `make golden`, which runs, from the repository root:

    /usr/bin/python3 tests/torch_muon.py

(Debian's python3-torch 1.13, which has no Muon: the Muon update below is
written here from the published algorithm, independently of the Go code.)
It writes forge/optim/testdata/muon.json; commit the result.
forge/optim/muon_test.go replays it.

The run, all in float64: four parameters named as a GPT names them —
two hidden matrices (a tall (8, 4) "blocks.0.mlp.w_up.weight" and a wide
(4, 8) "blocks.0.mlp.w_down.weight", the Muon group), an embedding
"wte.weight" (10, 4) and a norm gain "blocks.0.norm1.weight" (4,) (the AdamW
group: torch.optim.AdamW with weight decay on the embedding only). Each
step sets the raw gradients, calls clip_grad_norm_(…, 1.0) over all four,
sets the learning rates (AdamW's lr; Muon's muon_lr·lr/base_lr) and steps
both. Recorded: each step's lr, gradients, norm and parameters after it;
after the last step the Muon momenta and AdamW moments.

Muon, for a matrix P of shape (rows, cols) with gradient G:

    M = mu*M + G;  U = G + mu*M  (Nesterov)
    X = U / (||U||_F + eps);  X = X.T if rows > cols
    5 times:  A = X X^T;  X = a X + (b A + c A A) X   (a, b, c = 3.4445, -4.7750, 2.0315)
    O = X (transposed back)
    P = P (1 - lr wd) - lr sqrt(max(1, rows/cols)) O
"""

import json
import math
import os

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "forge", "optim", "testdata", "muon.json")

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)

A, B, C = 3.4445, -4.7750, 2.0315


def newton_schulz(u, steps, eps):
    x = u / (torch.linalg.norm(u) + eps)
    tall = u.shape[0] > u.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        a = x @ x.T
        x = A * x + (B * a + C * (a @ a)) @ x
    return x.T if tall else x


def main():
    rng = np.random.default_rng(20261203)
    shapes = {
        "blocks.0.mlp.w_up.weight": (8, 4),
        "blocks.0.mlp.w_down.weight": (4, 8),
        "wte.weight": (10, 4),
        "blocks.0.norm1.weight": (4,),
    }
    muon_names = ["blocks.0.mlp.w_up.weight", "blocks.0.mlp.w_down.weight"]
    init = {k: rng.standard_normal(s) * 0.5 for k, s in shapes.items()}
    init["blocks.0.norm1.weight"] = 1 + 0.1 * init["blocks.0.norm1.weight"]
    params = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}

    base_lr, muon_lr, mu, ns_steps, ns_eps = 1e-2, 0.02, 0.95, 5, 1e-7
    muon_wd, adam_wd, beta1, beta2, eps, max_norm = 0.1, 0.1, 0.9, 0.95, 1e-8, 1.0
    adam = torch.optim.AdamW(
        [
            {"params": [params["wte.weight"]], "weight_decay": adam_wd},
            {"params": [params["blocks.0.norm1.weight"]], "weight_decay": 0.0},
        ],
        lr=base_lr, betas=(beta1, beta2), eps=eps,
    )
    mom = {k: torch.zeros(shapes[k]) for k in muon_names}

    scales = [3.0, 0.2, 1.5, 0.05, 2.5]
    lrs = [base_lr * (i + 1) / 3 if i < 2 else base_lr * (0.55 + 0.45 * math.cos(math.pi * (i - 2) / 4))
           for i in range(len(scales))]
    steps = []
    for scale, lr in zip(scales, lrs):
        grads = {k: scale * rng.standard_normal(s) / math.sqrt(80) for k, s in shapes.items()}
        for k, p in params.items():
            p.grad = torch.tensor(grads[k])
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
        for g in adam.param_groups:
            g["lr"] = lr
        adam.step()
        mlr = muon_lr * lr / base_lr
        with torch.no_grad():
            for k in muon_names:
                p, g = params[k], params[k].grad
                mom[k].mul_(mu).add_(g)
                u = g + mu * mom[k]
                o = newton_schulz(u, ns_steps, ns_eps)
                rows, cols = p.shape
                p.mul_(1 - mlr * muon_wd).sub_(mlr * math.sqrt(max(1.0, rows / cols)) * o)
        steps.append({
            "lr": lr,
            "grads": {k: v.reshape(-1).tolist() for k, v in grads.items()},
            "norm": float(norm),
            "clipped": bool(float(norm) > max_norm),
            "params": {k: p.detach().reshape(-1).tolist() for k, p in params.items()},
        })

    out = {
        "torch_version": torch.__version__,
        "config": {"lr": base_lr, "muon_lr": muon_lr, "momentum": mu, "ns_steps": ns_steps, "ns_eps": ns_eps,
                   "muon_weight_decay": muon_wd, "weight_decay": adam_wd, "beta1": beta1, "beta2": beta2,
                   "eps": eps, "max_norm": max_norm},
        "order": list(shapes.keys()),
        "muon": muon_names,
        "shapes": {k: list(s) for k, s in shapes.items()},
        "init": {k: v.reshape(-1).tolist() for k, v in init.items()},
        "steps": steps,
        "momentum": {k: mom[k].reshape(-1).tolist() for k in muon_names},
        "moments": {k: {"m": adam.state[params[k]]["exp_avg"].reshape(-1).tolist(),
                        "v": adam.state[params[k]]["exp_avg_sq"].reshape(-1).tolist()}
                    for k in ["wte.weight", "blocks.0.norm1.weight"]},
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)}: {len(steps)} steps, clipped at "
          f"{[i for i, s in enumerate(steps) if s['clipped']]}")


if __name__ == "__main__":
    main()
