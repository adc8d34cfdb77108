#!/usr/bin/env python3
"""k8s_podman.py - turn config/k8s/*.yaml into what `podman kube play` runs.

Used by scripts/k8s_test.sh, which has no Kubernetes cluster: podman 4.3
plays Deployments (one pod per replica), ConfigMaps and hostPath volumes,
but not Secrets, Services, probes or DNS. So, and nothing else changes:
  - the Secret becomes a podman secret (a JSON map of base64 values,
    written to --secret-json) holding the test's API key;
  - Services are dropped (the test talks to pod IPs);
  - probes and lifecycle hooks are dropped (the test polls /health, the
    endpoint the probes use, itself), and so are containerPorts (podman
    would publish each on the host's port, where two replicas collide);
  - images become the locally built ones; the models volume becomes a
    hostPath of tests/fixtures and the model argument the tiny model's;
  - nginx's upstream lists the replicas' fixed IPs instead of resolving the
    headless Service (Debian's nginx 1.22 has no `resolve`).
It also checks that nginx.yaml's config is config/nginx-nanovllm.conf
outside the upstream block and the resolver line, so the two cannot drift.
"""
import argparse
import base64
import json
import re
import sys

import yaml


def fail(msg):
    sys.exit(f"k8s_podman.py: {msg}")


def load(path):
    return [d for d in yaml.safe_load_all(open(path, encoding="utf-8")) if d]


def only(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    if len(found) != 1:
        fail(f"expected one {kind}, found {len(found)}")
    return found[0]


def strip_container(c, keys):
    for key in keys:
        if key not in c:
            fail(f"container {c['name']} lost its {key}")
        del c[key]


def nanovllm(args):
    docs = load(args.nanovllm)
    secret = only(docs, "Secret")
    dep = only(docs, "Deployment")
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    strip_container(c, ("startupProbe", "readinessProbe", "livenessProbe", "lifecycle", "ports"))
    # sandboxes without cgroup delegation cannot apply limits; nothing here needs them
    c.pop("resources", None)
    c["image"] = args.nanovllm_image
    model_arg = c["args"].index("--model") + 1
    c["args"][model_arg] = "/models/" + args.model_name
    c["args"] += ["--kv-cache-memory", "256MiB", "--max-model-len", "2048"]
    key_ref = next(e["valueFrom"]["secretKeyRef"] for e in c["env"] if e["name"] == "NANOVLLM_API_KEY")
    if key_ref["name"] != secret["metadata"]["name"] or key_ref["key"] not in secret["stringData"]:
        fail("NANOVLLM_API_KEY does not come from the Secret")
    (vol,) = spec["volumes"]
    vol.pop("persistentVolumeClaim")
    vol["hostPath"] = {"path": args.models_dir, "type": "Directory"}
    json.dump({key_ref["key"]: base64.b64encode(args.api_key.encode()).decode()},
              open(args.secret_json, "w"))
    print(secret["metadata"]["name"])  # the podman secret's name, for the caller
    return [dep]


def conf_body(text):
    """The config without comments, blank lines, the resolver and the upstream block."""
    text = re.sub(r"upstream nanovllm \{.*?\n\s*\}", "upstream", text, flags=re.S)
    lines = [line.split("#")[0].strip() for line in text.split("\n")]
    return [line for line in lines if line and not line.startswith("resolver ")]


def nginx(args):
    docs = load(args.nginx)
    cm = only(docs, "ConfigMap")
    dep = only(docs, "Deployment")
    (name,) = cm["data"]
    conf = cm["data"][name]
    if conf_body(conf) != conf_body(open(args.nginx_conf, encoding="utf-8").read()):
        fail(f"{args.nginx} and {args.nginx_conf} differ outside the upstream block")
    servers = "".join(f"    server {ip}:8000 max_fails=3 fail_timeout=10s;\n" for ip in args.replica_ip)
    conf, n = re.subn(r"(upstream nanovllm \{\n)(.*?)(\n\})",
                      lambda m: m.group(1) + "    hash $nanovllm_route_key consistent;\n" + servers.rstrip("\n") + m.group(3),
                      conf, flags=re.S)
    if n != 1:
        fail("no upstream block in the ConfigMap")
    cm["data"][name] = "\n".join(line for line in conf.split("\n") if not line.startswith("resolver "))
    dep["spec"]["replicas"] = 1
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    strip_container(c, ("readinessProbe", "lifecycle", "ports"))
    c["image"] = args.nginx_image
    return [cm, dep]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nanovllm", required=True, help="config/k8s/nanovllm.yaml")
    p.add_argument("--nginx", required=True, help="config/k8s/nginx.yaml")
    p.add_argument("--nginx-conf", required=True, help="config/nginx-nanovllm.conf")
    p.add_argument("--nanovllm-image", required=True)
    p.add_argument("--nginx-image", required=True)
    p.add_argument("--models-dir", required=True)
    p.add_argument("--model-name", required=True)
    p.add_argument("--api-key", required=True)
    p.add_argument("--replica-ip", action="append", required=True)
    p.add_argument("--secret-json", required=True)
    p.add_argument("--out-nanovllm", required=True)
    p.add_argument("--out-nginx", required=True)
    args = p.parse_args()
    yaml.safe_dump_all(nanovllm(args), open(args.out_nanovllm, "w"), sort_keys=False)
    yaml.safe_dump_all(nginx(args), open(args.out_nginx, "w"), sort_keys=False)


if __name__ == "__main__":
    main()
