#!/usr/bin/env bash
# Opt-in: the Kubernetes manifests in deploy/kubernetes/ checked three ways.
# - Core kinds (Deployment, Service, ConfigMap, Job, PVC) validate against Kubernetes 1.30's
#   schemas with kubernetes-validate --strict, from PyPI, in a venv under target/.
# - Every tokentap config a ConfigMap carries passes `tokentap check`.
# - The PrometheusRule carries exactly deploy/prometheus/tokentap-rules.yml's groups, and
#   promtool accepts them.
# CRDs (ServiceMonitor, PrometheusRule, KServe's ServingRuntime) have no schema here: they are
# parsed, not validated.
#
#   scripts/kubernetes-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/k8s-venv
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q kubernetes-validate pyyaml
fi
cargo build --release --locked -q
"$VENV/bin/kubernetes-validate" --kubernetes-version 1.30.0 --strict \
  deploy/kubernetes/tokentap-vllm.yaml deploy/kubernetes/tokentap-litellm-tap.yaml \
  deploy/kubernetes/bench-job.yaml deploy/kubernetes/bench-indexed-job.yaml
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$VENV/bin/python" - "$WORK" <<'PY'
import glob, sys, yaml
work = sys.argv[1]
n = 0
for f in sorted(glob.glob("deploy/kubernetes/*.yaml")):
    for doc in yaml.safe_load_all(open(f)):
        if not doc:
            continue
        if doc["kind"] == "ConfigMap" and "tokentap.toml" in doc.get("data", {}):
            n += 1
            open(f"{work}/{n}.toml", "w").write(doc["data"]["tokentap.toml"])
        if doc["kind"] == "PrometheusRule":
            want = yaml.safe_load(open("deploy/prometheus/tokentap-rules.yml"))["groups"]
            assert doc["spec"]["groups"] == want, f"{f}: the PrometheusRule differs from tokentap-rules.yml"
            yaml.safe_dump({"groups": doc["spec"]["groups"]}, open(f"{work}/rules.yml", "w"))
print(f"{n} tokentap configs extracted; the PrometheusRule matches tokentap-rules.yml")
PY
for c in "$WORK"/*.toml; do target/release/tokentap check --config "$c"; done
command -v promtool >/dev/null || apt-get install -y prometheus >/dev/null
promtool check rules "$WORK/rules.yml"
echo "kubernetes manifests OK"
