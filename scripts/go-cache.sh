# Sourced by the scripts that build Go programs into the tests' cache (k8s-control-plane.sh,
# k8s-tools.sh), after `set -euo pipefail` and a `cd` to the repository:
#
#   go_cache_begin NAME KEY_PREFIX WHAT
#
# checks the Go toolchain (saying that WHAT needs it), sets KEY (KEY_PREFIX and the Go version),
# ROOT, DIR, LOG and BUILD and Go's environment; prints DIR and exits when a complete build is
# there (its `complete` marker); else starts DIR afresh, sends the build's own output to LOG
# (its tail shown on failure) and defines say() for progress lines on the terminal.
go_cache_begin() {
  local name=$1 prefix=$2 what=$3
  if ! command -v go >/dev/null; then
    echo "$name: needs the Go toolchain (1.26 or newer) on the PATH to build $what" >&2
    exit 1
  fi
  KEY="${prefix}_$(go env GOVERSION)"
  ROOT="${ATELIER_K8S_CACHE:-$PWD/.cache/k8s-control-plane}"
  DIR="$ROOT/$KEY"
  if [ -f "$DIR/complete" ]; then
    echo "$DIR"
    exit 0
  fi
  rm -rf "$DIR"
  mkdir -p "$DIR/bin" "$DIR/src"
  export GOFLAGS="-mod=mod -buildvcs=false"
  export GOTOOLCHAIN=local
  BUILD=(nice -n 10 go build -trimpath)
  GO_CACHE_NAME=$name
  LOG="$ROOT/build-$KEY.log"
  : >"$LOG"
  trap 'rc=$?; if [ $rc -ne 0 ]; then echo "$GO_CACHE_NAME: failed (exit $rc); the end of $LOG:" >&3; tail -n 30 "$LOG" >&3; fi' EXIT
  exec 3>&2 2>>"$LOG"
}

say() { echo "$GO_CACHE_NAME: $*" >&3; }
