#!/usr/bin/env bash
# Stops and deletes a cluster started by up.sh. Its component logs, its kwokctl configuration and
# the components' peak memory (memory.txt) stay in ${NODEWRIGHT_LOGS:-<cache>/logs}/<name>/.
# Idempotent: stopping a cluster that does not exist succeeds.
#
# Usage: tests/controlplane/down.sh [--name NAME]   (default name: nodewright)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "${here}/lib.sh"

name=nodewright
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) name="$2"; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) cp_die "unknown argument $1 (see --help)" ;;
  esac
done

# kwokctl comes from the cache; without it (binaries never built) there is nothing to stop.
bin_dir="$("${here}/build.sh" --print-dir | tail -n 1)" || true
export PATH="${bin_dir}:${PATH}"
cp_kwok_env
if [[ ! -d "$(cp_cluster_dir "${name}")" ]]; then
  echo "down.sh: no cluster '${name}'" >&2
  exit 0
fi
cp_stop_cluster "${name}"
echo "down.sh: cluster '${name}' stopped; logs in $(cp_logs_dir "${name}")" >&2
