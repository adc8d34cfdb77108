#!/usr/bin/env python3
"""fuzz_api.py - random malformed requests against a running `nanovllm serve`.

Takes valid completion, chat, responses, embeddings, tokenize and detokenize bodies, mutates a few
fields at a time (wrong types, huge or negative numbers, NUL and surrogate-
edge strings, deep or empty containers, dropped fields, truncated JSON, and
null for any field at any depth, as SDKs send for unset fields) and
checks that every answer is a well-formed one: a 2xx/4xx/503 status, and a
JSON body unless it is an event stream. The server must stay up throughout.
Best run against the sanitizer build, whose log then shows any fault:

    make asan   # builds build-asan/nanovllm
    build-asan/nanovllm serve --model tests/fixtures/tiny-qwen3 --port 8001 &
    python3 scripts/fuzz_api.py --port 8001 --requests 2000 --seed 1

The /v1/embeddings bodies reach their parser on an embedding model
(--model tests/fixtures/tiny-qwen3-embedding); the others, there, are refused early.

Exits 1 at the first connection failure or if any answer was malformed.
Only the standard library: it runs wherever python3 does.
"""
import argparse
import http.client
import json
import random
import sys

COMPLETION = {
    "prompt": "Hello", "max_tokens": 4, "temperature": 0.7, "top_p": 0.9, "top_k": 5, "min_p": 0.1,
    "n": 2, "stream": True, "stop": ["a"], "seed": 3, "logprobs": 2, "echo": True,
    "presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1, "ignore_eos": True,
    "stream_options": {"include_usage": True}, "user": "x", "max_completion_tokens": 3,
}
MESSAGES = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {"role": "assistant", "content": "yo"},
    {"role": "user", "content": "again"},
]
CHAT = {
    "messages": MESSAGES, "max_tokens": 4, "logprobs": True, "top_logprobs": 2, "n": 1, "stream": True,
    "chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": True,
}
TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "adds", "strict": False,
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]
TOOL_TURN = [
    {"role": "user", "content": "add 1", "name": "ann"},
    {"role": "assistant", "content": None, "reasoning": "r", "reasoning_content": "r", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "add", "content": "2"},
]
CHAT_TOOLS = {
    "messages": TOOL_TURN, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "add"}},
    "parallel_tool_calls": False, "max_completion_tokens": 16, "temperature": 0, "stream": False,
    "enable_thinking": False, "documents": [{"title": "t", "text": "x"}],
}
CHAT_FORMAT = {
    "messages": MESSAGES, "max_tokens": 8, "seed": 1, "logit_bias": {"11": 2}, "stop": ["}"],
    "response_format": {"type": "json_schema", "json_schema": {
        "name": "n", "description": "d", "strict": True, "schema": {"type": "object"}}},
    "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
}
COMPLETION_GUIDED = {
    "prompt": ["a", "b"], "max_tokens": 4, "min_tokens": 1, "stop_token_ids": [11], "truncate_prompt_tokens": 3,
    "structured_outputs": {"regex": "[ab]+", "disable_any_whitespace": True}, "best_of": 1, "n": 1,
}
TOKENIZE = {"prompt": "hi", "add_special_tokens": True, "messages": MESSAGES}
TOKENIZE_TOOLS = {"messages": TOOL_TURN, "tools": TOOLS, "add_generation_prompt": False,
                  "continue_final_message": False, "chat_template_kwargs": {"enable_thinking": True}}
DETOKENIZE = {"tokens": [1, 2, 3]}
RESPONSES_TOOLS = [{"type": "function", "name": "add", "description": "adds", "strict": True,
                    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}},
                                   "required": ["a"], "additionalProperties": False}}]
