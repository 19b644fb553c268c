#!/usr/bin/env bash
# Runs every test of the project, the way CI does:
#   1. builds the local control plane's binaries from their Go modules (cached; minutes the first time),
#   2. builds promtool and prometheus (tests/prometheus, cached) for the alert rule tests and the
#      alert health gate, checks formatting, lint
#      and that generated files (crds/; docs/reference/metrics.md and the dashboard are checked by
#      tests/docs/tests/generated.rs) match their generators, and the dependency graph against
#      deny.toml (cargo-deny, built from crates.io and cached),
#   3. builds the test images (as root), for the suite that runs on a real node,
#   4. runs `cargo test --workspace`: unit tests, property tests, and the end-to-end suites, which
#      start real local clusters (etcd + kube-apiserver + kube-controller-manager + kwok, and one
#      real kubelet + containerd node for real_node.rs) themselves.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Every step prints the run's elapsed time, so a CI log shows where the minutes go.
started_at=$SECONDS
step() { printf '\n==> [%4ds] %s\n' "$((SECONDS - started_at))" "$*" >&2; }

step "building the local control plane (cached after the first run)"
tests/controlplane/build.sh >&2

step "building promtool and prometheus from the Prometheus Go module (cached after the first run; alert rule tests, the alert health gate)"
tests/prometheus/build.sh --with-prometheus >&2

# A test that cannot run here fails unless skipping it was asked for (NODEWRIGHT_ALLOW_SKIP, see
# tests/e2e/src/skip.rs); every skip is logged here and counted at the end.
NODEWRIGHT_SKIP_LOG="$(mktemp -t nodewright-skips.XXXXXX)"
export NODEWRIGHT_SKIP_LOG
report_skips() {
  local n
  n="$(wc -l < "$NODEWRIGHT_SKIP_LOG" | tr -d ' ')"
  printf '\n==> [%4ds] done; %s test(s) skipped on purpose\n' "$((SECONDS - started_at))" "$n" >&2
  cat "$NODEWRIGHT_SKIP_LOG" >&2
  rm -f "$NODEWRIGHT_SKIP_LOG"
}
trap report_skips EXIT

step "cargo fmt --check"
cargo fmt --all -- --check

step "generated CRDs (crds/ and the chart's copy) are up to date"
cargo run --quiet -p nodewright-shared --bin crdgen -- --check crds chart/files/crds

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "cargo deny: licenses, banned crates, sources (advisories need GitHub, which CI cannot reach)"
tests/supply-chain/deny.sh

# The real node (a kubelet with containerd, next to the kwok nodes) needs root and the test images;
# tests/e2e/tests/real_node.rs runs the chart and real package stages on it when they are there.
if [[ "$(id -u)" == 0 && "${NODEWRIGHT_REAL_NODE_TESTS:-1}" != 0 ]]; then
  step "building the images for the real node (operator, webhook, test agent and packages, pause)"
  eval "$(tests/images/build.sh | tail -n 1)"
  export NODEWRIGHT_IMAGES_DIR
else
  step "no real node: not root, or NODEWRIGHT_REAL_NODE_TESTS=0 (the suites that need root skip, on purpose)"
  export NODEWRIGHT_ALLOW_SKIP="${NODEWRIGHT_ALLOW_SKIP:+$NODEWRIGHT_ALLOW_SKIP,}real_node,rotation_load,hostile_reviews"
fi

# The docs' examples run `kubectl nodewright`: the plugin `cargo test --workspace` builds before any
# test runs (so it is current), instead of a second build with the CLI's features alone.
export NODEWRIGHT_CLI_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/kubectl-nodewright"

step "cargo test --workspace"
cargo test --workspace
