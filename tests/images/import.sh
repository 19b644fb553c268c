#!/usr/bin/env bash
# Imports every test image built by build.sh into a containerd's `k8s.io` namespace (the one the
# CRI plugin, hence kubelet, uses), under its names and tags, and verifies them with
# `ctr images ls`. Idempotent: importing the same tar again re-points the same names.
#
#   tests/images/import.sh --address /run/containerd/containerd.sock [--snapshotter overlayfs]
#
# The images are taken from $NODEWRIGHT_IMAGES_DIR when it is set, else build.sh is run first;
# with $NODEWRIGHT_RELEASE_DIR set (release/build.sh's dist), the operator and webhook release
# images too: the node's platform from each image index, named as the released chart refers to them
# (<registry>/<name>:<version>, and by digest).
# Pods then use them with imagePullPolicy: IfNotPresent or Never.
# stdout: one line per image reference, `imported <name>:<tag>`; progress and errors on stderr.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ADDRESS=
SNAPSHOTTER=${CONTAINERD_SNAPSHOTTER:-overlayfs}
NAMESPACE=k8s.io

log() { echo "images/import.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

while [ $# -gt 0 ]; do
    case $1 in
        --address) ADDRESS=${2:?--address needs a socket path}; shift 2 ;;
        --address=*) ADDRESS=${1#--address=}; shift ;;
        --snapshotter) SNAPSHOTTER=${2:?--snapshotter needs a name}; shift 2 ;;
        --snapshotter=*) SNAPSHOTTER=${1#--snapshotter=}; shift ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (usage: import.sh --address SOCK [--snapshotter NAME])" ;;
    esac
done
[ -n "$ADDRESS" ] || die "--address SOCK is required (the containerd socket)"
[ -S "$ADDRESS" ] || die "$ADDRESS is not a socket (is containerd running?)"
command -v ctr >/dev/null || die "ctr is not installed"
command -v jq >/dev/null || die "jq is not installed"

if [ -z "${NODEWRIGHT_IMAGES_DIR:-}" ]; then
    eval "$("$HERE/build.sh" | tail -n 1)"
fi
DIR=${NODEWRIGHT_IMAGES_DIR:?}
[ -f "$DIR/images.json" ] || die "$DIR/images.json is missing (run tests/images/build.sh)"

ctr_() { ctr -a "$ADDRESS" -n "$NAMESPACE" "$@"; }

count=$(jq length "$DIR/images.json")
for i in $(seq 0 $((count - 1))); do
    name=$(jq -r ".[$i].name" "$DIR/images.json")
    tar=$(jq -r ".[$i].tar" "$DIR/images.json")
    log "importing $name from $DIR/$tar"
    ctr_ images import --base-name "$name" --snapshotter "$SNAPSHOTTER" "$DIR/$tar" >&2 \
        || die "ctr images import of $DIR/$tar failed"
done

release_refs=()
if [ -n "${NODEWRIGHT_RELEASE_DIR:-}" ]; then
    REL=$NODEWRIGHT_RELEASE_DIR
    [ -f "$REL/release.json" ] || die "$REL/release.json is missing (run release/build.sh)"
    registry=$(jq -r .registry "$REL/release.json")
    version=$(jq -r .version "$REL/release.json")
    for name in $(jq -r '.images[].name' "$REL/release.json"); do
        log "importing $registry/$name:$version from $REL/images/$name.oci.tar"
        ctr_ images import --base-name "$registry/$name" --snapshotter "$SNAPSHOTTER" "$REL/images/$name.oci.tar" >&2 \
            || die "ctr images import of $REL/images/$name.oci.tar failed"
        # The chart pins `<name>:<version>@<index digest>`; the CRI plugin looks such a reference up
        # by its digest alone (the tag is dropped), so the image needs a record under that name too
        # (a pull through the CRI creates both; `ctr images import` only the tag).
        index=$(jq -r --arg n "$name" '.images[] | select(.name == $n) | .index' "$REL/release.json")
        [[ "$index" == sha256:* ]] || die "release.json gives no index digest for $name"
        ctr_ images tag --force "$registry/$name:$version" "$registry/$name@$index" >&2 \
            || die "ctr images tag $registry/$name@$index failed"
        release_refs+=("$registry/$name:$version" "$registry/$name@$index")
    done
fi

# Verify: every name:tag is listed, and unpacked for the snapshotter.
listed=$(ctr_ images ls -q)
for ref in "${release_refs[@]}"; do
    grep -qxF "$ref" <<<"$listed" || die "$ref is not listed by ctr images ls after the import"
    ctr_ images check "name==$ref" | grep -q complete || die "$ref is listed but not complete"
    echo "imported $ref"
done
for i in $(seq 0 $((count - 1))); do
    name=$(jq -r ".[$i].name" "$DIR/images.json")
    for tag in $(jq -r ".[$i].tags[]" "$DIR/images.json"); do
        grep -qxF "$name:$tag" <<<"$listed" || die "$name:$tag is not listed by ctr images ls after the import"
        ctr_ images check "name==$name:$tag" | grep -q complete \
            || die "$name:$tag is listed but not complete"
        echo "imported $name:$tag"
    done
done
