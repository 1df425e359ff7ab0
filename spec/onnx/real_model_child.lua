-- Child process of import_spec.lua's torchvision checks: imports one
-- exported model, runs it on its input and prints how far it is from
-- onnxruntime's output:
--   luajit spec/onnx/real_model_child.lua MODEL.onnx IN.safetensors ORT.safetensors
-- -> "shape 2 1000", "outside 0", "maxdiff 1.9e-07", "maxabs 0.38"
-- A 100 MB model read into Lua strings and tables is the largest heap of
-- the suite: in its own process it neither depends on nor adds to what the
-- other specs left in busted's.
local flow = require 'oneflow'
local model, input, ort = arg[1], arg[2], arg[3]
local x = flow.load(input).input
local want = flow.load(ort).output
local got = flow.onnx.run(model, x)
print('shape ' .. table.concat(got:size():totable(), ' '))
local d = (got - want):abs()
print('outside ' .. d:gt(want:abs() * 1e-4 + 1e-4):sum():item())
print(('maxdiff %.9g'):format(d:max():item()))
print(('maxabs %.9g'):format(want:abs():max():item()))
