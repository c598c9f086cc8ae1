#!/usr/bin/env python3
"""Checks a `forge export` directory against the logits Forge computed.

Usage: /usr/bin/python3 tests/check_export.py EXPORT_DIR CASE.json [EXPORT_DIR CASE.json ...]

CASE.json holds {"ids": [[...]], "logits": [[[...]]]} (batch, time, vocab) from
Forge. This script reads config.json and model.safetensors as Hugging Face
transformers would (LlamaForCausalLM: rotate-half RoPE, RMSNorm, SwiGLU;
GPT2LMHeadModel: Conv1D weights stored (in, out), LayerNorm, gelu_new,
learned positions), runs its own PyTorch forward written from transformers'
documented semantics, and prints the worst relative difference as JSON.
It exits 1 if the difference exceeds 1e-4 (relative to the largest logit).
Needs only Debian's python3-torch (transformers is not required).
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(blob[base + b:base + e]), dtype=torch.float32)
        out[name] = t.reshape(info["shape"]) if info["shape"] else t.reshape(())
    return out


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama(cfg, W, ids):
    B, T = ids.shape
    H, K, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    cos, sin = ang.cos().float(), ang.sin().float()
    x = W["model.embed_tokens.weight"][ids]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(B, T, H, D).transpose(1, 2)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(B, T, K, D).transpose(1, 2)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(B, T, K, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // K, dim=1)
        v = v.repeat_interleave(H // K, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + y @ W[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        x = x + (F.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["lm_head.weight"] if not cfg["tie_word_embeddings"] else W["model.embed_tokens.weight"]
    return x @ head.T


def gpt2(cfg, W, ids):
    B, T = ids.shape
    H, C = cfg["n_head"], cfg["n_embd"]
    D = C // H
    eps = cfg["layer_norm_epsilon"]
    ln = lambda x, p: F.layer_norm(x, (C,), W[p + ".weight"], W[p + ".bias"], eps)
    conv = lambda x, p: x @ W[p + ".weight"] + W[p + ".bias"]  # Conv1D: weight (in, out)
    x = W["transformer.wte.weight"][ids] + W["transformer.wpe.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        q, k, v = conv(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(D)).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + conv((att @ v).transpose(1, 2).reshape(B, T, C), p + "attn.c_proj")
        x = x + conv(F.gelu(conv(ln(x, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh"), p + "mlp.c_proj")
    x = ln(x, "transformer.ln_f")
    head = W["lm_head.weight"] if not cfg["tie_word_embeddings"] else W["transformer.wte.weight"]
    return x @ head.T


def main():
    args = sys.argv[1:]
    if not args or len(args) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    status = 0
    for i in range(0, len(args), 2):
        status |= check(args[i], args[i + 1])
    return status


def check(d, case_path):
    case = json.load(open(case_path))
    cfg = json.load(open(d + "/config.json"))
    W = read_safetensors(d + "/model.safetensors")
    ids = torch.tensor(case["ids"], dtype=torch.long)
    want = torch.tensor(case["logits"], dtype=torch.float32)
    with torch.no_grad():
        got = {"llama": llama, "gpt2": gpt2}[cfg["model_type"]](cfg, W, ids)
    scale = want.abs().max().item()
    diff = (got - want).abs().max().item() / scale
    print(json.dumps({"dir": d, "model_type": cfg["model_type"], "max_rel_diff": diff, "logit_scale": scale}))
    return 0 if diff < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
