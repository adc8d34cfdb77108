#!/usr/bin/env bash
# k8s_test.sh - part of `make docker-test`: play config/k8s/*.yaml with
# podman and check a rolling restart loses no request.
#
# No Kubernetes cluster runs here, so `podman kube play` stands in for one
# (scripts/k8s_podman.py says what it changes in the manifests and why): two
# nanovllm replicas with the API key from the Secret, nginx in front with the
# manifests' config. Then:
#   - both replicas and nginx answer; 401 without the key, a completion and a
#     streamed chat with it, through nginx;
#   - a rolling restart, one replica at a time (SIGTERM, drain, start, wait
#     for /health), while clients stream chats through nginx without pause:
#     every stream must end with its finish_reason and [DONE]; the only
#     other answer allowed is a clean JSON 503, which the client retries.
#     Each replica must log its drain and exit 0.
#   - with no replica left, nginx answers a JSON 503 with Retry-After.
#
# scripts/docker_test.sh runs it once its image is built and checked (the
# image stays that script's to remove). This one builds an nginx image (Debian's
# nginx-light: nginx:1.27 cannot be pulled here) and removes it, the pods, the
# network and the secret on any exit; KEEP_IMAGES=1 keeps the nginx image.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=localhost/nanovllm:cpu-docker-test
BASE_IMAGE=localhost/debian:bookworm
NGINX_IMAGE=localhost/nginx-nanovllm:k8s-test
NETWORK=nanovllm-k8s-test
SUBNET=10.91.7
NGINX_IP=$SUBNET.10
REPLICA_IPS=("$SUBNET.11" "$SUBNET.12")
# fixed MACs too: a restarted pod would otherwise get a new one, and peers'
# stale ARP entries would black-hole it for a minute
NGINX_MAC=02:00:0a:5b:07:0a
REPLICA_MACS=(02:00:0a:5b:07:0b 02:00:0a:5b:07:0c)
API_KEY=k8s-test-key
WORK=$(mktemp -d /tmp/nanovllm-k8s-test.XXXXXX)
SECRET=""
pods_up=0

step() { printf '\n== %s\n' "$*"; }
FAILED_BECAUSE=""
fail() {
    FAILED_BECAUSE="$*"
    printf '\nk8s-test FAILED: %s\n' "$*" >&2
    exit 1
}
pm() { podman --runtime runc "$@"; }

