#!/usr/bin/env bash
# docker_test.sh - `make docker-test`: build the CPU image from our Dockerfile
# and check that it really deploys.
#
# No Docker engine runs on our machines and no registry can be pulled from,
# so this uses Debian's podman with the runc runtime (crun fails on this
# cgroup setup) and makes the Debian bookworm base image locally with
# debootstrap. Then: build the CPU flavour, run it with the tiny model
# mounted read-only and an API key passed through, wait for /health, send a
# completion (its greedy text must equal `nanovllm generate`'s on the host)
# and a streaming chat with curl, check the HEALTHCHECK, the unprivileged
# user and a clean stop, and print the image size. Then scripts/k8s_test.sh
# plays config/k8s/ on the image (two replicas behind nginx, a rolling
# restart under load).
#
# It removes what it made (container, image, build stages, a base image it
# had to create) on any exit; on failure it prints the container's log.
# KEEP_IMAGES=1 keeps the images for a look afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=localhost/debian:bookworm
IMAGE=localhost/nanovllm:cpu-docker-test
NAME=nanovllm-docker-test-$$
MODEL_DIR=$PWD/tests/fixtures/tiny-qwen3
API_KEY=docker-test-key
HOST_BIN=${NANOVLLM_BIN:-build/nanovllm}
WORK=$(mktemp -d /tmp/nanovllm-docker-test.XXXXXX)
BUILD_LOG=$WORK/build.log
made_base=0
started=0

step() { printf '\n== %s\n' "$*"; }
FAILED_BECAUSE=""
fail() {
    FAILED_BECAUSE="$*"
    printf '\ndocker-test FAILED: %s\n' "$*" >&2
    exit 1
}

