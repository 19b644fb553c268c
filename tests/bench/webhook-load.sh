#!/usr/bin/env bash
# Load run of the webhook over real TLS (a measurement, not a test): starts a local control plane
# (for the webhook's caches), the release-built webhook on 127.0.0.1, and runs the load generator at
# concurrency 1, 16 and 64 against /validate-nodewright with a 20-package NodeWright, then reports
# the webhook's peak RSS (VmHWM).
# Usage: tests/bench/webhook-load.sh [REQUESTS_PER_RUN]   (default 20000)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
requests="${1:-20000}"
name="nw-load-$$"
work="$(mktemp -d)"
pid=""
cleanup() { set +e; [[ -n "${pid}" ]] && kill "${pid}" 2>/dev/null; tests/controlplane/down.sh --name "${name}" >/dev/null 2>&1; rm -rf "${work}"; }
trap cleanup EXIT INT TERM

cargo build --quiet --release -p nodewright-webhook --bin nodewright-webhook --example loadgen
cargo build --quiet --release -p nodewright-certs
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release"
eval "$(tests/controlplane/up.sh --name "${name}" --nodes 1)"
"${target}/nodewright-certs" generate --dir "${work}" --name 127.0.0.1 >/dev/null
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
RUST_LOG=warn "${target}/nodewright-webhook" --listen "127.0.0.1:${port}" --metrics-listen 127.0.0.1:0 \
  --tls-cert-file "${work}/tls.crt" --tls-key-file "${work}/tls.key" --log-level warn >"${work}/webhook.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -fsS --cacert "${work}/ca.crt" "https://127.0.0.1:${port}/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
python3 - "${work}/body.json" <<'PY'
import json, sys
pk = {}
for i in range(20):
    p = {"name": f"package-{i}", "version": f"1.{i}.0", "image": f"registry.example.com:5000/team/package-{i}",
         "stageTimeout": "1h", "configMap": {"config.toml": "key = 1\n" * 20},
         "configInterrupts": {"config.toml": {"type": "service", "services": ["svc"]}},
         "resources": {"cpuRequest": "250m", "cpuLimit": "1", "memoryRequest": "256Mi", "memoryLimit": "512Mi"},
         "interrupt": {"type": "reboot"}}
    if i: p["dependsOn"] = {f"package-{i-1}": f"1.{i-1}.0"}
    pk[f"package-{i}"] = p
obj = {"apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright", "metadata": {"name": "load"},
       "spec": {"nodeSelectors": {"matchLabels": {"pool": "gpu"}}, "packages": pk}}
rev = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "00000000-0000-4000-8000-000000000001",
    "kind": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "kind": "NodeWright"},
    "resource": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "resource": "nodewrights"},
    "name": "load", "operation": "CREATE", "userInfo": {"username": "admin"}, "object": obj}}
json.dump(rev, open(sys.argv[1], "w"))
PY
echo "body: $(wc -c <"${work}/body.json") bytes (20 packages)"
for c in 1 16 64; do
  "${target}/examples/loadgen" --url "https://127.0.0.1:${port}/validate-nodewright" --ca "${work}/ca.crt" \
    --body "${work}/body.json" --concurrency "${c}" --requests "${requests}"
done
echo "webhook peak RSS: $(awk '/VmHWM/{print $2, $3}' "/proc/${pid}/status")"
