#!/usr/bin/env bash
# Builds NodeWright's test images as OCI image layouts with umoci: no container daemon, no
# registry. Each image ends up as one `<file>.tar` (a tar of an OCI layout, which
# `ctr -n k8s.io image import --base-name <name> <file>.tar` accepts; see import.sh) in
#
#   ${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}/images/<key>/
#
# where <key> is a sha256 over the binary, its shared libraries, busybox and this directory.
# Nothing is rebuilt when the key's directory is complete already.
#
# stdout: exactly one line, the last: `export NODEWRIGHT_IMAGES_DIR=<dir>` (progress goes to stderr),
# so `eval "$(tests/images/build.sh)"` works.
#
# The directory holds, besides the tars, `images.json`: for every image its name, tags, tar file,
# entrypoint, user, exposed ports and tar size (the same facts are in each image's config blob).
#
# Images (all linux/amd64, built from this machine's debug binaries). The operator and webhook
# images are not built here: the real node runs the release images (release/build.sh, imported by
# import.sh from $NODEWRIGHT_RELEASE_DIR), so what is tested is what is released.
#   nodewright.test/agent:dev                busybox + nodewright-test-agent (tests/agent), user 0;
#   nodewright.test/shellscript:{1.0.0,1.1.0,2.0.0}
#                                            a package like upstream's shellscript: every mode runs
#                                            shellscript_run.sh <mode>, which sources the configMap
#                                            key <mode>.sh; config.json's package_version = the tag;
#   nodewright.test/pause:dev                busybox + /pause (`-v` prints a version; otherwise
#                                            sleeps until TERM/INT, then exits 0).
#
# Needs: cargo, umoci, busybox (static, /usr/bin/busybox or $BUSYBOX), objcopy, ldd, sha256sum, jq.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
BUSYBOX=${BUSYBOX:-/usr/bin/busybox}
SHELLSCRIPT_TAGS=(1.0.0 1.1.0 2.0.0)

log() { echo "images/build.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# umoci, busybox-static, objcopy (binutils) and jq come from Debian's packages: installed when
# missing and this runs as root with apt-get (a fresh CI machine), else named in the error.
missing=()
for pair in umoci:umoci objcopy:binutils jq:jq; do
    command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
[ -x "$BUSYBOX" ] || missing+=(busybox-static)
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${missing[*]} from Debian's packages"
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}") >&2 \
        || die "installing ${missing[*]} failed"
fi
for tool in cargo umoci objcopy ldd sha256sum jq tar; do
    command -v "$tool" >/dev/null || die "$tool is not installed (Debian: apt-get install umoci binutils jq busybox-static)"
done
[ -x "$BUSYBOX" ] || die "no busybox at $BUSYBOX (apt-get install busybox-static)"
if ldd "$BUSYBOX" >/dev/null 2>&1; then
    die "$BUSYBOX is dynamically linked; the images need a static busybox (busybox-static)"
fi

log "cargo build (debug) of the test agent"
(cd "$REPO" && cargo build -p nodewright-test-agent --bin nodewright-test-agent) >&2
AGENT=$TARGET/debug/nodewright-test-agent
[ -x "$AGENT" ] || die "missing $AGENT"

# Shared libraries of a binary, the dynamic loader included (absolute paths as ldd resolves them).
libs() {
    ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u
}

key=$(
    {
        sha256sum "$AGENT" "$BUSYBOX"
        libs "$AGENT" | xargs -r readlink -f | xargs -r sha256sum
        (cd "$HERE" && find . -type f ! -name '*.md' | LC_ALL=C sort | xargs sha256sum)
        umoci --version
    } | sha256sum | cut -c1-16
)
OUT=$CACHE/images/$key
mkdir -p "$CACHE/images"
# One build at a time: two at once (a matrix run beside tests/run-all.sh) each replaced the other's
# $OUT, and one of them ended without its environment line. The second waits here, then finds
# the images built.
exec 9>"$CACHE/images/.build.lock"
flock 9
if [ -f "$OUT/images.json" ]; then
    log "up to date: $OUT"
    echo "export NODEWRIGHT_IMAGES_DIR=$OUT"
    exit 0
fi

