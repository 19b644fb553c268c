#!/usr/bin/env bash
# Adds (or moves to a new patch release) the wrapper module that builds one Kubernetes minor:
#   tests/controlplane/go/kubernetes-<major>.<minor>/go.mod + go.sum
#
# k8s.io/kubernetes replaces each of its staging modules with ./staging/src/..., which only works
# inside its own repository; the wrapper pins every staging module of that release (read from the
# release's own go.mod, fetched through the Go module proxy) to the matching v0.<minor>.<patch>,
# then `go mod tidy` resolves the rest. Commit both files; build.sh builds with -mod=readonly.
#
# Usage: tests/controlplane/add-k8s-version.sh 1.31.14
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${1:-}"
[[ "${version}" =~ ^v?1\.([0-9]+)\.([0-9]+)$ ]] \
  || { echo "usage: $0 1.<minor>.<patch> (a k8s.io/kubernetes release the Go module proxy serves), got '${version}'" >&2; exit 2; }
minor="${BASH_REMATCH[1]}"
patch="${BASH_REMATCH[2]}"
version="v1.${minor}.${patch}"
staging_version="v0.${minor}.${patch}"
dir="${here}/go/kubernetes-1.${minor}"

upstream_mod="$(go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
[[ -f "${upstream_mod}" ]] || { echo "error: the Go module proxy did not serve k8s.io/kubernetes@${version}" >&2; exit 1; }
# The staging list: every `k8s.io/X => ./staging/src/k8s.io/X` of the release. The sample-* modules
# are examples no command imports; pinning them would only add unused requirements.
mapfile -t staging < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "${upstream_mod}" | grep -v '^k8s.io/sample-' | sort -u)
((${#staging[@]} > 0)) || { echo "error: no staging modules found in ${upstream_mod}" >&2; exit 1; }

# The proxy does not serve every staging module at every patch (seen: k8s.io/kube-scheduler,
# kube-controller-manager, kube-proxy and endpointslice lack v0.31.14). Such a module is pinned to
# the newest patch of the same minor that the proxy does serve, and the go.mod says so: these are
# configuration and API type modules, which patch releases practically never change.
pins=()
notes=()
for m in "${staging[@]}"; do
  pin="${staging_version}"
  if ! go mod download "${m}@${pin}" >/dev/null 2>&1; then
    pin=""
    for ((p = patch - 1; p >= 0; p--)); do
      if go mod download "${m}@v0.${minor}.${p}" >/dev/null 2>&1; then pin="v0.${minor}.${p}"; break; fi
    done
    [[ -n "${pin}" ]] || { echo "error: the Go module proxy serves no v0.${minor}.x of ${m}" >&2; exit 1; }
    notes+=("${m} ${pin}")
    echo "add-k8s-version.sh: ${m}@${staging_version} is not on the Go module proxy; pinning ${pin}" >&2
  fi
  pins+=("${pin}")
done

mkdir -p "${dir}"
{
  echo "// Wrapper module that builds kube-apiserver, kube-controller-manager,"
  echo "// kube-scheduler, kubectl and kubelet from k8s.io/kubernetes ${version}."
  echo "// Written by tests/controlplane/add-k8s-version.sh ${version#v}: every staging"
  echo "// module of the release is pinned to ${staging_version} by the replace block."
  if ((${#notes[@]} > 0)); then
    echo "// Not on the Go module proxy at ${staging_version}, so pinned to the newest patch it"
    echo "// serves (configuration and API type modules):"
    for n in "${notes[@]}"; do echo "//   ${n}"; done
  fi
  cat <<EOF
module nodewright.test/controlplane/kubernetes

go 1.26.0

tool (
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-scheduler
	k8s.io/kubernetes/cmd/kubectl
	k8s.io/kubernetes/cmd/kubelet
)

require k8s.io/kubernetes ${version}

replace (
EOF
  for i in "${!staging[@]}"; do
    printf '\t%s => %s %s\n' "${staging[i]}" "${staging[i]}" "${pins[i]}"
  done
  echo ")"
} >"${dir}/go.mod"
rm -f "${dir}/go.sum"
(cd "${dir}" && GOFLAGS=-mod=mod go mod tidy)
echo "wrote ${dir}/go.mod and go.sum; build it with NODEWRIGHT_K8S_VERSION=1.${minor} tests/controlplane/build.sh" >&2