# podman as root asks for nofile=1048576 by default; raising a limit needs
# CAP_SYS_RESOURCE, which this sandbox withholds, so runc would refuse to
# start. Limits no higher than our own are always allowed.
podman_run_limits() {
    local nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
    [ "$nofile" = unlimited ] && nofile=1048576
    [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
    echo "--ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc"
}

pm() { podman --runtime runc "$@"; }

cleanup() {
    local rc=$?
    set +e
    if [ "$started" = 1 ]; then
        if [ "$rc" != 0 ]; then
            printf '\n---- container log (%s) ----\n' "$NAME" >&2
            pm logs "$NAME" >&2 2>&1
            printf -- '---- end of container log ----\n' >&2
            # the log above pushes the reason out of a short tail: say it again last
            printf '\ndocker-test FAILED: %s\n' "${FAILED_BECAUSE:-exit code $rc}" >&2
        fi
        pm rm -f "$NAME" > /dev/null 2>&1
    fi
    if [ "$rc" != 0 ] && [ -s "$BUILD_LOG" ] && ! pm image exists "$IMAGE"; then
        printf '\n---- image build log (last 40 lines) ----\n' >&2
        tail -n 40 "$BUILD_LOG" >&2
    fi
    if [ "${KEEP_IMAGES:-0}" != 1 ]; then
        pm rmi -f "$IMAGE" > /dev/null 2>&1
        # the build stage, left untagged by the multi-stage build
        pm images -q --filter dangling=true --filter label=org.nanovllm.stage=build \
            | xargs -r podman rmi -f > /dev/null 2>&1
        [ "$made_base" = 1 ] && pm rmi -f "$BASE_IMAGE" > /dev/null 2>&1
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "tools"
missing=()
for tool in podman runc debootstrap curl python3; do
    command -v "$tool" > /dev/null || missing+=("$tool")
done
python3 -c 'import yaml' 2> /dev/null || missing+=(python3-yaml)
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || fail "needs ${missing[*]} (apt-get install -y podman runc debootstrap uidmap curl python3 python3-yaml)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap uidmap curl python3 python3-yaml > /dev/null
fi
[ -x "$HOST_BIN" ] || fail "$HOST_BIN is missing: run make first"
podman --version

step "base image $BASE_IMAGE"
if pm image exists "$BASE_IMAGE"; then
    echo "present"
else
    start=$(date +%s)
    debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian > "$WORK/debootstrap.log" 2>&1 \
        || { tail -n 20 "$WORK/debootstrap.log" >&2; fail "debootstrap bookworm"; }
    # as the official image: no package lists or caches (the build stage runs apt-get update)
    rm -rf "$WORK"/rootfs/var/lib/apt/lists/* "$WORK"/rootfs/var/cache/apt/*
    tar -C "$WORK/rootfs" -c . | pm import -q - "$BASE_IMAGE" > /dev/null
    made_base=1
    rm -rf "$WORK/rootfs"
    echo "made with debootstrap in $(($(date +%s) - start)) s"
fi

step "build the CPU flavour"
start=$(date +%s)
pm build --network host --format docker --build-arg CUDA=0 \
    --build-arg BUILD_IMAGE="$BASE_IMAGE" --build-arg RUNTIME_IMAGE="$BASE_IMAGE" \
    -t "$IMAGE" . > "$BUILD_LOG" 2>&1 || fail "podman build (log above)"
echo "built in $(($(date +%s) - start)) s"

step "run it"
# a port nobody listens on (host network: the container's port is the host's)
port=0
for candidate in $(shuf -i 20000-60000 -n 50); do
    if ! (exec 3<> "/dev/tcp/127.0.0.1/$candidate") 2> /dev/null; then
        port=$candidate
        break
    fi
done
[ "$port" != 0 ] || fail "no free port"
# shellcheck disable=SC2046
pm run -d --name "$NAME" --network host $(podman_run_limits) \
    -e NANOVLLM_PORT="$port" -v "$MODEL_DIR:/models/tiny-qwen3:ro" \
    "$IMAGE" --model /models/tiny-qwen3 --api-key "$API_KEY" \
    --kv-cache-memory 256MiB --max-model-len 2048 > /dev/null
started=1
URL=http://127.0.0.1:$port
healthy=0
for _ in $(seq 1 300); do
    [ "$(pm inspect -f '{{.State.Running}}' "$NAME")" = true ] || fail "the container exited at start-up"
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ]; then
        healthy=1
        break
    fi
    sleep 0.2
done
[ "$healthy" = 1 ] || fail "/health never answered 200"
echo "/health 200 on port $port"

step "completion"
status=$(curl -s -o "$WORK/unauth.json" -w '%{http_code}' "$URL/v1/completions" \
    -H 'Content-Type: application/json' -d '{"prompt": "Hello", "max_tokens": 8}')
[ "$status" = 401 ] || fail "without the API key: HTTP $status, expected 401"
curl -sf "$URL/v1/completions" -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' \
    -d '{"model": "/models/tiny-qwen3", "prompt": "Hello", "max_tokens": 8, "temperature": 0}' \
    > "$WORK/completion.json" || fail "POST /v1/completions"
"$HOST_BIN" generate --model "$MODEL_DIR" --prompt Hello --max-tokens 8 --temperature 0 --json --quiet \
    > "$WORK/host.json" || fail "nanovllm generate on the host"
python3 - "$WORK/completion.json" "$WORK/host.json" << 'EOF' || fail "completion answer (above)"
import json, sys
got = json.load(open(sys.argv[1]))
want = json.load(open(sys.argv[2]))
choice = got["choices"][0]
assert got["object"] == "text_completion", got
assert got["usage"]["completion_tokens"] == 8, got["usage"]
assert choice["finish_reason"] == "length", choice
assert choice["text"] == want["text"], f"container {choice['text']!r} != host {want['text']!r}"
print("text", repr(choice["text"]), "= the host binary's")
EOF

step "streaming chat"
curl -sfN "$URL/v1/chat/completions" -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 6, "stream": true}' \
    > "$WORK/chat.sse" || fail "streaming POST /v1/chat/completions"
python3 - "$WORK/chat.sse" << 'EOF' || fail "streamed chat (above)"
import json, sys
lines = [l for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l]
assert all(l.startswith("data: ") for l in lines), lines
assert lines[-1] == "data: [DONE]", lines[-1]
chunks = [json.loads(l[6:]) for l in lines[:-1]]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert chunks[0]["choices"][0]["delta"].get("role") == "assistant", chunks[0]
text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
assert text and finish in (["length"], ["stop"]), (text, finish)
print(len(chunks), "chunks, finish_reason", finish[0], "text", repr(text))
EOF

step "healthcheck, user"
pm healthcheck run "$NAME" > /dev/null 2>&1 || fail "the image's HEALTHCHECK reports unhealthy"
echo "HEALTHCHECK: healthy"
uid=$(pm exec "$NAME" id -u)
[ "$uid" != 0 ] || fail "the server runs as root"
echo "runs as uid $uid"

step "stop"
pm stop -t 30 "$NAME" > /dev/null 2>&1
code=$(pm inspect -f '{{.State.ExitCode}}' "$NAME")
[ "$code" = 0 ] || fail "exit code $code after SIGTERM"
pm logs "$NAME" 2>&1 | grep -q "stopped" || fail "no clean stop in the log"
echo "stopped cleanly (exit 0)"

step "size"
image_bytes=$(pm image inspect -f '{{.Size}}' "$IMAGE")
base_bytes=$(pm image inspect -f '{{.Size}}' "$BASE_IMAGE")
printf 'image %s: %d MB (base %s %d MB + nanovllm %d MB)\n' "$IMAGE" $((image_bytes / 1000000)) \
    "$BASE_IMAGE" $((base_bytes / 1000000)) $(((image_bytes - base_bytes) / 1000000))
# This container's part is done: its log would only push the reason for a
# failure below out of a short tail.
pm rm -f "$NAME" > /dev/null 2>&1
started=0

step "kubernetes (scripts/k8s_test.sh)"
K8S_LOG=$WORK/k8s.log
if ! scripts/k8s_test.sh 2>&1 | tee "$K8S_LOG"; then
    why=$(grep -a '^k8s-test FAILED: ' "$K8S_LOG" | tail -n 1)
    fail "config/k8s: ${why#k8s-test FAILED: }"
fi

printf '\ndocker-test passed\n'
