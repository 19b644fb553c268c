#!/usr/bin/env bash
# Instructions per request of each admission endpoint (decode, default or validate, patch, encode),
# counted by valgrind's callgrind over the bench bodies of benches/common: a count, not a time, so
# it does not move with other load on the machine. Compare before/after on the same commit range.
# Usage: webhook/benches/callgrind.sh [ITERATIONS]   (default 200; needs valgrind)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
iterations="${1:-200}"
bin="$(cargo bench --quiet -p nodewright-webhook --bench admission_callgrind --no-run --message-format=json \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "admission_callgrind":
        print(m["executable"])')"
out="$(mktemp -d)"
trap 'rm -rf "${out}"' EXIT
printf '%-27s %14s %12s\n' endpoint instructions per-request
for endpoint in mutate-nodewright validate-nodewright mutate-deploymentpolicy validate-deploymentpolicy; do
  valgrind --tool=callgrind --callgrind-out-file="${out}/${endpoint}.out" \
    --toggle-collect='*admission_callgrind::measured*' "${bin}" "${endpoint}" "${iterations}" \
    >/dev/null 2>"${out}/${endpoint}.log" || { cat "${out}/${endpoint}.log" >&2; exit 1; }
  total="$(awk '/^summary:/{print $2}' "${out}/${endpoint}.out")"
  printf '%-27s %14s %12s\n' "${endpoint}" "${total}" "$((total / iterations))"
done
