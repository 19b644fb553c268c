#!/usr/bin/env bash
# Runs every test of the project, the way CI does:
#   1. builds the local control plane's binaries from their Go modules (cached; minutes the first time),
#   2. builds promtool and prometheus (tests/prometheus, cached) for the alert rule tests and the
#      alert health gate, checks formatting, lint
#      and that generated files (crds/; docs/reference/metrics.md and the dashboard are checked by
#      tests/docs/tests/generated.rs) match their generators, and the dependency graph against
#      deny.toml (cargo-deny, built from crates.io and cached),
#   3. builds the linux/amd64 release images and chart (release/build.sh --images-only --arch amd64,
#      checked by release/check.sh) and, as root, the test images, for the suite that runs on a
#      real node (it installs exactly that release) and the Dockerfile test (tests/e2e/tests/images.rs),
#   4. runs `cargo test --workspace`: unit tests, property tests, and the end-to-end suites, which
#      start real local clusters (etcd + kube-apiserver + kube-controller-manager + kwok, and one
#      real kubelet + containerd node for real_node.rs) themselves, on the newest Kubernetes minor,
#   5. runs the core end-to-end suites again on the oldest minor the chart supports
#      (`tests/matrix.sh --core <oldest>`, docs/kubernetes-support.md), beside step 4. Its control
#      plane is built in the background from the start, at the lowest CPU and I/O priority until
#      the tests start (it uses the cycles the builds leave idle), then at normal priority, as the
#      suites leave a CPU idle about half of the time. NODEWRIGHT_OLDEST_MINOR_TESTS=0 leaves
#      step 5 out.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Every step prints the run's elapsed time and the disk left, so a CI log shows where the minutes
# and the gigabytes go (a CI run once stopped on a full disk in the middle of `cargo test`).
started_at=$SECONDS
disk_free() { df -h --output=avail "$PWD" 2>/dev/null | tail -n 1 | tr -d ' '; }
step() { printf '\n==> [%4ds] [%s free] %s\n' "$((SECONDS - started_at))" "$(disk_free)" "$*" >&2; }

# One build of each test binary, never rebuilt in the run: incremental compilation data would only
# take disk (gigabytes over the workspace's test binaries). A developer's own setting stands.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# The oldest supported minor (the lowest go/kubernetes-1.<minor> module): its build starts now, in
# the background, and is waited for before step 5.
oldest_minor=""
oldest_build_pid=""
oldest_build_log=""
if [[ "${NODEWRIGHT_OLDEST_MINOR_TESTS:-1}" != 0 ]]; then
  # shellcheck source=controlplane/lib.sh
  oldest_minor="$(source tests/controlplane/lib.sh && cp_k8s_minors | head -n 1)"
  oldest_build_log="$(mktemp -t nodewright-oldest-build.XXXXXX)"
  step "building the Kubernetes ${oldest_minor} control plane in the background (idle priority; log ${oldest_build_log})"
  # setsid: its own process group, so an early exit stops the go builds under it too. A new session
  # is also a new scheduler autogroup (Linux with sched_autogroup, as here), and autogroups share the
  # CPU equally whatever their processes' nice: without lowering the group's own nice (its
  # /proc/self/autogroup), this "idle" build took half the machine from every step before step 5.
  NODEWRIGHT_K8S_VERSION="${oldest_minor}" setsid bash -c \
    'echo 19 >/proc/self/autogroup 2>/dev/null || true; exec nice -n 19 ionice -c 3 "$@"' \
    oldest-build tests/controlplane/build.sh >"${oldest_build_log}" 2>&1 &
  oldest_build_pid=$!
fi

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
  printf '\n==> [%4ds] [%s free] done; %s test(s) skipped on purpose\n' "$((SECONDS - started_at))" "$(disk_free)" "$n" >&2
  # What the run keeps on disk, for the next full-disk question.
  du -sh "${CARGO_TARGET_DIR:-$PWD/target}" "${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}" \
    "$(go env GOMODCACHE 2>/dev/null || echo "$HOME/go/pkg/mod")" "${CARGO_HOME:-$HOME/.cargo}" 2>/dev/null >&2 || true
  cat "$NODEWRIGHT_SKIP_LOG" >&2
  rm -f "$NODEWRIGHT_SKIP_LOG"
  # A run that stops early does not leave the background build behind.
  if [[ -n "${oldest_build_pid}" ]] && kill -0 "${oldest_build_pid}" 2>/dev/null; then
    kill -- "-${oldest_build_pid}" 2>/dev/null || true
  fi
  # Nor the oldest minor's suites (their clusters stop with their test processes); their log
  # says how far they got.
  if [[ -n "${oldest_tests_pid:-}" ]] && kill -0 "${oldest_tests_pid}" 2>/dev/null; then
    kill -- "-${oldest_tests_pid}" 2>/dev/null || true
    tail -n 40 "${oldest_tests_log}" >&2 || true
  fi
}
trap report_skips EXIT

step "cargo fmt --check"
cargo fmt --all -- --check

step "no import cycle between the modules of any crate (tests/structure/import-cycles.py)"
python3 tests/structure/import-cycles.py

step "generated CRDs (crds/ and the chart's copy) are up to date"
cargo run --quiet -p nodewright-shared --bin crdgen -- --check crds chart/files/crds

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "cargo deny: licenses, banned crates, sources (advisories need GitHub, which CI cannot reach)"
tests/supply-chain/deny.sh

