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
#
# Reboots. A supervisor (rn_supervise, pid in $(rn_root)/supervisor.pid) boots the node and
# watches for a reboot request. The node's `reboot` (and `systemctl reboot`, `shutdown`, ...: one
# stand-in installed over the host's commands in the node's mount namespace only, see
# rn_install_host_commands) writes $(rn_node_dir)/reboot-request and then hangs like a machine going
# down. The supervisor then takes the node down the way a machine goes down: every process of the
# node (containers, shims, containerd, the kubelet, the interrupt container mid-command) is
# SIGKILLed at once, the node's mount namespace (its /run tmpfs, container mounts, pod network
# namespaces) and its bridge go with them, and it stays down until the control plane has marked
# the node NotReady. The next boot is a fresh mount namespace with a fresh /run and a new
# /proc/sys/kernel/random/boot_id (bind-mounted there), so the kubelet reports a new
# status.nodeInfo.bootID. What a machine keeps on disk is kept: images, the kubelet's root dir and
# the package stages' host directories. The host itself is never rebooted or changed: every
# stand-in and the boot ID exist only inside the node's mount namespace.
# shellcheck shell=bash

# The node's address: a /32 on `lo` (the kubelet refuses a loopback node IP). Pods reach the
# apiserver on it; the apiserver reaches the kubelet on it.
RN_NODE_IP="${NODEWRIGHT_REAL_NODE_IP:-10.254.254.1}"
# Pod network: one bridge with host-local addresses; the host (apiserver) routes to it directly.
RN_POD_SUBNET="10.254.0.0/24"
RN_BRIDGE="nwbr0"
RN_CGROUP_ROOT="/nodewright-realnode"
# containerd and the kubelet (and so every shim) run here, beside the kubelet's pods: a reboot kills
# every task under RN_CGROUP_ROOT, and nothing else.
RN_CGROUP_SYSTEM="${RN_CGROUP_ROOT}/system"
# How long a reboot may wait for the control plane to see the node NotReady before booting anyway.
RN_DOWN_MAX_SECONDS=120
# The node's lease: renewed every quarter of it. With the controller manager's
# node-monitor-grace-period (up.sh), a node that stopped renewing it is NotReady within seconds.
RN_NODE_LEASE_SECONDS=8
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

# rn_node_dir: the supervisor's records, on the host's disk: boots.log (one line per boot: number,
# boot ID, time), host-commands.log (every reboot/systemctl/service the node's stand-in ran), the
# reboot request, and `hold` (while it exists, a node that went down stays down: a reboot that
# never comes back).
rn_node_dir() {
  echo "$(rn_root)/node"
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
  # An nsfile can only be bound on a private mount: make the directory one (once: every boot
  # makes a namespace here).
  if ! mountpoint -q "${dir}"; then
    mount --bind "${dir}" "${dir}"
    mount --make-private "${dir}"
  fi
  touch "$(rn_mntns)"
  unshare --mount="$(rn_mntns)" --propagation unchanged true
  # Slave first: on a host whose `/` is shared, nothing mounted in the node's namespace (the boot
  # ID, the host-command stand-ins, container mounts) may propagate back to the host.
  nsenter --mount="$(rn_mntns)" mount --make-rslave /
  nsenter --mount="$(rn_mntns)" mount --make-rshared /
}

# rn_drop_mntns: releases the node's mount namespace (it goes with its last process); with it go
# every mount made in it.
rn_drop_mntns() {
  umount "$(rn_mntns)" 2>/dev/null || umount -l "$(rn_mntns)" 2>/dev/null || true
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
  local dir sub parent
  while read -r dir; do
    for sub in "${dir}" "${dir}/system"; do
      mkdir -p "${sub}" 2>/dev/null || continue
      parent="$(dirname "${sub}")"
      # cpuset children start empty, and a cgroup with no cpus or mems takes no task.
      if [[ -f "${sub}/cpuset.cpus" ]]; then
        cat "${parent}/cpuset.cpus" >"${sub}/cpuset.cpus"
        cat "${parent}/cpuset.mems" >"${sub}/cpuset.mems"
      fi
    done
  done < <(rn_cgroup_dirs)
}

