#!/usr/bin/env bash
# The webhook's memory with its metadata-only node watch (the blast-radius warnings' node counts),
# for each node count given (default: 100 and 5000): a local control plane holding that many Node
# objects (a dozen labels and a 2 KiB annotation each), the webhook binary's VmRSS and VmHWM once
# its caches listed. A measurement, not a test (webhook/tests/node_cache_memory.rs, ignored by
# `cargo test`). The per-review CPU of the warnings at 100 and 5,000 nodes is in
# `cargo bench -p nodewright-webhook --bench admission -- blast_radius`.
# Usage: tests/bench/webhook-node-memory.sh [NODES...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
counts=("$@")
[[ ${#counts[@]} -gt 0 ]] || counts=(100 5000)
for n in "${counts[@]}"; do
  NODEWRIGHT_NODE_MEMORY_NODES="${n}" cargo test --quiet -p nodewright-webhook --test node_cache_memory \
    -- --ignored --nocapture 2>&1 | grep '^webhook node watch:'
done
