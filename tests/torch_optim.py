#!/usr/bin/env python3
"""PyTorch fixture for forge/optim's AdamW and gradient clipping.

Regenerate with `make golden`, which runs, from the repository root:

    /usr/bin/python3 tests/torch_optim.py

(Debian's python3-torch 1.13.) It writes forge/optim/testdata/adamw.json;
commit the result. forge/optim/adamw_test.go replays it.

The run: three float32 parameters — a 2-D weight (decayed), a 1-D gain and
a 1-D bias (the no-decay group, as forge's NewAdamW groups rank < 2
parameters) — and torch.optim.AdamW(betas=(0.9, 0.95), eps=1e-8,
weight_decay=0.1 on the weight group, 0 on the other). Each of the steps
sets the given raw gradients, calls torch.nn.utils.clip_grad_norm_(…, 1.0),
sets the group learning rates to the step's lr, and steps. Gradient scales
alternate so some steps clip and some do not; a few gradient entries are
0 or tiny so eps matters. Recorded per step: lr, the raw gradients, the
pre-clip norm clip_grad_norm_ returned, and every parameter after the
step; after the last step, the moments exp_avg and exp_avg_sq. Values are
float64 reprs of float32 numbers (exact).
"""

import json
import math
import os

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "forge", "optim", "testdata", "adamw.json")

torch.set_num_threads(1)


def f32list(a):
    return [float(x) for x in np.asarray(a, dtype=np.float32).reshape(-1)]


def main():
    rng = np.random.default_rng(20240520)
    shapes = {"weight": (4, 3), "gain": (3,), "bias": (3,)}
    init = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    init["gain"] = (1 + 0.1 * init["gain"]).astype(np.float32)

    params = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
    beta1, beta2, eps, wd, max_norm = 0.9, 0.95, 1e-8, 0.1, 1.0
    opt = torch.optim.AdamW(
        [
            {"params": [params["weight"]], "weight_decay": wd},
            {"params": [params["gain"], params["bias"]], "weight_decay": 0.0},
        ],
        lr=1e-2, betas=(beta1, beta2), eps=eps,
    )

    # Grad scales: clipped (norm > 1) and unclipped steps alternate.
    scales = [3.0, 0.2, 1.5, 0.05, 2.5, 0.3]
    lrs = [1e-2 * (i + 1) / 3 if i < 2 else 1e-2 * (0.55 + 0.45 * math.cos(math.pi * (i - 2) / 4))
           for i in range(len(scales))]
    steps = []
    for i, (scale, lr) in enumerate(zip(scales, lrs)):
        grads = {}
        for k, s in shapes.items():
            g = (scale * rng.standard_normal(s) / math.sqrt(18)).astype(np.float32)
            grads[k] = g
        grads["bias"][0] = 0.0          # v stays 0: the update is 0/eps
        grads["bias"][1] = np.float32(3e-9)  # sqrt(v̂) below eps
        for k, p in params.items():
            p.grad = torch.tensor(grads[k])
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        steps.append({
            "lr": lr,
            "grads": {k: f32list(v) for k, v in grads.items()},
            "norm": float(norm),
            "clipped": bool(float(norm) > max_norm),
            "params": {k: f32list(p.detach().numpy()) for k, p in params.items()},
        })

    state = {k: {"m": f32list(opt.state[p]["exp_avg"].numpy()),
                 "v": f32list(opt.state[p]["exp_avg_sq"].numpy())}
             for k, p in params.items()}
    out = {
        "torch_version": torch.__version__,
        "config": {"beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": wd, "max_norm": max_norm},
        "order": list(shapes.keys()),
        "shapes": {k: list(s) for k, s in shapes.items()},
        "init": {k: f32list(v) for k, v in init.items()},
        "steps": steps,
        "state": state,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)}: {len(steps)} steps, clipped at "
          f"{[i for i, s in enumerate(steps) if s['clipped']]}")


if __name__ == "__main__":
    main()
