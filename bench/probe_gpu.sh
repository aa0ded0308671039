#!/usr/bin/env bash
# The SDC probe on CUDA: throughput of the probe workload on each GPU, and whether it
# catches a bit flip injected into one GPU's result. Exits 0 with a note when no CUDA
# device (or no torch) is visible; 1 when a clean run fails or the flip goes unseen.
#
#   bench/probe_gpu.sh            # SIZE=4096 ITERATIONS=4 REPEATS=50 by default
#   PYTHON=python3 SIZE=8192 REPEATS=20 bench/probe_gpu.sh
# (the float64 reference runs once on the CPU; REPEATS times the work on each GPU)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
SIZE=${SIZE:-4096}
ITERATIONS=${ITERATIONS:-4}
REPEATS=${REPEATS:-50}

if ! "$PY" - <<'PYEOF' 2>/dev/null; then
import sys
import torch
sys.exit(0 if torch.cuda.is_available() else 1)
PYEOF
  echo "probe_gpu: no CUDA device visible to torch (or torch is not installed): nothing to check"
  exit 0
fi

out=$(mktemp -d)
run() { "$PY" -m goodput_operator.probe --backend torch --size "$SIZE" \
          --iterations "$ITERATIONS" --repeats "$REPEATS" --json "$@"; }
run >"$out/clean.json" || true
run --inject-bitflip 0 >"$out/flipped.json" || true
"$PY" - "$out/clean.json" "$out/flipped.json" <<'PYEOF'
import json
import sys

clean, flipped = (json.load(open(path)) for path in sys.argv[1:3])
devices = ", ".join(d["name"] for d in clean["devices"])
print(f"devices: {devices}")
print(f"matrix {clean['size']}, {clean['iterations']} chained products: {clean['seconds']} s, "
      f"{clean['gflops']} GFLOP/s per device (float32, TF32 off)")
print(f"clean run: {'OK' if clean['ok'] else 'FAILED'}: {clean['message']}")
print(f"bit flip injected on device 0: "
      f"{'detected' if flipped['bad'] == [0] else 'NOT detected'}: {flipped['message']}")
print(json.dumps({"clean": clean, "flipped": flipped}))
sys.exit(0 if clean["ok"] and flipped["bad"] == [0] else 1)
PYEOF