# rn_node_tasks: every task of the node (containerd, the kubelet, shims, containers), in any
# hierarchy.
rn_node_tasks() {
  local dir
  while read -r dir; do
    [[ -d "${dir}" ]] || continue
    find "${dir}" -name cgroup.procs -exec cat {} + 2>/dev/null
  done < <(rn_cgroup_dirs) | sort -un
}

# rn_kill_node_tasks SECONDS: SIGKILLs every task of the node until none is left (a task may fork
# while the others die). Fails when tasks outlive SECONDS.
rn_kill_node_tasks() {
  local deadline=$(( $(date +%s) + $1 )) tasks
  while tasks="$(rn_node_tasks)"; [[ -n "${tasks}" ]]; do
    # shellcheck disable=SC2086 # one pid per word
    kill -9 ${tasks} 2>/dev/null || true
    (( $(date +%s) < deadline )) || { echo "tasks of the node survived SIGKILL: ${tasks//$'\n'/ }" >&2; return 1; }
    sleep 0.1
  done
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
# In the node's /run (a tmpfs of its mount namespace): lost on every reboot, as on a machine.
state = "/run/containerd"
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
        "dataDir": "/run/nodewright-cni/ipam",
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
# The node's /run is its own tmpfs: a host resolv.conf pointing into /run (systemd-resolved) would
# dangle there, so the kubelet reads a copy taken at start.
resolvConf: ${root}/kubelet/resolv.conf
# Renewed every quarter of it: a node that stops (a reboot) is seen NotReady within seconds.
nodeLeaseDurationSeconds: ${RN_NODE_LEASE_SECONDS}
serializeImagePulls: false
registerNode: true
maxPods: 60
nodeStatusReportFrequency: 10s
containerRuntimeEndpoint: unix://$(rn_sock)
EOF
  cp "${cluster_kubeconfig}" "${root}/kubelet/kubeconfig.yaml"
  cat /etc/resolv.conf >"${root}/kubelet/resolv.conf" 2>/dev/null || : >"${root}/kubelet/resolv.conf"
}

# rn_wait_socket SOCK SECONDS
rn_wait_socket() {
  local deadline=$(( $(date +%s) + $2 ))
  until ctr -a "$1" version >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || return 1
    sleep 0.2
  done
}

# The stand-in for the host's power and service commands, installed only in the node's mount
# namespace (rn_install_host_commands) over `reboot`, `shutdown`, `poweroff`, `halt`, `systemctl`
# and `service`: a package's interrupt runs them on "the host" (chrooted into the root its pod
# mounts), and they must reach the node, never the machine running the tests.
#   reboot|shutdown|poweroff|halt, systemctl reboot|poweroff|halt|kexec: asks the node's supervisor
#     for a reboot, then never returns (a machine going down kills the caller mid-command);
#   systemctl/service anything else: recorded, succeeds.
# Every call is appended to $(rn_node_dir)/host-commands.log.
rn_host_command_script() {
  local node_dir
  node_dir="$(rn_node_dir)"
  cat <<EOF
#!/bin/sh
# The real node's stand-in for the host's power and service commands (tests/controlplane/realnode.sh).
cmd="\$(basename "\$0")"
echo "\$(date -u +%Y-%m-%dT%H:%M:%S.%NZ) \${cmd} \$*" >>"${node_dir}/host-commands.log"
case "\${cmd}" in
  systemctl)
    case "\$1" in
      reboot | poweroff | halt | kexec) ;;
      *) exit 0 ;;
    esac ;;
  service) exit 0 ;;
esac
echo "\${cmd} \$*" >"${node_dir}/reboot-request.tmp" && mv "${node_dir}/reboot-request.tmp" "${node_dir}/reboot-request"
# Going down: the supervisor kills this with everything else on the node.
while :; do sleep 1; done
EOF
}

