#!/usr/bin/env bash
# Stop what `make demo` started: the operator, then the sandbox.
set -u
cd "$(dirname "$0")/.."
STATE=.venv/demo
if [ -f "$STATE/operator.pid" ]; then
  kill "$(cat "$STATE/operator.pid")" 2>/dev/null || true
  rm -f "$STATE/operator.pid"
fi
.venv/bin/goodput sandbox down --name "${SANDBOX:-demo}"
