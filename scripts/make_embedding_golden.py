#!/usr/bin/python3
"""Float64 reference embeddings of the tiny Qwen3-Embedding fixture (numpy only).

Usage (from the repository root, after make_random_qwen3.py --preset tiny-embedding):
    scripts/make_embedding_golden.py tests/fixtures/tiny-qwen3-embedding \\
        > tests/fixtures/tiny-qwen3-embedding-golden/golden.json

Each case is a list of inputs; each input has its text (or null for a token-id input),
its ids (the text's tokens as Hugging Face encodes them with add_special_tokens, i.e.
followed by <|endoftext|> through the tokenizer's TemplateProcessing) and its L2-normalised
vectors under last-token, mean and CLS pooling, from scripts/qwen3_ref.py's forward in
float64. The cases: one input; a batch of three; two inputs sharing a 300-token prefix
(more than one KV block, so the prefix cache serves the second); one of 700 tokens (longer
than the tests' prefill chunk, so chunked prefill computes it).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_ref import Qwen3  # noqa: E402

EOT = 151643
TEXTS = {  # tokens from the fixture's tokenizer (nanovllm tokenize; byte-exact with HF)
    "Hello, world": [9707, 11, 1879],
    "The quick brown fox jumps over the lazy dog.": [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13],
    "Embeddings turn text into vectors.": [25486, 24602, 2484, 1467, 1119, 22879, 13],
    "nanovllm": [18759, 859, 654, 76],
}


def ids_run(n, start):
    """n deterministic ids away from the special tokens."""
    return [100 + (start + i * 7919) % 150000 for i in range(n)]


def main():
    m = Qwen3(sys.argv[1], "float64")
    prefix = ids_run(300, 1)
    cases = {
        "single": [("Hello, world", None)],
        "batch": [(t, None) for t in list(TEXTS)[1:]],
        "shared_prefix": [(None, prefix + ids_run(20, 2)), (None, prefix + ids_run(33, 3))],
        "long": [(None, ids_run(700, 4))],
    }
    out = {"model": "tiny-qwen3-embedding", "generator": "scripts/make_embedding_golden.py",
           "dtype": "float64", "cases": {}}
    for name, inputs in cases.items():
        rows = []
        for text, ids in inputs:
            ids = TEXTS[text] + [EOT] if text is not None else ids
            rows.append({"text": text, "ids": ids,
                         **{p: [round(float(x), 12) for x in m.embed(ids, p)] for p in ("last", "mean", "cls")}})
        out["cases"][name] = rows
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
