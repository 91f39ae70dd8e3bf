#!/usr/bin/env bash
# Builds the Kubernetes control plane that the Kubernetes driver's tests run against (docs/kubernetes.md):
# kube-apiserver, kube-controller-manager and kube-scheduler (k8s.io/kubernetes), etcd (go.etcd.io/etcd/server/v3), the
# agent-sandbox controller (sigs.k8s.io/agent-sandbox) and kwok (sigs.k8s.io/kwok), each from the Go
# module proxy at the version pinned below, and copies the agent-sandbox CRDs and kwok's pod and node
# stages from the same modules.
#
# Output: a directory keyed by the pins and the Go version (.cache/k8s-control-plane/<key>/, with bin/,
# crds/, stages/); a second run with the same pins only prints it. The last line printed is that
# directory. Safe to run again; a build cut short is redone (the directory counts only with its
# `complete` marker). Compiles at `nice -n 10` (the machine's two cores are shared).
set -euo pipefail
cd "$(dirname "$0")/.."

# The pins. k8s.io/kubernetes and the agent-sandbox controller agree on the API (agent-sandbox v1.0.1
# is built on k8s.io/api v0.36.4); etcd is the 3.6 line that Kubernetes 1.36 is tested with.
KUBERNETES=v1.36.3
ETCD=v3.6.16
AGENT_SANDBOX=v1.0.1
KWOK=v0.8.0

# shellcheck source=scripts/go-cache.sh
. scripts/go-cache.sh
# Go's own output (hundreds of "downloading" lines) goes to LOG; its tail is shown on failure.
go_cache_begin k8s-control-plane "k8s-${KUBERNETES}_etcd-${ETCD}_agent-sandbox-${AGENT_SANDBOX}_kwok-${KWOK}" 'the test control plane'
mkdir -p "$DIR/crds" "$DIR/stages"
started=$SECONDS

# Where the module proxy's copy of a module lives (downloads it).
module_dir() { (cd "$DIR/src" && go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'); }

# A module of our own per component: k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces
# its staging modules with ./staging/...), so its go.mod here replaces each staging module by the
# published one of the same number (v1.36.3 -> v0.36.3); etcd's server module likewise replaces
# its sibling modules by relative paths.
new_module() {
  mkdir -p "$DIR/src/$1"
  printf 'module atelier.local/%s\n\ngo 1.26.0\n' "$1" >"$DIR/src/$1/go.mod"
}

say "building kube-apiserver, kube-controller-manager and kube-scheduler $KUBERNETES"
new_module kubernetes
staging_version="v0.${KUBERNETES#v1.}"
{
  echo "require k8s.io/kubernetes $KUBERNETES"
  echo "replace ("
  (cd "$DIR/src" && go mod download -json "k8s.io/kubernetes@$KUBERNETES" >/dev/null)
  GOMODCACHE="$(go env GOMODCACHE)"
  sed -n 's#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' \
    "$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/$KUBERNETES.mod" |
    while read -r m; do echo "	$m => $m $staging_version"; done
  echo ")"
} >>"$DIR/src/kubernetes/go.mod"
version_flags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$KUBERNETES" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
(cd "$DIR/src/kubernetes" && "${BUILD[@]}" -ldflags "$version_flags" -o "$DIR/bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler)

say "building etcd $ETCD"
new_module etcd
printf 'require go.etcd.io/etcd/server/v3 %s\n' "$ETCD" >>"$DIR/src/etcd/go.mod"
(cd "$DIR/src/etcd" && "${BUILD[@]}" -ldflags "-s -w" -o "$DIR/bin/etcd" go.etcd.io/etcd/server/v3)

say "building the agent-sandbox controller $AGENT_SANDBOX"
new_module agent-sandbox
printf 'require sigs.k8s.io/agent-sandbox %s\n' "$AGENT_SANDBOX" >>"$DIR/src/agent-sandbox/go.mod"
(cd "$DIR/src/agent-sandbox" && "${BUILD[@]}" -ldflags "-s -w" -o "$DIR/bin/agent-sandbox-controller" \
  sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller)
cp "$(module_dir "sigs.k8s.io/agent-sandbox@$AGENT_SANDBOX")"/k8s/crds/*.yaml "$DIR/crds/"

say "building kwok $KWOK"
new_module kwok
printf 'require sigs.k8s.io/kwok %s\n' "$KWOK" >>"$DIR/src/kwok/go.mod"
(cd "$DIR/src/kwok" && "${BUILD[@]}" -ldflags "-s -w" -o "$DIR/bin/kwok" sigs.k8s.io/kwok/cmd/kwok)
kwok_dir="$(module_dir "sigs.k8s.io/kwok@$KWOK")"
cp "$kwok_dir"/kustomize/stage/node/fast/node-initialize.yaml \
  "$kwok_dir"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
  "$kwok_dir"/kustomize/stage/pod/general/pod-*.yaml "$DIR/stages/"
cp "$kwok_dir"/kustomize/crd/bases/*.yaml "$DIR/crds/"
chmod -R u+w "$DIR/crds" "$DIR/stages"

say "built in $((SECONDS - started)) s into $DIR"
touch "$DIR/complete"
echo "$DIR"
