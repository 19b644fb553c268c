#!/usr/bin/env bash
# Checks what release/build.sh put in dist/ (or $NODEWRIGHT_RELEASE_DIR); exits 1 naming every
# failed check. release/build.sh runs it after every build.
#
#   release/check.sh [DIST]
#
# Binaries: the ELF machine of their target, static (no program interpreter, no NEEDED library),
#   stripped (no .symtab, no .debug_*), cargo-auditable's .dep-v0 present with the binary's own
#   package as root; each runs (x86_64 natively, aarch64 under qemu-aarch64-static from Debian's
#   qemu-user-static) far enough to print `--version` with the release version and to refuse a bad
#   environment variable (nodewright-certs reads none: a bad argument).
# Images: one index per image with the built platforms; per platform a config with user
#   65532:65532, the entrypoint, the binary identical to dist/bin's for that platform and of its
#   architecture, CA certificates, no shell; the OCI annotations on index, manifest and config;
#   and <service>/Dockerfile's final stage describes the same image (files, user, workdir, ports,
#   entrypoint, env, label keys and static label values).
# Chart: helm lint --strict of the package, and it renders both images as tag@digest of the index.
# CLI: SHA256SUMS and the krew manifest match the archives, which hold dist/bin's binary.
# SBOMs: CycloneDX for every binary and image platform, one component per embedded package,
#   licences on every crates.io component. dist/SHA256SUMS matches.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIST=$(cd "${1:-${NODEWRIGHT_RELEASE_DIR:-$REPO/dist}}" && pwd)
cd "$REPO"

failures=0
fail() { echo "release/check.sh: FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "release/check.sh: ok: $*" >&2; }
die() { echo "release/check.sh: error: $*" >&2; exit 1; }

[ -f "$DIST/release.json" ] || die "$DIST/release.json is missing (run release/build.sh)"
for tool in jq readelf tar sha256sum python3; do command -v "$tool" >/dev/null || die "$tool is not installed"; done
command -v helm >/dev/null || eval "$("$REPO/release/tools.sh")"
VERSION=$(jq -r .version "$DIST/release.json")
REVISION=$(jq -r .revision "$DIST/release.json")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nodewright-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

arch_of_triple() { case $1 in x86_64-*) echo amd64 ;; aarch64-*) echo arm64 ;; esac; }
# target_of BINARY ARCH: the triple release.json lists BINARY under for ARCH (empty if none). Not a
# `while read` pipeline: its status is the last comparison's, which under pipefail ended the script
# silently whenever the wanted arch was not the last listed.
target_of() {
  local tt
  for tt in $(jq -r --arg n "$1" '.binaries[] | select(.name == $n) | .target' "$DIST/release.json"); do
    if [ "$(arch_of_triple "$tt")" = "$2" ]; then
      echo "$tt"
      return 0
    fi
  done
}
machine_of_arch() { case $1 in amd64) echo "Advanced Micro Devices X86-64" ;; arm64) echo AArch64 ;; esac; }

# run_bin TRIPLE BIN ARGS...: runs a built binary for its architecture, in an empty environment
# plus the variables in ENV_ARGS (an array set by the caller), stdout/stderr to $WORK/out, $WORK/err.
run_bin() {
  local triple=$1 bin=$2
  shift 2
  local runner=()
  if [ "$(arch_of_triple "$triple")" = arm64 ] && [ "$(uname -m)" != aarch64 ]; then
    command -v qemu-aarch64-static >/dev/null \
      || die "qemu-aarch64-static is not installed (Debian: apt-get install qemu-user-static; release/tools.sh --qemu)"
    runner=(qemu-aarch64-static)
  fi
  local rc=0
  (cd "$WORK" && env -i HOME="$WORK" "${ENV_ARGS[@]}" "${runner[@]}" "$bin" "$@" >"$WORK/out" 2>"$WORK/err") || rc=$?
  echo "$rc"
}

