#!/usr/bin/env bash
# The NodeWright demo, end to end on a local control plane (no container engine needed):
#   1. builds the control plane (cached) and the NodeWright binaries,
#   2. starts etcd + kube-apiserver + kube-controller-manager + kwok with 5 fake nodes and the CRDs,
#   3. starts the admission webhook on 127.0.0.1 with a fresh CA and registers it with the apiserver,
#   4. starts the operator (leader election on a Lease, Jobs in namespace nodewright),
#   5. applies the example DeploymentPolicy and NodeWright (defaults filled in at admission),
#   6. shows bad manifests rejected with messages that name the field and the fix,
#   7. watches the rollout reach complete on every node (every stage a Job pinned to its node),
#   8. stops everything, also on Ctrl-C or failure.
#
# Usage: tests/demo.sh [--keep] [--real-node]
#   --keep       leave the cluster and webhook running until Enter
#   --real-node  the chart installed with helm on a real node (kubelet + containerd, needs root) and
#                a package stage running for real: tests/demo-real-node.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for arg in "$@"; do
  if [[ "${arg}" == "--real-node" ]]; then
    args=()
    for a in "$@"; do [[ "${a}" == "--real-node" ]] || args+=("${a}"); done
    exec tests/demo-real-node.sh "${args[@]}"
  fi
done
repo="$(pwd)"
keep=false
[[ "${1:-}" == "--keep" ]] && keep=true

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

name="nodewright-demo-$$"
work="$(mktemp -d)"
webhook_pid=""
operator_pid=""
cleanup() {
  set +e
  [[ -n "${operator_pid}" ]] && kill "${operator_pid}" 2>/dev/null && wait "${operator_pid}" 2>/dev/null
  [[ -n "${webhook_pid}" ]] && kill "${webhook_pid}" 2>/dev/null && wait "${webhook_pid}" 2>/dev/null
  tests/controlplane/down.sh --name "${name}" >/dev/null 2>&1
  rm -rf "${work}"
}
trap cleanup EXIT INT TERM

say "Building the local control plane (first run: several minutes) and NodeWright"
bin_dir="$(tests/controlplane/build.sh | tail -n 1)"
export PATH="${bin_dir}:${PATH}"
cargo build --quiet --bin nodewright-webhook --bin nodewright-certs --bin nodewright-operator
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug"

say "Starting a local control plane with 5 kwok nodes"
eval "$(tests/controlplane/up.sh --name "${name}" --nodes 5)"
run kubectl get nodes
run kubectl get crd nodewrights.nodewright.nvidia.com deploymentpolicies.nodewright.nvidia.com

say "Starting the admission webhook on 127.0.0.1 (TLS, certificate from a fresh demo CA)"
"${target}/nodewright-certs" generate --dir "${work}/tls" --name 127.0.0.1 --name localhost
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
metrics_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"${target}/nodewright-webhook" --listen "127.0.0.1:${port}" --metrics-listen "127.0.0.1:${metrics_port}" \
  --tls-cert-file "${work}/tls/tls.crt" --tls-key-file "${work}/tls/tls.key" --log-format text --shutdown-delay 0s \
  >"${work}/webhook.log" 2>&1 &
webhook_pid=$!
for _ in $(seq 1 150); do
  curl -fsS --cacert "${work}/tls/ca.crt" "https://127.0.0.1:${port}/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS --cacert "${work}/tls/ca.crt" "https://127.0.0.1:${port}/readyz" >/dev/null || {
  cat "${work}/webhook.log"; echo "webhook did not become ready" >&2; exit 1; }
echo "webhook ready on https://127.0.0.1:${port}"

ca_bundle="$(base64 -w0 <"${work}/tls/ca.crt")"
hook() { # name path resource operations
  cat <<EOF
  - name: $1.nodewright.nvidia.com
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 10
    clientConfig:
      url: https://127.0.0.1:${port}/$2
      caBundle: ${ca_bundle}
    rules:
      - apiGroups: ["nodewright.nvidia.com"]
        apiVersions: ["v1alpha1"]
        resources: ["$3"]
        operations: [$4]
        scope: Cluster
EOF
}
{
  printf 'apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: nodewright-demo\nwebhooks:\n'
  hook mutate-nodewright mutate-nodewright nodewrights "CREATE, UPDATE"
  hook mutate-deploymentpolicy mutate-deploymentpolicy deploymentpolicies "CREATE, UPDATE"
  printf -- '---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: nodewright-demo\nwebhooks:\n'
  hook validate-nodewright validate-nodewright nodewrights "CREATE, UPDATE"
  hook validate-deploymentpolicy validate-deploymentpolicy deploymentpolicies "CREATE, UPDATE, DELETE"
} >"${work}/webhooks.yaml"
run kubectl apply -f "${work}/webhooks.yaml"
# The apiserver picks up a new webhook configuration asynchronously; wait until it calls ours.
for _ in $(seq 1 50); do
  kubectl apply --dry-run=server -f examples/deploymentpolicy.yaml >/dev/null 2>&1 \
    && grep -q mutate-deploymentpolicy "${work}/webhook.log" && break
  sleep 0.2
