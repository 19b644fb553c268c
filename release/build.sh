#!/usr/bin/env bash
# Builds a NodeWright release from this checkout, without a container daemon, into dist/:
#
#   release/build.sh [VERSION] [--images-only] [--arch amd64|arm64|all]
#
#   dist/bin/<triple>/          nodewright-operator, nodewright-webhook, nodewright-certs,
#                               kubectl-nodewright: release profile, static (musl), stripped, with
#                               their dependency list embedded by cargo-auditable (.dep-v0);
#                               triples x86_64-unknown-linux-musl and aarch64-unknown-linux-musl
#   dist/images/<name>/         OCI image layout of nodewright-operator / nodewright-webhook: one
#                               image index (linux/amd64 + linux/arm64) tagged VERSION; FROM
#                               scratch-like (the static binary, CA certificates, passwd/group with
#                               nonroot 65532), user 65532:65532, no shell, OCI annotations
#   dist/images/<name>.oci.tar  the same layout as one tar (`ctr images import`, `skopeo copy
#                               oci-archive:...`)
#   dist/chart/nodewright-VERSION.tgz
#                               the chart with appVersion, image tags and digests of these images
#                               (helm lint clean)
#   dist/cli/                   kubectl-nodewright_vVERSION_linux_{amd64,arm64}.tar.gz, their
#                               SHA256SUMS, and nodewright.yaml, the krew plugin manifest
#   dist/sbom/                  CycloneDX 1.5 JSON per binary (from its embedded dependency list,
#                               licences and checksums from Cargo.lock / cargo metadata) and per
#                               image and platform
#   dist/release.json           version, revision, digests and sizes of everything above
#   dist/SHA256SUMS             every file above
#
# VERSION defaults to the workspace version (Cargo.toml) and must equal it (a leading `v` is
# allowed): the binaries' --version and the images' tag are the same number. Timestamps are the
# commit's time (SOURCE_DATE_EPOCH), so two builds of one commit give identical image digests.
#
# --images-only  the operator and webhook binaries, images, SBOMs and the chart only (what the
#                real-node suite installs; CI builds this with --arch amd64)
# --arch         the platforms to build (default all: amd64 and arm64)
#
# Tools (zig, cargo-zigbuild, cargo-auditable, helm, jq, readelf) come from release/tools.sh,
# which installs them from the registries into ~/.cache/nodewright/tools. Licences, bans and
# sources are checked with cargo-deny (tests/supply-chain/deny.sh) unless --images-only.
# After the build, release/check.sh verifies every artifact (and runs the arm64 binaries under
# qemu-user-static).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

log() { echo "release/build.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

version_arg=
images_only=false
arches=(amd64 arm64)
while [ $# -gt 0 ]; do
  case $1 in
    --images-only) images_only=true; shift ;;
    --arch)
      case ${2:-} in
        amd64|arm64) arches=("$2") ;;
        all) arches=(amd64 arm64) ;;
        *) die "--arch takes amd64, arm64 or all, not '${2:-}'" ;;
      esac
      shift 2 ;;
    -h|--help) sed -n '2,38p' "$0"; exit 0 ;;
    -*) die "unknown option $1 (release/build.sh [VERSION] [--images-only] [--arch amd64|arm64|all])" ;;
    *) [ -z "$version_arg" ] || die "one VERSION only"; version_arg=$1; shift ;;
  esac
done

started=$SECONDS
step() { log "[$((SECONDS - started))s] $*"; }

qemu=()
for a in "${arches[@]}"; do [ "$a" = arm64 ] && [ "$(uname -m)" != aarch64 ] && qemu=(--qemu); done
eval "$("$REPO/release/tools.sh" "${qemu[@]}")"
for tool in cargo zig cargo-zigbuild cargo-auditable helm jq readelf gzip tar sha256sum python3 git; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH"
done

# --- what is built ---------------------------------------------------------------------------------
workspace_version=$(cargo metadata --format-version 1 --no-deps --locked \
  | jq -r '.packages[] | select(.name == "nodewright-operator") | .version')
