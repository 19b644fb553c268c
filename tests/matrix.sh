#!/usr/bin/env bash
# Runs the end-to-end suites on every Kubernetes minor the chart claims (or the ones named) and
# prints a table: suite x version -> passed/failed/skipped and wall time, plus the control plane's
# build time per version.
#
# Usage: tests/matrix.sh [--core | --suite NAME...] [--out DIR] [VERSION...]
#   VERSION   a minor with a module in tests/controlplane/go (kubernetes-1.<minor>), e.g. 1.31;
#             default: every one of them, oldest first
#   --core    the quicker set: rollout, outcomes, timeouts, stuck, policies, webhook admission,
#             chart install, CLI (default: every suite that runs on a cluster)
#   --suite   only this suite (a name of the table, e.g. real-node); repeat it for more
#   --out     where the logs and results go (default: <cache>/matrix/<UTC time>)
#
# One run at a time: a second waits for the first (they would share the docs' example cluster,
# the real node and the image caches).
#
# For each version: tests/controlplane/build.sh with NODEWRIGHT_K8S_VERSION set (cached per
# version; a cold build is about 15 minutes on 2 cores), then each suite as
# `cargo test --workspace --test TARGET` with NODEWRIGHT_K8S_VERSION set, so every cluster the
# suite starts (the real node's kubelet included) runs that release. The test binaries are built
# once, before the first version. A test that skips (tests/e2e/src/skip.rs) counts as skipped,
# not passed, and its reason is listed under the table. Exit status 1 when any suite failed.
#
# Environment: NODEWRIGHT_ALLOW_SKIP is passed through (as root nothing else may skip; otherwise
# the suites that need root, as in tests/run-all.sh), CARGO_TARGET_DIR, NODEWRIGHT_CACHE, and
# NODEWRIGHT_{CLI,OPERATOR,WEBHOOK}_BIN (default: the binaries the first step builds).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
# shellcheck source=controlplane/lib.sh
source tests/controlplane/lib.sh

# name package test-target; the first eight are the --core set.
suites_all=(
  "rollout nodewright-operator e2e_rollout"
  "outcomes nodewright-operator e2e_outcomes"
  "timeouts nodewright-operator e2e_timeouts"
  "stuck nodewright-operator e2e_stuck"
  "policies nodewright-operator e2e_policies"
  "webhook-admission nodewright-webhook e2e_admission"
  "chart-install nodewright-e2e chart_install"
  "cli nodewright-e2e e2e_cli"
  "conditions nodewright-operator e2e_conditions"
  "lifecycle nodewright-operator e2e_lifecycle"
  "ordering nodewright-operator e2e_ordering"
  "node-state nodewright-operator e2e_node_state"
  "operator-binary nodewright-operator e2e_binary"
  "leader-election nodewright-operator leader_election"
  "webhook-certs nodewright-operator webhook_certs"
  "chaos nodewright-operator chaos"
  "churn-memory nodewright-operator e2e_churn_memory"
  "hostile-input nodewright-webhook hostile_input"
  "controlplane nodewright-e2e controlplane"
  "crds nodewright-e2e crds"
  "pod-fates nodewright-e2e pod_fates"
  "real-node nodewright-e2e real_node"
  "rotation-load nodewright-e2e rotation_load"
  "doc-examples nodewright-docs doc_examples"
)
core_count=8

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }

