#!/usr/bin/env python3
"""Embeddings throughput on the CPU: `nanovllm serve`'s /v1/embeddings against
PyTorch running the Qwen3 forward of the same weights, in one run.

    /usr/bin/python3 scripts/bench_embeddings_torch.py MODEL_DIR [--inputs 256]
        [--torch-dtype float32|bfloat16] [--only ours|torch] [--port 8391]

MODEL_DIR is a Qwen3-Embedding-shaped folder with bf16 weights, e.g.
`scripts/make_random_qwen3.py --preset qwen3-0.6b-embedding --out DIR`.
Inputs: --inputs lists of random token ids, 64-512 tokens each (seeded, so
every run sends the same ones). Ours: a fresh `build/nanovllm serve` (its
defaults; a fresh server so that no input is in its prefix cache) answers
one request holding every input. PyTorch (Debian's python3-torch, not a
dependency of the project): the model's equations written out here (RMSNorm,
q/k norms, RoPE, causal GQA attention, SwiGLU; last-token pooling, L2
normalisation), one input at a time (no padding), torch.set_num_threads at
the machine's core count, weights in --torch-dtype. Prints the times,
tokens/s, the ratio and the largest cosine distance between the two sides'
vectors.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import time
import urllib.request

import numpy as np


def inputs_for(n):
    rng = random.Random(0)
    return [[rng.randrange(0, 151000) for _ in range(rng.randint(64, 512))] for _ in range(n)]


def ours(model, inputs, port):
    server = subprocess.Popen(["build/nanovllm", "serve", "--model", model, "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        body = json.dumps({"model": model, "input": inputs}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", body,
                                     {"Content-Type": "application/json"})
        t0 = time.time()
        out = json.load(urllib.request.urlopen(req, timeout=36000))
        return time.time() - t0, np.array([d["embedding"] for d in out["data"]], dtype=np.float64)
    finally:
        server.terminate()
        server.wait()


def load_bf16(path, torch, dtype):
    raw = open(path, "rb").read()
    head = struct.unpack("<Q", raw[:8])[0]
    header, base, weights = json.loads(raw[8:8 + head]), 8 + head, {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        a, b = v["data_offsets"]
        if v["dtype"] != "BF16":
            sys.exit(f"{name}: {v['dtype']}, expected BF16")
        bits = np.frombuffer(raw, dtype=np.uint16, count=(b - a) // 2, offset=base + a).astype(np.uint32) << 16
        weights[name] = torch.from_numpy(bits.view(np.float32).reshape(v["shape"]).copy()).to(dtype)
    return weights


def pytorch(model, inputs, dtype_name):
    import torch
    torch.set_num_threads(os.cpu_count())
    dt = getattr(torch, dtype_name)
    W = load_bf16(os.path.join(model, "model.safetensors"), torch, dt)
    cfg = json.load(open(os.path.join(model, "config.json")))
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]

    def rms(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(dt) * w

    def rope(x, pos):  # x [heads, T, hd]
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        f = torch.outer(pos.float(), inv)
        cos, sin = torch.cat([f.cos(), f.cos()], -1).to(dt), torch.cat([f.sin(), f.sin()], -1).to(dt)
        return x * cos + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin

    @torch.no_grad()
    def embed(ids):
        T, pos = len(ids), torch.arange(len(ids))
        x = W["embed_tokens.weight"][torch.tensor(ids)]
        mask = torch.full((T, T), float("-inf")).triu(1).to(dt)
        for layer in range(cfg["num_hidden_layers"]):
            p = f"layers.{layer}."
            h = rms(x, W[p + "input_layernorm.weight"])
            q = rms((h @ W[p + "self_attn.q_proj.weight"].T).view(T, nh, hd), W[p + "self_attn.q_norm.weight"])
            k = rms((h @ W[p + "self_attn.k_proj.weight"].T).view(T, nkv, hd), W[p + "self_attn.k_norm.weight"])
            v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, nkv, hd).transpose(0, 1)
            q, k = rope(q.transpose(0, 1), pos), rope(k.transpose(0, 1), pos)
            k, v = k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)
            att = torch.softmax(((q @ k.transpose(1, 2)) / hd ** 0.5 + mask).float(), -1).to(dt) @ v
            x = x + att.transpose(0, 1).reshape(T, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
            h = rms(x, W[p + "post_attention_layernorm.weight"])
            gate, up = h @ W[p + "mlp.gate_proj.weight"].T, h @ W[p + "mlp.up_proj.weight"].T
            x = x + (torch.nn.functional.silu(gate) * up) @ W[p + "mlp.down_proj.weight"].T
        e = rms(x[-1:], W["norm.weight"])[0].double()
        return (e / e.norm()).numpy()

    t0 = time.time()
    vectors = np.array([embed(ids) for ids in inputs])
    return time.time() - t0, vectors, torch.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--inputs", type=int, default=256)
    ap.add_argument("--torch-dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--only", choices=["ours", "torch"])
    ap.add_argument("--port", type=int, default=8391)
    a = ap.parse_args()
    inputs = inputs_for(a.inputs)
    tokens = sum(len(x) for x in inputs)
    got = {}
    if a.only != "torch":
        t, got["ours"] = ours(a.model, inputs, a.port)
        print(f"nanovllm: {len(inputs)} inputs, {tokens} tokens, {t:.1f} s, {tokens / t:.0f} tokens/s", flush=True)
        got["ours_s"] = t
    if a.only != "ours":
        t, got["torch"], version = pytorch(a.model, inputs, a.torch_dtype)
        print(f"PyTorch {version} {a.torch_dtype}: {len(inputs)} inputs, {tokens} tokens, {t:.1f} s, "
              f"{tokens / t:.0f} tokens/s", flush=True)
        got["torch_s"] = t
    if "ours" in got and "torch" in got:
        o, r = got["ours"], got["torch"]
        cos = (o * r).sum(1) / np.linalg.norm(o, axis=1) / np.linalg.norm(r, axis=1)
        print(f"ratio {got['torch_s'] / got['ours_s']:.2f}x; largest cosine distance {1 - cos.min():.2e}")


if __name__ == "__main__":
    main()
