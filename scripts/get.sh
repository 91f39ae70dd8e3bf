#!/bin/sh
# Atelier bootstrap: what `curl -fsSL URL/install.sh | sh -s -- [install flags]` runs.
# A running server serves this very file at GET /install.sh.
#
# It checks the platform, downloads the release tarball from ATELIER_RELEASE_URL (and nothing from
# anywhere else but apt), verifies its SHA-256, unpacks it beside any other release, installs the
# system packages the machine lacks (apt, with sudo when not root), then runs
# `atelier server install` with the arguments it was given.
#
# Environment:
#   ATELIER_RELEASE_URL  required. Where releases are: an http(s) URL or a folder path holding
#                        atelier-VERSION-linux-x64.tar.gz, its .sha256 and LATEST (what
#                        `npm run release` writes); or the URL/path of one tarball itself.
#   ATELIER_VERSION      the version to install (default: the one LATEST names).
#   ATELIER_PREFIX       root of the installed layout (default: none, so /opt/atelier and
#                        /usr/local/bin). Tests use a temporary folder.
#   ATELIER_SKIP_APT=1   do not check or install system packages (tests; machines prepared otherwise).
#   ATELIER_APT_PACKAGES the Debian packages to check and install instead of the server's runtime list
#                        below (space-separated): a machine that wants a subset, or more; the tests
#                        prove the apt path with one package this machine lacks.
#   ATELIER_SKIP_INSTALL=1  unpack and link only; do not run `atelier server install`.
set -eu

say() { printf 'atelier: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
now() { date +%s.%N 2>/dev/null || date +%s; }
phase_start=$(now)
phase() {
  t=$(now)
  say "$(awk -v a="$phase_start" -v b="$t" 'BEGIN { printf "%.2f", b - a }') s  $1"
  phase_start=$t
}

# --- platform -------------------------------------------------------------------------------
[ "$(uname -s)" = Linux ] || die "Atelier runs on Linux; this is $(uname -s)"
case "$(uname -m)" in
  x86_64 | amd64) arch=x64 ;;
  *) die "no Atelier release for $(uname -m) yet: releases are built for linux-x64 (x86_64)" ;;
esac
[ -n "${ATELIER_RELEASE_URL:-}" ] || die 'set ATELIER_RELEASE_URL to where the releases are (an http(s) URL or a folder), e.g. ATELIER_RELEASE_URL=https://example.org/atelier sh get.sh'
command -v tar >/dev/null 2>&1 || die 'tar is missing: install it (apt-get install tar) and run this again'
command -v sha256sum >/dev/null 2>&1 || die 'sha256sum is missing: install coreutils and run this again'

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || die 'run this as root, or install sudo: it installs system packages and a service'
  SUDO=sudo
fi

# --- fetch ----------------------------------------------------------------------------------
# fetch SRC DEST [bar]: an http(s) URL (curl, else wget) or a path (file:// or plain). With `bar`
# (the tarball) and stderr a terminal, curl's (or wget's) own progress bar is shown; otherwise the
# download is silent but for errors (a log gets no redraws).
fetch() {
  curl_progress=-sS wget_progress=-q
  if [ "${3:-}" = bar ] && [ -t 2 ]; then curl_progress=--progress-bar wget_progress='-q --show-progress'; fi
  case "$1" in
    http://* | https://*)
      if command -v curl >/dev/null 2>&1; then curl -fL "$curl_progress" -o "$2" "$1" || die "could not download $1"
      # shellcheck disable=SC2086 # two words on purpose
      elif command -v wget >/dev/null 2>&1; then wget $wget_progress -O "$2" "$1" || die "could not download $1"
      else die "neither curl nor wget is installed: install one, or set ATELIER_RELEASE_URL to a local folder"
      fi ;;
    file://*) cp "${1#file://}" "$2" 2>/dev/null || die "could not read ${1#file://}" ;;
    *) cp "$1" "$2" 2>/dev/null || die "could not read $1" ;;
  esac
}

work=$(mktemp -d "${TMPDIR:-/tmp}/atelier-get.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

src=${ATELIER_RELEASE_URL%/}
case "$src" in
  *.tar.gz)
    tarball_url=$src
    file=${src##*/}
    version=${file#atelier-}
    version=${version%-linux-$arch.tar.gz}
    [ "$version" != "$file" ] || die "$file is not named atelier-VERSION-linux-$arch.tar.gz" ;;
  *)
    version=${ATELIER_VERSION:-}
    if [ -z "$version" ]; then
      fetch "$src/LATEST" "$work/LATEST"
      version=$(head -n 1 "$work/LATEST" | tr -d ' \r\n')
    fi
    file="atelier-$version-linux-$arch.tar.gz"
    tarball_url="$src/$file" ;;
esac
case "$version" in
  '' | *[!0-9A-Za-z.+-]*) die "release version '$version' is not a version" ;;
