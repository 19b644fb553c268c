#!/usr/bin/env bash
# Pushes what release/build.sh built (dist/ or $NODEWRIGHT_RELEASE_DIR) to an OCI registry:
#
#   release/publish.sh [--insecure] [DIST]
#
#   images  <registry>/nodewright-operator:<version> and <registry>/nodewright-webhook:<version>,
#           each the whole image index (every platform) with `skopeo copy --all
#           --preserve-digests`, so the registry serves exactly the digests the chart pins
#   chart   oci://<registry>/charts/nodewright:<version> (`helm push`)
#
# <registry> is the one the release was built for (release.json's registry: the images are named
# and the chart's values point there); build with NODEWRIGHT_RELEASE_REGISTRY=my.registry/path to
# publish into your own (an air-gapped cluster). Log in first: `skopeo login <host>` and
# `helm registry login <host>` (the release workflow does it with the forge's token).
# --insecure: plain HTTP and no TLS verification (a local test registry only).
# stdout: one line per pushed artifact, `pushed <reference>@<digest>`.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { echo "release/publish.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

insecure=false
dist=
while [ $# -gt 0 ]; do
  case $1 in
    --insecure) insecure=true; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) die "unknown option $1 (release/publish.sh [--insecure] [DIST])" ;;
    *) dist=$1; shift ;;
  esac
done
DIST=$(cd "${dist:-${NODEWRIGHT_RELEASE_DIR:-$REPO/dist}}" && pwd)
[ -f "$DIST/release.json" ] || die "$DIST/release.json is missing (run release/build.sh)"

# skopeo from Debian's packages when missing (as root); helm from release/tools.sh.
if ! command -v skopeo >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing skopeo from Debian's packages"
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends skopeo) >&2 \
      || die "installing skopeo failed"
  else
    die "skopeo is not installed (Debian: apt-get install skopeo)"
  fi
fi
command -v helm >/dev/null || eval "$("$REPO/release/tools.sh")"
command -v jq >/dev/null || die "jq is not installed"

version=$(jq -r .version "$DIST/release.json")
registry=$(jq -r .registry "$DIST/release.json")
tls=()
helm_tls=()
if $insecure; then
  tls=(--dest-tls-verify=false)
  helm_tls=(--plain-http)
fi

for name in $(jq -r '.images[].name' "$DIST/release.json"); do
  want=$(jq -r --arg n "$name" '.images[] | select(.name == $n) | .index' "$DIST/release.json")
  ref=$registry/$name:$version
  log "skopeo copy --all oci:$DIST/images/$name:$version docker://$ref"
  skopeo copy --all --preserve-digests "${tls[@]}" "oci:$DIST/images/$name:$version" "docker://$ref" >&2 \
    || die "pushing $ref failed"
  got=$(skopeo inspect --raw "${tls[@]/--dest-/--}" "docker://$ref" | sha256sum | cut -d' ' -f1)
  [ "sha256:$got" = "$want" ] || die "$ref is served as sha256:$got, not the built $want"
  echo "pushed $ref@$want"
done

chart=$DIST/$(jq -r .chart "$DIST/release.json")
log "helm push $chart oci://$registry/charts"
out=$(helm push "$chart" "oci://$registry/charts" "${helm_tls[@]}" 2>&1) || die "helm push failed: $out"
digest=$(sed -n 's/^Digest: *//p' <<<"$out")
echo "pushed $registry/charts/nodewright:$version@$digest"