# rn_install_host_commands BOOT_ID: run inside the node's fresh mount namespace at every boot. Mounts
# the node's own /run (a tmpfs: lost on reboot), binds BOOT_ID over /proc/sys/kernel/random/boot_id,
# and the stand-in (rn_host_command_script) over the host's power and service commands and as
# /usr/local/sbin (first in PATH). Then /run/systemd/system (the node looks like a systemd host, so
# the agent runs `systemctl`) and, last, /run/nodewright-test-node/allow-reboot, which tells the
# test agent that `reboot` here is this node's: it is written only when every stand-in is in place.
rn_install_host_commands() {
  local boot_id="$1" dir=/run/nodewright-test-node name path real
  mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
  mkdir -p /run/lock "${dir}/sbin" /run/systemd/system
  echo "${boot_id}" >"${dir}/boot_id"
  mount --bind "${dir}/boot_id" /proc/sys/kernel/random/boot_id
  [[ "$(cat /proc/sys/kernel/random/boot_id)" == "${boot_id}" ]] || return 1
  rn_host_command_script >"${dir}/sbin/nodewright-host-command"
  chmod 0755 "${dir}/sbin/nodewright-host-command"
  for name in reboot shutdown poweroff halt systemctl service; do
    ln -s nodewright-host-command "${dir}/sbin/${name}"
  done
  # First in every usual PATH, for a host without some of these commands.
  if [[ -d /usr/local/sbin ]]; then
    mount --bind "${dir}/sbin" /usr/local/sbin
  fi
  declare -A done_paths=()
  for name in reboot shutdown poweroff halt systemctl service; do
    for path in /usr/sbin /sbin /usr/bin /bin; do
      [[ -e "${path}/${name}" ]] || continue
      real="$(readlink -f "${path}/${name}")"
      [[ -f "${real}" && -z "${done_paths[${real}]:-}" ]] || continue
      mount --bind "${dir}/sbin/nodewright-host-command" "${real}"
      done_paths[${real}]=1
    done
  done
  echo "reboot, shutdown, poweroff, halt, systemctl and service on this node are the real node's stand-ins (tests/controlplane/realnode.sh)" \
    >"${dir}/allow-reboot"
}

# rn_in_system_cgroup COMMAND...: runs COMMAND (exec) in the node's system cgroup, where a reboot
# finds it.
rn_in_system_cgroup() {
  local dir
  while read -r dir; do
    echo $$ >"${dir%"${RN_CGROUP_ROOT}"}${RN_CGROUP_SYSTEM}/cgroup.procs" 2>/dev/null || true
  done < <(rn_cgroup_dirs)
  if declare -F "$1" >/dev/null; then
    "$@"
  else
    exec "$@"
  fi
}

# rn_respawn COMMAND...: runs COMMAND again whenever it exits, as a service manager restarts a
# service (the kubelet exits when it starts before containerd's CRI plugin has recovered its
# state, as it may at boot).
rn_respawn() {
  while true; do
    "$@"
    echo "realnode: $1 exited with $?; starting it again in 1s"
    sleep 1
  done
}

# rn_boot BIN_DIR LOGS_DIR IMPORT: one boot of the node: a fresh mount namespace with a new boot
# ID, containerd (then the test images when IMPORT is true), then the kubelet. Appends the boot to
# $(rn_node_dir)/boots.log.
rn_boot() {
  local bin_dir="$1" logs_dir="$2" import="$3" root boot_id number
  root="$(rn_root)"
  boot_id="$(cat /proc/sys/kernel/random/uuid)"
  number=1
  [[ -f "$(rn_node_dir)/boots.log" ]] && number=$(( $(wc -l <"$(rn_node_dir)/boots.log") + 1 ))
  rn_make_mntns || { echo "could not make the real node's mount namespace" >&2; return 1; }
  rn_in_ns bash -c "$(declare -f rn_host_command_script rn_node_dir rn_root cp_cache_root rn_install_host_commands); rn_install_host_commands '${boot_id}'" \
    || { echo "could not install the node's /run, boot ID and host commands" >&2; return 1; }

  # setsid: the node's processes are not in the supervisor's session or process group.
  setsid bash -c "$(declare -f rn_in_system_cgroup rn_cgroup_dirs); RN_CGROUP_ROOT='${RN_CGROUP_ROOT}' RN_CGROUP_SYSTEM='${RN_CGROUP_SYSTEM}' rn_in_system_cgroup \"\$@\"" \
    rn-containerd nsenter --mount="$(rn_mntns)" containerd --config "${root}/containerd/config.toml" \
    </dev/null >>"${logs_dir}/containerd.log" 2>&1 8>&- &
  echo $! >"${root}/containerd.pid"
  disown
  rn_wait_socket "$(rn_sock)" 30 || { echo "containerd did not start (see ${logs_dir}/containerd.log)" >&2; return 1; }

  if ${import} && [[ -n "${NODEWRIGHT_IMAGES_DIR:-}" ]]; then
    "${cp_here}/../images/import.sh" --address "$(rn_sock)" >>"${logs_dir}/images.log" 2>&1 \
      || { echo "importing the test images from ${NODEWRIGHT_IMAGES_DIR} failed (see ${logs_dir}/images.log)" >&2; return 1; }
  fi

  setsid bash -c "$(declare -f rn_in_system_cgroup rn_cgroup_dirs rn_respawn); RN_CGROUP_ROOT='${RN_CGROUP_ROOT}' RN_CGROUP_SYSTEM='${RN_CGROUP_SYSTEM}' rn_in_system_cgroup rn_respawn \"\$@\"" \
    rn-kubelet nsenter --mount="$(rn_mntns)" "${bin_dir}/kubelet" \
    --config="${root}/kubelet/config.yaml" \
    --kubeconfig="${root}/kubelet/kubeconfig.yaml" \
    --root-dir="${root}/kubelet/root" \
    --cert-dir="${root}/kubelet/pki" \
    --hostname-override="${RN_NODE_NAME}" \
    --node-ip="${RN_NODE_IP}" \
    --node-labels="type=real,nodewright.test/real-node=true" \
    --v=2 </dev/null >>"${logs_dir}/kubelet.log" 2>&1 8>&- &
  echo $! >"${root}/kubelet.pid"
  disown
  echo "${number} ${boot_id} $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$(rn_node_dir)/boots.log"
  echo "realnode: boot ${number}: boot ID ${boot_id}"
}