esac

fetch "$tarball_url" "$work/$file" bar
fetch "$tarball_url.sha256" "$work/$file.sha256"
want=$(awk '{ print $1; exit }' "$work/$file.sha256")
got=$(sha256sum "$work/$file" | awk '{ print $1 }')
[ "$want" = "$got" ] || die "checksum mismatch for $file: expected $want, got $got. The download is damaged or was altered: nothing was installed"
phase "downloaded and verified atelier $version"

# --- unpack (releases are immutable and live side by side) ----------------------------------
prefix=${ATELIER_PREFIX:-}
home="$prefix/opt/atelier"
bindir="$prefix/usr/local/bin"
release="$home/releases/$version"
$SUDO mkdir -p "$home/releases" "$bindir"
if [ -e "$release/RELEASE.json" ]; then
  say "release $version is already unpacked in $release"
else
  tmp="$home/releases/.unpack-$version-$$"
  $SUDO rm -rf "$tmp"
  $SUDO mkdir -p "$tmp"
  $SUDO tar -xzf "$work/$file" -C "$tmp" --no-same-owner || { $SUDO rm -rf "$tmp"; die "could not unpack $file"; }
  [ -e "$tmp/atelier-$version/RELEASE.json" ] || { $SUDO rm -rf "$tmp"; die "$file holds no atelier-$version/RELEASE.json: not an Atelier release"; }
  $SUDO mv "$tmp/atelier-$version" "$release"
  $SUDO rm -rf "$tmp"
fi
if [ -L "$home/current" ]; then
  cur=$(readlink "$home/current")
  if [ "$cur" != "releases/$version" ]; then
    die "Atelier is already installed here (current -> $cur): to move to $version run \`atelier server upgrade --release $tarball_url\`"
  fi
else
  $SUDO ln -sfn "releases/$version" "$home/current.new"
  $SUDO mv -T "$home/current.new" "$home/current"
fi
$SUDO ln -sfn "$home/current/bin/atelier" "$bindir/atelier"
phase "unpacked to $release"

# --- system packages ------------------------------------------------------------------------
# What the server runs (sandboxes, networking, PostgreSQL, simulators): the runtime part of
# scripts/install.sh's list (no compilers: the release is built).
PACKAGES=${ATELIER_APT_PACKAGES:-bubblewrap socat util-linux mount e2fsprogs git perl iproute2 postgresql postgresql-client python3 ca-certificates curl redis-server openjdk-17-jre-headless openssh-client openssh-sftp-server}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
if [ "${ATELIER_SKIP_APT:-}" = 1 ]; then
  say 'ATELIER_SKIP_APT=1: system packages not checked'
elif ! command -v dpkg-query >/dev/null 2>&1; then
  say "not a Debian-like system: install these (or their equivalents) yourself: $PACKAGES"
else
  missing=""
  for p in $PACKAGES; do
    case "$p" in *[!a-z0-9.+-]* | [!a-z0-9]*) die "'$p' is not a Debian package name (ATELIER_APT_PACKAGES?)" ;; esac
    installed "$p" || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    say "installing:$missing"
    case " $missing " in
      *" postgresql "*)
        # Atelier runs its own PostgreSQL cluster: no system one.
        $SUDO mkdir -p /etc/postgresql-common/createcluster.d
        echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/atelier.conf >/dev/null ;;
    esac
    # Nor system services (redis, PostgreSQL): none is started while apt runs.
    ours=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null && $SUDO chmod 755 /usr/sbin/policy-rc.d && ours=1
    fi
    $SUDO mkdir -p /usr/share/man/man1
    # Another apt run (unattended upgrades) may hold the lock: wait for it rather than fail.
    # shellcheck disable=SC2086 # the list is split on purpose
    if ! { $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq &&
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $missing >/dev/null; }; then
      [ -z "$ours" ] || $SUDO rm -f /usr/sbin/policy-rc.d
      die "apt-get could not install:$missing (see above); fix that and run this again"
    fi
    [ -z "$ours" ] || $SUDO rm -f /usr/sbin/policy-rc.d
    for p in $missing; do installed "$p" || die "apt-get ran, yet $p is not installed (dpkg-query -W $p): install it and run this again"; done
    say "installed:$missing"
  fi
fi
phase 'system packages present'

# --- install --------------------------------------------------------------------------------
"$release/bin/atelier" --version >/dev/null || die "the unpacked release does not run: $release/bin/atelier --version failed"
if [ "${ATELIER_SKIP_INSTALL:-}" = 1 ]; then
  say "ATELIER_SKIP_INSTALL=1: unpacked only; run \`atelier server install\` when ready"
  exit 0
fi
if [ -n "$prefix" ]; then set -- --prefix "$prefix" "$@"; fi
$SUDO "$release/bin/atelier" server install "$@"
phase 'atelier server install'
