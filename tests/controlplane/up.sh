#!/usr/bin/env bash
# Starts a local Kubernetes control plane for NodeWright's tests and demo:
#   etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok-controller,
# run as plain processes by kwokctl's binary runtime from the binaries build.sh made, plus N
# fake nodes that kwok keeps Ready and whose pods follow the Stages in stages/ (pod fates).
# Installs every crds/*.yaml of the repository and waits until all of it is usable.
#
# Usage: tests/controlplane/up.sh [--name NAME] [--nodes N] [--owner-pid PID] [--timeout SECONDS]
#                                   [--no-crds] [--real-node]
#   --name       cluster name (default: nodewright); two names can run at once (free ports are
#                picked per cluster)
#   --nodes      number of fake nodes, kwok-node-0..N-1 (default: 3)
#   --owner-pid  the process the cluster belongs to (the Rust fixture passes its own pid); a
#                later up.sh deletes clusters whose owner has died without tearing them down
#   --timeout    seconds to wait for readiness (default: 300)
#   --no-crds    do not install crds/*.yaml (a suite that installs them itself, or a test of a
#                broken CRD that should not stop every other test)
#   --real-node  also start one real node (real-node-0): containerd + runc + CNI and a kubelet
#                running real containers next to the kwok nodes (realnode.sh; needs root; the
#                Debian packages are installed when missing). With NODEWRIGHT_IMAGES_DIR set
#                (tests/images/build.sh), the test images are imported into its containerd.
#                One real node per machine: a second cluster asking for one waits for the first.
#
# NODEWRIGHT_K8S_VERSION picks the Kubernetes minor (1.31 ... 1.37, default the newest): every
# component and the real node's kubelet run that release (build.sh builds it when missing).
#
# Stdout is shell: `eval "$(tests/controlplane/up.sh)"` sets KUBECONFIG. Progress goes to stderr.
# Component logs: ${NODEWRIGHT_LOGS:-<cache>/logs}/<name>/ (kept after down.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "${here}/lib.sh"
repo="$(cd "${here}/../.." && pwd)"

name=nodewright
nodes=3
owner_pid=""
timeout=300
install_crds=true
real_node=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) name="$2"; shift 2 ;;
    --nodes) nodes="$2"; shift 2 ;;
    --owner-pid) owner_pid="$2"; shift 2 ;;
    --timeout) timeout="$2"; shift 2 ;;
    --no-crds) install_crds=false; shift ;;
    --real-node) real_node=true; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) cp_die "unknown argument $1 (see --help)" ;;
  esac
