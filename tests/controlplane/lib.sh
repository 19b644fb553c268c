# Shared helpers for build.sh, up.sh and down.sh. Sourced, not executed.
# shellcheck shell=bash

# Bump when build.sh changes how binaries are produced (flags, ldflags) so every machine rebuilds
# instead of reusing binaries made the old way.
CP_BUILD_REVISION=1

cp_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=realnode.sh
source "${cp_here}/realnode.sh"

cp_die() {
  echo "error: $*" >&2
  exit 1
}

# cp_module_version MODULE_DIR MODULE_PATH: the version go/MODULE_DIR/go.mod requires.
cp_module_version() {
  local v
  v="$(awk -v m="$2" '($1 == m && $2 ~ /^v/) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' \
    "${cp_here}/go/$1/go.mod")"
  [[ -n "${v}" ]] || cp_die "go/$1/go.mod does not require $2"
  echo "${v}"
}

# cp_module_time MODULE_DIR MODULE_PATH: the publication time of that version (RFC 3339), used
# as a reproducible build date.
cp_module_time() {
  (cd "${cp_here}/go/$1" && go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' "$2")
}

# cp_cache_root: where built binaries and cluster state live (outside the repository).
cp_cache_root() {
  echo "${NODEWRIGHT_CACHE:-${HOME}/.cache/nodewright}"
}

# The Kubernetes minors this checkout can build: one wrapper module per minor,
# go/kubernetes-1.<minor> (written by add-k8s-version.sh), oldest first.
cp_k8s_minors() {
  local d
  for d in "${cp_here}"/go/kubernetes-1.*/; do
    d="${d%/}"
    echo "${d##*/kubernetes-}"
  done | sort -V
}

# cp_k8s_minor: the minor NODEWRIGHT_K8S_VERSION asks for ("1.31", "v1.31" or the exact release
# "1.31.14"), default the newest. Dies with the list of minors when there is no module for it.
cp_k8s_minor() {
  local want="${NODEWRIGHT_K8S_VERSION:-}" minors minor full
  minors="$(cp_k8s_minors | tr '\n' ' ')"
  if [[ -z "${want}" ]]; then
    cp_k8s_minors | tail -n 1
    return 0
  fi
  want="${want#v}"
  [[ "${want}" =~ ^(1\.[0-9]+)(\.[0-9]+)?$ ]] \
    || cp_die "NODEWRIGHT_K8S_VERSION='${NODEWRIGHT_K8S_VERSION}' is not a Kubernetes version; use a minor such as 1.31 (supported: ${minors% }) or unset it for the newest"
  minor="${BASH_REMATCH[1]}"
  [[ -f "${cp_here}/go/kubernetes-${minor}/go.mod" ]] \
    || cp_die "NODEWRIGHT_K8S_VERSION=${NODEWRIGHT_K8S_VERSION}: no control plane module for Kubernetes ${minor} (supported: ${minors% }); add one with tests/controlplane/add-k8s-version.sh ${minor}.<patch>"
  if [[ -n "${BASH_REMATCH[2]}" ]]; then
    full="$(cp_module_version "kubernetes-${minor}" k8s.io/kubernetes)"
    [[ "${full}" == "v${want}" ]] \
      || cp_die "NODEWRIGHT_K8S_VERSION=${NODEWRIGHT_K8S_VERSION}: the pinned ${minor} release is ${full#v}; set NODEWRIGHT_K8S_VERSION=${minor}, or move the pin with tests/controlplane/add-k8s-version.sh ${want}"
  fi
  echo "${minor}"
}

# cp_k8s_module: the wrapper module directory (under go/) of the selected minor.
cp_k8s_module() {
  local minor
  minor="$(cp_k8s_minor)" || exit 1
  echo "kubernetes-${minor}"
}

# cp_key: names the pinned versions, plus a digest of the go.mod/go.sum of every module the build
# uses (the selected minor's Kubernetes module, etcd, helm, kwok), the Go version and the build
# revision, so a change to any pin, any transitive dependency or the toolchain lands in a new
# directory instead of reusing stale binaries. Each Kubernetes minor has its own key.
cp_key() {
  local gover digest k8s mods=()
  k8s="$(cp_k8s_module)" || exit 1
  gover="$(go env GOVERSION 2>/dev/null || echo nogo)"
  # Alphabetical module order (the order of the single module directory's digest before minors
  # had modules of their own, so the newest minor keeps its key).
  mods=(etcd helm "${k8s}" kwok)
  digest="$( (cd "${cp_here}/go" && for m in "${mods[@]}"; do cat "${m}/go.mod"; done \
    && for m in "${mods[@]}"; do cat "${m}/go.sum"; done; echo "${gover} ${CP_BUILD_REVISION}") | sha256sum | cut -c1-12)"
  printf 'k8s-%s_etcd-%s_kwok-%s_helm-%s_%s_%s\n' \
    "$(cp_module_version "${k8s}" k8s.io/kubernetes)" \
    "$(cp_module_version etcd go.etcd.io/etcd/server/v3)" \
    "$(cp_module_version kwok sigs.k8s.io/kwok)" \
    "$(cp_module_version helm helm.sh/helm/v4)" \
    "${gover}" "${digest}"
}

cp_bin_dir() {
  local key
  key="$(cp_key)" || exit 1
  echo "$(cp_cache_root)/controlplane/${key}/bin"
}

# kwokctl keeps each cluster (pki, etcd data, pids, logs) under $KWOK_WORKDIR/clusters/<name>;
# ours live in the cache, away from a user's own ~/.kwok clusters.
cp_kwok_env() {
  KWOK_WORKDIR="$(cp_cache_root)/kwok"
  export KWOK_WORKDIR
  mkdir -p "${KWOK_WORKDIR}/clusters"
}

cp_cluster_dir() {
  echo "$(cp_cache_root)/kwok/clusters/$1"
}

cp_logs_dir() {
  echo "${NODEWRIGHT_LOGS:-$(cp_cache_root)/logs}/$1"
}

# cp_proc_start PID: the process's start time in clock ticks (field 22 of /proc/PID/stat), so a
# recycled pid is not mistaken for the original owner.
cp_proc_start() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo gone; return 0; }
  # The command name (field 2) may contain spaces; everything after the last ')' is fixed.
  stat="${stat##*) }"
  echo "${stat}" | awk '{ print $20 }'
}

