#!/usr/bin/env bash
# Runs every test of the project, the way CI does:
#   1. builds the local control plane's binaries from their Go modules (cached; minutes the first time),
#   2. checks formatting, lint and that generated files (crds/) match their generator,
#   3. runs `cargo test --workspace`: unit tests, property tests, and the end-to-end suites, which
#      start real local clusters (etcd + kube-apiserver + kube-controller-manager + kwok) themselves.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

step "building the local control plane (cached after the first run)"
tests/controlplane/build.sh >&2

step "cargo fmt --check"
cargo fmt --all -- --check

step "generated CRDs (crds/ and the chart's copy) are up to date"
cargo run --quiet -p nodewright-shared --bin crdgen -- --check crds chart/files/crds

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "cargo test --workspace"
cargo test --workspace
