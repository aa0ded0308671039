#!/usr/bin/env bash
# Install Debian's haproxy package (the routing tests and bench.routing start it on loopback).
set -euo pipefail
if command -v haproxy >/dev/null; then exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-haproxy: need root or sudo to apt-get install haproxy" >&2; exit 1; }
  SUDO=sudo
fi
command -v apt-get >/dev/null || { echo "install-haproxy: no apt-get; install HAProxy >= 2.6 and put it on PATH" >&2; exit 1; }
echo "Installing Debian's haproxy package (for the routing tests)..."
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends haproxy >/dev/null
# the package may start a system service; the tests run their own instances
$SUDO pkill -x haproxy 2>/dev/null || true
haproxy -v | head -1
