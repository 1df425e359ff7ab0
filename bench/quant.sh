#!/bin/sh
# quant.sh -- the "Model optimisation" figures of doc/benchmarks.md: the
# Fashion-MNIST LeNet fp32 vs int8 (PTQ, dynamic, QAT) and 50% channel
# pruning here (examples/quantization/ptq.lua), then the same weights and
# batches through torch.ao.quantization with PyTorch 1.13 (Debian's
# python3-torch) and PyTorch 2.x (TORCH2_PYTHON, else bench/torch_venv.sh).
#   sh bench/quant.sh [--checkpoint lenet.safetensors] [other ptq.lua options]
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${TMPDIR:-/tmp}/quant_bench
mkdir -p "$OUT"
echo "load before: $(cat /proc/loadavg)"
"$ROOT/bin/flow" "$ROOT/examples/quantization/ptq.lua" --qat --prune --export "$OUT" "$@"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  for t in 1 2; do /usr/bin/python3 "$ROOT/bench/quant_torch.py" "$OUT" 8 50 $t; done
else
  echo "no PyTorch 1.13 (python3-torch) for /usr/bin/python3"
fi
PY2=${TORCH2_PYTHON:-$(sh "$ROOT/bench/torch_venv.sh" 2>/dev/null || true)}
if [ -n "$PY2" ] && "$PY2" -c 'import torch' 2>/dev/null; then
  for t in 1 2; do "$PY2" "$ROOT/bench/quant_torch.py" "$OUT" 8 50 $t; done
else
  echo "no PyTorch 2.x (set TORCH2_PYTHON or run bench/torch_venv.sh)"
fi
echo "load after: $(cat /proc/loadavg)"