done
[[ "${name}" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || cp_die "--name must be a DNS label, got '${name}'"
[[ "${nodes}" =~ ^[0-9]+$ ]] || cp_die "--nodes must be a number, got '${nodes}'"

bin_dir="$("${here}/build.sh" | tail -n 1)"
export PATH="${bin_dir}:${PATH}"
cp_kwok_env
cluster_dir="$(cp_cluster_dir "${name}")"
logs_dir="$(cp_logs_dir "${name}")"

cp_gc_orphans

if [[ -e "${cluster_dir}" ]]; then
  cp_die "cluster '${name}' already exists (${cluster_dir}); stop it with tests/controlplane/down.sh --name ${name}"
fi

mkdir -p "$(dirname "${logs_dir}")"
# Logs of clusters stopped more than three days ago are old news.
find "$(dirname "${logs_dir}")" -mindepth 1 -maxdepth 1 -mtime +3 -exec rm -rf {} + 2>/dev/null || true
rm -rf "${logs_dir}"
mkdir -p "${logs_dir}"
up_log="${logs_dir}/up.log"

# A failed start tears the cluster down (its logs are kept) so nothing is left running.
fail() {
  echo "error: $*" >&2
  cp_stop_cluster "${name}" >&2 || true
  echo "error: component logs: ${logs_dir}" >&2
  exit 1
}

config="$(mktemp)"
nodes_yaml="$(mktemp)"
trap 'rm -f "${config}" "${nodes_yaml}"' EXIT

# Every binary is local: the defaults are download URLs, unreachable here and not reproducible.
cat >"${config}" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  securePort: true
  # RBAC and the default admission chain (webhooks, ServiceAccount, NamespaceLifecycle, ...)
  # as on a real cluster: the product's webhooks and least-privilege RBAC are tested here.
  kubeAuthorization: true
  kubeAdmission: true
  # Hundreds of kwok nodes renew leases often; client-side throttling would let them expire.
  disableQPSLimits: true
  # kwok serves the container logs of a fake pod from the file a kwok.x-k8s.io Logs object names
  # (one per pod, created by a test that reads logs through the API); other pods have none.
  enableCRDs: [Logs]
  etcdBinary: ${bin_dir}/etcd
  kubeApiserverBinary: ${bin_dir}/kube-apiserver
  kubeControllerManagerBinary: ${bin_dir}/kube-controller-manager
  kubeSchedulerBinary: ${bin_dir}/kube-scheduler
  kwokControllerBinary: ${bin_dir}/kwok
  kubectlBinary: ${bin_dir}/kubectl
EOF
# The kube-apiserver calls a webhook configured by Service at one of the Service's EndpointSlice
# endpoints, as with kube-proxy on a real cluster: no kube-proxy runs here, so ClusterIPs do not
# route. Suites point a Service at local webhook processes with EndpointSlices of their own
# (tests/e2e/tests/rotation_load.rs), and the real node's pods are reached at their pod IPs.
apiserver_args='
  - key: enable-aggregator-routing
    value: "true"'
if ${real_node}; then
  rn_prereqs
  # kwok must leave the real node to its kubelet (it would race it on every pod); the apiserver
  # must reach the kubelet by IP (logs, exec) and be reachable from pods (bound beyond loopback,
  # with the node address in its certificate).
  cat >>"${config}" <<EOF
  kubeApiserverCertSANs: ["${RN_NODE_IP}"]
  # A real node that reboots (realnode.sh) is seen NotReady within seconds, not the default 40:
  # its kubelet renews its lease every quarter of ${RN_NODE_LEASE_SECONDS}s, kwok the fake nodes'
  # too, and the controller manager's grace period is twice the lease.
  # (kwokctl multiplies every heartbeat setting by heartbeatFactor, 5 by default: these are meant.)
  heartbeatFactor: 1
  nodeLeaseDurationSeconds: ${RN_NODE_LEASE_SECONDS}
  kubeControllerManagerNodeMonitorGracePeriodMilliseconds: $(( RN_NODE_LEASE_SECONDS * 2000 ))
  kubeControllerManagerNodeMonitorPeriodMilliseconds: 1000
componentsPatches:
- name: kwok-controller
  extraArgs:
  - key: manage-all-nodes
    value: "false"
  - key: manage-nodes-with-annotation-selector
    value: kwok.x-k8s.io/node=fake
- name: kube-apiserver
  extraArgs:
  - key: kubelet-preferred-address-types
    value: InternalIP,Hostname${apiserver_args}
  - key: bind-address
    value: 0.0.0.0
    override: true
EOF
else
  cat >>"${config}" <<EOF
componentsPatches:
- name: kube-apiserver
  extraArgs:${apiserver_args}
EOF
fi

echo "up.sh: starting cluster '${name}' (logs: ${logs_dir})" >&2
t0=$(date +%s)
# Serialise creation: kwokctl picks free ports by probing, so two creations at the same moment
# could pick the same one. The lock is held only while the processes start; kwokctl does not get
# the lock's descriptor (8>&-), or every component would inherit it.
exec 8>"$(cp_cache_root)/kwok/.create.lock"
flock 8
if ! kwokctl create cluster --name "${name}" --kubeconfig "" \
    -c "${config}" -c "${here}/stages/node.yaml" -c "${here}/stages/pod.yaml" \
    --timeout "${timeout}s" --wait "${timeout}s" >>"${up_log}" 2>&1 8>&-; then
  flock -u 8
  tail -n 30 "${up_log}" >&2
  fail "kwokctl create cluster failed"
fi
flock -u 8
if [[ -n "${owner_pid}" ]]; then
  owner_start="$(cp_proc_start "${owner_pid}")"
  echo "${owner_pid} ${owner_start}" >"${cluster_dir}/nodewright-owner"
  # The watcher: stops the cluster as soon as the owner exits, however it exits (a test binary
  # holding the cluster in a static never runs a destructor; SIGKILL runs nothing). setsid keeps
  # it out of the owner's process group (Ctrl-C), and it holds none of our stdout, so the
  # caller's read of this script's output ends when the script does.
  # shellcheck disable=SC2016 # the script is expanded by the inner bash, from its arguments
  setsid bash -c '
    source "$1"
    while [[ "$(cp_proc_start "$2")" == "$3" && -d "$5" ]]; do sleep 1; done
    [[ -d "$5" ]] && "$4" --name "$6"
  ' nodewright-watch "${here}/lib.sh" "${owner_pid}" "${owner_start}" "${here}/down.sh" \
    "${cluster_dir}" "${name}" </dev/null >>"${logs_dir}/watcher.log" 2>&1 8>&- &
fi
# The live logs, under the name tests print; down.sh replaces the link with a copy.
ln -sfn "${cluster_dir}/logs" "${logs_dir}/components"

kubeconfig="${cluster_dir}/kubeconfig.yaml"
[[ -f "${kubeconfig}" ]] || fail "kwokctl did not write ${kubeconfig}"
k() { kubectl --kubeconfig "${kubeconfig}" "$@"; }

# The cluster runs the release that was asked for (NODEWRIGHT_K8S_VERSION), or the matrix would
# report one minor's results under another's name.
want_version="$(awk -F= '$1 == "kubernetes" { print $2 }' "${bin_dir}/VERSIONS")"
server_version="$(k version -o json 2>>"${up_log}" | sed -n '/"serverVersion"/,/}/s/^ *"gitVersion": "\(v[^"]*\)".*/\1/p' || true)"
[[ "${server_version}" == "${want_version}" ]] \
  || fail "the kube-apiserver reports '${server_version}', not ${want_version} (the binaries in ${bin_dir})"
echo "up.sh: kube-apiserver ${server_version}" >&2

# Fake nodes. The annotation is kwok's convention (and what a kind/kwok mixed cluster selects on).
{
  echo "apiVersion: v1"
  echo "kind: List"
  echo "items:"
  for ((i = 0; i < nodes; i++)); do
    cat <<EOF
- apiVersion: v1
  kind: Node
  metadata:
    name: kwok-node-${i}
    annotations:
      kwok.x-k8s.io/node: fake
      node.alpha.kubernetes.io/ttl: "0"
    labels:
      type: kwok
      kubernetes.io/arch: amd64
      kubernetes.io/os: linux
      kubernetes.io/hostname: kwok-node-${i}
      node.kubernetes.io/instance-type: kwok
  spec: {}
EOF
  done
} >"${nodes_yaml}"
if ((nodes > 0)); then
  k create -f "${nodes_yaml}" >>"${up_log}" 2>&1 || fail "creating ${nodes} nodes failed (see ${up_log})"
  k wait --for=condition=Ready node --all --timeout="${timeout}s" >>"${up_log}" 2>&1 \
    || fail "nodes did not become Ready within ${timeout}s"
fi

# Pods cannot be created in a namespace before its default ServiceAccount exists.
deadline=$(( $(date +%s) + timeout ))
until k -n default get serviceaccount default >/dev/null 2>&1; do
  (( $(date +%s) < deadline )) || fail "the default ServiceAccount never appeared (kube-controller-manager not working?)"
  sleep 0.5
done

if ${real_node}; then
  # A subshell, so that a failure inside (cp_die) still reaches fail() and its teardown.
  (rn_start "${name}" "${kubeconfig}" "${bin_dir}" "${logs_dir}" "${timeout}") 8>&- || fail "the real node did not start"
fi

shopt -s nullglob
crds=("${repo}"/crds/*.yaml)
if ${install_crds} && ((${#crds[@]} > 0)); then
  for f in "${crds[@]}"; do
    k apply --server-side -f "${f}" >>"${up_log}" 2>&1 || fail "installing ${f} failed (see ${up_log})"
  done
  k wait --for=condition=Established crd --all --timeout="${timeout}s" >>"${up_log}" 2>&1 \
    || fail "CRDs did not become Established"
fi

echo "up.sh: cluster '${name}' ready with ${nodes} nodes in $(( $(date +%s) - t0 ))s" >&2
if ${real_node}; then
  echo "export NODEWRIGHT_REAL_NODE=${RN_NODE_NAME}"
  echo "export NODEWRIGHT_REAL_NODE_IP=${RN_NODE_IP}"
  echo "export NODEWRIGHT_CONTAINERD_SOCK=$(rn_sock)"
  echo "export NODEWRIGHT_REAL_NODE_HOST_DIR=$(rn_root)/host"
  echo "export NODEWRIGHT_REAL_NODE_DIR=$(rn_node_dir)"
fi
echo "# cluster ${name}: ${nodes} kwok nodes; logs in ${logs_dir}; stop with tests/controlplane/down.sh --name ${name}"
echo "export NODEWRIGHT_LOGS_DIR=${logs_dir}"
echo "export NODEWRIGHT_BIN_DIR=${bin_dir}"
echo "export KUBECONFIG=${kubeconfig}"