# podman asks for limits above ours by default, which runc may not raise here
# (see docker_test.sh); kube play takes no --ulimit, so they go in a config.
nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] && nofile=1048576
[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' \
    "$nofile" "$nofile" "$nproc" "$nproc" > "$WORK/containers.conf"
export CONTAINERS_CONF=$WORK/containers.conf

replica_pods() { pm pod ps --format '{{.Name}}' | grep '^nanovllm-pod-' | sort; }

cleanup() {
    local rc=$?
    set +e
    if [ "$pods_up" = 1 ]; then
        if [ "$rc" != 0 ]; then
            for c in $(pm ps -a --format '{{.Names}}' | grep -E '^(nanovllm|nginx-nanovllm)-pod-'); do
                printf '\n---- log of %s (last 60 lines) ----\n' "$c" >&2
                pm logs "$c" 2>&1 | tail -n 60 >&2
            done
        fi
        pm kube down "$WORK/nginx.yaml" > /dev/null 2>&1
        pm kube down "$WORK/nanovllm.yaml" > /dev/null 2>&1
    fi
    [ -n "$SECRET" ] && pm secret rm "$SECRET" > /dev/null 2>&1
    pm network rm -f "$NETWORK" > /dev/null 2>&1
    [ "${KEEP_IMAGES:-0}" = 1 ] || pm rmi -f "$NGINX_IMAGE" > /dev/null 2>&1
    # The logs above push the reason out of a short tail: say it again last.
    if [ "$rc" != 0 ]; then
        [ -s "$WORK/clients.out" ] && { printf '\n---- clients ----\n' >&2; tail -n 12 "$WORK/clients.out" >&2; }
        printf '\nk8s-test FAILED: %s\n' "${FAILED_BECAUSE:-exit code $rc}" >&2
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_healthy() { # url, what
    for _ in $(seq 1 300); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/health")" = 200 ] && return 0
        sleep 0.2
    done
    fail "$2: /health never answered 200"
}

step "images"
python3 -c 'import yaml' 2> /dev/null || fail "needs python3-yaml (apt-get install -y python3-yaml)"
pm image exists "$IMAGE" || fail "no $IMAGE: run make docker-test, which builds it and then runs this"
if ! pm image exists "$NGINX_IMAGE"; then
    cat > "$WORK/Containerfile.nginx" << EOF
FROM $BASE_IMAGE
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light \
 && rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled/default \
 && ln -sf /dev/stdout /var/log/nginx/access.log && ln -sf /dev/stderr /var/log/nginx/error.log
STOPSIGNAL SIGQUIT
CMD ["/usr/sbin/nginx", "-g", "daemon off;"]
EOF
    pm build --network host -t "$NGINX_IMAGE" -f "$WORK/Containerfile.nginx" "$WORK" > "$WORK/nginx_build.log" 2>&1 \
        || { tail -n 20 "$WORK/nginx_build.log" >&2; fail "building the nginx image"; }
fi
echo "$IMAGE, $NGINX_IMAGE"

step "manifests"
args=()
for ip in "${REPLICA_IPS[@]}"; do args+=(--replica-ip "$ip"); done
SECRET=$(python3 scripts/k8s_podman.py --nanovllm config/k8s/nanovllm.yaml --nginx config/k8s/nginx.yaml \
    --nginx-conf config/nginx-nanovllm.conf --nanovllm-image "$IMAGE" --nginx-image "$NGINX_IMAGE" \
    --models-dir "$PWD/tests/fixtures" --model-name tiny-qwen3 --api-key "$API_KEY" "${args[@]}" \
    --secret-json "$WORK/secret.json" --out-nanovllm "$WORK/nanovllm.yaml" --out-nginx "$WORK/nginx.yaml") \
    || fail "config/k8s manifests (above)"
echo "nginx.yaml's config agrees with config/nginx-nanovllm.conf; secret $SECRET"

step "play"
pm network rm -f "$NETWORK" > /dev/null 2>&1 || true
pm network create --subnet "$SUBNET.0/24" "$NETWORK" > /dev/null
pm secret rm "$SECRET" > /dev/null 2>&1 || true
pm secret create "$SECRET" "$WORK/secret.json" > /dev/null
pods_up=1
ip_args=()
for i in "${!REPLICA_IPS[@]}"; do ip_args+=(--ip "${REPLICA_IPS[$i]}" --mac-address "${REPLICA_MACS[$i]}"); done
pm kube play --network "$NETWORK" "${ip_args[@]}" "$WORK/nanovllm.yaml" > /dev/null
pm kube play --network "$NETWORK" --ip "$NGINX_IP" --mac-address "$NGINX_MAC" "$WORK/nginx.yaml" > /dev/null
mapfile -t PODS < <(replica_pods)
[ "${#PODS[@]}" = 2 ] || fail "expected 2 replica pods, got: ${PODS[*]}"
for ip in "${REPLICA_IPS[@]}"; do wait_healthy "http://$ip:8000" "replica $ip"; done
NGINX=http://$NGINX_IP:8000
wait_healthy "$NGINX" nginx
for p in "${PODS[@]}"; do
    c=$p-nanovllm
    [ "$(pm exec "$c" id -u)" = 10001 ] || fail "$c does not run as uid 10001"
    pm exec "$c" sh -c ': > /probe' 2> /dev/null && fail "$c: the root filesystem is writable"
done
echo "replicas ${PODS[*]} at ${REPLICA_IPS[*]} (uid 10001, read-only root), nginx at $NGINX_IP: /health 200"

step "through nginx"
status=$(curl -s -o /dev/null -w '%{http_code}' "$NGINX/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Hello", "max_tokens": 4}')
[ "$status" = 401 ] || fail "without the API key: HTTP $status, expected 401"
curl -sf "$NGINX/v1/completions" -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' \
    -d '{"prompt": "Hello", "max_tokens": 8, "temperature": 0}' > "$WORK/completion.json" \
    || fail "POST /v1/completions through nginx"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["usage"]["completion_tokens"] == 8, d; print("completion:", repr(d["choices"][0]["text"]))' \
    "$WORK/completion.json" || fail "completion through nginx"

step "rolling restart under load"
cat > "$WORK/stream_clients.py" << 'EOF'
# Streams chats through nginx from several threads until the stop file shows up.
import http.client, json, os, sys, threading, time
host, key, stop_file = sys.argv[1], sys.argv[2], sys.argv[3]
counts = {"ok": 0, "retried_503_replica_stopping": 0, "retried_503_no_replica": 0, "failed": 0}
failures, lock = [], threading.Lock()

def one(i, n):
    body = json.dumps({"messages": [{"role": "user", "content": f"client {i} request {n}"}],
                       "max_tokens": 96, "stream": True})
    conn = http.client.HTTPConnection(host, 8000, timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {key}",
                     "Content-Type": "application/json", "X-Session-Id": f"s{i}-{n}"})
        resp = conn.getresponse()
        data = resp.read().decode("utf-8", "replace")
        if resp.status == 503:
            err = json.loads(data)["error"]
            if resp.getheader("Retry-After") and err["message"]:  # nginx's own, or a replica's
                return "retried_503_" + ("no_replica" if "no nanovllm replica" in err["message"] else "replica_stopping"), None
            return "failed", f"503 without Retry-After or message: {data[:200]}"
        if resp.status != 200:
            return "failed", f"HTTP {resp.status}: {data[:200]}"
        lines = [l for l in data.split("\n") if l]
        if not lines or lines[-1] != "data: [DONE]":
            return "failed", f"stream cut: ...{data[-200:]!r}"
        chunks = [json.loads(l[6:]) for l in lines[:-1]]
        if any("error" in c for c in chunks):
            return "failed", f"error event: {data[-300:]!r}"
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0]["finish_reason"]]
        if finish not in (["length"], ["stop"]):
            return "failed", f"finish_reason {finish}"
        return "ok", None
    except Exception as e:  # a reset, a timeout, bad JSON: all failures
        return "failed", f"{type(e).__name__}: {e}"
    finally:
        conn.close()

