#!/usr/bin/env bash
# Builds cargo-deny from crates.io into a cache outside the repository (once per version) and checks
# the workspace's dependency graph against deny.toml: licenses, banned crates, sources.
# Advisories are left out: the RustSec database comes from GitHub, which CI cannot reach.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
version=0.20.2
root="${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}/tools/cargo-deny-${version}"
if [[ ! -x "$root/bin/cargo-deny" ]]; then
  echo "deny.sh: building cargo-deny ${version} from crates.io (cached after the first run)" >&2
  started=$(date +%s)
  # cargo-deny's own release profile is fat LTO with one codegen unit: minutes of a 2-core CI run
  # spent optimising a tool that runs for a second. A plain optimised build does the same checks.
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
    cargo install cargo-deny --version "$version" --locked --quiet --root "$root.tmp" >&2
  rm -rf "$root" && mv "$root.tmp" "$root"
  echo "deny.sh: cargo-deny built in $(( $(date +%s) - started ))s" >&2
fi
exec "$root/bin/cargo-deny" --log-level warn check licenses bans sources
