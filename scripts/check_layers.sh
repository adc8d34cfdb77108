#!/usr/bin/env bash
# check_layers.sh - the rooms' arrows point one way: each top-level folder of
# product code may include only the rooms listed below it here. `make test`
# runs it first; it prints every include that breaks the order and exits 1.
#
#   cli         the program: main, one file per subcommand, backend choice, benchmarks
#   server      the HTTP edge (server/http) and the OpenAI protocol (server/openai)
#   cpu, cuda   the backends: each fills the engine's runner interface
#   engine      requests, scheduler, block manager, sampler, the runner interface
#   chat        chat templates, tool-call formats, an answer split into its parts
#   model       checkpoints: config.json, safetensors, weights
#   structured  the grammar engine: constraints compiled to token masks
#   text        tokenizer and Jinja interpreter
#   base, config  errors, logs, buffers, CPU features; defaults
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A may_include=(
  [config]=""
  [base]="config"
  [text]="base config"
  [structured]="base config text"
  [model]="base config"
  [chat]="base config text structured"
  [engine]="base config text structured model"
  [cpu]="base config model engine"
  [cuda]="base config model engine"
  [server]="base config text structured model engine chat"
  [cli]="base config text structured model engine chat cpu cuda server"
)

bad=0
while IFS= read -r file; do
  room=${file%%/*}
  [ -n "${may_include[$room]+x}" ] || continue
  while IFS= read -r line; do
    target=$(sed -E 's/^[^"]*"([^"]+)".*/\1/' <<<"$line")
    [[ $target == */* ]] || continue            # same folder
    to=${target%%/*}
    [ "$to" = "$room" ] && continue
    [ -n "${may_include[$to]+x}" ] || continue  # not a room (a system path)
    if [[ " ${may_include[$room]} " != *" $to "* ]]; then
      echo "check_layers: $file includes $target: $room may include only: ${may_include[$room]:-nothing}"
      bad=1
    fi
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$file" || true)
done < <(git ls-files '*.c' '*.h' '*.cu' 2>/dev/null || find . -name '*.[ch]' -o -name '*.cu' | sed 's|^\./||')

[ "$bad" -eq 0 ] && echo "check_layers: every include points down the rooms' order"
exit "$bad"
