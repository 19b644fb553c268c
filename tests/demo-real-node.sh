#!/usr/bin/env bash
# The NodeWright demo on a real node (tests/demo.sh --real-node): the chart installed with helm, its
# operator and webhook running as real containers, and a package stage running for real.
#   1. builds the control plane (cached), the linux/amd64 release images of the operator and
#      webhook with the release chart pinned to them (release/build.sh --images-only --arch amd64:
#      static binaries, daemonless OCI image indexes), and the test images (test agent, test
#      package, pause) with umoci (no daemon, no registry),
#   2. starts a local control plane with 2 kwok nodes and one real node (kubelet + containerd,
#      needs root) and imports the images into the real node's containerd,
#   3. `helm install`s the release chart (its images by tag and digest) into a namespace at Pod
#      Security `restricted` (package pods run in the chart's privileged `nodewright-packages`): the
#      operator elects a leader, the webhook serves 2 replicas behind its Service, the operator
#      issues the webhook's certificate,
#   4. shows a bad NodeWright denied by the in-cluster webhook,
#   5. applies a NodeWright whose package runs on the real node through the test agent and shows
#      the stage's real logs (`kubectl logs`) and the node state the operator recorded,
#   6. a package with a reboot interrupt: the node is cordoned, the agent's `reboot` reboots the
#      real node (every container killed, NotReady, back with a new boot ID; the machine running
#      the demo is never touched), post-interrupt runs on the new boot, the node is uncordoned,
#   7. uninstalls and stops everything, also on Ctrl-C or failure.
#
# Usage: tests/demo-real-node.sh [--keep]   (--keep: leave everything running until Enter)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
keep=false
[[ "${1:-}" == "--keep" ]] && keep=true
[[ "$(id -u)" == 0 ]] || { echo "the real node needs root (it runs containerd and a kubelet)" >&2; exit 1; }

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

name="nodewright-demo-real-$$"
work="$(mktemp -d)"
cleanup() {
  set +e
  tests/controlplane/down.sh --name "${name}" >/dev/null 2>&1
  rm -rf "${work}"
}
trap cleanup EXIT INT TERM

say "Building the local control plane (first run: several minutes), the release images and chart, and the test images"
bin_dir="$(tests/controlplane/build.sh | tail -n 1)"
export PATH="${bin_dir}:${PATH}"
# Assigned first: a failed build stops the demo here (`eval "$(...)"` alone would not).
release_env="$(NODEWRIGHT_DIST="${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}/release/demo" \
  release/build.sh --images-only --arch amd64 | tail -n 1)"
eval "${release_env}"
export NODEWRIGHT_RELEASE_DIR
eval "$(tests/images/build.sh | tail -n 1)"
export NODEWRIGHT_IMAGES_DIR
chart="${NODEWRIGHT_RELEASE_DIR}/$(jq -r .chart "${NODEWRIGHT_RELEASE_DIR}/release.json")"

say "Starting a local control plane with 2 kwok nodes and one real node"
eval "$(tests/controlplane/up.sh --name "${name}" --nodes 2 --real-node --no-crds)"
run kubectl get nodes -o wide
real="${NODEWRIGHT_REAL_NODE}"
port="$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}' | sed 's/.*://')"

say "helm install: the chart's operator and webhook as real containers on ${real}"
cat >"${work}/values.yaml" <<EOF
operator:
  # The release chart's image (tag and digest), imported into the node rather than pulled.
  image: {pullPolicy: Never}
  agentImage: nodewright.test/agent:dev
  pauseImage: nodewright.test/pause:dev
  packageImagePullPolicy: Never
  copyDirRoot: ${NODEWRIGHT_REAL_NODE_HOST_DIR}/lib
  agentLogRoot: ${NODEWRIGHT_REAL_NODE_HOST_DIR}/log
  logFormat: text
  nodeSelector: {kubernetes.io/hostname: ${real}}
  # No kube-proxy on this machine: point the pods at the apiserver directly.
  extraEnv:
    - {name: KUBERNETES_SERVICE_HOST, value: "${NODEWRIGHT_REAL_NODE_IP}"}
    - {name: KUBERNETES_SERVICE_PORT, value: "${port}"}
  # The real node is the only node the services can run on here: never drained off it by the
  # reboot step (on a real cluster they run on other nodes, where a drain reschedules them).
  tolerations:
    - {key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoSchedule}
