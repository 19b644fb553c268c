#!/usr/bin/env bash
# Builds promtool (and, with --with-prometheus, prometheus) from the Go module
# github.com/prometheus/prometheus, pinned by the wrapper module go/ (go.mod + committed go.sum),
# the way tests/controlplane/build.sh builds the control plane. The binaries go to a cache outside
# the repository, keyed by the pins:
#   ${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}/prometheus/<key>/bin
# A second run finds them and does nothing. The last line on stdout is the bin dir.
#
# Usage: tests/prometheus/build.sh [--with-prometheus] [--print-dir]
#   --with-prometheus  also build the prometheus server (tests/observability/panels.sh needs it;
#                      the test suite needs only promtool)
#   --print-dir        only print the bin dir (exit 1 if the asked binaries are not built)
#
# The control plane's key does not include this module (it lives outside tests/controlplane/go), so
# changing these pins never rebuilds the control plane.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() { echo "error: $*" >&2; exit 1; }

# Bump when this script changes how binaries are produced.
BUILD_REVISION=2
want=(promtool)
print_only=false
for arg in "$@"; do
  case "${arg}" in
    --with-prometheus) want+=(prometheus) ;;
    --print-dir) print_only=true ;;
    *) echo "usage: $0 [--with-prometheus] [--print-dir]" >&2; exit 2 ;;
  esac
done

command -v go >/dev/null || die "go is not on PATH; promtool is built from its Go module (Go >= 1.26)"
module_version() {
  awk '($1 == "github.com/prometheus/prometheus" && $2 ~ /^v/) { print $2; exit }' "${here}/go/go.mod"
}
version="$(module_version)"
[[ -n "${version}" ]] || die "go/go.mod does not require github.com/prometheus/prometheus"
gover="$(go env GOVERSION)"
digest="$( (cat "${here}/go/go.mod" "${here}/go/go.sum"; echo "${gover} ${BUILD_REVISION}") | sha256sum | cut -c1-12)"
key_dir="${NODEWRIGHT_CACHE:-${HOME}/.cache/nodewright}/prometheus/prometheus-${version}_${gover}_${digest}"
bin_dir="${key_dir}/bin"

built() {
  local b
  for b in "${want[@]}"; do [[ -f "${bin_dir}/.${b}.complete" ]] || return 1; done
}
if built; then echo "${bin_dir}"; exit 0; fi
if ${print_only}; then echo "${bin_dir}"; exit 1; fi

mkdir -p "${bin_dir}"
exec 9>"${key_dir}/.build.lock"
if ! flock -n 9; then
  echo "prometheus/build.sh: another build of ${key_dir} is running; waiting for it" >&2
  flock 9
fi
if built; then echo "${bin_dir}"; exit 0; fi

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=readonly"
# A build cache of its own, removed when done: the binaries are what is cached (by key), as in
# tests/controlplane/build.sh, so the run's disk goes to the Rust builds and the test clusters.
gocache="$(mktemp -d "${key_dir}/.gocache.XXXXXX")"
export GOCACHE="${gocache}"
trap 'rm -rf "${gocache}"' EXIT
log="${key_dir}/build.log"
# Prometheus' own version stamp (v0.316.0 of the module is release 3.16.0), so `--version` and
# the build_info metric name the release.
mm="${version#v0.}"; mm="${mm%%.*}"
release="$(( mm / 100 )).$(( mm % 100 )).${version##*.}"
ldflags="-s -w -X github.com/prometheus/common/version.Version=${release} -X github.com/prometheus/common/version.Branch=HEAD"
for b in "${want[@]}"; do
  [[ -f "${bin_dir}/.${b}.complete" ]] && continue
  t0=$(date +%s)
  echo "prometheus/build.sh: building ${b} ${release} from github.com/prometheus/prometheus@${version}" >&2
  # remove_all_sd: Prometheus' own build tag leaving out every service-discovery plugin (cloud SDKs,
  # client-go...): rule tests and a scrape of static targets need none, and the build is a fraction.
  if ! (cd "${here}/go" && go build -trimpath -tags remove_all_sd -ldflags "${ldflags}" -o "${bin_dir}/${b}.tmp" \
      "github.com/prometheus/prometheus/cmd/${b}") >>"${log}" 2>&1; then
    tail -n 40 "${log}" >&2
    die "building ${b} failed; full log: ${log}"
  fi
  "${bin_dir}/${b}.tmp" --version >>"${log}" 2>&1 || die "'${b} --version' failed; see ${log}"
  mv "${bin_dir}/${b}.tmp" "${bin_dir}/${b}"
  touch "${bin_dir}/.${b}.complete"
  echo "prometheus/build.sh: ${b} done in $(( $(date +%s) - t0 ))s" >&2
done
echo "${bin_dir}"