VERSION=${version_arg#v}
VERSION=${VERSION:-$workspace_version}
[ "$VERSION" = "$workspace_version" ] \
  || die "VERSION $VERSION is not the workspace version $workspace_version: set [workspace.package] version in Cargo.toml (and the chart's version) first"
REVISION=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  REVISION=$REVISION-dirty
  log "warning: the work tree has uncommitted changes; revision recorded as $REVISION"
fi
# The commit's time stamps every file, config and SBOM. Not exported: cc-rs build scripts (ring)
# watch SOURCE_DATE_EPOCH, and a new commit would rebuild every crate above them.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
# [workspace.package] repository (not every member inherits it).
SOURCE_URL=$(awk '/^\[/ { section = $0 } section == "[workspace.package]" && $1 == "repository" { gsub(/"/, "", $3); print $3 }' Cargo.toml)
[ -n "$SOURCE_URL" ] || die "no repository in Cargo.toml's [workspace.package]"
LICENSE=$(cargo metadata --format-version 1 --no-deps --locked \
  | jq -r '.packages[] | select(.name == "nodewright-operator") | .license')
REGISTRY=${NODEWRIGHT_RELEASE_REGISTRY:-ghcr.io/nodewright}
RELEASE_URL=${NODEWRIGHT_RELEASE_URL:-$SOURCE_URL/releases/download/v$VERSION}
DIST=${NODEWRIGHT_DIST:-$REPO/dist}
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
CACHE=${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}

triple() { case $1 in amd64) echo x86_64-unknown-linux-musl ;; arm64) echo aarch64-unknown-linux-musl ;; esac; }

if $images_only; then
  packages=(nodewright-operator nodewright-webhook)
  binaries=(nodewright-operator nodewright-webhook)
else
  packages=(nodewright-operator nodewright-webhook nodewright-certs nodewright-cli)
  binaries=(nodewright-operator nodewright-webhook nodewright-certs kubectl-nodewright)
fi

rm -rf "$DIST"
mkdir -p "$DIST"/{bin,images,chart,sbom}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nodewright-release.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# --- licences ----------------------------------------------------------------------------------------
if ! $images_only; then
  step "cargo deny: licences, banned crates, sources (deny.toml)"
  tests/supply-chain/deny.sh
fi

# --- binaries ----------------------------------------------------------------------------------------
# Paths are remapped so that nothing of this machine's layout ends up in a binary: the same commit
# builds the same bytes in another checkout, home or target directory.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustflags="--remap-path-prefix=$REPO=/nodewright --remap-path-prefix=$cargo_home=/cargo --remap-path-prefix=$TARGET=/target"
for arch in "${arches[@]}"; do
  t=$(triple "$arch")
  step "cargo auditable zigbuild --release --target $t (${binaries[*]})"
  # One cargo invocation per binary: cargo unifies the features of the packages built together,
  # so building the operator next to the CLI would give other operator bytes than building it
  # alone (as --images-only does). Built alone, each binary is the same in every mode.
  for i in "${!binaries[@]}"; do
    env -u SOURCE_DATE_EPOCH RUSTFLAGS="$rustflags" cargo auditable zigbuild --release --locked --target "$t" \
      -p "${packages[$i]}" --bin "${binaries[$i]}" >&2 \
      || die "the release build of ${binaries[$i]} for $t failed"
  done
  mkdir -p "$DIST/bin/$t"
  for b in "${binaries[@]}"; do
    install -m 0755 "$TARGET/$t/release/$b" "$DIST/bin/$t/$b"
  done
done

# --- SBOMs -------------------------------------------------------------------------------------------
# Per binary: its components are exactly the packages cargo-auditable embedded in it (.dep-v0,
# zlib-compressed JSON), with licence and source from `cargo metadata` and the checksum from
# Cargo.lock.
cargo metadata --format-version 1 --locked \
  | jq -c '[.packages[] | {key: "\(.name)@\(.version)", value: {license, repository, source}}] | from_entries' \
  >"$WORK/licences.json"
