# The optional real node of a local cluster (up.sh --real-node): containerd + runc + CNI from
# Debian's packages and a kubelet built by build.sh from the pinned Kubernetes module, running real
# containers next to the kwok nodes. Sourced by up.sh, down.sh and lib.sh; not executed.
#
# One real node per machine: the kubelet hard-codes /var/lib/kubelet/device-plugins and
# /var/log/containers, containerd 1.6 its shim sockets under /run/containerd/s, libcni its cache
# under /var/lib/cni. The node's processes hold an flock on $(rn_lock_file) for their whole life,
# so a second cluster asking for a real node waits until the first one's node is gone.
#
# Everything else lives under $(rn_root): containerd's root and state, the kubelet's root dir,
# pod logs, CNI config, the package stages' host directories. Teardown (rn_stop) removes exactly
# that, the fixed paths above, the mounts, the network namespaces, the bridge, the node address on
# `lo` and the cgroups, so nothing is left behind. See ../../shared/reference/real-node.md for why
# each setting below is needed.
# shellcheck shell=bash

# The node's address: a /32 on `lo` (the kubelet refuses a loopback node IP). Pods reach the
# apiserver on it; the apiserver reaches the kubelet on it.
RN_NODE_IP="${NODEWRIGHT_REAL_NODE_IP:-10.254.254.1}"
# Pod network: one bridge with host-local addresses; the host (apiserver) routes to it directly.
RN_POD_SUBNET="10.254.0.0/24"
RN_BRIDGE="nwbr0"
RN_CGROUP_ROOT="/nodewright-realnode"
RN_NODE_NAME="${NODEWRIGHT_REAL_NODE_NAME:-real-node-0}"
# openssl: the real-node suite reads the certificate each webhook pod serves with s_client.
RN_APT_PACKAGES=(containerd runc containernetworking-plugins umoci busybox-static openssl)

rn_root() {
  echo "$(cp_cache_root)/realnode"
}

# Machine-wide, not per cache: two checkouts with different NODEWRIGHT_CACHE still share the
# kubelet's fixed paths, the bridge and the node address.
rn_lock_file() {
  local dir=/run/lock
  [[ -d "${dir}" && -w "${dir}" ]] || dir=/tmp
  echo "${dir}/nodewright-realnode.lock"
}

rn_sock() {
  echo "$(rn_root)/containerd/containerd.sock"
}

# The node's own mount namespace, kept by a bind mount of its nsfile. containerd, the kubelet and
# every container live in it: `/` is made rshared there (package pods mount the host's `/` with
# HostToContainer propagation, which needs a shared or slave `/`, and this machine's `/` is
# private), and every mount they make stays in it and goes when it goes, leaving the host's
# mount table as it was.
rn_mntns() {
  echo "$(rn_root)/ns/mnt"
}

rn_make_mntns() {
  local dir
  dir="$(dirname "$(rn_mntns)")"
  mkdir -p "${dir}"
  # An nsfile can only be bound on a private mount: make the directory one.
  mount --bind "${dir}" "${dir}"
  mount --make-private "${dir}"
  touch "$(rn_mntns)"
  unshare --mount="$(rn_mntns)" --propagation unchanged true
  nsenter --mount="$(rn_mntns)" mount --make-rshared /
}

# rn_in_ns COMMAND...: runs COMMAND in the node's mount namespace.
rn_in_ns() {
  nsenter --mount="$(rn_mntns)" "$@"
}

# rn_prereqs: installs the Debian packages the node needs when a command is missing, and checks
# the privileges it needs (root with CAP_SYS_ADMIN and CAP_NET_ADMIN, overlayfs, cgroup v1 or v2).
rn_prereqs() {
  [[ "$(id -u)" == 0 ]] || cp_die "--real-node needs root (it runs containerd and a kubelet)"
  local missing=false cmd
  for cmd in containerd containerd-shim-runc-v2 runc umoci busybox openssl ip nsenter unshare; do
    command -v "${cmd}" >/dev/null || missing=true
  done
  [[ -x /usr/lib/cni/bridge ]] || missing=true
  if ${missing}; then
    echo "up.sh: installing ${RN_APT_PACKAGES[*]} from Debian's packages" >&2
    command -v apt-get >/dev/null || cp_die "--real-node needs ${RN_APT_PACKAGES[*]} and apt-get is not available to install them"
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${RN_APT_PACKAGES[@]}") >&2 \
      || cp_die "installing ${RN_APT_PACKAGES[*]} failed"
  fi
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
  grep -qw overlay /proc/filesystems || cp_die "--real-node needs overlayfs"
}

# rn_cgroup_dirs: the cgroupRoot's directory in every cgroup hierarchy (v1 controllers, or v2).
rn_cgroup_dirs() {
  local mnt
  while read -r _ mnt fstype _; do
    case "${fstype}" in
      cgroup | cgroup2) echo "${mnt}${RN_CGROUP_ROOT}" ;;
    esac
  done </proc/mounts
}

