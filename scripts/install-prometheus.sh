#!/usr/bin/env bash
# Install Debian's prometheus package (the autoscaling e2e tests start it on loopback).
set -euo pipefail
if command -v prometheus >/dev/null; then exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-prometheus: need root or sudo to apt-get install prometheus" >&2; exit 1; }
  SUDO=sudo
fi
command -v apt-get >/dev/null || { echo "install-prometheus: no apt-get; install Prometheus >= 2.40 and put it on PATH" >&2; exit 1; }
echo "Installing Debian's prometheus package (for the autoscaling tests)..."
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# the package may start a system service on :9090; the tests run their own instance
$SUDO pkill -x prometheus 2>/dev/null || true
prometheus --version | head -1
