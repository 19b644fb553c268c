#!/usr/bin/env bash
# The dashboard's rendering evidence: builds Prometheus from its Go module (cached), runs a demo on
# the local control plane (operator and webhook in-process, a rollout through a DeploymentPolicy,
# timed-out stages, denied and admitted manifests), lets Prometheus scrape both services, and
# evaluates every panel's query of chart/files/dashboards/nodewright.json: each must return data.
# Prints each query with its number of series. Not in CI (minutes of build and scrape windows);
# the dashboard lint that is in CI is tests/docs/tests/lint.rs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
tests/prometheus/build.sh --with-prometheus >/dev/null
exec cargo test -p nodewright-docs --test panels -- --ignored --nocapture
