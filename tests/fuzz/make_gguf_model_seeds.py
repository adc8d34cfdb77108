#!/usr/bin/python3
"""Seeds for build-fuzz/fuzz_gguf_model: small valid GGUF files of each architecture the
loader reads (qwen3, qwen3moe, qwen35, qwen35moe; one also an embedding model), with a
byte-level BPE vocabulary of ~260 tokens instead of Qwen's 151,669 so that libFuzzer's
mutations reach the metadata often. No tensor data beyond the few the config reads
(token_embd, whose rows are the vocabulary, and the routers, which mark a layer sparse).

Usage: tests/fuzz/make_gguf_model_seeds.py OUT_DIR
"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import make_gguf as mg  # noqa: E402


def byte_symbols():
    """GPT-2's byte -> printable character map, in byte order."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def vocab_kv(eos, embedding):
    sym = byte_symbols()
    merged = ["He", "ll", "\u0120w", "or"]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = sym + merged + specials
    types = [1] * (len(sym) + len(merged)) + [3] * len(specials)
    kv = [("tokenizer.ggml.model", mg.STR, "gpt2", None),
          ("tokenizer.ggml.pre", mg.STR, "qwen2", None),
          ("tokenizer.ggml.tokens", mg.ARR, tokens, mg.STR),
          ("tokenizer.ggml.token_type", mg.ARR, types, mg.I32),
          ("tokenizer.ggml.merges", mg.ARR, ["H e", "l l", "\u0120 w", "o r"], mg.STR),
          ("tokenizer.ggml.eos_token_id", mg.U32, tokens.index(eos), None),
          ("tokenizer.ggml.add_bos_token", mg.BOOL, False, None),
          ("tokenizer.chat_template", mg.STR,
           "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}", None)]
    if embedding:
        kv.append(("tokenizer.ggml.add_eos_token", mg.BOOL, True, None))
    return kv, len(tokens)


def write(path, arch, layers, moe, hybrid, embedding=False):
    hidden, experts = 8, 4
    kv = [("general.architecture", mg.STR, arch, None), ("general.alignment", mg.U32, 32, None)]
    a = arch + "."
    vkv, n_vocab = vocab_kv("<|endoftext|>" if embedding else "<|im_end|>", embedding)
    kv += [(a + "block_count", mg.U32, layers, None), (a + "context_length", mg.U32, 4096, None),
           (a + "embedding_length", mg.U32, hidden, None), (a + "feed_forward_length", mg.U32, 16, None),
           (a + "attention.head_count", mg.U32, 2, None), (a + "attention.head_count_kv", mg.U32, 1, None),
           (a + "attention.key_length", mg.U32, 4, None), (a + "attention.value_length", mg.U32, 4, None),
           (a + "rope.freq_base", mg.F32T, 1e6, None),
           (a + "attention.layer_norm_rms_epsilon", mg.F32T, 1e-6, None)]
    if moe:
        kv += [(a + "expert_count", mg.U32, experts, None), (a + "expert_used_count", mg.U32, 2, None),
               (a + "expert_feed_forward_length", mg.U32, 8, None)]
    if hybrid:
        kv += [(a + "ssm.conv_kernel", mg.U32, 4, None), (a + "ssm.state_size", mg.U32, 4, None),
               (a + "ssm.group_count", mg.U32, 1, None), (a + "ssm.time_step_rank", mg.U32, 2, None),
               (a + "ssm.inner_size", mg.U32, 8, None), (a + "full_attention_interval", mg.U32, 2, None),
               (a + "rope.dimension_count", mg.U32, 2, None)]
        if moe:
            kv.append((a + "expert_shared_feed_forward_length", mg.U32, 8, None))
    if embedding:
        kv.append((a + "pooling_type", mg.U32, 3, None))
    kv += vkv
    tensors = [("token_embd.weight", [hidden, n_vocab])]  # the config's vocab size is its row count
    tensors += [(f"blk.{i}.ffn_gate_inp.weight", [hidden, experts]) for i in range(layers) if moe]
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
        for k, vt, val, sub in kv:
            f.write(mg.pack_kv(k, vt, val, sub))
        off = 0
        for name, ne in tensors:
            f.write(mg.pack_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                    + struct.pack("<IQ", 0, off))
            off += 4 * ne[0] * ne[1]
        mg.pad_to(f)
        for _, ne in tensors:
            f.write(b"\0" * (4 * ne[0] * ne[1]))
    return n_vocab


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else sys.exit(__doc__)
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "qwen3.gguf"), "qwen3", 2, False, False)
    write(os.path.join(out, "qwen3-embedding.gguf"), "qwen3", 2, False, False, embedding=True)
    write(os.path.join(out, "qwen3moe.gguf"), "qwen3moe", 2, True, False)
    write(os.path.join(out, "qwen35.gguf"), "qwen35", 4, False, True)
    write(os.path.join(out, "qwen35moe.gguf"), "qwen35moe", 2, True, True)
    print(f"wrote 5 seeds to {out}")


if __name__ == "__main__":
    main()