rn_make_cgroups() {
  local dir parent
  while read -r dir; do
    mkdir -p "${dir}" 2>/dev/null || continue
    parent="$(dirname "${dir}")"
    # cpuset children start empty, and a cgroup with no cpus or mems takes no task.
    if [[ -f "${dir}/cpuset.cpus" ]]; then
      cat "${parent}/cpuset.cpus" >"${dir}/cpuset.cpus"
      cat "${parent}/cpuset.mems" >"${dir}/cpuset.mems"
    fi
  done < <(rn_cgroup_dirs)
}

# rn_remove_cgroups: moves stray tasks to the parent, then removes the tree deepest first.
rn_remove_cgroups() {
  local dir sub task
  while read -r dir; do
    [[ -d "${dir}" ]] || continue
    while read -r sub; do
      if [[ -f "${sub}/cgroup.procs" ]]; then
        while read -r task; do
          echo "${task}" >"$(dirname "${dir}")/cgroup.procs" 2>/dev/null || kill -9 "${task}" 2>/dev/null || true
        done <"${sub}/cgroup.procs"
      fi
    done < <(find "${dir}" -depth -type d 2>/dev/null)
    find "${dir}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done < <(rn_cgroup_dirs)
}

rn_write_configs() {
  local root="$1" cluster_kubeconfig="$2"
  mkdir -p "${root}"/{containerd,cni/net.d,kubelet,pod-logs,host} "$(dirname "$(rn_sock)")"
  cat >"${root}/containerd/config.toml" <<EOF
version = 2
root = "${root}/containerd/root"
state = "${root}/containerd/state"
oom_score = 0
[grpc]
  address = "$(rn_sock)"
[ttrpc]
  address = "$(rn_sock).ttrpc"
[debug]
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "${root}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  # The test images' pause doubles as the sandbox image: nothing is pulled from a registry.
  sandbox_image = "nodewright.test/pause:dev"
  # root here lacks CAP_SYS_RESOURCE: without this, runc fails every sandbox on oom_score_adj -998.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${root}/cni/net.d"
EOF
  cat >"${root}/cni/net.d/10-nodewright.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "nodewright-realnode",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${RN_BRIDGE}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "${root}/cni/ipam",
        "ranges": [[{ "subnet": "${RN_POD_SUBNET}" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "loopback" }
  ]
}
EOF
  cat >"${root}/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${RN_NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
# The apiserver has no kubelet client certificate here: anonymous + AlwaysAllow, bound to the
# node's private test address only.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
# 1.35+ refuses cgroup v1 unless told otherwise; this machine kind is cgroup v1 (hybrid).
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: ${RN_CGROUP_ROOT}
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
# The disk counts as well used here: never garbage-collect the imported (unpullable) images and
# never evict on disk pressure.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
podLogsDir: ${root}/pod-logs
serializeImagePulls: false
registerNode: true
maxPods: 60
nodeStatusReportFrequency: 10s
containerRuntimeEndpoint: unix://$(rn_sock)
EOF
  cp "${cluster_kubeconfig}" "${root}/kubelet/kubeconfig.yaml"
}

# rn_wait_socket SOCK SECONDS
rn_wait_socket() {
  local deadline=$(( $(date +%s) + $2 ))
  until ctr -a "$1" version >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || return 1
    sleep 0.2
  done
}