# rn_shutdown: the node goes down the way a machine does: every process SIGKILLed at once (no
# graceful stop of anything), then its mount namespace and its bridge are gone.
rn_shutdown() {
  local root pidfile
  root="$(rn_root)"
  # By pid too, in case a process escaped the system cgroup.
  for pidfile in "${root}/kubelet.pid" "${root}/containerd.pid"; do
    [[ -f "${pidfile}" ]] && kill -9 "$(cat "${pidfile}")" 2>/dev/null
  done
  rn_kill_node_tasks 30 || return 1
  pkill -9 -f "containerd-shim-runc-v2 .*-address $(rn_sock)" 2>/dev/null || true
  rm -f "${root}/kubelet.pid" "${root}/containerd.pid"
  # cgroups live in memory: a machine boots with none of the pods' left.
  rn_remove_cgroups
  rn_make_cgroups
  rn_drop_mntns
  ip link del "${RN_BRIDGE}" 2>/dev/null || true
}

# rn_node_ready KUBECONFIG: the node's Ready condition as the control plane has it.
rn_node_ready() {
  kubectl --kubeconfig "$1" get node "${RN_NODE_NAME}" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null
}

# rn_supervise CLUSTER_KUBECONFIG BIN_DIR LOGS_DIR: the node's supervisor (see the header). Boots
# the node, then reboots it whenever its `reboot` asks, until it is killed (rn_cleanup).
rn_supervise() {
  local kubeconfig="$1" bin_dir="$2" logs_dir="$3" node_dir request deadline
  node_dir="$(rn_node_dir)"
  request="${node_dir}/reboot-request"
  export PATH="${bin_dir}:${PATH}"
  rn_boot "${bin_dir}" "${logs_dir}" true || { echo "realnode: the first boot failed" >&2; exit 1; }
  while true; do
    until [[ -e "${request}" ]]; do sleep 0.2; done
    echo "realnode: reboot requested ($(cat "${request}")) at $(date -u +%Y-%m-%dT%H:%M:%S.%NZ)"
    mv "${request}" "${node_dir}/reboot-handled"
    rn_shutdown || { echo "realnode: the node could not be taken down" >&2; exit 1; }
    echo "realnode: down at $(date -u +%Y-%m-%dT%H:%M:%S.%NZ)"
    # Down until the control plane has seen it (NotReady), as it would a machine rebooting.
    deadline=$(( $(date +%s) + RN_DOWN_MAX_SECONDS ))
    while [[ "$(rn_node_ready "${kubeconfig}")" == True ]] && (( $(date +%s) < deadline )); do
      sleep 0.5
    done
    echo "realnode: Ready=$(rn_node_ready "${kubeconfig}") at $(date -u +%Y-%m-%dT%H:%M:%S.%NZ)"
    while [[ -e "${node_dir}/hold" ]]; do sleep 0.5; done
    rn_boot "${bin_dir}" "${logs_dir}" false || { echo "realnode: a boot failed" >&2; exit 1; }
  done
}

