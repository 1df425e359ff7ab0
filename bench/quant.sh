#!/bin/sh
# quant.sh -- the "Model optimisation" figures of doc/benchmarks.md: the
# Fashion-MNIST LeNet (or, with --model resnet18, a ResNet-18) fp32 vs int8
# (PTQ, dynamic, QAT) and, for the LeNet, 50% channel pruning here
# (examples/quantization/ptq.lua), then the same weights and batches through
# torch.ao.quantization with PyTorch 1.13 (Debian's python3-torch) and
# PyTorch 2.x (TORCH2_PYTHON, else bench/torch_venv.sh); first this CPU's
# int8 ceiling (build/bench_vnni_peak, where it has AVX-512 VNNI).
#   sh bench/quant.sh [--model resnet18] [--checkpoint model.safetensors] [other ptq.lua options]
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${TMPDIR:-/tmp}/quant_bench
mkdir -p "$OUT"
echo "load before: $(cat /proc/loadavg)"
PEAK="$ROOT/build/bench_vnni_peak"
if [ -x "$PEAK" ]; then
  for t in 1 2; do OMP_NUM_THREADS=$t "$PEAK" || true; done
fi
# channel pruning is the LeNet's (a ResNet's residual sums tie its channels)
PRUNE=--prune
case " $* " in *" resnet18 "*|*"=resnet18 "*) PRUNE= ;; esac
rm -f "$OUT"/lenet_fp32.pt "$OUT"/resnet18_fp32.pt
"$ROOT/bin/flow" "$ROOT/examples/quantization/ptq.lua" --qat $PRUNE --export "$OUT" "$@"
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