awk '
  /^\[\[package\]\]/ { if (name != "") print name "\t" version "\t" sum; name = ""; version = ""; sum = "" }
  /^name = /     { gsub(/"/, "", $3); name = $3 }
  /^version = /  { gsub(/"/, "", $3); version = $3 }
  /^checksum = / { gsub(/"/, "", $3); sum = $3 }
  END { if (name != "") print name "\t" version "\t" sum }
' Cargo.lock | jq -R -c 'split("\t") | select(.[2] != "") | {key: "\(.[0])@\(.[1])", value: .[2]}' \
  | jq -s -c from_entries >"$WORK/checksums.json"

# audit_json BINARY: the decompressed .dep-v0 section (readelf reads any ELF machine).
audit_json() {
  local bin=$1 line off size
  line=$(readelf -SW "$bin" | sed 's/^ *\[ *[0-9]*\]//' | awk '$1 == ".dep-v0" { print $4, $5 }')
  [ -n "$line" ] || die "$bin has no .dep-v0 section (not built with cargo auditable)"
  read -r off size <<<"$line"
  python3 -c '
import sys, zlib
data = open(sys.argv[1], "rb").read()
off, size = int(sys.argv[2], 16), int(sys.argv[3], 16)
sys.stdout.write(zlib.decompress(data[off:off + size]).decode())
' "$bin" "$off" "$size"
}

# cyclonedx NAME VERSION TYPE PURL AUDIT_JSON [EXTRA_COMPONENTS_JSON]: a CycloneDX 1.5 document.
cyclonedx() {
  local name=$1 version=$2 type=$3 purl=$4 audit=$5 extra=${6:-[]}
  jq -n --arg name "$name" --arg version "$version" --arg type "$type" --arg purl "$purl" \
    --arg created "$CREATED" --arg revision "$REVISION" --arg source "$SOURCE_URL" \
    --argjson extra "$extra" \
    --slurpfile audit "$audit" --slurpfile lic "$WORK/licences.json" --slurpfile sums "$WORK/checksums.json" '
    ($audit[0].packages) as $pkgs
    | def ref($p): if $p.source == "crates.io" then "pkg:cargo/\($p.name)@\($p.version)"
                   else "pkg:cargo/\($p.name)@\($p.version)?vcs_url=\($source)" end;
    {
      bomFormat: "CycloneDX", specVersion: "1.5", version: 1,
      metadata: {
        timestamp: $created,
        tools: {components: [{type: "application", name: "release/build.sh (cargo-auditable .dep-v0, Cargo.lock)"}]},
        component: {type: $type, "bom-ref": $purl, name: $name, version: $version, purl: $purl,
                    properties: [{name: "vcs:revision", value: $revision}]}
      },
      components: ([$pkgs[] | . as $p | ($lic[0]["\($p.name)@\($p.version)"] // {}) as $m | {
          type: "library", "bom-ref": ref($p), name: $p.name, version: $p.version, purl: ref($p),
          scope: (if $p.kind == "build" then "excluded" else "required" end)
        }
        + (if $m.license then {licenses: [{expression: $m.license}]} else {} end)
        + (if $sums[0]["\($p.name)@\($p.version)"] then
             {hashes: [{alg: "SHA-256", content: $sums[0]["\($p.name)@\($p.version)"]}]} else {} end)
        + (if $m.repository then {externalReferences: [{type: "vcs", url: $m.repository}]} else {} end)
      ] + $extra | sort_by(."bom-ref")),
      dependencies: [$pkgs[] | {ref: ref(.), dependsOn: [(.dependencies // [])[] as $i | ref($pkgs[$i])] | sort}]
        | sort_by(.ref)
    }'
}

for arch in "${arches[@]}"; do
  t=$(triple "$arch")
  for b in "${binaries[@]}"; do
    audit_json "$DIST/bin/$t/$b" >"$WORK/audit-$t-$b.json"
    cyclonedx "$b" "$VERSION" application "pkg:generic/$b@$VERSION?arch=$arch" "$WORK/audit-$t-$b.json" \
      >"$DIST/sbom/$b.$t.cdx.json"
  done
done

# --- images ------------------------------------------------------------------------------------------
# CA certificates: Mozilla's bundle as the certifi wheel on PyPI carries it, pinned by version and
# hash (the same bytes on every machine, unlike the build host's /etc/ssl).
CERTIFI_VERSION=2026.10.19.post1
CERTIFI_SHA256=1324c476b4811eff41a8bc2122cd0bbd4d9c7234c725446d99ab1612b3a7fdd2
certifi_dir=$CACHE/tools/certifi-$CERTIFI_VERSION
if [ ! -f "$certifi_dir/cacert.pem" ]; then
  step "certifi $CERTIFI_VERSION from PyPI (the CA bundle)"
  rm -rf "$certifi_dir.tmp" && mkdir -p "$certifi_dir.tmp"
  printf 'certifi==%s --hash=sha256:%s\n' "$CERTIFI_VERSION" "$CERTIFI_SHA256" >"$certifi_dir.tmp/requirements.txt"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --require-hashes \
    -r "$certifi_dir.tmp/requirements.txt" -d "$certifi_dir.tmp" >&2 || die "pip download certifi failed"
  python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("certifi/cacert.pem"))' \
    "$certifi_dir.tmp/certifi-$CERTIFI_VERSION-py3-none-any.whl" >"$certifi_dir.tmp/cacert.pem"
  rm -rf "$certifi_dir" && mv "$certifi_dir.tmp" "$certifi_dir"
fi
CACERT=$certifi_dir/cacert.pem
grep -q 'BEGIN CERTIFICATE' "$CACERT" || die "$CACERT holds no certificate"

# Deterministic tar: sorted names, the commit's mtime, root-owned numeric ids, no atime/ctime.
det_tar() {
  tar --sort=name --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner "$@"
}
# blob LAYOUT FILE: moves FILE into LAYOUT's blobs, prints its digest.
blob() {
  local layout=$1 file=$2 sum
  sum=$(sha256sum "$file" | cut -d' ' -f1)
  mkdir -p "$layout/blobs/sha256"
  mv "$file" "$layout/blobs/sha256/$sum"
  echo "sha256:$sum"
}
size_of() { stat -c %s "$1/blobs/sha256/${2#sha256:}"; }

# The annotations of every manifest, index and config (as labels).
annotations() {
  local name=$1 description=$2
  jq -n -c --arg v "$VERSION" --arg r "$REVISION" --arg s "$SOURCE_URL" --arg l "$LICENSE" \
    --arg c "$CREATED" --arg t "$name" --arg d "$description" '{
      "org.opencontainers.image.created": $c,
      "org.opencontainers.image.description": $d,
      "org.opencontainers.image.licenses": $l,
      "org.opencontainers.image.revision": $r,
      "org.opencontainers.image.source": $s,
      "org.opencontainers.image.title": $t,
      "org.opencontainers.image.version": $v
    }'
}

# image_for NAME ARCH LAYOUT ENTRYPOINT PORTS...: one platform's image into LAYOUT; prints the
# manifest descriptor (JSON). Mirrors <service>/Dockerfile's final stage (release/check.sh
# compares the two).
image_for() {
  local name=$1 arch=$2 layout=$3 description=$4
  shift 4
  local t root variant=null
  t=$(triple "$arch")
  [ "$arch" = arm64 ] && variant='"v8"'
  root=$WORK/rootfs-$name-$arch
  mkdir -p "$root/etc/ssl/certs" "$root/usr/local/bin"
  install -m 0644 release/rootfs/etc/passwd release/rootfs/etc/group release/rootfs/etc/nsswitch.conf "$root/etc/"
  install -m 0644 "$CACERT" "$root/etc/ssl/certs/ca-certificates.crt"
  install -m 0755 "$DIST/bin/$t/$name" "$root/usr/local/bin/$name"
  find "$root" -type d -exec chmod 0755 {} +
  det_tar -C "$root" -cf "$WORK/layer.tar" etc usr
  local diff_id layer config manifest ann ports=()
  diff_id=sha256:$(sha256sum "$WORK/layer.tar" | cut -d' ' -f1)
  gzip -n -9 "$WORK/layer.tar"
  layer=$(blob "$layout" "$WORK/layer.tar.gz")
  ann=$(annotations "$name" "$description")
  for p in "$@"; do ports+=("$p/tcp"); done
  jq -n -c --arg created "$CREATED" --arg arch "$arch" --argjson variant "$variant" --arg diff "$diff_id" \
    --arg entry "/usr/local/bin/$name" --argjson labels "$ann" \
    --argjson ports "$(printf '%s\n' "${ports[@]}" | jq -R . | jq -s 'map({key: ., value: {}}) | from_entries')" '{
      created: $created, architecture: $arch, os: "linux",
      config: {
        User: "65532:65532", ExposedPorts: $ports,
        Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        Entrypoint: [$entry], WorkingDir: "/", Labels: $labels
      },
      rootfs: {type: "layers", diff_ids: [$diff]},
      history: [{created: $created, created_by: "release/build.sh: static binary, CA certificates, passwd/group (nonroot 65532)"}]
    } + (if $variant then {variant: $variant} else {} end)' >"$WORK/config.json"
  config=$(blob "$layout" "$WORK/config.json")
  jq -n -c --arg config "$config" --argjson csize "$(size_of "$layout" "$config")" \
    --arg layer "$layer" --argjson lsize "$(size_of "$layout" "$layer")" --argjson ann "$ann" '{
      schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $csize},
      layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $layer, size: $lsize}],
      annotations: $ann
    }' >"$WORK/manifest.json"
  manifest=$(blob "$layout" "$WORK/manifest.json")
  rm -rf "$root"
  jq -n -c --arg d "$manifest" --argjson s "$(size_of "$layout" "$manifest")" --arg arch "$arch" \
    --argjson variant "$variant" --argjson layer "$(size_of "$layout" "$layer")" '{
      mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $d, size: $s,
      platform: ({architecture: $arch, os: "linux"} + (if $variant then {variant: $variant} else {} end))
    }'
}

# image NAME DESCRIPTION PORTS...: the multi-arch index and its layout (and tar) under dist/images.
image() {
  local name=$1 description=$2
  shift 2
  local layout=$DIST/images/$name descriptors=() arch index ann
  step "image $REGISTRY/$name:$VERSION (${arches[*]})"
  mkdir -p "$layout"
  for arch in "${arches[@]}"; do
    descriptors+=("$(image_for "$name" "$arch" "$layout" "$description" "$@")")
  done
  ann=$(annotations "$name" "$description")
  printf '%s\n' "${descriptors[@]}" | jq -s -c --argjson ann "$ann" '{
      schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: ., annotations: $ann
    }' >"$WORK/index.json"
  index=$(blob "$layout" "$WORK/index.json")
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  jq -n -c --arg d "$index" --argjson s "$(size_of "$layout" "$index")" --arg v "$VERSION" \
    --arg n "$REGISTRY/$name:$VERSION" '{
      schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [{mediaType: "application/vnd.oci.image.index.v1+json", digest: $d, size: $s,
                   annotations: {"org.opencontainers.image.ref.name": $v, "io.containerd.image.name": $n}}]
    }' >"$layout/index.json"
  find "$layout" -type d -exec chmod 0755 {} + && find "$layout" -type f -exec chmod 0644 {} +
  det_tar -C "$layout" -cf "$DIST/images/$name.oci.tar" oci-layout index.json blobs
  # The image SBOM per platform: the binary's components plus the CA bundle.
  for arch in "${arches[@]}"; do
    local t manifest_digest
    t=$(triple "$arch")
    manifest_digest=$(jq -r --arg a "$arch" '.manifests[] | select(.platform.architecture == $a) | .digest' \
      "$layout/blobs/sha256/${index#sha256:}")
    cyclonedx "$REGISTRY/$name" "$VERSION" container \
      "pkg:oci/$name@${manifest_digest/:/%3A}?repository_url=$REGISTRY/$name&arch=$arch&tag=$VERSION" \
      "$WORK/audit-$t-$name.json" \
      "$(jq -n -c --arg v "$CERTIFI_VERSION" --arg h "$CERTIFI_SHA256" --arg b "$name" --arg a "$arch" '[
        {type: "data", "bom-ref": "pkg:pypi/certifi@\($v)#cacert.pem", name: "certifi cacert.pem (Mozilla CA bundle) at /etc/ssl/certs/ca-certificates.crt",
         version: $v, purl: "pkg:pypi/certifi@\($v)", licenses: [{expression: "MPL-2.0"}],
         hashes: [{alg: "SHA-256", content: $h}]},
        {type: "application", "bom-ref": "pkg:generic/\($b)@binary?arch=\($a)", name: "/usr/local/bin/\($b)",
         version: "see sbom/\($b).<triple>.cdx.json"}]')" \
      >"$DIST/sbom/$name.image.linux-$arch.cdx.json"
  done
  log "  index $index"
}
image nodewright-operator "NodeWright operator: runs host package stages as Jobs on the selected nodes" 8080 8081
image nodewright-webhook "NodeWright admission webhook: defaults and validation of NodeWright and DeploymentPolicy" 9443 9090

