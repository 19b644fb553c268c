# The release's linux/amd64 operator and webhook images and its chart, built as release/build.sh
# builds them for a release (static musl binaries, daemonless OCI image indexes, the chart pinned to
# their digests), for the suites that install the release: tests/run-all.sh and tests/matrix.sh
# (the real node). Sourced, not executed.
# shellcheck shell=bash

# release_images [LOG]: builds them into <cache>/release/ci (reused: a later run finds them
# current) and exports NODEWRIGHT_RELEASE_DIR. The build's output goes to stderr, or to the file
# LOG (then its last 40 lines on a failure). A failed build exits.
release_images() {
  local log="${1:-}" release_env lock_fd
  local dist="${NODEWRIGHT_CACHE:-${HOME}/.cache/nodewright}/release/ci"
  # One build at a time writes ${dist}: a matrix run beside tests/run-all.sh (or another matrix
  # run) would otherwise interleave two builds' files there. The second waits, then finds the
  # images current. The lock goes with the descriptor, on return or on exit.
  mkdir -p "$(dirname "${dist}")"
  exec {lock_fd}>"${dist}.lock"
  flock "${lock_fd}"
  # Assigned first: a failed build stops here (`eval "$(...)"` alone would not). Its last line
  # is the environment it built.
  if [[ -n "${log}" ]]; then
    if ! release_env="$(NODEWRIGHT_DIST="${dist}" \
      release/build.sh --images-only --arch amd64 2>>"${log}" | tail -n 1)"; then
      tail -n 40 "${log}" >&2
      echo "error: building the release images failed; see ${log}" >&2
      exit 1
    fi
  elif ! release_env="$(NODEWRIGHT_DIST="${dist}" \
    release/build.sh --images-only --arch amd64 | tail -n 1)"; then
    echo "error: building the release images failed (output above)" >&2
    exit 1
  fi
  exec {lock_fd}>&-
  eval "${release_env}"
  export NODEWRIGHT_RELEASE_DIR
}
