# gpu_lib.sh - what scripts/gpu_check.sh and scripts/gpu_ab.sh share, sourced
# by both on the GPU machine: the bundle unpacked (as scripts/gpu_bundle.sh
# packs it) with its libraries on the path, table rows printed as they are
# known and again as a table at the end, and one JSON field read out.
#
# Expects OUT and ROW_WIDTH (the name column) set; sets BUNDLE, BIN, PY.
BUNDLE=${BUNDLE:-gpu-bundle}
BIN=$BUNDLE/nanovllm
PY=${PY:-python3}
export LD_LIBRARY_PATH="$PWD/$BUNDLE/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if [ ! -x "$BIN" ] && [ -f "$BUNDLE/bundle.tar.xz" ]; then
    { xz -dc "$BUNDLE/bundle.tar.xz" | tar -C "$BUNDLE" -xf -; } 2> /dev/null ||
        "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
            "$BUNDLE/bundle.tar.xz" "$BUNDLE" || echo "cannot unpack $BUNDLE/bundle.tar.xz"
fi

ROWS=()
row() { # name, result, detail
    ROWS+=("$1|$2|$3")
    printf "%-${ROW_WIDTH}s %-6s %s\n" "$1" "$2" "$3"
}

# The rows again, as a table under TITLE, into $OUT/table.txt too.
print_table() {
    echo
    echo "==== $1 ($(date -u +%Y-%m-%dT%H:%MZ)) ===="
    for r in "${ROWS[@]}"; do
        IFS='|' read -r name result detail <<< "$r"
        printf "%-${ROW_WIDTH}s %-6s %s\n" "$name" "$result" "$detail"
    done | tee "$OUT/table.txt"
}

# json_field JSON EXPR [FORMAT]: d EXPR of the JSON, numbers formatted as FORMAT (e.g. .0f)
json_field() {
    "$PY" -c "import json,sys; d=json.loads(sys.argv[1]); v=d$2; f=sys.argv[2:]
print(format(v, f[0]) if f and isinstance(v, (int, float)) and not isinstance(v, bool) else v)" "$1" ${3:+"$3"} 2>/dev/null
}
