#!/usr/bin/env bash
# The checks that need a GPU, as one short script for a lent GPU machine (python3 with a
# CUDA torch): the SDC probe on CUDA (bench/probe_gpu.sh), and the example trainer on NCCL
# (one rank, one device), run through and then resumed from its step-20 checkpoint: the
# resumed run must end with the same parameters, bit for bit. Exit 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
echo "== SDC probe on CUDA"
PYTHON=python3 SIZE=4096 REPEATS=20 timeout 240 bash bench/probe_gpu.sh 2>&1 | head -4
work=$(mktemp -d)
train() {  # a single-rank job outside the operator: reports are refused, training goes on
  env PYTHONPATH="$PWD/src" MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "$@" \
    timeout 120 python3 examples/trainer/train.py --backend nccl --steps 30 \
    --checkpoint-every 10 2>&1 | grep -E "resumed|FINAL|Error"
}
echo "== example trainer on NCCL, uninterrupted"
first=$(train MASTER_PORT=29511 GOODPUT_CHECKPOINT_DIR="$work/a")
echo "$first"
point="$work/a/step-00000020"
digest=$(PYTHONPATH="$PWD/src" python3 -c \
  "from goodput_operator.sdk import checkpoint; print(checkpoint.digest('$point'))")
echo "== resumed from step 20"
second=$(train MASTER_PORT=29512 GOODPUT_CHECKPOINT_DIR="$work/b" GOODPUT_RESUME_FROM="$point" \
  GOODPUT_RESUME_STEP=20 GOODPUT_RESUME_DIGEST="$digest")
echo "$second"
a=$(grep -o "fingerprint=[0-9a-f]*" <<<"$first"); b=$(grep -o "fingerprint=[0-9a-f]*" <<<"$second")
[ -n "$a" ] && [ "$a" = "$b" ] && echo "resume on CUDA: bit-exact ($a)" && exit 0
echo "resume on CUDA: final parameters differ ($a vs $b)"; exit 1