WORK=$(mktemp -d "$CACHE/images/.build-$key.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
log "building into $OUT (work dir $WORK)"
started=$(date +%s)

# A root filesystem tree with busybox and a symlink per applet in /bin (as the busybox image).
busybox_tree() {
    local root=$1
    mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/root" "$root/var/tmp"
    chmod 1777 "$root/tmp" "$root/var/tmp"
    install -m 0755 "$BUSYBOX" "$root/bin/busybox"
    local applet
    for applet in $("$BUSYBOX" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnobody:x:65534:\n' >"$root/etc/group"
}

# Installs a binary (debug info stripped) at its path in root, with its libraries and loader.
install_binary() {
    local bin=$1 root=$2 dest=$3 lib
    mkdir -p "$root$(dirname "$dest")"
    objcopy --strip-debug "$bin" "$root$dest"
    chmod 0755 "$root$dest"
    for lib in $(libs "$bin"); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
}

# umoci_image LAYOUT TAG ROOTFS [umoci config options...]: a one-layer image from ROOTFS.
# unpack + repack, not `umoci insert`: umoci 0.4.7's insert writes layer tars without their end
# (no padding, no end-of-archive blocks, absolute member names), which containerd tolerates but
# GNU tar and stricter tools refuse.
umoci_image() {
    local layout=$1 tag=$2 rootfs=$3
    shift 3
    [ -d "$layout" ] || umoci init --layout "$layout" >&2
    umoci new --image "$layout:$tag" >&2
    local bundle=$WORK/bundle-$(basename "$layout")-$tag
    umoci unpack --image "$layout:$tag" "$bundle" >&2
    cp -a "$rootfs/." "$bundle/rootfs/"
    umoci repack --image "$layout:$tag" "$bundle" >&2
    rm -rf "$bundle"
    umoci config --image "$layout:$tag" --architecture amd64 --os linux \
        --history.created_by "tests/images/build.sh" "$@" >&2
}

# pack LAYOUT NAME FILE: garbage-collects the layout, tars it to OUT/FILE.tar.
pack() {
    local layout=$1 file=$2
    umoci gc --layout "$layout" >&2
    tar -C "$layout" -cf "$WORK/out/$file.tar" oci-layout index.json blobs
}

mkdir -p "$WORK/out"
PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# --- agent: busybox (chroot, sh, ...) + the test agent, as root ----------------------------------
root=$WORK/agent-rootfs
busybox_tree "$root"
install_binary "$AGENT" "$root" /usr/local/bin/nodewright-test-agent
umoci_image "$WORK/agent" dev "$root" \
    --config.entrypoint /usr/local/bin/nodewright-test-agent --config.user 0:0 \
    --config.workingdir / --config.env "$PATH_ENV"
pack "$WORK/agent" agent
log "built nodewright.test/agent:dev"

# --- shellscript package: one layout, a tag per version, package_version = tag ------------------
# The operator pulls <image>:<version> and the agent files flags, logs and history under
# config.json's package_version, so each tag carries its own version (an upgrade from 1.0.0 to
# 2.0.0 then shows PREVIOUS_VERSION=1.0.0 and CURRENT_VERSION=2.0.0, as with real packages).
for tag in "${SHELLSCRIPT_TAGS[@]}"; do
    root=$WORK/shellscript-$tag-rootfs
    busybox_tree "$root"
    mkdir -p "$root/skyhook-package/skyhook_dir"
    install -m 0755 "$HERE/shellscript/shellscript_run.sh" "$root/skyhook-package/skyhook_dir/shellscript_run.sh"
    sed "s/@VERSION@/$tag/" "$HERE/shellscript/config.json.in" >"$root/skyhook-package/config.json"
    jq -e --arg v "$tag" '.package_version == $v' "$root/skyhook-package/config.json" >/dev/null \
        || die "shellscript config.json for $tag is wrong"
    umoci_image "$WORK/shellscript" "$tag" "$root" \
        --config.cmd sh --config.workingdir / --config.env "$PATH_ENV"
done
pack "$WORK/shellscript" shellscript
log "built nodewright.test/shellscript:{${SHELLSCRIPT_TAGS[*]}}"

# --- pause ----------------------------------------------------------------------------------------
root=$WORK/pause-rootfs
busybox_tree "$root"
install -m 0755 "$HERE/pause/pause" "$root/pause"
umoci_image "$WORK/pause" dev "$root" \
    --config.entrypoint /pause --config.user 65535:65535 --config.workingdir / \
    --config.env "$PATH_ENV" --config.stopsignal SIGTERM
pack "$WORK/pause" pause
log "built nodewright.test/pause:dev"

# --- images.json: what each image is, read back from its config blob -----------------------------
describe() {
    local name=$1 file=$2
    local layout=$WORK/$file
    local tags manifest config
    tags=$(jq -c '[.manifests[].annotations["org.opencontainers.image.ref.name"]]' "$layout/index.json")
    manifest=$(jq -r '.manifests[0].digest | sub(":"; "/")' "$layout/index.json")
    config=$(jq -r '.config.digest | sub(":"; "/")' "$layout/blobs/$manifest")
    jq -c --arg name "$name" --arg tar "$file.tar" --argjson tags "$tags" \
        --argjson size "$(stat -c %s "$WORK/out/$file.tar")" \
        '{name: $name, tags: $tags, tar: $tar, size: $size, entrypoint: .config.Entrypoint,
          cmd: .config.Cmd, user: .config.User,
          exposed_ports: ((.config.ExposedPorts // {}) | keys)}' "$layout/blobs/$config"
}
{
    describe nodewright.test/agent agent
    describe nodewright.test/shellscript shellscript
    describe nodewright.test/pause pause
} | jq -s . >"$WORK/out/images.json"

rm -rf "$OUT"
mv "$WORK/out" "$OUT"
log "done in $(($(date +%s) - started))s:"
(cd "$OUT" && ls -lh -- *.tar | awk '{print "  " $5 "\t" $9}') >&2
echo "export NODEWRIGHT_IMAGES_DIR=$OUT"