# --- binaries ------------------------------------------------------------------------------------------
for row in $(jq -r '.binaries[] | "\(.target)/\(.name)"' "$DIST/release.json"); do
  triple=${row%%/*} name=${row#*/} bin=$DIST/bin/$row
  [ -x "$bin" ] || { fail "$row is missing"; continue; }
  arch=$(arch_of_triple "$triple")
  machine=$(readelf -h "$bin" | sed -n 's/^ *Machine: *//p')
  [ "$machine" = "$(machine_of_arch "$arch")" ] || fail "$row is for machine '$machine'"
  readelf -lW "$bin" | grep -q 'INTERP' && fail "$row has a program interpreter (dynamically linked)"
  readelf -dW "$bin" | grep -q '(NEEDED)' && fail "$row needs shared libraries: $(readelf -dW "$bin" | grep NEEDED)"
  sections=$(readelf -SW "$bin")
  grep -qE ' \.symtab | \.debug_' <<<"$sections" && fail "$row is not stripped (has .symtab or .debug_*)"
  if line=$(sed 's/^ *\[ *[0-9]*\]//' <<<"$sections" | awk '$1 == ".dep-v0" { print $4, $5 }') && [ -n "$line" ]; then
    read -r off size <<<"$line"
    root=$(python3 -c '
import json, sys, zlib
data = open(sys.argv[1], "rb").read()
off, size = int(sys.argv[2], 16), int(sys.argv[3], 16)
deps = json.loads(zlib.decompress(data[off:off + size]))
print(*[p["name"] for p in deps["packages"] if p.get("root")])
' "$bin" "$off" "$size")
    case $name in
      kubectl-nodewright) want=nodewright-cli ;;
      *) want=$name ;;
    esac
    [ "$root" = "$want" ] || fail "$row's embedded dependency list has root '$root', not $want"
  else
    fail "$row has no .dep-v0 section (cargo auditable)"
  fi
  ENV_ARGS=()
  rc=$(run_bin "$triple" "$bin" --version)
  { [ "$rc" = 0 ] && grep -qF "$VERSION" "$WORK/out"; } \
    || fail "$row --version: exit $rc, stdout '$(cat "$WORK/out")', stderr '$(cat "$WORK/err")'"
  version_line=$(cat "$WORK/out")
  # A bad environment variable (nodewright-certs: a bad argument) is refused, naming it.
  case $name in
    nodewright-operator) ENV_ARGS=(JOB_STAGE_TIMEOUT=forever); args=(); want_rc=1; want_err=JOB_STAGE_TIMEOUT ;;
    nodewright-webhook) ENV_ARGS=(WEBHOOK_LISTEN=nowhere); args=(); want_rc=2; want_err=nowhere ;;
    kubectl-nodewright) ENV_ARGS=(NODEWRIGHT_MAX_DISRUPTED_NODES=lots); args=(plan); want_rc=2; want_err=NODEWRIGHT_MAX_DISRUPTED_NODES ;;
    nodewright-certs) ENV_ARGS=(); args=(generate --dir "$WORK/certs" --name x --days 0); want_rc=2; want_err=--days ;;
  esac
  rc=$(run_bin "$triple" "$bin" "${args[@]}")
  if [ "$rc" = "$want_rc" ] && grep -qF -- "$want_err" "$WORK/err"; then
    ok "$row: $(readelf -h "$bin" | sed -n 's/^ *Type: *//p' | cut -d' ' -f1) $machine static stripped auditable, '$version_line', ${ENV_ARGS[*]:-${args[*]}} refused (exit $rc)"
  else
    fail "$row with ${ENV_ARGS[*]:-} ${args[*]}: exit $rc (want $want_rc), stderr '$(head -c 600 "$WORK/err")' (want it to name $want_err)"
  fi
done

# --- images ----------------------------------------------------------------------------------------------
blob_path() { echo "$1/blobs/sha256/${2#sha256:}"; }
required_annotations='["org.opencontainers.image.created","org.opencontainers.image.description","org.opencontainers.image.licenses","org.opencontainers.image.revision","org.opencontainers.image.source","org.opencontainers.image.title","org.opencontainers.image.version"]'

# dockerfile_final_stage DOCKERFILE: the instructions after the last FROM, one per line
# (continuations joined, comments dropped).
dockerfile_final_stage() {
  sed -e 's/^[[:space:]]*#.*$//' "$1" | awk '
    { line = cont $0; cont = "" }
    /\\$/ { sub(/\\$/, "", line); cont = line; next }
    line ~ /^[[:space:]]*$/ { next }
    { print line }' | awk '/^FROM / { n = 0; delete out } { out[n++] = $0 } END { for (i = 1; i < n; i++) print out[i] }'
}

