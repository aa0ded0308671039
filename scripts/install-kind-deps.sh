#!/usr/bin/env bash
# Install what `goodput kind up` needs from Debian's packages: Podman (kind's provider, run
# rootful with the project's own configuration and storage), netavark and aardvark-dns (the
# cluster network with DNS: workers join the control plane by its container name), plus
# what the node image is assembled with (scripts/install-real-node-deps.sh: containerd for
# the preload, debootstrap for the root file system). Without root (or apt-get) it says so
# and exits 0: the kind lane then skips with the reason.
set -euo pipefail
"$(dirname "$0")/install-real-node-deps.sh"
need=()
command -v podman >/dev/null || need+=(podman)
[ -x /usr/lib/podman/netavark ] || command -v netavark >/dev/null || need+=(netavark)
[ -x /usr/lib/podman/aardvark-dns ] || command -v aardvark-dns >/dev/null || need+=(aardvark-dns)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install-kind-deps: not root or no apt-get; the kind lane will be skipped" \
       "(needs: ${need[*]})" >&2
  exit 0
fi
echo "Installing Debian packages for kind: ${need[*]}..."
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
podman --version