webhook:
  image: {pullPolicy: Never}
  nodeSelector: {kubernetes.io/hostname: ${real}}
  tolerations:
    - {key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoSchedule}
  extraEnv:
    - {name: KUBERNETES_SERVICE_HOST, value: "${NODEWRIGHT_REAL_NODE_IP}"}
    - {name: KUBERNETES_SERVICE_PORT, value: "${port}"}
defaults: {jobBackoffLimit: 1}
crds: {keep: false}
# Package pods (privileged host pods) run here, created by the chart at Pod Security privileged.
packageNamespace: {name: nodewright-packages}
EOF
# The services' namespace at Pod Security restricted: the package pods run in their own.
run kubectl create namespace nodewright
run kubectl label namespace nodewright pod-security.kubernetes.io/enforce=restricted
run helm install nw "${chart}" -n nodewright -f "${work}/values.yaml"
run kubectl -n nodewright rollout status deploy/nw-nodewright-operator --timeout=180s
run kubectl -n nodewright rollout status deploy/nw-nodewright-webhook --timeout=180s
run kubectl -n nodewright get pods -o wide
run kubectl -n nodewright get lease -o custom-columns=LEASE:.metadata.name,HOLDER:.spec.holderIdentity
# The webhook serves once the operator has issued its certificate and injected the caBundle.
for _ in $(seq 1 120); do
  kubectl get validatingwebhookconfiguration -l app.kubernetes.io/instance=nw \
    -o jsonpath='{.items[0].webhooks[0].clientConfig.caBundle}' 2>/dev/null | grep -q . && break
  sleep 1
done

say "A bad NodeWright is denied by the in-cluster webhook"
printf '$ kubectl apply -f examples/invalid/depends-on-cycle.yaml\n'
if kubectl apply -f examples/invalid/depends-on-cycle.yaml 2>&1; then
  echo "UNEXPECTED: examples/invalid/depends-on-cycle.yaml was admitted" >&2; exit 1
fi

say "A package stage running for real on ${real} (the test agent runs the package's script on the host)"
cat >"${work}/nodewright.yaml" <<EOF
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata:
  name: real-demo
spec:
  nodeSelectors:
    matchLabels: {kubernetes.io/hostname: ${real}}
  packages:
    hello:
      version: 1.0.0
      image: nodewright.test/shellscript
      configMap:
        apply.sh: |
          echo "hello from \$(hostname), kernel \$(uname -r)"
          echo "installing pretend drivers"; sleep 2; echo "done"
EOF
run kubectl apply -f "${work}/nodewright.yaml"
deadline=$(( $(date +%s) + 180 ))
until [[ "$(kubectl get nw real-demo -o jsonpath='{.status.status}' 2>/dev/null)" == "complete" ]]; do
  (( $(date +%s) < deadline )) || { kubectl -n nodewright-packages get jobs,pods -o wide; echo "the stage did not complete" >&2; exit 1; }
  sleep 1
done
run kubectl get nw real-demo
run kubectl -n nodewright-packages get jobs -L nodewright.nvidia.com/package,nodewright.nvidia.com/stage
job="$(kubectl -n nodewright-packages get jobs -l nodewright.nvidia.com/name=real-demo,nodewright.nvidia.com/stage=apply -o jsonpath='{.items[0].metadata.name}')"
pod="$(kubectl -n nodewright-packages get pods -l "job-name=${job}" -o jsonpath='{.items[0].metadata.name}')"
container="$(kubectl -n nodewright-packages get pod "${pod}" -o jsonpath='{.spec.initContainers[1].name}')"
run kubectl -n nodewright-packages logs "${pod}" -c "${container}"
run kubectl get node "${real}" -o jsonpath='{.metadata.annotations.nodewright\.nvidia\.com/nodeState_real-demo}{"\n"}'