core=false
out=""
versions=()
chosen=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --core) core=true; shift ;;
    --suite) chosen+=("${2:?--suite needs a suite name}"); shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "error: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) versions+=("${1#v}"); shift ;;
  esac
done
if ((${#versions[@]} == 0)); then
  mapfile -t versions < <(cp_k8s_minors)
fi
# Fail on a bad version before anything is built (cp_k8s_minor names the supported ones).
for v in "${versions[@]}"; do
  NODEWRIGHT_K8S_VERSION="${v}" cp_k8s_minor >/dev/null
done
if ${core} && ((${#chosen[@]} > 0)); then
  echo "error: --core and --suite choose the suites each; give one of them" >&2
  exit 2
elif ((${#chosen[@]} > 0)); then
  suites=()
  for name in "${chosen[@]}"; do
    found=""
    for s in "${suites_all[@]}"; do
      read -r n _ _ <<<"${s}"
      [[ "${n}" == "${name}" ]] && found="${s}"
    done
    if [[ -z "${found}" ]]; then
      echo "error: --suite ${name}: no such suite; the suites are: $(for s in "${suites_all[@]}"; do read -r n _ _ <<<"${s}"; printf '%s ' "${n}"; done)" >&2
      exit 2
    fi
    suites+=("${found}")
  done
  set_name="chosen"
elif ${core}; then
  suites=("${suites_all[@]:0:core_count}")
  set_name="core"
else
  suites=("${suites_all[@]}")
  set_name="all"
fi

mkdir -p "$(cp_cache_root)/matrix"
exec {matrix_lock}>"$(cp_cache_root)/matrix/.lock"
if ! flock -n "${matrix_lock}"; then
  echo "matrix: another tests/matrix.sh run holds $(cp_cache_root)/matrix/.lock; waiting for it to end" >&2
  flock "${matrix_lock}"
fi
out="${out:-$(cp_cache_root)/matrix/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "${out}"
results="${out}/results.tsv"
printf 'version\tsuite\tstatus\tpassed\tfailed\tskipped\tignored\tseconds\n' >"${results}"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty=""
[[ -z "$(git status --porcelain 2>/dev/null)" ]] || dirty=" (uncommitted changes)"
started_at=$SECONDS
step() { printf '\n==> [%5ds] %s\n' "$((SECONDS - started_at))" "$*" >&2; }

if [[ "$(id -u)" != 0 ]]; then
  export NODEWRIGHT_ALLOW_SKIP="${NODEWRIGHT_ALLOW_SKIP:+$NODEWRIGHT_ALLOW_SKIP,}real_node,rotation_load,hostile_reviews"
fi

# The test binaries, once: they do not depend on the version (the fixture reads
# NODEWRIGHT_K8S_VERSION at run time). Always with --workspace, as tests/run-all.sh builds them:
# selecting packages with -p unifies dependency features differently (kube's `cel`, ...) and
# would rebuild much of the workspace.
# `binary` (the CLI's cluster-free test) is there for its package's binary: an integration test
# makes cargo build its package's binaries, and the suites below run kubectl-nodewright, the
# operator and the webhook from this build (NODEWRIGHT_*_BIN, as tests/run-all.sh sets them).
# Left to build them themselves (`cargo build -p`, features unified for one package), the suites
# replaced each other's artifacts and the next suite compiled again: minutes per minor, counted in
# the suites' wall times.
cargo_args=(--workspace --test binary)
for s in "${suites[@]}"; do
  read -r _ _ target <<<"${s}"
  cargo_args+=(--test "${target}")
done
step "building the test binaries (${set_name} set: ${#suites[@]} suites)"
t0=$SECONDS
cargo test --no-run "${cargo_args[@]}" >"${out}/cargo-build.log" 2>&1 \
  || { tail -n 40 "${out}/cargo-build.log" >&2; echo "error: building the test binaries failed; see ${out}/cargo-build.log" >&2; exit 1; }
cargo_build_seconds=$((SECONDS - t0))
bin_dir_of_build="${CARGO_TARGET_DIR:-${repo}/target}/debug"
export NODEWRIGHT_CLI_BIN="${NODEWRIGHT_CLI_BIN:-${bin_dir_of_build}/kubectl-nodewright}"
export NODEWRIGHT_OPERATOR_BIN="${NODEWRIGHT_OPERATOR_BIN:-${bin_dir_of_build}/nodewright-operator}"
export NODEWRIGHT_WEBHOOK_BIN="${NODEWRIGHT_WEBHOOK_BIN:-${bin_dir_of_build}/nodewright-webhook}"
for bin in "${NODEWRIGHT_CLI_BIN}" "${NODEWRIGHT_OPERATOR_BIN}" "${NODEWRIGHT_WEBHOOK_BIN}"; do
  [[ -x "${bin}" ]] || { echo "error: ${bin} was not built by: cargo test --no-run ${cargo_args[*]}" >&2; exit 1; }
done
if [[ "$(id -u)" == 0 && " ${suites[*]} " == *" real-node "* && -z "${NODEWRIGHT_IMAGES_DIR:-}" ]]; then
  step "building the images for the real node"
  eval "$(tests/images/build.sh 2>>"${out}/images-build.log" | tail -n 1)"
  # A failed build prints no environment line: stop here, not at the real node's suite.
  [[ -n "${NODEWRIGHT_IMAGES_DIR:-}" ]] || { tail -n 20 "${out}/images-build.log" >&2; echo "error: building the test images failed; see ${out}/images-build.log" >&2; exit 1; }
  export NODEWRIGHT_IMAGES_DIR
fi
# The real node installs the release's chart with its linux/amd64 images, as tests/run-all.sh
# builds them (cached in the same place, so a run after run-all reuses them).
if [[ "$(id -u)" == 0 && " ${suites[*]} " == *" real-node "* && -z "${NODEWRIGHT_RELEASE_DIR:-}" ]]; then
  step "building the release images and chart for the real node (release/build.sh --images-only --arch amd64)"
  # shellcheck source=release-images.sh
  source tests/release-images.sh
  release_images "${out}/release-build.log"
fi

declare -A build_cell=()
any_failed=false
for v in "${versions[@]}"; do
  export NODEWRIGHT_K8S_VERSION="${v}"
  mkdir -p "${out}/${v}"
  bin_dir="$(tests/controlplane/build.sh --print-dir 2>/dev/null || true)"
  if [[ -f "${bin_dir}/.complete" ]]; then
    step "Kubernetes ${v}: control plane cached (${bin_dir})"
    build_cell[${v}]="cached ($(awk -F= '$1 == "build_seconds" { print $2 }' "${bin_dir}/VERSIONS")s when built)"
  else
    step "Kubernetes ${v}: building the control plane (about 15 minutes on 2 cores; log ${out}/${v}/build.log)"
    t0=$SECONDS
    if ! tests/controlplane/build.sh >"${out}/${v}/build.log" 2>&1; then
      tail -n 20 "${out}/${v}/build.log" >&2
      build_cell[${v}]="FAILED after $((SECONDS - t0))s"
      any_failed=true
      for s in "${suites[@]}"; do
        read -r name _ _ <<<"${s}"
        printf '%s\t%s\tnot-run\t0\t0\t0\t0\t0\n' "${v}" "${name}" >>"${results}"
      done
      continue
    fi
    build_cell[${v}]="built in $((SECONDS - t0))s"
  fi
  k8s_release="$(awk -F= '$1 == "kubernetes" { print $2 }' "$(tests/controlplane/build.sh --print-dir)/VERSIONS")"
  for s in "${suites[@]}"; do
    read -r name pkg target <<<"${s}"
    log="${out}/${v}/${name}.log"
    skips="${out}/${v}/${name}.skipped"
    : >"${skips}"
    step "Kubernetes ${k8s_release}: ${name} (cargo test --workspace --test ${target}, package ${pkg}; log ${log})"
    t0=$SECONDS
    rc=0
    NODEWRIGHT_SKIP_LOG="${skips}" cargo test --workspace --test "${target}" >"${log}" 2>&1 || rc=$?
    seconds=$((SECONDS - t0))
    # libtest's summary: "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; ..."
    read -r passed failed ignored < <(awk '
      /^test result:/ {
        for (i = 1; i <= NF; i++) {
          if ($(i+1) ~ /^passed/) p += $i
          if ($(i+1) ~ /^failed/) f += $i
          if ($(i+1) ~ /^ignored/) g += $i
        }
        seen = 1
      }
      END { print p + 0, f + 0, g + 0 }' "${log}")
    skipped="$(grep -c '^SKIPPED ' "${skips}" || true)"
    passed=$((passed - skipped))
    if ((rc == 0 && failed == 0)); then
      status=passed
    else
      status=FAILED
      any_failed=true
      # A binary that died before its summary (a panic outside a test, a crash) failed as a whole.
      grep -q '^test result:' "${log}" || status=ERROR
      grep -E '^test .* FAILED$|^    [a-z_0-9:]+$' "${log}" | sed 's/^/    /' >&2 || true
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${v}" "${name}" "${status}" "${passed}" "${failed}" \
      "${skipped}" "${ignored}" "${seconds}" >>"${results}"
    printf '    %s: %s passed, %s failed, %s skipped, %s ignored in %ss\n' "${status}" "${passed}" \
      "${failed}" "${skipped}" "${ignored}" "${seconds}" >&2
  done
done
unset NODEWRIGHT_K8S_VERSION

# The table (markdown): one row per suite, one column per version.
table="${out}/table.md"
{
  echo "Matrix run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit ${commit}${dirty}, ${set_name} set; $(nproc) cores."
  echo "Cell: status, passed/failed/skipped, wall time. Test binaries built in ${cargo_build_seconds}s."
  echo
  printf '| suite |'
  for v in "${versions[@]}"; do printf ' %s |' "${v}"; done
  echo
  printf '|---|'
  for _ in "${versions[@]}"; do printf -- '---|'; done
  echo
  printf '| control plane build |'
  for v in "${versions[@]}"; do printf ' %s |' "${build_cell[${v}]}"; done
  echo
  for s in "${suites[@]}"; do
    read -r name _ _ <<<"${s}"
    printf '| %s |' "${name}"
    for v in "${versions[@]}"; do
      awk -F'\t' -v v="${v}" -v n="${name}" '
        $1 == v && $2 == n {
          if ($3 == "not-run") { printf " not run |"; exit }
          printf " %s %s/%s/%s, %ss |", $3, $4, $5, $6, $8
        }' "${results}"
    done
    echo
  done
  printf '| total wall time |'
  for v in "${versions[@]}"; do
    awk -F'\t' -v v="${v}" '$1 == v { t += $8 } END { printf " %ss |", t + 0 }' "${results}"
  done
  echo
  echo
  any_skip=false
  for v in "${versions[@]}"; do
    for f in "${out}/${v}"/*.skipped; do
      [[ -s "${f}" ]] || continue
      if ! ${any_skip}; then echo "Skipped on purpose:"; any_skip=true; fi
      sed "s/^SKIPPED /- ${v} $(basename "${f}" .skipped): /" "${f}"
    done
  done
} >"${table}"
echo >&2
cat "${table}"
echo >&2
echo "matrix: logs and results in ${out} (results.tsv, table.md)" >&2
if ${any_failed}; then
  echo "matrix: FAILED (see the logs named above)" >&2
  exit 1
fi
