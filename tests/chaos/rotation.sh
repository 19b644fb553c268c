#!/usr/bin/env bash
# Admission through certificate rotation under load (the long run): the chart installed with helm
# on a local control plane, two webhook processes behind its Service (the kube-apiserver calls a
# random ready endpoint, failurePolicy Fail), the operator's certificate controller renewing the
# serving certificate and then rotating the CA with its overlap, CLIENTS clients (default 64)
# creating and updating NodeWrights through the apiserver for SECONDS (default 600), and each
# webhook process SIGKILLed once. Every process runs under the chart's resource limits (a cgroup
# each, when run as root). Prints the steps seen, failed admissions and p50/p99 latency during
# rotation, outside it and while a replica is down, and each process's peak memory against its
# limit. The suite is tests/e2e/tests/rotation_load.rs; its CI variant (64 clients, 80 s, one kill)
# runs in `cargo test`. Needs root (an address on lo for the Service's endpoints).
#
#   tests/chaos/rotation.sh [SECONDS] [CLIENTS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export NODEWRIGHT_ROTATION_SECONDS="${1:-600}"
export NODEWRIGHT_ROTATION_CLIENTS="${2:-64}"
log="$(mktemp -t nodewright-rotation.XXXXXX)"
set +e
nice -n "${NICE:-10}" cargo test -p nodewright-e2e --test rotation_load rotation_under_load_long -- --ignored --nocapture --exact 2>&1 | tee "$log" >&2
status=${PIPESTATUS[0]}
set -e
echo
sed -n '/^==== admission through certificate rotation under load ====/,/^failed requests:/p' "$log"
rm -f "$log"
exit "$status"
