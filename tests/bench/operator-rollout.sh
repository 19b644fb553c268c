#!/usr/bin/env bash
# Many-node run of the operator (a measurement, not a test): starts a local control plane with N kwok
# nodes (default 100), the release-built operator binary, applies a NodeWright of 3 packages (one
# depending on the other two) to every node, and reports the wall time to `complete`, the operator's
# peak RSS and CPU seconds, its API requests by verb (its own client counter), and the apiserver's
# request counts by verb over the run (every client: the operator plus the Job controller and kwok
# doing what the operator's Jobs cause).
# Usage: tests/bench/operator-rollout.sh [NODES]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
nodes="${1:-100}"
name="nw-rollout-$$"
work="$(mktemp -d)"
pid=""
cleanup() { set +e; [[ -n "${pid}" ]] && kill "${pid}" 2>/dev/null; tests/controlplane/down.sh --name "${name}" >/dev/null 2>&1; rm -rf "${work}"; }
trap cleanup EXIT INT TERM

cargo build --quiet --release -p nodewright-operator --bin nodewright-operator
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release"
eval "$(tests/controlplane/up.sh --name "${name}" --nodes "${nodes}" --timeout 900)"
kubectl create namespace nodewright >/dev/null
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
NAMESPACE=nodewright POD_NAME=bench LOG_FORMAT=text LOG_LEVEL=warn \
  METRICS_LISTEN="127.0.0.1:${port}" PROBE_LISTEN="127.0.0.1:${port}" \
  "${target}/nodewright-operator" >"${work}/operator.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do curl -fsS "http://127.0.0.1:${port}/readyz" >/dev/null 2>&1 && break; sleep 0.2; done

apiserver_by_verb() {
  kubectl get --raw /metrics | python3 -c '
import re, sys, collections
c = collections.Counter()
for line in sys.stdin:
    m = re.match(r"apiserver_request_total\{(.*)\} (\S+)", line)
    if m:
        labels = dict(re.findall(r"(\w+)=\"([^\"]*)\"", m.group(1)))
        c[labels.get("verb", "?")] += float(m.group(2))
print(" ".join(f"{k}={int(v)}" for k, v in sorted(c.items())))'
}
before="$(apiserver_by_verb)"
cat >"${work}/nw.yaml" <<YAML
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata: {name: bench}
spec:
  nodeSelectors: {matchLabels: {type: kwok}}
  packages:
    alpha: {version: 1.0.0, image: ghcr.io/example/alpha, stageTimeout: 10m}
    beta: {version: 1.0.0, image: ghcr.io/example/beta, stageTimeout: 10m}
    gamma: {version: 1.0.0, image: ghcr.io/example/gamma, stageTimeout: 10m, dependsOn: {alpha: 1.0.0, beta: 1.0.0}}
YAML
idle_rss="$(awk '/VmRSS/{print $2, $3}' "/proc/${pid}/status")"
read -r cpu0 < <(awk '{print $14+$15}' "/proc/${pid}/stat")
t0=$(date +%s.%N)
kubectl apply -f "${work}/nw.yaml" >/dev/null
until [[ "$(kubectl get nw bench -o jsonpath='{.status.status}')" == "complete" ]]; do
  if ! kill -0 "${pid}" 2>/dev/null; then tail -n 40 "${work}/operator.log"; echo "operator exited" >&2; exit 1; fi
  sleep 1
done
t1=$(date +%s.%N)
read -r cpu1 < <(awk '{print $14+$15}' "/proc/${pid}/stat")
after="$(apiserver_by_verb)"
hz=$(getconf CLK_TCK)
echo "nodes: ${nodes}, packages: 3 (6 stage Jobs per node: apply + config each)"
echo "jobs created: $(kubectl get jobs -n nodewright --no-headers 2>/dev/null | wc -l) (finished Jobs are deleted after their TTL)"
python3 -c "print(f'wall time to complete: {${t1}-${t0}:.1f} s')"
python3 -c "print(f'operator CPU: {(${cpu1}-${cpu0})/${hz}:.2f} s during the rollout')"
echo "operator RSS before the rollout (caches warm): ${idle_rss}"
echo "operator peak RSS: $(awk '/VmHWM/{print $2, $3}' "/proc/${pid}/status"), at the end: $(awk '/VmRSS/{print $2, $3}' "/proc/${pid}/status")"
echo "operator API requests by verb (its client):"
curl -fsS "http://127.0.0.1:${port}/metrics" | grep '^nodewright_operator_api_requests_total' || echo "  (counter not exported)"
echo "apiserver requests by verb, all clients, before: ${before}"
echo "apiserver requests by verb, all clients, after:  ${after}"
