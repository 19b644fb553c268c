#!/usr/bin/env bash
# Load run of the webhook over real TLS (a measurement, not a test). Starts a local control plane
# (for the webhook's caches; it holds the DeploymentPolicy the bench NodeWright names), the
# release-built webhook on 127.0.0.1, and the baseline server (webhook/examples/baseline.rs: the
# same axum + rustls stack, flags, body limit and timeout layers around an empty handler). At
# concurrency 1, 16 and 64 the load generator sends the bench bodies (webhook/benches/common: a
# 20-package NodeWright, a four-compartment DeploymentPolicy) to every admission endpoint, and to
# the baseline before and after each of them. Prints requests/s, p50 and p99 per endpoint and its
# throughput as a ratio to the baseline runs around it (the rest of the machine's load drifts;
# neighbouring runs saw the same), the server's own CPU per request (user + system time of its
# process over the run: the share of the cost that is the server's, not the load generator's), then
# both servers' peak RSS (VmHWM). The load generator runs on the same machine, so a ratio is the share of the whole
# request cost (client, TLS, HTTP) that is not the handler.
# Usage: tests/bench/webhook-load.sh [REQUESTS_PER_RUN]   (default 20000)
#   LOG_LEVEL (default warn) is the webhook's log filter: `info` adds its per-request log line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
requests="${1:-20000}"
name="nw-load-$$"
work="$(mktemp -d)"
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "${p}" 2>/dev/null; done
  tests/controlplane/down.sh --name "${name}" >/dev/null 2>&1
  rm -rf "${work}"
}
trap cleanup EXIT INT TERM

cargo build --quiet --release -p nodewright-webhook --bin nodewright-webhook --example loadgen --example baseline
cargo build --quiet --release -p nodewright-certs
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release"
export PATH="$(tests/controlplane/build.sh | tail -n 1):${PATH}"
eval "$(tests/controlplane/up.sh --name "${name}" --nodes 1)"
"${target}/nodewright-certs" generate --dir "${work}" --name 127.0.0.1 >/dev/null
"${target}/examples/loadgen" --write-bodies "${work}"
# The bench NodeWright's deploymentPolicy; the webhook is not registered, so this is not admitted.
python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["request"]["object"]))' \
  "${work}/validate-deploymentpolicy.json" | kubectl apply -f - >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
serve() { # serve BINARY PORT LOG
  RUST_LOG="${LOG_LEVEL:-warn}" "$1" --listen "127.0.0.1:$2" --metrics-listen 127.0.0.1:0 \
    --tls-cert-file "${work}/tls.crt" --tls-key-file "${work}/tls.key" --log-level "${LOG_LEVEL:-warn}" >"$3" 2>&1 &
  pids+=("$!")
}
wait_ready() { # wait_ready URL WHAT
  for _ in $(seq 1 300); do
    curl -fsS --cacert "${work}/ca.crt" "$1" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "$2 never became ready" >&2
  exit 1
}
webhook_port="$(free_port)"
serve "${target}/nodewright-webhook" "${webhook_port}" "${work}/webhook.log"
webhook_pid="${pids[-1]}"
baseline_port="$(free_port)"
serve "${target}/examples/baseline" "${baseline_port}" "${work}/baseline.log"
baseline_pid="${pids[-1]}"
wait_ready "https://127.0.0.1:${webhook_port}/readyz" "the webhook (caches synced, certificate loaded)"
wait_ready "https://127.0.0.1:${baseline_port}/healthz" "the baseline"
sleep 1

endpoints=(validate-nodewright mutate-nodewright validate-deploymentpolicy mutate-deploymentpolicy)
echo "bodies: $(for e in "${endpoints[@]}"; do printf '%s %s bytes  ' "${e}" "$(wc -c <"${work}/${e}.json")"; done)"
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
run() { # run LABEL URL BODY CONCURRENCY SERVER_PID
  local before out
  before="$(ticks "$5")"
  out="$("${target}/examples/loadgen" --url "$2" --ca "${work}/ca.crt" \
    --body "$3" --concurrency "$4" --requests "${requests}")"
  # The server's CPU (user + system) per request, in microseconds.
  printf '%s %s server_us=%s\n' "$1" "${out}" \
    "$(( ($(ticks "$5") - before) * 1000000 / $(getconf CLK_TCK) / requests ))" | tee -a "${work}/results"
}
baseline() { run baseline "https://127.0.0.1:${baseline_port}/baseline" "${work}/validate-nodewright.json" "$1" "${baseline_pid}"; }
for c in 1 16 64; do
  baseline "${c}"
  for e in "${endpoints[@]}"; do
    run "${e}" "https://127.0.0.1:${webhook_port}/${e}" "${work}/${e}.json" "${c}" "${webhook_pid}"
    baseline "${c}"
  done
done >&2

python3 - "${work}/results" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    label, rest = line.split(" ", 1)
    rows.append((label, dict(kv.split("=", 1) for kv in rest.split())))
ms = lambda v: float(v[:-2])
print(f"{'concurrency':>11} {'endpoint':<26} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'ratio':>6} {'server CPU µs/req':>18}  notes")
for c in sorted({int(f["concurrency"]) for _, f in rows}):
    at = [(label, f) for label, f in rows if int(f["concurrency"]) == c]
    base = [f for label, f in at if label == "baseline"]
    rps = [float(f["rps"]) for f in base]
    mean = sum(rps) / len(rps)
    p50 = sorted(ms(f["p50"]) for f in base)[len(base) // 2]
    p99 = sorted(ms(f["p99"]) for f in base)[len(base) // 2]
    cpu = sorted(int(f["server_us"]) for f in base)[len(base) // 2]
    print(f"{c:>11} {'baseline':<26} {mean:>8.0f} {p50:>8.3f} {p99:>8.3f} {1:>6.2f} {cpu:>18}  "
          f"mean (median latencies) of {len(rps)} runs, {min(rps):.0f} to {max(rps):.0f} req/s")
    for i, (label, f) in enumerate(at):
        if label == "baseline":
            continue
        # Against the baseline runs just before and after: the load of the rest of the machine
        # drifts, and neighbours saw the same.
        near = [float(at[j][1]["rps"]) for j in (i - 1, i + 1) if 0 <= j < len(at) and at[j][0] == "baseline"]
        ratio = float(f["rps"]) / (sum(near) / len(near))
        bad = " ".join(f"{k}={f[k]}" for k in ("errors", "denied") if f[k] != "0")
        print(f"{c:>11} {label:<26} {float(f['rps']):>8.0f} {ms(f['p50']):>8.3f} {ms(f['p99']):>8.3f} {ratio:>6.2f} {f['server_us']:>18}  {bad}")
PY
echo "peak RSS: webhook $(awk '/VmHWM/{print $2, $3}' "/proc/${webhook_pid}/status"), baseline $(awk '/VmHWM/{print $2, $3}' "/proc/${baseline_pid}/status")"
