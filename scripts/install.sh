#!/usr/bin/env bash
# Installs what Atelier needs on Debian 12 (apt and npm), builds it, and puts `atelier` on the PATH.
# Safe to run again. Uses sudo for apt when not run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# openjdk-17-jre-headless: the wiremock simulator runs the WireMock jar on the system Java.
# openssh-client and openssh-sftp-server: `atelier config-ssh` (ssh-keygen), sftp into workshops; make and g++ build node-pty.
# gcc and libc6-dev build the system-call filter's loader and the sandbox entry (src/sandbox/seccomp-exec.c, sandbox-enter.c; static, no C library).
# awscli: the AWS CLI inside workshops, pointed at their localstack simulator (docs/simulators.md).
# ripgrep: the sandbox-runtime peer (`srt`) of bench 1 refuses to start without `rg`.
# chromium: Debian's browser, driven by playwright-core in the dashboard's end-to-end test (never a downloaded one).
PACKAGES=(bubblewrap socat util-linux mount e2fsprogs git perl iproute2 postgresql postgresql-client python3 ca-certificates curl redis-server openjdk-17-jre-headless openssh-client openssh-sftp-server make g++ gcc libc6-dev python3-pyflakes python3-requests awscli openssl zsh fish chromium ripgrep)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "atelier: installing ${missing[*]}"
  # Atelier runs its own PostgreSQL cluster: do not let the package create and start a system one.
  $SUDO mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/atelier.conf >/dev/null
  # Nor a system redis: simulators start their own redis-server per workshop. While apt runs,
  # packages may not start services (policy-rc.d, removed afterwards if it was ours).
  ours=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null && $SUDO chmod 755 /usr/sbin/policy-rc.d && ours=1
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  # Slim Debian images drop /usr/share/man, where the JRE's postinst links java.1.gz.
  $SUDO mkdir -p /usr/share/man/man1
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ -n "$ours" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
fi

node -e 'const [maj, min] = process.versions.node.split(".").map(Number); if (maj < 20 || (maj === 20 && min < 10)) { console.error("atelier needs Node.js 20.10 or newer, found " + process.version); process.exit(1); }'

npm ci --no-audit --no-fund --loglevel=error
npm run -s build
# The dashboard (web/, its own package and lock file): built into web/dist, served by the server at /.
npm ci --prefix web --no-audit --no-fund --loglevel=error
npm run -s build --prefix web
# The Kubernetes driver's tests run against a real control plane built with Go from pinned modules
# (docs/kubernetes.md), cached in .cache/k8s-control-plane/ and rebuilt only when a pin changes.
# The server itself needs no Go: without it, only that build is left for later.
if command -v go >/dev/null; then
  scripts/k8s-control-plane.sh >/dev/null
  # helm and kubectl, for the Helm chart's test (test/kubernetes.helm.test.ts).
  scripts/k8s-tools.sh >/dev/null
else
  echo "atelier: no Go toolchain: the Kubernetes tests' control plane is not built (install Go 1.26+, then run scripts/k8s-control-plane.sh and scripts/k8s-tools.sh)"
fi

if [ -w /usr/local/bin ] || [ -n "$SUDO" ]; then
  $SUDO ln -sf "$PWD/bin/atelier" /usr/local/bin/atelier
  echo "atelier: installed; \`atelier\` is on your PATH (/usr/local/bin/atelier -> $PWD/bin/atelier)"
else
  echo "atelier: installed; run it as $PWD/bin/atelier"
fi