def client(i):
    n = 0
    while not os.path.exists(stop_file):
        t = time.time()
        outcome, why = one(i, n)
        n += 1
        if why: why = f"[client {i}, {time.strftime('%H:%M:%S', time.gmtime(t))}+{time.time() - t:.1f}s] {why}"
        with lock:
            counts[outcome] += 1
            if why: failures.append(why)
            with open(stop_file + ".ok", "w") as f: f.write(str(counts["ok"]))
        if outcome.startswith("retried"): time.sleep(0.2)

threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(counts))
for f in failures[:10]: print("  failure:", f)
sys.exit(1 if counts["failed"] or counts["ok"] < 10 else 0)  # at least some real load
EOF
python3 "$WORK/stream_clients.py" "$NGINX_IP" "$API_KEY" "$WORK/stop" > "$WORK/clients.out" 2>&1 &
clients=$!
sleep 2
for i in "${!PODS[@]}"; do
    p=${PODS[$i]}
    t0=$(date +%s%N)
    # The container, not the pod: `podman pod stop` takes the pod's network
    # down while its containers still drain, which Kubernetes never does.
    pm stop -t 45 "$p-nanovllm" > /dev/null
    code=$(pm inspect -f '{{.State.ExitCode}}' "$p-nanovllm")
    [ "$code" = 0 ] || fail "$p: exit code $code after SIGTERM"
    drain=$(pm logs "$p-nanovllm" 2>&1 | grep -o 'SIGTERM: finishing [0-9]* in-flight requests' | tail -n 1)
    [ -n "$drain" ] || fail "$p: no drain in its log"
    pm start "$p-nanovllm" > /dev/null
    wait_healthy "http://${REPLICA_IPS[$i]}:8000" "$p after its restart"
    printf '%s: %s, exit 0, ready again after %d ms (stopped at %s UTC)\n' "$p" "$drain" \
        $((($(date +%s%N) - t0) / 1000000)) "$(date -u -d "@$((t0 / 1000000000))" +%T)"
    sleep 2
done
# enough load after the restarts too: 10 streams completed in all, waiting
# at most 60 s for them on a slow machine
for _ in $(seq 1 300); do
    ok=$(cat "$WORK/stop.ok" 2> /dev/null || true)
    [ "${ok:-0}" -ge 10 ] 2> /dev/null && break
    sleep 0.2
done
touch "$WORK/stop"
wait "$clients" && clients_rc=0 || clients_rc=$?
cat "$WORK/clients.out"
if [ "$clients_rc" != 0 ]; then # the counts and the first failures, in the one line a short tail keeps
    fail "requests were lost during the rolling restart: $(grep -a -m 1 '^{' "$WORK/clients.out")" \
        "$(grep -a 'failure:' "$WORK/clients.out" | head -n 3 | tr -s ' \n' ' ')"
fi

step "no replica left"
for p in "${PODS[@]}"; do pm stop -t 45 "$p-nanovllm" > /dev/null; done
curl -s -D "$WORK/headers" -o "$WORK/none.json" "$NGINX/v1/completions" -H "Authorization: Bearer $API_KEY" \
    -H 'Content-Type: application/json' -d '{"prompt": "Hello", "max_tokens": 4}' > /dev/null || true
grep -q '^HTTP/1.1 503' "$WORK/headers" || fail "nginx with no replica: $(head -n 1 "$WORK/headers")"
grep -qi '^Retry-After: 1' "$WORK/headers" || fail "nginx's 503 has no Retry-After"
python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["type"] == "server_error", e; print("503:", e["message"])' \
    "$WORK/none.json" || fail "nginx's 503 is not an OpenAI-style error"

printf '\nk8s-test passed\n'
