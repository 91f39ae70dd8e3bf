#!/usr/bin/env bash
# Builds the two clients the Helm chart's test runs against the test control plane (docs/kubernetes.md):
# `helm` (helm.sh/helm/v4) and `kubectl` (k8s.io/kubernetes/cmd/kubectl, at the Kubernetes release
# scripts/k8s-control-plane.sh pins, so client and API server are one version), each from the Go
# module proxy.
#
# Output: a directory keyed by the pins and the Go version, beside the control plane's in the same
# cache root (.cache/k8s-control-plane/tools-<key>/bin/); a second run with the same pins only prints
# it. The last line printed is that directory. A build cut short is redone (the directory counts only
# with its `complete` marker). Compiles at `nice -n 10` (the machine's two cores are shared).
set -euo pipefail
cd "$(dirname "$0")/.."

# Helm 4 is the current major; v4.3.2 is built on k8s.io/client-go v0.37.2 in its own module, so its
# Kubernetes libraries do not have to agree with the control plane's.
HELM=v4.3.2
# One pin for the Kubernetes release, read from the control plane's script.
KUBERNETES="$(sed -n 's/^KUBERNETES=//p' scripts/k8s-control-plane.sh)"

# shellcheck source=scripts/go-cache.sh
. scripts/go-cache.sh
go_cache_begin k8s-tools "tools-helm-${HELM}_kubectl-${KUBERNETES}" 'helm and kubectl'
mkdir -p "$DIR/src/helm" "$DIR/src/kubectl"
started=$SECONDS

say "building helm $HELM"
printf 'module atelier.local/helm\n\ngo 1.26.0\n\nrequire helm.sh/helm/v4 %s\n' "$HELM" >"$DIR/src/helm/go.mod"
# Helm prints its version from this variable (`helm version`); without it, it says "main".
(cd "$DIR/src/helm" && "${BUILD[@]}" -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM" \
  -o "$DIR/bin/helm" helm.sh/helm/v4/cmd/helm)

# As in k8s-control-plane.sh: k8s.io/kubernetes replaces its staging modules by ./staging/..., so
# this module replaces each by the published one of the same number (v1.36.3 -> v0.36.3).
say "building kubectl $KUBERNETES"
staging_version="v0.${KUBERNETES#v1.}"
{
  printf 'module atelier.local/kubectl\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n' "$KUBERNETES"
  echo "replace ("
  (cd "$DIR/src/kubectl" && go mod download -json "k8s.io/kubernetes@$KUBERNETES" >/dev/null)
  sed -n 's#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' \
    "$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBERNETES.mod" |
    while read -r m; do echo "	$m => $m $staging_version"; done
  echo ")"
} >"$DIR/src/kubectl/go.mod.new"
mv "$DIR/src/kubectl/go.mod.new" "$DIR/src/kubectl/go.mod"
version_flags="-s -w -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES -X k8s.io/component-base/version.gitVersion=$KUBERNETES -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$KUBERNETES" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
(cd "$DIR/src/kubectl" && "${BUILD[@]}" -ldflags "$version_flags" -o "$DIR/bin/kubectl" k8s.io/kubernetes/cmd/kubectl)

say "built in $((SECONDS - started)) s into $DIR"
touch "$DIR/complete"
echo "$DIR"