index_digest() { jq -r '.manifests[0].digest' "$DIST/images/$1/index.json"; }
OPERATOR_DIGEST=$(index_digest nodewright-operator)
WEBHOOK_DIGEST=$(index_digest nodewright-webhook)

# --- chart -------------------------------------------------------------------------------------------
step "helm package: appVersion $VERSION, image tags and digests"
chart=$WORK/chart/nodewright
mkdir -p "$WORK/chart" && cp -a chart "$chart"
sed -i -e "s/^version: .*/version: $VERSION/" -e "s/^appVersion: .*/appVersion: \"$VERSION\"/" "$chart/Chart.yaml"
# Only operator.image and webhook.image: their tag and digest lines, found by section.
awk -v v="$VERSION" -v op="$OPERATOR_DIGEST" -v wh="$WEBHOOK_DIGEST" '
  /^[a-zA-Z]/ { top = $1; image = 0 }
  /^  image:/ { image = (top == "operator:" || top == "webhook:") }
  /^  [a-zA-Z]/ && !/^  image:/ { image = 0 }
  image && /^    tag: ""/ { sub(/""/, "\"" v "\""); tags++ }
  image && /^    digest: ""/ { sub(/""/, "\"" (top == "operator:" ? op : wh) "\""); digests++ }
  { print }
  END { if (tags != 2 || digests != 2) { print "expected 2 tag and 2 digest lines, found " tags "/" digests > "/dev/stderr"; exit 1 } }