say "A reboot interrupt: the real node reboots (the machine running this demo does not)"
boot_before="$(kubectl get node "${real}" -o jsonpath='{.status.nodeInfo.bootID}')"
echo "boot ID before: ${boot_before}"
cat >"${work}/reboot.yaml" <<EOF
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata:
  name: real-reboot
spec:
  nodeSelectors:
    matchLabels: {kubernetes.io/hostname: ${real}}
  packages:
    kernel:
      version: 1.0.0
      image: nodewright.test/shellscript
      interrupt: {type: reboot}
      configMap:
        apply.sh: |
          echo "installing a pretend kernel on boot \$(cat /proc/sys/kernel/random/boot_id)"
        post_interrupt.sh: |
          echo "running on the new kernel, boot \$(cat /proc/sys/kernel/random/boot_id)"
EOF
run kubectl apply -f "${work}/reboot.yaml"
t0=$(date +%s)
# What a newcomer watches: cordon, the reboot (NotReady), the new boot ID, uncordon, complete.
last=""
deadline=$(( t0 + 300 ))
while :; do
  line="$(kubectl get node "${real}" -o jsonpath='unschedulable={.spec.unschedulable} Ready={.status.conditions[?(@.type=="Ready")].status} bootID={.status.nodeInfo.bootID}' 2>/dev/null || true)"
  state="$(kubectl get nw real-reboot -o jsonpath='{.status.status}' 2>/dev/null || true)"
  line="${line} nodewright=${state:-?}"
  if [[ "${line}" != "${last}" ]]; then
    printf '%4ss  %s\n' "$(( $(date +%s) - t0 ))" "${line}"
    last="${line}"
  fi
  [[ "${state}" == complete && "${line}" != *unschedulable=true* ]] && break
  (( $(date +%s) < deadline )) || { kubectl -n nodewright-packages get jobs,pods -o wide; echo "the reboot interrupt did not complete" >&2; exit 1; }
  sleep 1
done
boot_after="$(kubectl get node "${real}" -o jsonpath='{.status.nodeInfo.bootID}')"
echo "boot ID after:  ${boot_after}"
[[ "${boot_after}" != "${boot_before}" ]] || { echo "UNEXPECTED: the boot ID did not change" >&2; exit 1; }
run kubectl get events -n default --field-selector "reason=Rebooted,involvedObject.name=${real}"
echo "The node's supervisor: its boots and the host commands the agent ran on the node"
run cat "${NODEWRIGHT_REAL_NODE_DIR}/boots.log" "${NODEWRIGHT_REAL_NODE_DIR}/host-commands.log"
job="$(kubectl -n nodewright-packages get jobs -l nodewright.nvidia.com/name=real-reboot,nodewright.nvidia.com/stage=post-interrupt -o jsonpath='{.items[0].metadata.name}')"
pod="$(kubectl -n nodewright-packages get pods -l "job-name=${job}" -o jsonpath='{.items[0].metadata.name}')"
container="$(kubectl -n nodewright-packages get pod "${pod}" -o jsonpath='{.spec.initContainers[1].name}')"
run kubectl -n nodewright-packages logs "${pod}" -c "${container}"
run kubectl delete nw real-reboot --wait=true --timeout=120s
run kubectl -n nodewright rollout status deploy/nw-nodewright-webhook --timeout=180s

if ${keep}; then
  say "Everything keeps running; KUBECONFIG=${KUBECONFIG}. Press Enter to stop."
  read -r _ || true
fi
say "Uninstalling and stopping everything"
run kubectl delete nw real-demo --wait=true --timeout=120s
run helm uninstall nw -n nodewright --wait --timeout=180s