RESPONSES = {
    "input": [
        {"type": "message", "role": "developer", "content": "d"},
        {"role": "user", "content": [{"type": "input_text", "text": "add 1"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "r"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "add", "arguments": "{\"a\": 1}",
         "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "2"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "2", "annotations": []}]},
    ],
    "instructions": "be brief", "tools": RESPONSES_TOOLS, "tool_choice": {"type": "function", "name": "add"},
    "parallel_tool_calls": False, "max_output_tokens": 16, "temperature": 0, "top_p": 1, "store": True,
    "reasoning": {"effort": "none", "summary": "auto"}, "metadata": {"k": "v"}, "user": "u", "include": [],
    "truncation": "disabled",
}
RESPONSES_STREAM = {
    "input": "hi", "max_output_tokens": 8, "stream": True, "seed": 3, "top_k": 5,
    "text": {"format": {"type": "json_schema", "name": "n", "strict": True, "schema": {"type": "object"}},
             "verbosity": "medium"},
    "chat_template_kwargs": {"enable_thinking": False},
}
EMBEDDINGS = {
    "input": ["hi", "there"], "model": "tests/fixtures/tiny-qwen3-embedding", "encoding_format": "base64",
    "dimensions": 8, "user": "u", "truncate_prompt_tokens": 16,
}
EMBEDDINGS_IDS = {"input": [[1, 2, 3], [4]], "encoding_format": "float"}
ROUTES = [("/v1/embeddings", EMBEDDINGS), ("/v1/embeddings", EMBEDDINGS_IDS), ("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT),
          ("/tokenize", TOKENIZE), ("/detokenize", DETOKENIZE), ("/v1/chat/completions", CHAT_TOOLS),
          ("/v1/chat/completions", CHAT_FORMAT), ("/v1/completions", COMPLETION_GUIDED),
          ("/tokenize", TOKENIZE_TOOLS), ("/v1/responses", RESPONSES), ("/v1/responses", RESPONSES_STREAM)]

ODD_VALUES = [
    None, True, False, 0, -1, 1, 2**31, 2**63, -2**63, 1e308, -1e308, 0.5, -0.5, "", "x", "\u0000",
    "\ud7ff", "\U0001F600" * 3, [], [1], [[1, 2]], [151935], [151936], [-5], {}, {"a": 1}, "a" * 5000,
    [0] * 3000, float("nan"),
]
OK_STATUSES = {200, 400, 404, 413, 422, 503}


def mutate(obj, rng, depth=0):
    out = json.loads(json.dumps(obj))
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(list(out) + ["extra"])
        roll = rng.random()
        value = out.get(key)
        if roll < 0.1:
            out.pop(key, None)
        elif roll < 0.35 and depth < 2 and isinstance(value, dict) and value:
            out[key] = mutate(value, rng, depth + 1)
        elif roll < 0.35 and depth < 2 and isinstance(value, list) and value and isinstance(value[0], dict):
            value[rng.randrange(len(value))] = mutate(value[0], rng, depth + 1)
        else:
            out[key] = rng.choice(ODD_VALUES)
    return out


def members(obj, out):
    """Every (container, key) under obj: object members and list items, at any depth."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        out.append((obj, key))
        members(value, out)
    return out


# Null or absent there means "the rest of the context" for a chat:
# thousands of tokens per request, each one slow under a grammar
# (tests/test_server_nulls.c covers it).
LENGTH_KEYS = {"max_tokens", "max_completion_tokens", "max_output_tokens"}


def nulls(obj, rng):
    """obj with one to three fields (anywhere) set to null: what SDKs send for unset ones."""
    out = json.loads(json.dumps(obj))
    found = [(c, k) for c, k in members(out, []) if k not in LENGTH_KEYS]
    for _ in range(rng.randint(1, 3)):
        container, key = rng.choice(found)
        container[key] = None
    return out


def send(port, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    malformed = 0
    counts = {}
    for i in range(args.requests):
        path, base = rng.choice(ROUTES)
        roll = rng.random()
        body = nulls(base, rng) if roll < 0.25 else mutate(nulls(base, rng), rng) if roll < 0.35 else mutate(base, rng)
        for key in LENGTH_KEYS & base.keys():  # dropped or null: restored (see LENGTH_KEYS)
            if body.get(key, None) is None:
                body[key] = base[key]
        text = json.dumps(body)
        if rng.random() < 0.05:
            text = text[:rng.randint(0, len(text))]
        body = text.encode("utf-8", "surrogatepass")
        try:
            status, ctype, data = send(args.port, path, body)
        except (OSError, http.client.HTTPException) as e:
            print(f"request {i}: no answer ({e}) to POST {path} {text[:300]}")
            return 1
        counts[(path, status)] = counts.get((path, status), 0) + 1
        problem = None
        if status not in OK_STATUSES:
            problem = f"status {status}"
        elif "text/event-stream" not in ctype:
            try:
                json.loads(data)
            except ValueError:
                problem = "a body that is not JSON"
        if problem:
            malformed += 1
            print(f"request {i}: {problem} for POST {path} {text[:300]}\n  -> {data[:300]!r}")
    for (path, status), n in sorted(counts.items()):
        print(f"{n:6d}  {status}  {path}")
    print(f"{args.requests} requests, {malformed} malformed answers")
    return 1 if malformed else 0


if __name__ == "__main__":
    sys.exit(main())