' chart/values.yaml >"$chart/values.yaml" || die "filling the chart's image tags and digests failed"
helm lint --strict "$chart" >&2 || die "helm lint failed"
# helm package writes each file's mtime into the archive: the commit's time, not the checkout's or
# this build's, so two builds of one commit give the same chart archive (and dist/SHA256SUMS).
find "$chart" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
helm package "$chart" -d "$DIST/chart" >&2 || die "helm package failed"
CHART=$DIST/chart/nodewright-$VERSION.tgz
rendered=$(helm template nw "$CHART" -n nodewright | awk '$1 == "image:" { gsub(/"/, "", $2); print $2 }' | sort -u)
for want in "$REGISTRY/nodewright-operator:$VERSION@$OPERATOR_DIGEST" "$REGISTRY/nodewright-webhook:$VERSION@$WEBHOOK_DIGEST"; do
  grep -qxF "$want" <<<"$rendered" || die "the packaged chart does not render image $want (it renders: $rendered)"
done

# --- CLI archives and krew manifest ---------------------------------------------------------------------
if ! $images_only; then
  step "kubectl-nodewright archives, SHA256SUMS, krew manifest"
  mkdir -p "$DIST/cli"
  for arch in "${arches[@]}"; do
    t=$(triple "$arch")
    d=$WORK/cli-$arch
    mkdir -p "$d"
    install -m 0755 "$DIST/bin/$t/kubectl-nodewright" "$d/kubectl-nodewright"
    det_tar -C "$d" -cf - kubectl-nodewright | gzip -n -9 >"$DIST/cli/kubectl-nodewright_v${VERSION}_linux_$arch.tar.gz"
  done
  (cd "$DIST/cli" && sha256sum -- *.tar.gz >SHA256SUMS)
  {
    cat <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: nodewright
spec:
  version: v$VERSION
  homepage: $SOURCE_URL
  shortDescription: Preview, explain and steer NodeWright host package rollouts
  description: |
    kubectl nodewright shows what the NodeWright operator will do next (plan), why a node or
    package waits (why), the state of each node's packages, and pauses, resumes and resets
    rollouts. It talks to the cluster with your kubeconfig, like kubectl.
  platforms:
EOF
    for arch in "${arches[@]}"; do
      f=kubectl-nodewright_v${VERSION}_linux_$arch.tar.gz
      cat <<EOF
  - selector:
      matchLabels:
        os: linux
        arch: $arch
    uri: $RELEASE_URL/$f
    sha256: $(sha256sum "$DIST/cli/$f" | cut -d' ' -f1)
    bin: kubectl-nodewright
    files:
    - from: kubectl-nodewright
      to: .
EOF
    done
  } >"$DIST/cli/nodewright.yaml"