# dockerfile_expect DOCKERFILE: what the Dockerfile's final stage says, as JSON.
dockerfile_expect() {
  local stage files=() user="" workdir="/" entry="[]" env=() ports=() labels="{}"
  stage=$(dockerfile_final_stage "$1")
  while IFS= read -r line; do
    set -f
    # shellcheck disable=SC2086
    set -- $line
    set +f
    case $1 in
      COPY)
        shift
        local srcs=() from=false
        for a in "$@"; do case $a in --from=*) from=true ;; --*) ;; *) srcs+=("$a") ;; esac; done
        local dest=${srcs[-1]}
        unset 'srcs[-1]'
        for s in "${srcs[@]}"; do
          if ! $from && [ -d "$REPO/$s" ]; then
            while IFS= read -r f; do files+=("${dest%/}/$f"); done < <(cd "$REPO/$s" && find . -type f | sed 's|^\./||')
          elif [[ $dest == */ ]]; then
            files+=("$dest$(basename "$s")")
          else
            files+=("$dest")
          fi
        done ;;
      USER) user=$2 ;;
      WORKDIR) workdir=$2 ;;
      ENTRYPOINT) entry=${line#ENTRYPOINT } ;;
      ENV) shift; for e in "$@"; do env+=("$e"); done ;;
      EXPOSE) shift; for p in "$@"; do [[ $p == */* ]] || p=$p/tcp; ports+=("$p"); done ;;
      LABEL)
        # key="value" pairs; values may hold spaces.
        labels=$(python3 -c '
import json, shlex, sys
out = {}
for word in shlex.split(sys.argv[1]):
    k, _, v = word.partition("=")
    out[k] = v
print(json.dumps(out))' "${line#LABEL }") ;;
      ARG) ;;
      *) fail "$1 in ${1:-?} is not understood by release/check.sh; teach it or keep the Dockerfile to COPY/ENV/USER/WORKDIR/EXPOSE/LABEL/ENTRYPOINT/ARG" ;;
    esac
  done <<<"$stage"
  jq -n -c --arg user "$user" --arg workdir "$workdir" --argjson entry "$entry" --argjson labels "$labels" \
    --argjson files "$(printf '%s\n' "${files[@]}" | sed 's|^/||' | jq -R . | jq -s 'sort')" \
    --argjson env "$(printf '%s\n' "${env[@]}" | jq -R . | jq -s 'map(select(. != "")) | sort')" \
    --argjson ports "$(printf '%s\n' "${ports[@]}" | jq -R . | jq -s 'map(select(. != "")) | sort')" \
    '{user: $user, workdir: $workdir, entrypoint: $entry, env: $env, ports: $ports, files: $files,
      label_keys: ($labels | keys), static_labels: ($labels | with_entries(select(.value | test("\\$") | not)))}'
}

for name in $(jq -r '.images[].name' "$DIST/release.json"); do
  layout=$DIST/images/$name
  service=${name#nodewright-}
  [ -f "$layout/index.json" ] || { fail "$layout/index.json is missing"; continue; }
  idx=$(jq -r '.manifests[0].digest' "$layout/index.json")
  [ "$(jq -r --arg n "$name" '.images[] | select(.name == $n) | .index' "$DIST/release.json")" = "$idx" ] \
    || fail "$name: release.json's index digest is not the layout's"
  [ "$(sha256sum "$(blob_path "$layout" "$idx")" | cut -d' ' -f1)" = "${idx#sha256:}" ] || fail "$name: index blob digest mismatch"
  index=$(blob_path "$layout" "$idx")
  jq -e '.mediaType == "application/vnd.oci.image.index.v1+json"' "$index" >/dev/null || fail "$name: not an image index"
  jq -e --argjson r "$required_annotations" '(.annotations | keys) as $k | $r - $k == []' "$index" >/dev/null \
    || fail "$name: the index lacks OCI annotations"
  want_platforms=$(jq -r '.binaries[] | select(.name == "nodewright-operator") | .target' "$DIST/release.json" \
    | while read -r t; do arch_of_triple "$t"; done | sort | paste -sd' ')
  got_platforms=$(jq -r '.manifests[].platform.architecture' "$index" | sort | paste -sd' ')
  [ "$want_platforms" = "$got_platforms" ] || fail "$name: index platforms '$got_platforms', want '$want_platforms'"
  expect=$(dockerfile_expect "$service/Dockerfile")
  for m in $(jq -r '.manifests[].digest' "$index"); do
    manifest=$(blob_path "$layout" "$m")
    [ "$(sha256sum "$manifest" | cut -d' ' -f1)" = "${m#sha256:}" ] || fail "$name: manifest blob $m digest mismatch"
    arch=$(jq -r --arg m "$m" '.manifests[] | select(.digest == $m) | .platform.architecture' "$index")
    config=$(blob_path "$layout" "$(jq -r .config.digest "$manifest")")
    layer=$(blob_path "$layout" "$(jq -r '.layers[0].digest' "$manifest")")
    [ "$(jq '.layers | length' "$manifest")" = 1 ] || fail "$name/$arch: expected one layer"
    jq -e --argjson r "$required_annotations" '(.annotations | keys) as $k | $r - $k == []' "$manifest" >/dev/null \
      || fail "$name/$arch: the manifest lacks OCI annotations"
    jq -e --arg a "$arch" --arg v "$VERSION" --arg r "$REVISION" '.architecture == $a and .os == "linux"
      and .config.Labels["org.opencontainers.image.version"] == $v
      and .config.Labels["org.opencontainers.image.revision"] == $r' "$config" >/dev/null \
      || fail "$name/$arch: config architecture or version/revision labels wrong"
    [ "sha256:$(gzip -dc "$layer" | sha256sum | cut -d' ' -f1)" = "$(jq -r '.rootfs.diff_ids[0]' "$config")" ] \
      || fail "$name/$arch: the layer's diff_id does not match the config"
    gzip -dc "$layer" | tar -tvf - >"$WORK/listing"
    layer_files=$(awk '$1 ~ /^-/ { print $6 }' "$WORK/listing" | sort | jq -R . | jq -s -c .)
    awk '$1 ~ /^[-l]/ { print $6 }' "$WORK/listing" | grep -qE '(^|/)(sh|bash|busybox|ash|dash)$' \
      && fail "$name/$arch: the image has a shell"
    awk '$2 != "0/0" { print }' "$WORK/listing" | grep -q . && fail "$name/$arch: files not owned by 0/0: $(awk '$2 != "0/0"' "$WORK/listing")"
    mkdir -p "$WORK/root" && gzip -dc "$layer" | tar -xf - -C "$WORK/root"
    t=$(target_of "$name" "$arch")
    cmp -s "$WORK/root/usr/local/bin/$name" "$DIST/bin/$t/$name" \
      || fail "$name/$arch: /usr/local/bin/$name is not dist/bin/$t/$name"
    grep -q 'BEGIN CERTIFICATE' "$WORK/root/etc/ssl/certs/ca-certificates.crt" 2>/dev/null \
      || fail "$name/$arch: no CA certificates at /etc/ssl/certs/ca-certificates.crt"
    grep -q '^nonroot:x:65532:65532:' "$WORK/root/etc/passwd" || fail "$name/$arch: /etc/passwd lacks nonroot 65532"
    rm -rf "$WORK/root"
    got=$(jq -c --argjson files "$layer_files" '{user: .config.User, workdir: .config.WorkingDir, entrypoint: .config.Entrypoint,
      env: (.config.Env | sort), ports: (.config.ExposedPorts | keys | sort), files: $files,
      label_keys: (.config.Labels | keys), static_labels: .config.Labels}' "$config")
    diff_out=$(jq -n --argjson want "$expect" --argjson got "$got" '
      [ ("user", "workdir", "entrypoint", "env", "ports", "files", "label_keys") as $k
        | select($want[$k] != $got[$k]) | "\($k): Dockerfile \($want[$k] | tojson), image \($got[$k] | tojson)" ]
      + [ $want.static_labels | to_entries[] | select($got.static_labels[.key] != .value)
          | "label \(.key): Dockerfile \(.value | tojson), image \($got.static_labels[.key] | tojson)" ]
      | .[]' -r)
    if [ -n "$diff_out" ]; then
      fail "$service/Dockerfile and the $name/$arch image differ:"$'\n'"$diff_out"
    else
      ok "$name linux/$arch $m: $(jq -r '.layers[0].size' "$manifest") bytes compressed, user $(jq -r .config.User "$config"), no shell, the same image as $service/Dockerfile"
    fi
  done
done

# --- chart -------------------------------------------------------------------------------------------------
chart=$DIST/$(jq -r .chart "$DIST/release.json")
if [ -f "$chart" ]; then
  helm lint --strict "$chart" >"$WORK/lint" 2>&1 || fail "helm lint --strict $chart: $(cat "$WORK/lint")"
  helm show chart "$chart" | grep -qxF "appVersion: $VERSION" || fail "$chart: appVersion is not $VERSION"
  rendered=$(helm template nw "$chart" -n nodewright | awk '$1 == "image:" { gsub(/"/, "", $2); print $2 }' | sort -u)
  for ref in $(jq -r '.images[].reference' "$DIST/release.json"); do
    grep -qxF "$ref" <<<"$rendered" || fail "$chart does not render $ref"
  done
  ok "$chart: helm lint --strict clean, appVersion $VERSION, images $(jq -r '[.images[].reference] | join(", ")' "$DIST/release.json")"
else
  fail "the chart $chart is missing"
fi

# --- CLI archives, krew manifest ----------------------------------------------------------------------------
if [ -d "$DIST/cli" ]; then
  (cd "$DIST/cli" && sha256sum --quiet -c SHA256SUMS) || fail "dist/cli/SHA256SUMS does not match"
  for a in "$DIST"/cli/*.tar.gz; do
    f=$(basename "$a")
    arch=${f%.tar.gz} arch=${arch##*_}
    grep -qF "$(sha256sum "$a" | cut -d' ' -f1)" "$DIST/cli/nodewright.yaml" || fail "the krew manifest lacks $f's sha256"
    grep -qF "/$f" "$DIST/cli/nodewright.yaml" || fail "the krew manifest lacks $f's uri"
    t=$(target_of kubectl-nodewright "$arch")
    tar -xOzf "$a" kubectl-nodewright | cmp -s - "$DIST/bin/$t/kubectl-nodewright" \
      || fail "$f does not hold dist/bin/$t/kubectl-nodewright"
  done
  ok "dist/cli: $(find "$DIST/cli" -name '*.tar.gz' | wc -l) archives, SHA256SUMS and the krew manifest agree"
fi

# --- SBOMs ---------------------------------------------------------------------------------------------------
for row in $(jq -r '.binaries[] | "\(.target)/\(.name)"' "$DIST/release.json"); do
  sbom=$DIST/sbom/${row#*/}.${row%%/*}.cdx.json
  jq -e '.bomFormat == "CycloneDX" and (.components | length) > 10
    and ([.components[] | select(.purl | test("vcs_url") | not) | select(.licenses == null)] == [])' "$sbom" >/dev/null 2>&1 \
    || fail "$sbom is missing, not CycloneDX, or has a crates.io component without a licence"
done
for name in $(jq -r '.images[].name' "$DIST/release.json"); do
  for p in $(jq -r --arg n "$name" '.images[] | select(.name == $n) | .platforms[].platform' "$DIST/release.json"); do
    sbom=$DIST/sbom/$name.image.linux-${p#linux/}.cdx.json
    jq -e '.bomFormat == "CycloneDX" and .metadata.component.type == "container"
      and ([.components[] | select(.name | test("cacert"))] | length) == 1' "$sbom" >/dev/null 2>&1 \
      || fail "$sbom is missing or lacks the container or its CA bundle"
  done
done
ok "SBOMs: $(find "$DIST/sbom" -name '*.cdx.json' | wc -l) CycloneDX documents"

(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || fail "dist/SHA256SUMS does not match"

if [ "$failures" -gt 0 ]; then
  echo "release/check.sh: $failures check(s) failed" >&2
  exit 1
fi
echo "release/check.sh: every check passed ($DIST)" >&2