done

say "Starting the operator (it elects itself leader on a Lease, then reconciles)"
run kubectl create namespace nodewright
op_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
NAMESPACE=nodewright POD_NAME=demo-operator LOG_FORMAT=text LOG_LEVEL=info \
  METRICS_LISTEN="127.0.0.1:${op_port}" PROBE_LISTEN="127.0.0.1:${op_port}" \
  "${target}/nodewright-operator" >"${work}/operator.log" 2>&1 &
operator_pid=$!
for _ in $(seq 1 150); do
  curl -fsS "http://127.0.0.1:${op_port}/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "http://127.0.0.1:${op_port}/readyz" >/dev/null || {
  cat "${work}/operator.log"; echo "operator did not become ready" >&2; exit 1; }
echo "operator ready (probes and metrics on http://127.0.0.1:${op_port})"

say "Applying the example DeploymentPolicy and NodeWright"
run kubectl label nodes --all nodewright.example.com/pool=gpu --overwrite >/dev/null
run kubectl apply -f examples/deploymentpolicy.yaml
run kubectl apply -f examples/nodewright.yaml
run kubectl get nwdp,nw
say "Defaults filled in at admission (package names, stageTimeout, strategy defaults)"
run kubectl get nw gpu-host-setup -o jsonpath='{range .spec.packages.*}{.name}{"\tstageTimeout="}{.stageTimeout}{"\n"}{end}'
run kubectl get nwdp gpu-rollout -o jsonpath='{.spec.default.strategy}{"\n"}'

say "The rollout, as kubectl get nw -w shows it (kwok plays every package pod to success)"
last=""
deadline=$(( $(date +%s) + 300 ))
while :; do
  row="$(kubectl get nw gpu-host-setup --no-headers 2>/dev/null || true)"
  # A row is printed when something but its AGE column changed, as `kubectl get -w` would.
  key="$(awk '{$NF=""; print}' <<<"${row}")"
  if [[ "${key}" != "${last}" ]]; then
    [[ -z "${last}" ]] && kubectl get nw gpu-host-setup 2>/dev/null | sed -n 1p
    echo "${row}"
    last="${key}"
  fi
  [[ "$(kubectl get nw gpu-host-setup -o jsonpath='{.status.status}' 2>/dev/null)" == "complete" ]] && break
  if (( $(date +%s) > deadline )); then
    tail -n 40 "${work}/operator.log"; echo "the rollout did not complete in 5 minutes" >&2; exit 1
  fi
  sleep 1
done
run kubectl get jobs -n nodewright -L nodewright.nvidia.com/package,nodewright.nvidia.com/stage,nodewright.nvidia.com/node
say "Per-node state the operator recorded (node annotation nodewright.nvidia.com/nodeState_gpu-host-setup)"
run kubectl get node kwok-node-0 -o jsonpath='{.metadata.annotations.nodewright\.nvidia\.com/nodeState_gpu-host-setup}{"\n"}'

say "Bad manifests are rejected at admission, with every problem named"
for bad in depends-on-cycle stage-timeout-too-large image-with-tag uninstall-apply-without-enabled policy-not-found; do
  printf '$ kubectl apply -f examples/invalid/%s.yaml\n' "${bad}"
  if kubectl apply -f "examples/invalid/${bad}.yaml" 2>&1; then
    echo "UNEXPECTED: examples/invalid/${bad}.yaml was admitted" >&2; exit 1
  fi
done
printf '$ kubectl delete nwdp gpu-rollout   # still used by gpu-host-setup\n'
if kubectl delete nwdp gpu-rollout 2>&1; then echo "UNEXPECTED: policy in use was deleted" >&2; exit 1; fi

say "Metrics"
curl -fsS "http://127.0.0.1:${metrics_port}/metrics" | grep '^nodewright_webhook_requests_total' || true
curl -fsS "http://127.0.0.1:${op_port}/metrics" | grep '^nodewright_' | head -n 20 || true

if ${keep}; then
  say "Cluster and webhook keep running; KUBECONFIG=${KUBECONFIG}. Press Enter to stop."
  read -r _
fi
say "Stopping everything"