fi

# --- the record -------------------------------------------------------------------------------------
step "dist/release.json and dist/SHA256SUMS"
{
  for name in nodewright-operator nodewright-webhook; do
    layout=$DIST/images/$name
    idx=$(index_digest "$name")
    # Per platform: the bytes a pull transfers (manifest, config and compressed layer).
    platforms=$(jq -c '.manifests[] | {a: .platform.architecture, d: .digest, s: .size}' "$layout/blobs/sha256/${idx#sha256:}" \
      | while read -r p; do
          d=$(jq -r .d <<<"$p")
          jq -c --argjson p "$p" '{platform: "linux/\($p.a)", manifest: $p.d,
            compressed_bytes: ($p.s + .config.size + ([.layers[].size] | add))}' "$layout/blobs/sha256/${d#sha256:}"
        done | jq -s -c .)
    jq -n -c --arg name "$name" --arg ref "$REGISTRY/$name:$VERSION@$idx" --arg idx "$idx" \
      --argjson tar "$(stat -c %s "$DIST/images/$name.oci.tar")" --argjson platforms "$platforms" \
      '{kind: "image", name: $name, reference: $ref, index: $idx, tar_bytes: $tar, platforms: $platforms}'
  done
  for arch in "${arches[@]}"; do
    t=$(triple "$arch")
    for b in "${binaries[@]}"; do
      jq -n -c --arg b "$b" --arg t "$t" --arg sum "$(sha256sum "$DIST/bin/$t/$b" | cut -d' ' -f1)" \
        --argjson size "$(stat -c %s "$DIST/bin/$t/$b")" '{kind: "binary", name: $b, target: $t, sha256: $sum, bytes: $size}'
    done
  done
} | jq -s --arg v "$VERSION" --arg r "$REVISION" --arg c "$CREATED" --arg chart "chart/$(basename "$CHART")" \
  --arg registry "$REGISTRY" '{version: $v, revision: $r, created: $c, registry: $registry, chart: $chart,
   images: [.[] | select(.kind == "image") | del(.kind)], binaries: [.[] | select(.kind == "binary") | del(.kind)]}' \
  >"$DIST/release.json"
(cd "$DIST" && find . -type f ! -name SHA256SUMS ! -path './images/*/*' | sed 's|^\./||' | LC_ALL=C sort \
  | xargs sha256sum >SHA256SUMS)

step "release/check.sh"
"$REPO/release/check.sh" "$DIST"

step "done: $DIST"
jq -r '.images[] | "  \(.reference)" , (.platforms[] | "    \(.platform) \(.manifest) \(.compressed_bytes) bytes compressed")' "$DIST/release.json" >&2
jq -r '.binaries[] | "  \(.target)/\(.name) \(.bytes) bytes"' "$DIST/release.json" >&2
echo "export NODEWRIGHT_RELEASE_DIR=$DIST"
