#!/usr/bin/env bash
# Chat template benchmark: renders one long conversation (100 messages with
# tool calls and tool results, 8 tools) with real templates, timing each
# render alone (`nanovllm tokenize --chat --bench`), and the same template
# and request in Python's Jinja2 as transformers runs it when a python3 with
# jinja2 is at hand (not a dependency: the baseline is skipped otherwise).
#
#   scripts/bench_chat_template.sh [RUNS]   (default 300)
#
# Prints one line per template: median milliseconds per render, ours and
# Jinja2's, and their ratio; the goal is <= 1 ms for ours.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-300}
WORK=build/bench-chat-template
mkdir -p "$WORK"
make -s build/nanovllm
export SOURCE_DATE_EPOCH=1722002400 TZ=UTC

# The conversation: system, then 33 rounds of user / assistant tool call /
# tool result (the last one a plain answer), 8 tools with JSON schemas.
python3 - "$WORK/request.json" <<'PY'
import json, sys
tools = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": f"Tool number {i}: looks things up and reports back.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "what to look for"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        "filters": {"type": "object", "properties": {"site": {"type": "string"},
                                                      "tags": {"type": "array", "items": {"type": "string"}}}}},
        "required": ["query"]}}} for i in range(8)]
messages = [{"role": "system", "content": "You are a careful assistant. Use the tools when they help."}]
for i in range(33):
    messages.append({"role": "user", "content": f"Question {i}: what do the records say about item {i}? " * 3})
    if len(messages) == 97:
        messages.append({"role": "assistant", "content": f"Item {i} is fine."})
        break
    messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"call{i:05d}x", "type": "function",
                     "function": {"name": f"tool_{i % 8}", "arguments": {"query": f"item {i}", "limit": 5}}}]})
    messages.append({"role": "tool", "tool_call_id": f"call{i:05d}x", "content": json.dumps({"item": i, "status": "ok", "notes": ["a", "b"]})})
messages = messages[:100]
json.dump({"messages": messages, "tools": tools, "add_generation_prompt": True}, open(sys.argv[1], "w"))
print(f"request: {len(messages)} messages, {len(tools)} tools", file=sys.stderr)
PY

baseline() { # template file -> median ms of Jinja2, or "-"
  python3 - "$1" "$WORK/request.json" "$RUNS" <<'PY' 2>/dev/null || echo "-"
import json, sys, time
from datetime import datetime
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.exceptions import TemplateError
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def raise_exception(m): raise TemplateError(m)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: datetime.now().strftime(f)
t = env.from_string(open(sys.argv[1]).read())
req = json.load(open(sys.argv[2]))
runs = int(sys.argv[3])
kw = dict(messages=req["messages"], tools=req["tools"], documents=None, add_generation_prompt=True,
          bos_token="<s>", eos_token="</s>")
t.render(**kw)
times = []
for _ in range(runs):
    t0 = time.perf_counter(); t.render(**kw); times.append((time.perf_counter() - t0) * 1e3)
times.sort()
print(f"{times[len(times) // 2]:.4f}")
PY
}

printf "%-45s %10s %10s %8s\n" "template" "ours ms" "jinja2 ms" "ratio"
for dir in tests/fixtures/chat-templates/*/; do
  name=$(basename "$dir")
  ours=$(build/nanovllm tokenize --model tests/fixtures/tiny-qwen3 --chat --bench --json --quiet \
           --bench-runs "$RUNS" --chat-template "$dir/template.jinja" < "$WORK/request.json" 2>/dev/null \
         | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["median_ms"])' 2>/dev/null || echo "raises")
  theirs=$( [ "$ours" = raises ] && echo "-" || baseline "$dir/template.jinja")
  ratio=$(python3 -c "import sys; a, b = sys.argv[1:]; print('%.1fx' % (float(b) / float(a)) if '-' not in (a, b) and a != 'raises' else '-')" "$ours" "$theirs")
  printf "%-45s %10s %10s %8s\n" "$name" "$ours" "$theirs" "$ratio"
done