# rn_start CLUSTER_NAME CLUSTER_KUBECONFIG BIN_DIR LOGS_DIR TIMEOUT: starts the node's supervisor
# (holding the machine's real-node lock), which boots the node: containerd, the test images when
# NODEWRIGHT_IMAGES_DIR is set, the kubelet. Waits for the node to be Ready.
rn_start() {
  local name="$1" kubeconfig="$2" bin_dir="$3" logs_dir="$4" timeout="$5" root t0 deadline
  root="$(rn_root)"
  t0=$(date +%s)
  rn_prereqs
  # The supervisor and the node's processes inherit fd 7 with the lock held; it is released when
  # the last of them exits, however they exit.
  exec 7>"$(rn_lock_file)"
  if ! flock -n 7; then
    echo "up.sh: the machine's real node is in use by another cluster; waiting up to ${timeout}s" >&2
    flock -w "${timeout}" 7 || cp_die "the real node is still in use by another cluster (lock $(rn_lock_file))"
  fi
  # A previous owner killed without teardown: clean what it left before starting.
  rn_cleanup "${root}" >&2
  echo "${name}" >"$(rn_lock_file).owner"
  rn_write_configs "${root}" "${kubeconfig}"
  mkdir -p "$(rn_node_dir)"
  echo "${name}" >"${root}/cluster"
  ip addr add "${RN_NODE_IP}/32" dev lo 2>/dev/null || true
  rn_make_cgroups

  setsid bash -c 'source "$1/lib.sh"; shift; rn_supervise "$@"' rn-supervisor "${cp_here}" \
    "${kubeconfig}" "${bin_dir}" "${logs_dir}" </dev/null >>"${logs_dir}/supervisor.log" 2>&1 8>&- &
  echo $! >"${root}/supervisor.pid"
  exec 7>&-

  deadline=$(( $(date +%s) + timeout ))
  until [[ "$(rn_node_ready "${kubeconfig}")" == True ]]; do
    if ! kill -0 "$(cat "${root}/supervisor.pid")" 2>/dev/null; then
      tail -n 20 "${logs_dir}/supervisor.log" "${logs_dir}/kubelet.log" >&2 2>/dev/null
      cp_die "the real node's supervisor exited (see ${logs_dir}/supervisor.log)"
    fi
    if [[ -f "${root}/kubelet.pid" ]] && ! kill -0 "$(cat "${root}/kubelet.pid")" 2>/dev/null; then
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
  local root="$1" sock
  sock="$(rn_sock)"
  # The supervisor first, so that nothing boots the node again.
  rn_kill "${root}/supervisor.pid"
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
  # Whatever is left in the node's cgroups (a shim killed first leaves its container; the
  # supervisor may have been killed mid-boot), then the cgroups.
  rn_kill_node_tasks 10 || true
  rn_remove_cgroups
  # The node's mount namespace goes with its last process and its nsfile's bind mount; with it go
  # every mount containerd and the kubelet made there, its /run and the pods' network namespaces.
  rn_drop_mntns
  umount "$(dirname "$(rn_mntns)")" 2>/dev/null || umount -l "$(dirname "$(rn_mntns)")" 2>/dev/null || true
  ip link del "${RN_BRIDGE}" 2>/dev/null || true
  ip addr del "${RN_NODE_IP}/32" dev lo 2>/dev/null || true
  # The kubelet's and libcni's fixed host paths (see the header).
  rm -rf /var/lib/kubelet/device-plugins /var/lib/kubelet/plugins_registry /var/lib/kubelet/plugins \
    /var/lib/kubelet/pod-resources /var/log/containers /var/log/pods /var/lib/cni/results \
    /var/lib/cni/networks/nodewright-realnode
  rmdir /var/lib/kubelet /var/lib/cni/networks /var/lib/cni 2>/dev/null || true
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
