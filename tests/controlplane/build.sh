#!/usr/bin/env bash
# Builds the local control plane's binaries from their upstream Go modules:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
#   kubelet (for the optional real node, up.sh --real-node)          (k8s.io/kubernetes)
#   etcd                                                              (go.etcd.io/etcd/server/v3)
#   kwok, kwokctl                                                     (sigs.k8s.io/kwok)
#   helm                                                              (helm.sh/helm/v4)
#
# Every version is pinned by the wrapper modules under go/ (go.mod + committed go.sum), so the
# build is reproducible and needs nothing but the Go module proxy. Kubernetes has one module per
# supported minor, go/kubernetes-1.<minor> (add-k8s-version.sh writes one); NODEWRIGHT_K8S_VERSION
# picks it (1.31 ... 1.37; default the newest). The binaries go to a cache outside the repository,
# keyed by those pins (so each minor has its own key):
#   ${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}/controlplane/<key>/bin
# A second run finds the directory and does nothing. The last line on stdout is the bin dir.
#
# Usage: tests/controlplane/build.sh [--print-dir]
#   --print-dir   only print the bin dir this checkout would use (exit 1 if it is not built)
#
# Environment: NODEWRIGHT_K8S_VERSION (the Kubernetes minor, e.g. 1.31, or its exact pinned
# release, e.g. 1.31.14; default the newest), NODEWRIGHT_CACHE (cache root), GOTOOLCHAIN (honoured as usual), GOFLAGS (extended
# with -mod=readonly so a go.sum that does not match go.mod fails instead of drifting).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "${here}/lib.sh"

print_only=false
case "${1:-}" in
  --print-dir) print_only=true ;;
  "") ;;
  *) echo "usage: $0 [--print-dir]" >&2; exit 2 ;;
esac

bin_dir="$(cp_bin_dir)"
if [[ -f "${bin_dir}/.complete" ]]; then
  echo "${bin_dir}"
  exit 0
fi
if ${print_only}; then
  echo "${bin_dir}"
  exit 1
fi

command -v go >/dev/null || cp_die "go is not on PATH; the control plane is built from Go modules (Go >= 1.26)"

key_dir="$(dirname "${bin_dir}")"
mkdir -p "${key_dir}"
# One builder per key: a concurrent caller (two test binaries on a fresh machine) waits here and
# then finds the finished directory.
exec 9>"${key_dir}/.build.lock"
if ! flock -n 9; then
  echo "build.sh: another build of ${key_dir} is running; waiting for it" >&2
  flock 9
fi
if [[ -f "${bin_dir}/.complete" ]]; then
  echo "${bin_dir}"
  exit 0
fi

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=readonly"
stage="$(mktemp -d "${key_dir}/.bin.XXXXXX")"
# A build cache of its own, removed with the stage: the binaries are what is cached (by key), and
# a shared GOCACHE would keep gigabytes of compiled Kubernetes packages per minor on the disk that
# the Rust builds and test clusters of the same run need (a CI run once ran out of it).
gocache="$(mktemp -d "${key_dir}/.gocache.XXXXXX")"
export GOCACHE="${gocache}"
trap 'rm -rf "${stage}" "${gocache}"' EXIT
log="${key_dir}/build.log"
: >"${log}"
started=$(date +%s)

# build MODULE_DIR OUT PACKAGE LDFLAGS
build() {
  local dir="$1" out="$2" pkg="$3" ldflags="$4" t0
  t0=$(date +%s)
  echo "build.sh: building ${out} from ${pkg}" >&2
  if ! (cd "${here}/go/${dir}" && go build -trimpath -ldflags "-s -w ${ldflags}" -o "${stage}/${out}" "${pkg}") >>"${log}" 2>&1; then
    tail -n 40 "${log}" >&2
    cp_die "building ${out} failed; full log: ${log}"
  fi
  echo "build.sh: ${out} done in $(( $(date +%s) - t0 ))s" >&2
}

k8s_mod="$(cp_k8s_module)"
k8s_ver="$(cp_module_version "${k8s_mod}" k8s.io/kubernetes)"
k8s_time="$(cp_module_time "${k8s_mod}" k8s.io/kubernetes)"
k8s_major="${k8s_ver#v}"; k8s_major="${k8s_major%%.*}"
k8s_minor="${k8s_ver#v*.}"; k8s_minor="${k8s_minor%%.*}"
# Without these the components report v0.0.0-master, and kwokctl (which reads --version to pick
# flags) and clients (discovery) would see a placeholder instead of the real release.
k8s_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X ${pkg}.gitVersion=${k8s_ver} -X ${pkg}.gitMajor=${k8s_major} -X ${pkg}.gitMinor=${k8s_minor}"
  k8s_ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${k8s_time}"
done
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
  build "${k8s_mod}" "${cmd}" "k8s.io/kubernetes/cmd/${cmd}" "${k8s_ldflags}"
done

build etcd etcd go.etcd.io/etcd/server/v3 ""

kwok_ver="$(cp_module_version kwok sigs.k8s.io/kwok)"
# KubeVersion is kwokctl's default --kube-version; align it with the binaries built above.
kwok_ldflags="-X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_ver#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${k8s_ver#v}"
build kwok kwok sigs.k8s.io/kwok/cmd/kwok "${kwok_ldflags}"
build kwok kwokctl sigs.k8s.io/kwok/cmd/kwokctl "${kwok_ldflags}"

helm_ver="$(cp_module_version helm helm.sh/helm/v4)"
build helm helm helm.sh/helm/v4/cmd/helm "-X helm.sh/helm/v4/internal/version.version=${helm_ver} -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

# Smoke check: every binary runs and the apiserver reports the pinned release.
"${stage}/kube-apiserver" --version | grep -q "Kubernetes ${k8s_ver}" \
  || cp_die "kube-apiserver does not report ${k8s_ver}; see ${log}"
for check in "etcd --version" "kubectl version --client" "kube-controller-manager --version" \
  "kube-scheduler --version" "kubelet --version" "kwok --version" "kwokctl --version" "helm version"; do
  # shellcheck disable=SC2086 # each check is a binary followed by its arguments
  "${stage}"/${check} >>"${log}" 2>&1 || cp_die "'${check}' failed; see ${log}"
done

{
  echo "kubernetes=${k8s_ver}"
  echo "etcd=$(cp_module_version etcd go.etcd.io/etcd/server/v3)"
  echo "kwok=${kwok_ver}"
  echo "helm=${helm_ver}"
  echo "go=$(go env GOVERSION)"
  echo "build_seconds=$(( $(date +%s) - started ))"
} >"${stage}/VERSIONS"
touch "${stage}/.complete"
rm -rf "${bin_dir}" "${gocache}"
mv "${stage}" "${bin_dir}"
trap - EXIT
echo "build.sh: built in $(( $(date +%s) - started ))s" >&2
echo "${bin_dir}"