# rn_start CLUSTER_NAME CLUSTER_KUBECONFIG BIN_DIR LOGS_DIR TIMEOUT: starts containerd and the
# kubelet (holding the machine's real-node lock), imports the test images when
# NODEWRIGHT_IMAGES_DIR is set, and waits for the node to be Ready.
rn_start() {
  local name="$1" kubeconfig="$2" bin_dir="$3" logs_dir="$4" timeout="$5" root t0 deadline
  root="$(rn_root)"
  t0=$(date +%s)
  rn_prereqs
  # The node's processes inherit fd 7 with the lock held; it is released when the last of them
  # exits, however they exit.
  exec 7>"$(rn_lock_file)"
  if ! flock -n 7; then
    echo "up.sh: the machine's real node is in use by another cluster; waiting up to ${timeout}s" >&2
    flock -w "${timeout}" 7 || cp_die "the real node is still in use by another cluster (lock $(rn_lock_file))"
  fi
  # A previous owner killed without teardown: clean what it left before starting.
  rn_cleanup "${root}" >&2
  echo "${name}" >"$(rn_lock_file).owner"
  rn_write_configs "${root}" "${kubeconfig}"
  echo "${name}" >"${root}/cluster"
  ip addr add "${RN_NODE_IP}/32" dev lo 2>/dev/null || true
  rn_make_cgroups
  rn_make_mntns || cp_die "could not make the real node's mount namespace"

  setsid nsenter --mount="$(rn_mntns)" containerd --config "${root}/containerd/config.toml" \
    </dev/null >>"${logs_dir}/containerd.log" 2>&1 8>&- &
  echo $! >"${root}/containerd.pid"
  rn_wait_socket "$(rn_sock)" 30 || cp_die "containerd did not start (see ${logs_dir}/containerd.log)"

  if [[ -n "${NODEWRIGHT_IMAGES_DIR:-}" ]]; then
    "${cp_here}/../images/import.sh" --address "$(rn_sock)" >>"${logs_dir}/images.log" 2>&1 \
      || cp_die "importing the test images from ${NODEWRIGHT_IMAGES_DIR} failed (see ${logs_dir}/images.log)"
  fi

  setsid nsenter --mount="$(rn_mntns)" "${bin_dir}/kubelet" \
    --config="${root}/kubelet/config.yaml" \
    --kubeconfig="${root}/kubelet/kubeconfig.yaml" \
    --root-dir="${root}/kubelet/root" \
    --cert-dir="${root}/kubelet/pki" \
    --hostname-override="${RN_NODE_NAME}" \
    --node-ip="${RN_NODE_IP}" \
    --node-labels="type=real,nodewright.test/real-node=true" \
    --v=2 </dev/null >>"${logs_dir}/kubelet.log" 2>&1 8>&- &
  echo $! >"${root}/kubelet.pid"
  exec 7>&-

  deadline=$(( $(date +%s) + timeout ))
  until kubectl --kubeconfig "${kubeconfig}" get node "${RN_NODE_NAME}" \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; do
    if ! kill -0 "$(cat "${root}/kubelet.pid")" 2>/dev/null; then
      tail -n 20 "${logs_dir}/kubelet.log" >&2
      cp_die "the kubelet exited (see ${logs_dir}/kubelet.log)"
    fi
    (( $(date +%s) < deadline )) || cp_die "the real node did not become Ready within ${timeout}s (see ${logs_dir}/kubelet.log)"
    sleep 0.5
  done
  echo "up.sh: real node ${RN_NODE_NAME} Ready in $(( $(date +%s) - t0 ))s" >&2
}

# rn_kill PIDFILE: TERM, then KILL after a few seconds.
rn_kill() {
  local pid i
  [[ -f "$1" ]] || return 0
  pid="$(cat "$1")"
  kill "${pid}" 2>/dev/null || { rm -f "$1"; return 0; }
  for ((i = 0; i < 50; i++)); do
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "${pid}" 2>/dev/null || true
  rm -f "$1"
}

# rn_cleanup ROOT: stops the node's processes and removes everything it created. Idempotent; also
# what a new start runs first, after an owner was killed without teardown.
rn_cleanup() {
  local root="$1" sock mnt ns
  sock="$(rn_sock)"
  rn_kill "${root}/kubelet.pid"
  # Every container, then containerd, then any shim left (they outlive containerd by design).
  if [[ -S "${sock}" ]]; then
    local task
    for task in $(ctr -a "${sock}" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "${sock}" -n k8s.io tasks kill -s SIGKILL "${task}" >/dev/null 2>&1 || true
    done
    sleep 0.5
  fi
  rn_kill "${root}/containerd.pid"
  pkill -9 -f "containerd-shim-runc-v2 .*-address ${sock}" 2>/dev/null || true
  # Processes of pods still in the node's cgroups (a shim killed first leaves its container).
  rn_remove_cgroups
  # Network namespaces made by the CRI plugin for the node's pods.
  for ns in /var/run/netns/cni-*; do
    [[ -e "${ns}" ]] || continue
    umount "${ns}" 2>/dev/null || umount -l "${ns}" 2>/dev/null || true
    rm -f "${ns}"
  done
  # The node's mount namespace goes with its last process and its nsfile's bind mount; with it go
  # every mount containerd and the kubelet made there.
  umount "$(rn_mntns)" 2>/dev/null || umount -l "$(rn_mntns)" 2>/dev/null || true
  umount "$(dirname "$(rn_mntns)")" 2>/dev/null || umount -l "$(dirname "$(rn_mntns)")" 2>/dev/null || true
  ip link del "${RN_BRIDGE}" 2>/dev/null || true
  ip addr del "${RN_NODE_IP}/32" dev lo 2>/dev/null || true
  # The kubelet's and libcni's fixed host paths (see the header).
  rm -rf /var/lib/kubelet/device-plugins /var/lib/kubelet/plugins_registry /var/lib/kubelet/plugins \
    /var/lib/kubelet/pod-resources /var/log/containers /var/log/pods /var/lib/cni/results \
    /var/lib/cni/networks/nodewright-realnode /run/containerd/s /run/containerd/io.containerd.runtime.v2.task \
    /run/containerd/runc /run/containerd/fifo
  rmdir /var/lib/kubelet /var/lib/cni/networks /var/lib/cni /run/containerd /var/run/netns 2>/dev/null || true
  rm -rf "${root}"
  rm -f "$(rn_lock_file).owner"
}

# rn_stop CLUSTER_NAME: tears the real node down if it belongs to that cluster.
rn_stop() {
  local root
  root="$(rn_root)"
  [[ -f "${root}/cluster" && "$(cat "${root}/cluster")" == "$1" ]] || return 0
  rn_cleanup "${root}"
}
