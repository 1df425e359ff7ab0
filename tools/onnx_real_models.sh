#!/bin/sh
# Real models through flow.onnx.load against onnxruntime (doc/onnx.md "Import",
# doc/benchmarks.md "ONNX import"): torchvision models and BERT-base from
# Hugging Face transformers exported by torch.onnx from PyTorch 2.x
# (spec/onnx/torch_models.py in the venv of bench/st2_venv.sh, which has
# PyTorch 2.x, torchvision and transformers; onnx 1.17 is added to it for the
# exporter). Without PyTorch 2.x: Debian's PyTorch 1.13 and the
# sentence-transformers venv, and the script says so. Run by onnxruntime (the onnx
# venv of spec/onnx/setup_onnxruntime.sh, 2 threads) and by us on the same
# input: a 2x3x224x224 batch; for BERT 2x128 token ids and a mask. Prints per model the largest difference, the number
# of elements outside allclose(rtol = 1e-4, atol = 1e-4), and seconds per
# batch for both (one warm-up run, then the median of 5 timed runs each), and
# the largest difference between the module compiled by nn.Graph and eager.
#   sh tools/onnx_real_models.sh [name...]     default: resnet50 mobilenet_v3_large vit_b_16 bert_base
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
ort_py=$(sh "$here/spec/onnx/setup_onnxruntime.sh" | tail -1 | sed 's/^onnx venv ready: //')
names=${*:-resnet50 mobilenet_v3_large vit_b_16 bert_base}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
vision=$(echo "$names" | tr ' ' '\n' | grep -v '^bert_base$' | tr '\n' ' ')
if t2_py=$(sh "$here/bench/st2_venv.sh" 2>/dev/null | tail -1) && [ -x "$t2_py" ] &&
   { "$t2_py" -c 'import onnx' 2>/dev/null ||
     "$t2_py" -m pip install --quiet --disable-pip-version-check onnx==1.17.0 >&2; }; then
  vision_py=$t2_py bert_py=$t2_py
else
  echo "no PyTorch 2.x venv (bench/st2_venv.sh): exporting with Debian's PyTorch 1.13" >&2
  vision_py=/usr/bin/python3
  bert_py=$(sh "$here/spec/text/setup_sentence_transformers.sh" | tail -1)
fi
if [ -n "$vision" ]; then
  # shellcheck disable=SC2086
  "$vision_py" "$here/spec/onnx/torch_models.py" export "$tmp" $vision | grep exported
fi
case " $names " in *" bert_base "*)
  "$bert_py" "$here/spec/onnx/torch_models.py" export "$tmp" bert_base | grep exported ;;
esac
# shellcheck disable=SC2086
"$ort_py" "$here/spec/onnx/torch_models.py" ort "$tmp" $names > "$tmp/ort.txt"
export LUA_PATH="$here/lua/?.lua;$here/lua/?/init.lua;${LUA_PATH:-;}"
# shellcheck disable=SC2086
luajit - "$tmp" $names <<'LUA'
local flow = require 'oneflow'
local ffi = require 'ffi'
ffi.cdef 'typedef struct { long s; long ns; } orm_ts; int clock_gettime(int, orm_ts *);'
local function now() local t = ffi.new('orm_ts'); ffi.C.clock_gettime(1, t); return tonumber(t.s) + tonumber(t.ns) * 1e-9 end
local dir = arg[1]
local ort = {}
for line in io.lines(dir .. '/ort.txt') do
  local n, t = line:match('^ort (%S+) (%S+)')
  if n then ort[n] = tonumber(t) end
end
for i = 2, #arg do
  local name = arg[i]
  local net = flow.onnx.load(dir .. '/' .. name .. '.onnx')
  net:eval()
  -- the inputs in the graph's order (an image, or BERT's ids and mask)
  local st = flow.load(dir .. '/' .. name .. '.in.safetensors')
  local xs = st.input and {st.input} or {st.input_ids, st.attention_mask}
  local function first(...) local r = ... ; if type(r) == 'table' and not flow.is_tensor(r) then r = r[1] end return r end
  local want = flow.load(dir .. '/' .. name .. '.ort.safetensors').output
  local y
  flow.no_grad(function() y = first(net(unpack(xs))) end)
  local times = {}
  for k = 1, 5 do
    local t0 = now()
    flow.no_grad(function() y = first(net(unpack(xs))) end)
    times[k] = now() - t0
  end
  table.sort(times)
  local dt = times[3]
  local d = (y - want):abs()
  -- the same module compiled by nn.Graph
  local G = flow.nn.Graph:subclass('OnnxRealGraph')
  function G:__init(m) flow.nn.Graph.__init(self); self.m = m end
  function G:build(...) return first(self.m(...)) end
  local g = G(net)
  g(unpack(xs))
  local gd = (g(unpack(xs)) - y):abs():max():item()
  print(('%-20s max |diff| %.3g (max |y| %.3g), outside allclose(1e-4): %d; s/batch: oneflow %.3f, onnxruntime %.3f (x%.1f); nn.Graph vs eager %.3g')
    :format(name, d:max():item(), want:abs():max():item(), d:gt(want:abs() * 1e-4 + 1e-4):sum():item(), dt,
            ort[name], dt / ort[name], gd))
end
LUA
