#!/usr/bin/env python3
"""compare_templates.py - renders a folder of chat templates (*.jinja) with
`nanovllm tokenize --chat --json` and with Python's Jinja2 set up as
transformers sets it up, for a few conversations each, and reports where they
differ. Needs a python3 with jinja2 (not a dependency of the build).

    python3 scripts/compare_templates.py DIR [MODEL_DIR]

MODEL_DIR (default tests/fixtures/tiny-qwen3) gives the tokenizer and its
special tokens (eos_token <|im_end|>, no bos_token). Templates are passed with
--chat-template and the messages as sent (--chat-template-content-format
verbatim), so both sides see the same variables.
"""
import glob
import json
import os
import subprocess
import sys
from datetime import datetime

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FOLDER = sys.argv[1]
MODEL = sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/tiny-qwen3"
BIN = os.environ.get("NANOVLLM_BIN", "build/nanovllm")


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise TemplateError(message)


class Generation(Extension):
    """transformers' {% generation %} block (its AssistantTracker): renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[loopcontrols, Generation])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception
ENV.globals["strftime_now"] = lambda fmt: datetime(2024, 7, 26, 14, 0).strftime(fmt)

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}]
CONVERSATIONS = {
    "user": {"messages": [{"role": "user", "content": "Hello é!"}]},
    "system-multi": {"messages": [
        {"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>hmm</think>Hello"}, {"role": "user", "content": "Bye"}]},
    "tools": {"tools": TOOLS, "messages": [
        {"role": "system", "content": "S"}, {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_abc123xyz", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "call_abc123xyz", "name": "get_weather", "content": "21 C"}]},
    "no-think": {"messages": [{"role": "user", "content": "Hi"}],
                 "chat_template_kwargs": {"enable_thinking": False}},
    "parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                        {"type": "text", "text": "b"}]}]},
}


def jinja2_render(source, conv):
    variables = {"eos_token": "<|im_end|>", "add_generation_prompt": True, "tools": conv.get("tools"),
                 "documents": None, "messages": conv["messages"], **conv.get("chat_template_kwargs", {})}
    return ENV.from_string(source).render(**variables)


def main():
    os.environ.update(SOURCE_DATE_EPOCH="1722002400", TZ="UTC")
    same = both_raise = 0
    differ = []
    for path in sorted(glob.glob(os.path.join(FOLDER, "*.jinja"))):
        source = open(path, encoding="utf-8").read()
        for name, conv in CONVERSATIONS.items():
            try:
                want, error = jinja2_render(source, conv), None
            except Exception as e:  # the template raises in Jinja2
                want, error = None, f"{type(e).__name__}: {e}"
            p = subprocess.run([BIN, "tokenize", "--model", MODEL, "--chat", "--json", "--quiet",
                                "--chat-template", path, "--chat-template-content-format", "verbatim"],
                               input=json.dumps(conv).encode(), capture_output=True)
            got = json.loads(p.stdout)["text"] if p.returncode == 0 else None
            if p.returncode not in (0, 1):
                differ.append(f"{os.path.basename(path)} {name}: exit {p.returncode}")
            elif error is not None and got is None:
                both_raise += 1
            elif got == want:
                same += 1
            else:
                theirs = error or repr(want[:120])
                ours = p.stderr.decode(errors="replace").strip() if got is None else repr(got[:120])
                differ.append(f"{os.path.basename(path)} {name}:\n  jinja2: {theirs[:200]}\n  ours:   {ours[:200]}")
    for line in differ:
        print(line)
    print(f"{same} identical, {both_raise} raise in both, {len(differ)} differ")


if __name__ == "__main__":
    main()