# The release's linux/amd64 operator and webhook images and its chart, as release/build.sh builds
# them for a release (static musl binaries, daemonless OCI image indexes, the chart pinned to their
# digests); the multi-arch release is `release/build.sh` alone. NODEWRIGHT_RELEASE_IMAGES=0 skips
# them, and with them the suites that need them.
release_built=false
if [[ "${NODEWRIGHT_RELEASE_IMAGES:-1}" != 0 ]]; then
  step "building the release images and chart for linux/amd64 (release/build.sh --images-only --arch amd64)"
  # shellcheck source=release-images.sh
  source tests/release-images.sh
  release_images
  release_built=true
  # NODEWRIGHT_LOW_DISK=1 (.ci/run sets it): the release's intermediate build (its own profile and
  # target, never used by the tests) goes once the images are built; a local run keeps it, warm.
  if [[ "${NODEWRIGHT_LOW_DISK:-0}" == 1 ]]; then
    rm -rf "${CARGO_TARGET_DIR:-$PWD/target}/x86_64-unknown-linux-musl"
  fi
else
  step "no release images: NODEWRIGHT_RELEASE_IMAGES=0 (the suites that need them skip, on purpose)"
  export NODEWRIGHT_ALLOW_SKIP="${NODEWRIGHT_ALLOW_SKIP:+$NODEWRIGHT_ALLOW_SKIP,}release_images,real_node"
fi

# The real node (a kubelet with containerd, next to the kwok nodes) needs root, the release and the
# test images; tests/e2e/tests/real_node.rs runs the chart and real package stages on it.
if $release_built && [[ "$(id -u)" == 0 && "${NODEWRIGHT_REAL_NODE_TESTS:-1}" != 0 ]]; then
  step "building the test images for the real node (test agent and packages, pause)"
  unset NODEWRIGHT_IMAGES_DIR
  eval "$(tests/images/build.sh | tail -n 1)"
  # A failed build prints no environment line (its error is above): stop here.
  [[ -n "${NODEWRIGHT_IMAGES_DIR:-}" ]] || { echo "error: building the test images failed (output above)" >&2; exit 1; }
  export NODEWRIGHT_IMAGES_DIR
else
  step "no real node: not root, or NODEWRIGHT_REAL_NODE_TESTS=0 (the suites that need root skip, on purpose)"
  export NODEWRIGHT_ALLOW_SKIP="${NODEWRIGHT_ALLOW_SKIP:+$NODEWRIGHT_ALLOW_SKIP,}real_node,rotation_load,hostile_reviews"
fi

# Suites of another package run the services and the plugin (the docs' examples run `kubectl
# nodewright`, chart_install and chaos run the operator and the webhook): the binaries `cargo test
# --workspace` builds before any test runs (so they are current), instead of a second build of
# each package with its own features alone (minutes of compiling and gigabytes of target).
export NODEWRIGHT_CLI_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/kubectl-nodewright"
export NODEWRIGHT_OPERATOR_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/nodewright-operator"
export NODEWRIGHT_WEBHOOK_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/nodewright-webhook"

step "building the test binaries (cargo test --workspace --no-run)"
cargo test --workspace --no-run

# From here the suites mostly wait on their clusters (a CPU is idle about half of the time), so the
# oldest minor's build gets normal priority and its core set runs beside the newest minor's suites
# instead of after them (each suite starts clusters of its own; nothing is shared between the two;
# a suite that stops components of its cluster holds the cluster-creation lock meanwhile, see
# tests/e2e/src/ports.rs). tests/matrix.sh's build.sh call waits on the build's lock and then
# finds the binaries.
oldest_tests_pid=""
oldest_tests_log=""
if [[ -n "${oldest_minor}" ]]; then
  if kill -0 "${oldest_build_pid}" 2>/dev/null; then
    echo 0 >"/proc/${oldest_build_pid}/autogroup" 2>/dev/null || true
    renice -n 0 -g "${oldest_build_pid}" >/dev/null 2>&1 || true
    ionice -c 2 -n 4 -P "${oldest_build_pid}" >/dev/null 2>&1 || true
  fi
  oldest_tests_log="$(mktemp -t nodewright-oldest-tests.XXXXXX)"
  step "the core end-to-end suites on the oldest supported minor, Kubernetes ${oldest_minor}, start beside cargo test once its control plane is built, then the docs' examples (tests/matrix.sh --core ${oldest_minor}; log ${oldest_tests_log})"
  # setsid: a process group of its own, so an early exit stops its cargo and test processes too.
  # The docs' examples (about 5 minutes, on the newest minor) follow the core set in this stream,
  # which would otherwise end long before the other.
  setsid bash -c 'tests/matrix.sh --core "$1" && cargo test --workspace --test doc_examples' \
    oldest-tests "${oldest_minor}" >"${oldest_tests_log}" 2>&1 &
  oldest_tests_pid=$!
  step "cargo test --workspace (the docs' examples, every_page_runs, run in the other stream)"
  cargo test --workspace -- --skip every_page_runs
else
  step "cargo test --workspace"
  cargo test --workspace
fi

if [[ -n "${oldest_minor}" ]]; then
  step "waiting for the core end-to-end suites on Kubernetes ${oldest_minor} and the docs' examples"
  oldest_rc=0
  wait "${oldest_tests_pid}" || oldest_rc=$?
  oldest_tests_pid=""
  # Done (or failed, and matrix.sh's own build.sh call then built it): its exit is in its log.
  wait "${oldest_build_pid}" 2>/dev/null || true
  oldest_build_pid=""
  # The build's own log first (its times), then the suites' (the table is its end).
  cat "${oldest_build_log}" "${oldest_tests_log}" >&2
  rm -f "${oldest_build_log}" "${oldest_tests_log}"
  if [[ "${oldest_rc}" != 0 ]]; then
    echo "error: the core suites on Kubernetes ${oldest_minor} or the docs' examples failed (exit ${oldest_rc}; output above)" >&2
    exit "${oldest_rc}"
  fi
fi
