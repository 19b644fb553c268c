#!/usr/bin/env bash
# Chaos during a rollout (the long run): TRIALS trials (default 20) over NODES kwok nodes (default
# 200) on one local control plane, with the real operator binary, faults at seeded random points
# (SIGKILL of the leader with two replicas, SIGKILL and restart of the only replica, kube-apiserver
# restart, etcd paused, package pods and Jobs deleted) and the invariants checked after every trial
# from the test's own watches. The operator replicas and the webhook (in the admission path,
# failurePolicy Fail) run under the chart's default resource limits (cgroups, as root); an OOM kill
# is a violation. Prints a table: trials, faults injected by kind, invariant violations (must be
# 0), rollout time with faults vs without, peak RSS of the operator and the apiserver, and each
# service's peak memory against its limit. The suite is operator/tests/chaos.rs; its CI variant
# (3 trials, 30 nodes) runs in `cargo test`.
#
#   tests/chaos/run.sh [TRIALS] [NODES]
#   NODEWRIGHT_CHAOS_SEED=N      replay a run (the seed is printed at the start)
#   NODEWRIGHT_CHAOS_LOG_LEVEL   the operator replicas' LOG_LEVEL (logs: <cluster logs>/<trial>/)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export NODEWRIGHT_CHAOS_TRIALS="${1:-20}"
export NODEWRIGHT_CHAOS_NODES="${2:-200}"
log="$(mktemp -t nodewright-chaos.XXXXXX)"
set +e
nice -n "${NICE:-10}" cargo test -p nodewright-operator --test chaos chaos_long -- --ignored --nocapture 2>&1 | tee "$log" >&2
status=${PIPESTATUS[0]}
set -e
echo
grep -E '^chaos:' "$log" | head -1 || true
awk '/^ *trials +nodes/{p=1} p&&/^webhook/{print; p=0; next} p' "$log" | head -5
rm -f "$log"
exit "$status"
