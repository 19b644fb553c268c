#!/usr/bin/env bash
# Many-node run of the operator against its floor (a measurement, not a test).
#
# 1. Operator: a local control plane with N kwok nodes (default 100), the release-built operator,
#    a NodeWright of 3 packages (gamma depends on alpha and beta: 6 stage Jobs per node) applied to
#    every node; traced by `nodewright-bench rollout` until the NodeWright is `complete`.
# 2. Floor: a fresh cluster of the same size, no operator; `nodewright-bench floor` creates the same
#    Jobs (the operator's own builders and defaults), each node's first Jobs at once and every next
#    Job of the chain the moment its predecessors complete.
#
# Prints, for both: wall time (and the operator's as a ratio to the floor), the mean gaps of the
# stage chain (Job created -> pod created -> pod done -> Job Complete -> outcome recorded -> next
# Job created), the apiserver's requests by verb and resource over the run (every client: the
# operator or the floor driver, plus the Job controller and kwok doing what the Jobs cause, plus
# the trace's own watches), and for the operator: its own API requests by verb and resource, its
# writes per node-stage, peak RSS and CPU.
#
# Usage: tests/bench/operator-rollout.sh [NODES]
# Environment: BENCH_BUDGET=N adds a DeploymentPolicy whose budget and fixed strategy roll the
#   fleet in batches of N nodes (for fleets where every node at once is more than the apiserver
#   can take; the floor ignores it: use it with BENCH_SKIP_FLOOR=1);
#   BENCH_SKIP_FLOOR=1 skips the floor; BENCH_HEAPTRACK=1 runs the operator under heaptrack (its
#   file is kept and named); BENCH_KEEP=DIR keeps reports and logs in DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=../controlplane/lib.sh
source tests/controlplane/lib.sh
nodes="${1:-100}"
budget="${BENCH_BUDGET:-}"
[[ "${BENCH_HEAPTRACK:-0}" == 1 && -z "${BENCH_KEEP:-}" ]] && BENCH_KEEP="$(mktemp -d)"
work="${BENCH_KEEP:-$(mktemp -d)}"
mkdir -p "${work}"
name=""
pid=""
cleanup() {
  set +e
  [[ -n "${opid:-}" ]] && kill "${opid}" 2>/dev/null
  [[ -n "${pid}" ]] && kill "${pid}" 2>/dev/null && wait "${pid}" 2>/dev/null
  [[ -n "${name}" ]] && tests/controlplane/down.sh --name "${name}" >/dev/null 2>&1
  [[ -z "${BENCH_KEEP:-}" ]] && rm -rf "${work}"
}
trap cleanup EXIT INT TERM

cargo build --quiet --release -p nodewright-operator --bin nodewright-operator -p nodewright-bench --bin nodewright-bench
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release"

{
  if [[ -n "${budget}" ]]; then
    cat <<YAML
apiVersion: nodewright.nvidia.com/v1alpha1
kind: DeploymentPolicy
metadata: {name: bench}
spec:
  default: {budget: {count: ${budget}}, strategy: {fixed: {initialBatch: ${budget}}}}
---
YAML
  fi
  cat <<YAML
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata: {name: bench}
spec:
  nodeSelectors: {matchLabels: {type: kwok}}
YAML
  [[ -n "${budget}" ]] && echo "  deploymentPolicy: bench"
  cat <<YAML
  packages:
    alpha: {version: 1.0.0, image: ghcr.io/example/alpha, stageTimeout: 10m}
    beta: {version: 1.0.0, image: ghcr.io/example/beta, stageTimeout: 10m}
    gamma: {version: 1.0.0, image: ghcr.io/example/gamma, stageTimeout: 10m, dependsOn: {alpha: 1.0.0, beta: 1.0.0}}
YAML
} >"${work}/all.yaml"
# The NodeWright alone (the bench tool creates it, and times from that moment).
python3 - "${work}/all.yaml" "${work}/nw.yaml" "${work}/policy.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
open(sys.argv[2], "w").write(docs[-1])
open(sys.argv[3], "w").write(docs[0] if len(docs) > 1 else "")
PY

# apiserver_request_total as "verb resource[/subresource] count" lines.
apiserver_requests() {
  kubectl get --raw /metrics | python3 -c '
import re, sys, collections
c = collections.Counter()
for line in sys.stdin:
    m = re.match(r"apiserver_request_total\{(.*)\} (\S+)", line)
    if m:
        l = dict(re.findall(r"(\w+)=\"([^\"]*)\"", m.group(1)))
        r = l.get("resource", "") + ("/" + l["subresource"] if l.get("subresource") else "")
        c[(l.get("verb", "?"), r or "-")] += float(m.group(2))
for (v, r), n in sorted(c.items()):
    print(v, r, int(n))'
}

