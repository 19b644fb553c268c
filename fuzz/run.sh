#!/usr/bin/env bash
# Runs each fuzz target for SECONDS (default 60) with libFuzzer and prints a table: target, time,
# executions, executions per second, corpus size, crashes. Crashing inputs land in
# fuzz/artifacts/<target>/ (copy one into fuzz/regressions/<target>/ once fixed: cargo test replays
# it from then on). With --minimize, the corpus of each target is minimized afterwards
# (cargo fuzz cmin) so what is committed stays small.
#
#   fuzz/run.sh [SECONDS] [--minimize] [TARGET...]     targets: admission node_plan (default both)
#
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). FUZZ_TARGET_DIR overrides
# the build directory (default fuzz/target); FUZZ_JOBS runs that many fuzzing processes per target.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

seconds=60
minimize=0
targets=()
for arg in "$@"; do
    case "$arg" in
        --minimize) minimize=1 ;;
        ''|*[!0-9]*) targets+=("$arg") ;;
        *) seconds="$arg" ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=(admission node_plan)
target_dir="${FUZZ_TARGET_DIR:-$PWD/target}"
jobs="${FUZZ_JOBS:-1}"

command -v cargo-fuzz >/dev/null || { echo "fuzz/run.sh: cargo-fuzz is not installed: cargo install cargo-fuzz" >&2; exit 2; }
[ -d corpus/admission ] || bash seed.sh >/dev/null

for t in "${targets[@]}"; do cargo +nightly fuzz build --target-dir "$target_dir" "$t" >&2; done

rows=()
failed=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    log="$(mktemp)"
    before=$(find "artifacts/$t" -type f | wc -l)
    set +e
    cargo +nightly fuzz run --target-dir "$target_dir" "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -print_final_stats=1 -jobs="$jobs" -workers="$jobs" \
        -artifact_prefix="artifacts/$t/" >"$log" 2>&1
    status=$?
    set -e
    execs=$(grep -h 'stat::number_of_executed_units' "$log" fuzz-*.log 2>/dev/null | awk '{s+=$2} END {print s+0}')
    after=$(find "artifacts/$t" -type f | wc -l)
    crashes=$((after - before))
    if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then
        echo "fuzz/run.sh: $t exited $status without an artifact; its log:" >&2
        tail -30 "$log" >&2
        crashes="?"
        failed=1
    fi
    [ "$crashes" = 0 ] || failed=1
    if [ "$minimize" = 1 ]; then
        cargo +nightly fuzz cmin --target-dir "$target_dir" "$t" "corpus/$t" >/dev/null 2>&1 || true
    fi
    size=$(find "corpus/$t" -type f | wc -l)
    rows+=("$(printf '%-10s %6ss %12s %10s %8s %8s' "$t" "$seconds" "$execs" "$((execs / (seconds > 0 ? seconds : 1)))" "$size" "$crashes")")
    rm -f "$log" fuzz-*.log
done

printf '%-10s %7s %12s %10s %8s %8s\n' target time executions exec/s corpus crashes
printf '%s\n' "${rows[@]}"
exit "$failed"