# cp_memory_report NAME: peak (VmHWM) and current (VmRSS) resident memory of every component,
# the real node's containerd and kubelet included when the cluster has it.
cp_memory_report() {
  local dir pidfile pid comp hwm rss total_hwm=0 total_rss=0 pidfiles=()
  dir="$(cp_cluster_dir "$1")"
  pidfiles=("${dir}"/pids/*.pid)
  if [[ -f "$(rn_root)/cluster" && "$(cat "$(rn_root)/cluster")" == "$1" ]]; then
    pidfiles+=("$(rn_root)"/*.pid)
  fi
  printf '%-28s %12s %12s\n' component peak_rss_kib rss_kib
  for pidfile in "${pidfiles[@]}"; do
    [[ -f "${pidfile}" ]] || continue
    pid="$(cat "${pidfile}")"
    comp="$(basename "${pidfile}" .pid)"
    [[ "${pidfile}" == "$(rn_root)"/* ]] && comp="realnode-${comp}"
    hwm="$(awk '/^VmHWM:/ { print $2 }' "/proc/${pid}/status" 2>/dev/null || true)"
    rss="$(awk '/^VmRSS:/ { print $2 }' "/proc/${pid}/status" 2>/dev/null || true)"
    printf '%-28s %12s %12s\n' "${comp}" "${hwm:-gone}" "${rss:-gone}"
    total_hwm=$((total_hwm + ${hwm:-0}))
    total_rss=$((total_rss + ${rss:-0}))
  done
  printf '%-28s %12s %12s\n' total "${total_hwm}" "${total_rss}"
}

# cp_stop_cluster NAME: keeps the logs (a copy replaces the live link) and the components' memory
# figures, then stops every component and deletes the cluster. Idempotent.
cp_stop_cluster() {
  local name="$1" dir logs pidfile pid
  cp_kwok_env
  dir="$(cp_cluster_dir "${name}")"
  logs="$(cp_logs_dir "${name}")"
  [[ -d "${dir}" ]] || return 0
  mkdir -p "${logs}"
  cp_memory_report "${name}" >"${logs}/memory.txt" 2>/dev/null || true
  if [[ -L "${logs}/components" ]]; then
    rm -f "${logs}/components"
  fi
  mkdir -p "${logs}/components"
  cp -a "${dir}/logs/." "${logs}/components/" 2>/dev/null || true
  cp -a "${dir}/kwok.yaml" "${logs}/kwokctl-config.yaml" 2>/dev/null || true
  # The real node first: its kubelet must not outlive the apiserver it reports to.
  rn_stop "${name}" >>"${logs}/down.log" 2>&1 || true
  if ! kwokctl delete cluster --name "${name}" --kubeconfig "" >>"${logs}/down.log" 2>&1; then
    # kwokctl could not read its own state: stop the components it recorded, by pid.
    for pidfile in "${dir}"/pids/*.pid; do
      [[ -f "${pidfile}" ]] || continue
      pid="$(cat "${pidfile}")"
      kill "${pid}" 2>/dev/null || true
    done
    sleep 1
    for pidfile in "${dir}"/pids/*.pid; do
      [[ -f "${pidfile}" ]] || continue
      pid="$(cat "${pidfile}")"
      kill -9 "${pid}" 2>/dev/null || true
    done
    rm -rf "${dir}"
  fi
}

# cp_gc_orphans: deletes clusters whose recorded owner process is gone (a test binary killed
# before its teardown ran). Clusters started without --owner-pid are never touched.
cp_gc_orphans() {
  local owner_file name pid start
  for owner_file in "$(cp_cache_root)"/kwok/clusters/*/nodewright-owner; do
    [[ -f "${owner_file}" ]] || continue
    read -r pid start <"${owner_file}" || continue
    if [[ "$(cp_proc_start "${pid}")" != "${start}" ]]; then
      name="$(basename "$(dirname "${owner_file}")")"
      echo "up.sh: deleting orphaned cluster '${name}' (owner ${pid} is gone)" >&2
      cp_stop_cluster "${name}" || true
    fi
  done
}
