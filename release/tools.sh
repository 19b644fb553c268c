#!/usr/bin/env bash
# Installs what release/build.sh needs, from the package registries, into a cache outside the
# repository (once per version), and prints `export PATH=...` lines for it on stdout:
#
#   eval "$(release/tools.sh)"
#
#   zig              ziglang from PyPI: the C compiler and linker for the musl targets (ring's C
#                    and assembly are compiled for x86_64 and aarch64 musl by it)
#   cargo-zigbuild   from crates.io: drives cargo with zig as the cross linker
#   cargo-auditable  from crates.io: embeds the dependency list (.dep-v0 section) in each binary
#   rust targets     x86_64-unknown-linux-musl, aarch64-unknown-linux-musl (rustup)
#   Debian packages  jq, binutils (readelf, for the checks) when missing and running as root;
#                    qemu-user-static with --qemu (release/check.sh runs the arm64 binaries with it)
#   helm             the control plane's (tests/controlplane/build.sh) when it is built, else only
#                    helm from the same pinned Go module (tests/controlplane/go/helm)
#
# Usage: release/tools.sh [--qemu]
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}/tools
ZIG_VERSION=0.15.2
ZIGBUILD_VERSION=0.24.1
AUDITABLE_VERSION=0.7.7
TARGETS=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)

log() { echo "release/tools.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

want_qemu=false
case "${1:-}" in
  --qemu) want_qemu=true ;;
  "") ;;
  *) die "usage: release/tools.sh [--qemu]" ;;
esac
mkdir -p "$TOOLS"

# Debian packages, installed when missing (as root with apt-get: a fresh CI machine).
missing=()
for pair in jq:jq readelf:binutils; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if $want_qemu && ! command -v qemu-aarch64-static >/dev/null; then missing+=(qemu-user-static); fi
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${missing[*]} from Debian's packages"
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}") >&2 \
      || die "installing ${missing[*]} failed"
  else
    die "missing ${missing[*]} (Debian: apt-get install ${missing[*]})"
  fi
fi

# Rust targets.
installed=$(rustup target list --installed)
for t in "${TARGETS[@]}"; do
  grep -qxF "$t" <<<"$installed" || { log "rustup target add $t"; rustup target add "$t" >&2; }
done

# zig, from the ziglang wheel on PyPI (the wheel carries zig and its lib/ directory).
zig_dir=$TOOLS/ziglang-$ZIG_VERSION
if [ ! -x "$zig_dir/bin/zig" ]; then
  command -v python3 >/dev/null || die "python3 is needed to install ziglang from PyPI"
  log "installing ziglang $ZIG_VERSION from PyPI"
  rm -rf "$zig_dir.tmp"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$zig_dir.tmp/site" \
    "ziglang==$ZIG_VERSION" >&2 || die "pip install ziglang==$ZIG_VERSION failed"
  mkdir -p "$zig_dir.tmp/bin"
  # A symlink: zig finds its lib/ next to its real path.
  ln -s "$zig_dir/site/ziglang/zig" "$zig_dir.tmp/bin/zig"
  rm -rf "$zig_dir" && mv "$zig_dir.tmp" "$zig_dir"
fi
"$zig_dir/bin/zig" version >/dev/null || die "$zig_dir/bin/zig does not run"

# cargo subcommands from crates.io, with a quick release profile (they are tools, not shipped).
cargo_tool() {
  local crate=$1 version=$2 root=$TOOLS/$1-$2
  if [ ! -x "$root/bin/$crate" ]; then
    log "building $crate $version from crates.io (cached after the first run)"
    local started=$SECONDS
    rm -rf "$root.tmp"
    CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
      CARGO_TARGET_DIR="$TOOLS/.target-$crate" \
      cargo install "$crate" --version "$version" --locked --quiet --root "$root.tmp" >&2 \
      || die "cargo install $crate $version failed"
    rm -rf "$root" "$TOOLS/.target-$crate" && mv "$root.tmp" "$root"
    log "$crate built in $((SECONDS - started))s"
  fi
  echo "$root/bin"
}
zigbuild_bin=$(cargo_tool cargo-zigbuild "$ZIGBUILD_VERSION")
auditable_bin=$(cargo_tool cargo-auditable "$AUDITABLE_VERSION")

# helm: the control plane's when it is built (CI builds it first), else helm alone.
if helm_bin=$("$REPO/tests/controlplane/build.sh" --print-dir 2>/dev/null); then
  :
else
  helm_ver=$(awk '$1 == "helm.sh/helm/v4" { print $2 }' "$REPO/tests/controlplane/go/helm/go.mod" | head -n 1)
  [ -n "$helm_ver" ] || die "no helm.sh/helm/v4 version in tests/controlplane/go/helm/go.mod"
  helm_bin=$TOOLS/helm-$helm_ver/bin
  if [ ! -x "$helm_bin/helm" ]; then
    command -v go >/dev/null || die "go is needed to build helm from its Go module"
    log "building helm $helm_ver from tests/controlplane/go/helm (cached after the first run)"
    (cd "$REPO/tests/controlplane/go/helm" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" go build -trimpath \
      -ldflags "-X helm.sh/helm/v4/internal/version.version=$helm_ver -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
      -o "$helm_bin.tmp/helm" helm.sh/helm/v4/cmd/helm) >&2 || die "building helm failed"
    mkdir -p "$helm_bin" && mv "$helm_bin.tmp/helm" "$helm_bin/helm" && rmdir "$helm_bin.tmp"
  fi
fi

echo "export PATH=$zig_dir/bin:$zigbuild_bin:$auditable_bin:$helm_bin:\$PATH"