# CPU seconds (user + system, in clock ticks) of each control-plane component of the running cluster,
# as "component ticks" lines: what the rollout cost the apiserver, etcd, the controllers and kwok.
cp_cpu() {
  local pidfile
  for pidfile in "$(cp_cluster_dir "${name}")"/pids/*.pid; do
    [[ -f "${pidfile}" ]] || continue
    echo "$(basename "${pidfile}" .pid) $(awk '{print $14+$15}' "/proc/$(cat "${pidfile}")/stat" 2>/dev/null || echo 0)"
  done
}

start_cluster() {
  name="nw-bench-$1-$$"
  eval "$(tests/controlplane/up.sh --name "${name}" --nodes "${nodes}" --timeout 900)"
  kubectl create namespace nodewright >/dev/null
  [[ -s "${work}/policy.yaml" ]] && kubectl apply -f "${work}/policy.yaml" >/dev/null
  return 0
}
stop_cluster() { tests/controlplane/down.sh --name "${name}" >/dev/null 2>&1 || true; name=""; }

# --- 1. the operator -------------------------------------------------------------------------------
start_cluster op
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
runner=()
if [[ "${BENCH_HEAPTRACK:-0}" == 1 ]]; then
  runner=(heaptrack -o "${work}/operator.heaptrack")
fi
NAMESPACE=nodewright POD_NAME=bench LOG_FORMAT=text LOG_LEVEL="${BENCH_LOG_LEVEL:-warn}" \
  METRICS_LISTEN="127.0.0.1:${port}" PROBE_LISTEN="127.0.0.1:${port}" \
  "${runner[@]}" "${target}/nodewright-operator" >"${work}/operator.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do curl -fsS "http://127.0.0.1:${port}/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
opid="$(pgrep -P "${pid}" -f nodewright-operator || echo "${pid}")"
apiserver_requests >"${work}/op-before.txt"
cp_cpu >"${work}/op-cpu-before.txt"
idle_rss="$(awk '/VmRSS/{print $2, $3}' "/proc/${opid}/status")"
read -r cpu0 < <(awk '{print $14+$15}' "/proc/${opid}/stat")
"${target}/nodewright-bench" rollout --manifest "${work}/nw.yaml" --json "${work}/operator.json"
read -r cpu1 < <(awk '{print $14+$15}' "/proc/${opid}/stat")
apiserver_requests >"${work}/op-after.txt"
cp_cpu >"${work}/op-cpu-after.txt"
peak_rss="$(awk '/VmHWM/{print $2, $3}' "/proc/${opid}/status")"
end_rss="$(awk '/VmRSS/{print $2, $3}' "/proc/${opid}/status")"
curl -fsS "http://127.0.0.1:${port}/metrics" >"${work}/op-metrics.txt" || true
grep '^nodewright_operator_api_requests_total' "${work}/op-metrics.txt" >"${work}/op-own.txt" || true
jobs_seen="$(kubectl get jobs -n nodewright --no-headers 2>/dev/null | wc -l)"
# The operator itself first (under heaptrack it is a child of ${pid}).
kill "${opid}" 2>/dev/null; kill "${pid}" 2>/dev/null; wait "${pid}" 2>/dev/null || true; pid=""
stop_cluster

# --- 2. the floor ----------------------------------------------------------------------------------
if [[ "${BENCH_SKIP_FLOOR:-0}" != 1 ]]; then
  start_cluster floor
  apiserver_requests >"${work}/floor-before.txt"
  cp_cpu >"${work}/floor-cpu-before.txt"
  "${target}/nodewright-bench" floor --manifest "${work}/nw.yaml" --json "${work}/floor.json"
  apiserver_requests >"${work}/floor-after.txt"
  cp_cpu >"${work}/floor-cpu-after.txt"
  stop_cluster
fi

# --- report ----------------------------------------------------------------------------------------
hz=$(getconf CLK_TCK)
echo
echo "== ${nodes} kwok nodes x 3 packages (6 stage Jobs per node)${budget:+, budget ${budget} nodes}"
echo "operator: CPU $(python3 -c "print(f'{(${cpu1}-${cpu0})/${hz}:.2f}')") s during the rollout;" \
  "RSS idle ${idle_rss}, peak ${peak_rss}, at the end ${end_rss}; Jobs left at the end: ${jobs_seen}" \
  | tee "${work}/summary.txt"
python3 - "${work}" "${nodes}" "${hz}" <<'PY'
import json, os, re, sys
work, nodes, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(name):
    p = os.path.join(work, name)
    return json.load(open(p)) if os.path.exists(p) else None
def counts(name):
    p = os.path.join(work, name)
    out = {}
    if os.path.exists(p):
        for line in open(p):
            v, r, n = line.split()
            out[(v, r)] = int(n)
    return out
def delta(run):
    b, a = counts(f"{run}-before.txt"), counts(f"{run}-after.txt")
    return {k: a.get(k, 0) - b.get(k, 0) for k in a if a.get(k, 0) - b.get(k, 0) > 0}
op, fl = load("operator.json"), load("floor.json")
print(f"wall time to complete: operator {op['wall_seconds']:.1f} s", end="")
if fl:
    print(f", floor {fl['wall_seconds']:.1f} s, ratio {op['wall_seconds'] / fl['wall_seconds']:.2f}")
else:
    print()
print("\nstage chain, mean (p95) ms per node-stage:")
names = [g["name"] for g in op["gaps"]] + [g["name"] for g in (fl or {}).get("gaps", []) if g["name"] not in [x["name"] for x in op["gaps"]]]
def cell(report, n):
    g = next((g for g in (report or {}).get("gaps", []) if g["name"] == n), None)
    return f"{g['mean_ms']:.0f} ({g['p95_ms']:.0f})" if g else "-"
print(f"  {'gap':<46} {'operator':>14} {'floor':>14}")
for n in names:
    print(f"  {n:<46} {cell(op, n):>14} {cell(fl, n):>14}")
own = {}
for line in open(os.path.join(work, "op-own.txt")) if os.path.exists(os.path.join(work, "op-own.txt")) else []:
    m = re.match(r'nodewright_operator_api_requests_total\{(.*)\} (\S+)', line)
    if m:
        l = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        own[(l["verb"], l["resource"])] = int(float(m.group(2)))
o, f = delta("op"), delta("floor")
keys = sorted(set(o) | set(f) | set(own))
print("\napiserver requests over the run, by verb and resource:")
print(f"  {'verb':<8} {'resource':<28} {'all clients (op)':>17} {'all clients (floor)':>20} {'operator itself':>16}")
for k in keys:
    print(f"  {k[0]:<8} {k[1]:<28} {o.get(k, 0):>17} {f.get(k, 0) if fl else '-':>20} {own.get(k, 0):>16}")
print(f"  {'total':<37} {sum(o.values()):>17} {sum(f.values()) if fl else '-':>20} {sum(own.values()):>16}")
def cpu(run):
    def read(which):
        p = os.path.join(work, f"{run}-cpu-{which}.txt")
        return dict((c, int(float(t))) for c, t in (l.split() for l in open(p))) if os.path.exists(p) else {}
    b, a = read("before"), read("after")
    return {c: (a[c] - b.get(c, 0)) / hz for c in a}
oc, fc = cpu("op"), cpu("floor")
print("\ncontrol plane CPU seconds during the rollout (the operator's own CPU is above):")
print(f"  {'component':<28} {'operator run':>13} {'floor run':>10}")
for c in sorted(set(oc) | set(fc)):
    print(f"  {c:<28} {oc.get(c, 0):>13.1f} {('%.1f' % fc.get(c, 0)) if fl else '-':>10}")
print(f"  {'total':<28} {sum(oc.values()):>13.1f} {('%.1f' % sum(fc.values())) if fl else '-':>10}")
writes = {k: v for k, v in own.items() if k[0] in ("create", "update", "patch", "delete", "deletecollection")}
stages = nodes * 6
print(f"\noperator writes: {sum(writes.values())} for {stages} node-stages = {sum(writes.values()) / stages:.2f} per node-stage")
print("  " + ", ".join(f"{v} {r} {n}" for (v, r), n in sorted(writes.items())))
PY
[[ -n "${BENCH_KEEP:-}" ]] && echo "reports and logs kept in ${work}"
if [[ "${BENCH_HEAPTRACK:-0}" == 1 ]]; then
  echo "heaptrack file: $(ls "${work}"/operator.heaptrack* 2>/dev/null)"
fi
