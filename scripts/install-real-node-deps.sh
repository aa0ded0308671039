#!/usr/bin/env bash
# Install what real sandbox nodes need from Debian's packages: containerd and runc (the
# container runtime), the CNI plugins (pod networking), iptables (kube-proxy's Service rules),
# debootstrap (the images' root file systems) and buildah (builds the operator image from the
# Dockerfile without a Docker daemon). Without root (or apt-get) it says so and exits 0: real-node tests then skip
# with the reason, everything else still runs.
set -euo pipefail
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
command -v ip >/dev/null || [ -x /usr/sbin/ip ] || need+=(iproute2)
command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || need+=(iptables)
command -v buildah >/dev/null || need+=(buildah)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install-real-node-deps: not root or no apt-get; real-node tests will be skipped" \
       "(needs: ${need[*]})" >&2
  exit 0
fi
echo "Installing Debian packages for real sandbox nodes: ${need[*]}..."
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
containerd --version
