-- flow.onnx.export: every case is exported, read back with the spec's own
-- protobuf decoder (always), and -- when a python with onnx and onnxruntime
-- is found -- checked with onnx.checker and run in onnxruntime against the
-- Lua outputs (spec/onnx/check_onnx.py). Python is looked for in
-- $ONNX_PYTHON ('none': do not look), the venv made by
-- spec/onnx/setup_onnxruntime.sh, then python3; without it those checks are
-- pending.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local D = require 'oneflow.onnx.reader'
local T = require 'oneflow.tensor'
local nn, F = flow.nn, flow.nn.functional

local TOL = 1e-4

------------------------------------------------------------------ python
local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local PYTHON = H.onnx_python()
local CHECKER = 'spec/onnx/check_onnx.py'

------------------------------------------------------------------ files
local tmpdir = os.tmpname()
os.remove(tmpdir)
tmpdir = tmpdir .. '_onnx'
assert(os.execute('mkdir -p ' .. sh_quote(tmpdir)))
local function path(name) return tmpdir .. '/' .. name end
local function exists(p)
  local f = io.open(p, 'rb')
  if f then f:close() end
  return f ~= nil
end

------------------------------------------------------------------ helpers
local function randomize(m)
  flow.no_grad(function()
    for _, p in ipairs(m:parameters()) do p:copy_(flow.randn(p:size():totable()) * 0.5 + 0.2) end
    for name, b in m:named_buffers() do
      if name:match('running_mean$') then b:copy_(flow.randn(b:size():totable()) * 0.3) end
      if name:match('running_var$') then b:copy_(flow.rand(b:size():totable()) + 0.5) end
    end
  end)
  return m
end

local function flat_outputs(...)
  local res = {}
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    if flow.is_tensor(v) then res[#res + 1] = v
    elseif type(v) == 'table' then
      for _, e in ipairs(v) do res[#res + 1] = e end
    end
  end
  return res
end

local function run_model(model, inputs)
  return flow.no_grad(function() return flat_outputs(model(unpack(inputs))) end)
end

------------------------------------------------------------------ cases
-- build() -> model, inputs[, extra input lists checked on the same file]
local cases = {}
local function case(name, build, opts, tol)
  cases[#cases + 1] = {name = name, build = build, opts = opts or {}, tol = tol or TOL}
end

local LeNet = nn.Module:subclass('LeNet')
function LeNet:__init()
  nn.Module.__init(self)
  self.conv1 = nn.Conv2d(1, 6, 5, {padding = 2})
  self.conv2 = nn.Conv2d(6, 16, 5)
  self.fc1 = nn.Linear(16 * 5 * 5, 120)
  self.fc2 = nn.Linear(120, 84)
  self.fc3 = nn.Linear(84, 10)
end
function LeNet:forward(x)
  x = F.max_pool2d(F.relu(self.conv1(x)), 2)
  x = F.avg_pool2d(F.relu(self.conv2(x)), 2)
  x = flow.flatten(x, 2)
  return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))
end

local Tagger = nn.Module:subclass('Tagger')
function Tagger:__init()
  nn.Module.__init(self)
  self.emb = nn.Embedding(20, 16, {padding_idx = 1})
  self.norm = nn.LayerNorm(16)
  self.fc = nn.Linear(16, 16)
  self.bn = nn.BatchNorm1d(16)
  self.head = nn.Linear(16, 5)
end
function Tagger:forward(ids)
  local h = F.gelu(self.fc(self.norm(self.emb(ids))))
  h = self.bn(h:transpose(2, 3)):transpose(2, 3)
  local p = F.softmax(self.head(h), -1)
  return p, p:argmax(-1)
end

local batch_axes = {dynamic_axes = {input = {[1] = 'batch'}, output = {[1] = 'batch'}}}

case('mlp', function()
  local net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4), nn.LogSoftmax(-1))
  return net, {flow.randn(3, 6)}, {{flow.randn(7, 6)}}
end, batch_axes)

case('lenet', function()
  return LeNet(), {flow.randn(2, 1, 28, 28)}, {{flow.randn(5, 1, 28, 28)}}
end, batch_axes)

case('tagger', function()
  local net = randomize(Tagger())
  return net, {flow.randint(1, 21, {3, 7})}, {{flow.randint(1, 21, {2, 7})}}
end, {dynamic_axes = {input = {[1] = 'batch'}, output_1 = {[1] = 'batch'}, output_2 = {[1] = 'batch'}}})

-- a compiled nn.Graph object: its build traced, its modules' parameters
-- named by attribute ("model.0.weight"), compared with the compiled run
local ExportGraph = nn.Graph:subclass('ExportGraph')
function ExportGraph:__init(m) nn.Graph.__init(self); self.model = m end
function ExportGraph:build(x) return F.softmax(self.model(x), -1) end
case('compiled_graph', function()
  local net = randomize(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                                      nn.Linear(4 * 6 * 6, 5)))
  net:eval()
  local g = ExportGraph(net)
  local x = flow.randn(2, 3, 8, 8)
  g(x)
  g(x)   -- compiled
  return g, {x}
end)

case('two_inputs', function()
  local emb, fc = nn.Embedding(10, 4), nn.Linear(8, 3)
  local function model(x, ids)
    local h = flow.cat({x, emb(ids):mean(2)}, 2)
    local y = fc(h)
    return {y, y:argmax(2, {keepdim = true})}
  end
  return model, {flow.randn(4, 4), flow.randint(1, 11, {4, 3})}, {{flow.randn(6, 4), flow.randint(1, 11, {6, 3})}}
end, {input_names = {'features', 'tokens'}, output_names = {'logits', 'best'},
      dynamic_axes = {features = {1}, tokens = {1}, logits = {1}, best = {1}}})

case('arith', function()
  return function(x, y)
    return {((2 - x) * 3 + x / 4) ^ 2 - (-x), x:add(y, {alpha = 2}), x:sub(y, {alpha = 0.5}), x:add(1),
            x:mul(y), x:div(y:abs() + 1), 1 / (x:abs() + 1), x % 0.5, x:maximum(y), x:minimum(y),
            x:max(y), x:pow(2), (x:abs() + 0.1):pow(y), flow.pow(2, x), x:clamp(-0.5, 0.7), x:clamp{min = 0},
            x:clamp(nil, 0.3), x:clip(-1, 1)}
  end, {flow.randn(3, 4), flow.randn(3, 4)}
end)

case('unary', function()
  return function(x)
    local p, s = x:abs() + 0.5, (x * 0.5):clamp(-0.9, 0.9)
    return {x:exp(), p:log(), p:sqrt(), p:rsqrt(), x:sin(), x:cos(), x:tan(), x:tanh(), x:sigmoid(), x:erf(),
            x:erfc(), (x * 3):floor(), (x * 3):ceil(), (x * 3):round(), (x * 3):trunc(), x:sign(),
            p:reciprocal(), x:square(), p:log2(), p:log10(), p:log1p(), x:expm1(), x:atan(), s:asin(),
            s:acos(), x:sinh(), x:cosh(), x:neg(), x:abs(), x:relu(), x:isnan(), x:isfinite(),
            (x:clone()):exp_(), x:clone():mul_(2):add_(1)}
  end, {flow.randn(3, 5)}
end)

case('activations', function()
  local prelu = randomize(nn.PReLU(4))
  local prelu1 = nn.PReLU()
  return function(x)
    return {F.relu(x), F.gelu(x), F.gelu(x, {approximate = 'tanh'}), F.silu(x), F.mish(x), F.hardswish(x * 3),
            F.hardsigmoid(x * 3), F.softplus(x), F.softplus(x, {beta = 2, threshold = 3}), F.elu(x),
            F.elu(x, 0.5), F.selu(x), F.celu(x, {alpha = 2}), F.leaky_relu(x, 0.2), F.relu6(x * 4),
            F.hardtanh(x, -0.5, 0.5), F.logsigmoid(x), F.softsign(x), F.glu(x, -1), F.softmax(x, 2),
            F.log_softmax(x, 1), F.softmin(x, -1), F.tanhshrink(x), F.hardshrink(x, 0.5),
            F.softshrink(x, 0.5), F.threshold(x, 0.1, 20), prelu(x), prelu1(x), nn.Tanh()(x),
            nn.Sigmoid()(x), nn.ReLU(true)(x:clone())}
  end, {flow.randn(3, 4)}
end)

case('views', function()
  return function(x)
    local parts = x:chunk(2, 3)
    local s = x:split({1, 2}, 2)
    return {x:reshape(6, 4), x:view(2, 12), x:flatten(), flow.flatten(x, 2), x:transpose(1, 3),
            x:permute(3, 1, 2), x[1]:t(), x.T, x:unsqueeze(1):squeeze(1), x:unsqueeze(-1), x:narrow(3, 2, 2),
            x:select(2, -1), x[2], x[{1, {2, 3}}], x[{{}, 2}], x:narrow(1, 1, 1):expand(3, 3, 4),
            x['repeat'](x, 1, 2, 1), x:tile(2), parts[1], parts[2], s[1], s[2], x:unbind(1)[2],
            flow.cat({x, x * 2}, 2), flow.stack({x, x}, 1), x:flip(3), x:flip({1, 2}), x:roll(1, 3),
            x:roll(2), x:contiguous(), x:view(24):view_as(x), x:squeeze(), x[1]:expand_as(x),
            x[{{1, 2}, {1, 3, 2}, -1}], x[{2, {-2}}], x[flow.tensor({2, 1, 2}, {dtype = flow.int64})]}
  end, {flow.randn(2, 3, 4)}
end)

case('reductions', function()
  return function(x)
    local v, i = x:max(2)
    local v2, i2 = x:min(3, true)
    return {x:sum(), x:sum(2), x:sum({1, 3}, true), x:mean(2, {keepdim = true}), x:prod(3), x:amax(1),
            x:amin({2, 3}), v, i, v2, i2, x:max(), x:min(), x:argmax(2), x:argmax(), x:argmin(1, {keepdim = true}),
            x:var(2), x:std(), x:var(3, {unbiased = false}), x:norm(), x:norm(1, 2), x:norm(3, 3),
            x:norm(math.huge, 1), x:logsumexp(2), x:cumsum(2), x:gt(0):all(2), x:gt(1):any(),
            x:sum(2, {dtype = flow.float64}), x:mean()}
  end, {flow.randn(3, 4, 5)}
end)

case('indexing', function()
  local idx = flow.tensor({{1, 3}, {5, 2}, {4, 1}, {2, 5}}, {dtype = flow.int64})
  return function(x, ix)
    local v, i = x:topk(2, 2)
    local sv, si = x:sort(2, {descending = true})
    return {x:gather(2, ix), x:index_select(2, ix[1]), x:index_select(1, flow.tensor({3, 1}, {dtype = flow.int64})),
            flow.where(x:gt(0), x, 0), flow.where(x:lt(0), 1.5, x), x:masked_fill(x:lt(-0.5), -1), v, i, sv, si,
            x:tril(), x:triu(1), flow.one_hot(ix, 6), x:gt(0):nonzero(), x:scatter(2, ix, 9),
            x:scatter_add(2, ix, x:narrow(2, 1, 2)), x:argsort(2), x:gather(1, flow.tensor({{2, 1, 4, 3, 1}},
            {dtype = flow.int64}))}
  end, {flow.randn(4, 5), idx}
end)

case('compare_cast', function()
  return function(x, y, k)
    return {x:eq(x:round()), x:ne(y), x:lt(y), x:le(0), x:gt(y), x:ge(0.5), x:gt(0):logical_and(y:gt(0)),
            x:gt(0):logical_or(y:gt(0)), x:gt(0):logical_xor(y:gt(0)), x:gt(0):logical_not(), x:long(),
            k:float() * 0.5, k:floor_divide(3), (k - 5):floor_divide(3), k:remainder(3), (k - 5):remainder(3),
            x:remainder(0.7), x:fmod(0.7), x:div(y:abs() + 0.5, {rounding_mode = 'floor'}),
            x:div(0.3, {rounding_mode = 'trunc'}), k:div(2), (k - 5):div(3, {rounding_mode = 'trunc'}),
            k * 2 + 1, k:eq(3), x:double(), x:to(flow.int32), k:bool(), x:type_as(k)}
  end, {flow.randn(3, 4), flow.randn(3, 4), flow.randint(0, 10, {3, 4})}
end)

case('matmul', function()
  return function(a, b, c)
    return {a:matmul(b), flow.bmm(a, c), flow.mm(a[1], b), flow.mv(b:t(), a[1][1]), flow.dot(a[1][1], a[2][1]),
            flow.addmm(b[1], a[1], b, {beta = 0.5, alpha = 2}), flow.outer(a[1][1], a[1][2]), a:matmul(c)}
  end, {flow.randn(2, 3, 4), flow.randn(4, 5), flow.randn(2, 4, 5)}
end)

case('like', function()
  return function(x)
    return {flow.zeros_like(x) + x, flow.ones_like(x) * 2, flow.full_like(x, 3.5), x:new_zeros(2, 3),
            flow.zeros(3, 2) + 1, x + flow.arange(0, 4)}
  end, {flow.randn(3, 4)}
end)

case('conv', function()
  local c1 = nn.Conv1d(3, 4, 3, {padding = 1})
  local c2 = nn.Conv2d(4, 6, 3, {stride = 2, padding = 1, groups = 2})
  local c2b = nn.Conv2d(3, 4, {3, 2}, {padding = 'same', dilation = 2})
  local c2r = nn.Conv2d(3, 2, 3, {padding = 1, padding_mode = 'reflect', bias = false})
  local c3 = nn.Conv3d(2, 3, 2)
  local t1 = nn.ConvTranspose1d(3, 2, 3, {stride = 2})
  local t2 = nn.ConvTranspose2d(3, 4, 3, {stride = 2, padding = 1, output_padding = 1})
  local t3 = nn.ConvTranspose3d(2, 2, 2, {stride = 2})
  return function(x1, x2, x3)
    return {c1(x1), c2(c2b(x2)), c2r(x2), c3(x3), t1(x1), t2(x2), t3(x3), c2b(x2[1])}
  end, {flow.randn(2, 3, 10), flow.randn(2, 3, 9, 9), flow.randn(1, 2, 4, 4, 4)}
end)

case('pooling', function()
  local mods = {nn.MaxPool2d(3, {stride = 2, ceil_mode = true}), nn.MaxPool2d(2, {padding = 1, dilation = 2}),
                nn.AvgPool2d(3, {stride = 2, padding = 1, count_include_pad = false}),
                nn.AvgPool2d(2, {divisor_override = 3}), nn.AdaptiveAvgPool2d({3, 4}), nn.AdaptiveAvgPool2d(1),
                nn.AdaptiveMaxPool2d(2), nn.AdaptiveMaxPool2d({3, 5}), nn.MaxPool2d(2)}
  local m3 = {nn.MaxPool3d(2), nn.AvgPool3d(2, {stride = 1}), nn.AdaptiveAvgPool3d({1, 2, 7})}
  return function(x1, x2, x3)
    local res = {F.max_pool1d(x1, 3, {stride = 2}), F.avg_pool1d(x1, 4, {stride = 3, padding = 1, ceil_mode = true}),
                 nn.AdaptiveAvgPool1d(4)(x1), nn.AdaptiveMaxPool1d(1)(x1), F.avg_pool2d(x2, 3, {ceil_mode = true})}
    for _, m in ipairs(mods) do res[#res + 1] = m(x2) end
    for _, m in ipairs(m3) do res[#res + 1] = m(x3) end
    return res
  end, {flow.randn(2, 3, 11), flow.randn(2, 3, 9, 10), flow.randn(1, 2, 5, 6, 7)}
end)

case('normalization', function()
  local bn1, bn2 = randomize(nn.BatchNorm1d(3)), randomize(nn.BatchNorm2d(3))
  local bn_nt = randomize(nn.BatchNorm2d(3, {track_running_stats = false}))
  local inorm = randomize(nn.InstanceNorm2d(3, {affine = true}))
  local inorm0 = nn.InstanceNorm1d(3)
  local gn = randomize(nn.GroupNorm(2, 6))
  local ln, ln2 = randomize(nn.LayerNorm({4, 5})), nn.LayerNorm(5, {elementwise_affine = false})
  local rms = randomize(nn.RMSNorm({4, 5}))
  for _, m in ipairs({bn1, bn2, bn_nt, inorm, gn, ln}) do m:eval() end
  return function(x2, x1, x6)
    return {bn2(x2), bn_nt(x2), inorm(x2), inorm0(x2:flatten(3)), gn(x6), ln(x2), ln2(x2), bn1(x1),
            bn1(x2:flatten(3)), F.normalize(x2, {dim = 2}), rms(x2), F.rms_norm(x2, 5, nil, 1e-3)}
  end, {flow.randn(2, 3, 4, 5), flow.randn(4, 3), flow.randn(2, 6, 3, 3)}
end)

case('resample_pad', function()
  return function(x2, x1)
    return {nn.Upsample({scale_factor = 2})(x2), nn.Upsample({size = {7, 9}, mode = 'bilinear'})(x2),
            nn.Upsample({scale_factor = 2, mode = 'bilinear', align_corners = true})(x2),
            F.interpolate(x2, {scale_factor = 1.5}), F.interpolate(x1, {size = 10, mode = 'linear'}),
            F.interpolate(x2, {size = {3, 4}}), nn.UpsamplingNearest2d({scale_factor = 3})(x2),
            F.pad(x2, {1, 2}), F.pad(x2, {1, 1, 2, 0}, {mode = 'reflect'}), F.pad(x2, {2, 1, 1, 2}, 'replicate'),
            F.pad(x1, {1, 1}, {value = 3}), nn.ZeroPad2d(1)(x2), nn.PixelShuffle(2)(x2['repeat'](x2, 1, 2, 1, 1))}
  end, {flow.randn(1, 2, 5, 6), flow.randn(1, 2, 7)}
end)

case('bilinear_attention', function()
  local bil = randomize(nn.Bilinear(3, 4, 5))
  local mha = nn.MultiheadAttention(8, 2)
  return function(a, b, q, k)
    local o, w = mha(q, k, k)
    local mask = flow.zeros(4, 6)
    local qb, kb = q:transpose(1, 2), k:transpose(1, 2)
    return {bil(a, b), o, w, F.scaled_dot_product_attention(qb, kb, kb, {attn_mask = mask}),
            F.scaled_dot_product_attention(qb, qb, qb, {is_causal = true})}
  end, {flow.randn(2, 3), flow.randn(2, 4), flow.randn(4, 2, 8), flow.randn(6, 2, 8)}
end)

case('transformer', function()
  local layer = nn.TransformerEncoderLayer(16, 4, {dim_feedforward = 32, batch_first = true, activation = 'gelu'})
  local enc = nn.TransformerEncoder(layer, 2, {norm = nn.LayerNorm(16)})
  enc:eval()
  return function(x) return enc(x, {is_causal = true}) end, {flow.randn(2, 5, 16)}
end)

case('recurrent', function()
  local lstm = nn.LSTM(4, 8, {num_layers = 2, batch_first = true})
  local gru = nn.GRU(4, 6)
  return function(x)
    local y = lstm(x)
    local z, h = gru(x:transpose(1, 2))
    return {y, z, h}
  end, {flow.randn(2, 3, 4)}
end)

-- ops whose ONNX form depends on the opset
for _, opset in ipairs({14, 18, 20, 21}) do
  case('opset' .. opset, function()
    local ln, gn = randomize(nn.LayerNorm(5)), randomize(nn.GroupNorm(2, 4))
    return function(x, k)
      local res = {ln(x), gn(x), F.mish(x), F.gelu(x), F.gelu(x, {approximate = 'tanh'}), x:mean(2), x:amax(2),
                   x:norm(2, 3), x:var(2), x:logsumexp(3), x:sum(2), x:gt(0):any(3)}
      if opset >= 18 then
        res[#res + 1] = k:bitwise_and(6)
        res[#res + 1] = k:bitwise_not()
      end
      if opset >= 19 then res[#res + 1] = F.pad(x, {1, 2, 2, 1}, {mode = 'circular'}) end
      return res
    end, {flow.randn(2, 4, 3, 5), flow.randint(0, 10, {3, 4})}
  end, {opset = opset})
end

-- flowvision's classification models, when the package is there
local vision_ok, vision = pcall(require, 'flowvision')
local vit_ok, vit = pcall(require, 'flowvision.models.vit')
-- running statistics from one batch, so that activations stay O(1) in eval
-- mode (freshly initialised deep nets shrink them to ~1e-10)
local function calibrate(m, x)
  local saved = {}
  for _, mod in ipairs(m:modules()) do
    if rawget(mod, 'momentum') ~= nil and mod.running_mean ~= nil then
      saved[#saved + 1] = {mod, mod.momentum}
      mod.momentum = 1
    end
  end
  m:train()
  flow.no_grad(function() m(x) end)
  for _, e in ipairs(saved) do e[1].momentum = e[2] end
  m:eval()
  return m
end

local function zoo(name, make, size)
  case(name, function()
    flow.manual_seed(1)
    local m = calibrate(make(), flow.randn(4, 3, size, size))
    return m, {flow.randn(2, 3, size, size)}, {{flow.randn(3, 3, size, size)}}
  end, batch_axes)
end
if vision_ok and type(vision.models) == 'table' then
  if vision.models.resnet18 then
    zoo('resnet18', function() return vision.models.resnet18({num_classes = 10}) end, 64)
  end
  if vision.models.mobilenet_v2 then
    zoo('mobilenet_v2', function() return vision.models.mobilenet_v2({num_classes = 10}) end, 64)
  end
end
local vit_tiny = (vision_ok and type(vision.models) == 'table' and vision.models.vit_tiny_patch16_224)
                 or (vit_ok and type(vit) == 'table' and vit.models and vit.models.vit_tiny_patch16_224)
if vit_tiny then
  zoo('vit_tiny', function() return vit_tiny({num_classes = 10, img_size = 32}) end, 32)
end

------------------------------------------------------------------ export all, check once
local results, exported = {}, {}

local function write_case(c, manifest)
  flow.manual_seed(7)
  local model, inputs, extra = c.build()
  if nn.is_module(model) then model:eval() end
  local file = path(c.name .. '.onnx')
  local ok, m = pcall(flow.onnx.export, model, inputs, file, c.opts)
  exported[c.name] = {ok = ok, model = m, file = file, error = not ok and m or nil}
  if not ok then return end
  local sets = {inputs}
  for _, e in ipairs(extra or {}) do sets[#sets + 1] = e end
  for si, set in ipairs(sets) do
    local feeds, k = {}, 0
    for _, x in ipairs(set) do
      if flow.is_tensor(x) then
        k = k + 1
        feeds[m.graph.inputs[k].name] = x
      end
    end
    local outs = run_model(model, set)
    local want = {}
    for i, y in ipairs(outs) do want[m.graph.outputs[i].name] = y end
    local tag = c.name .. '_' .. si
    flow.save(feeds, path(tag .. '_in.safetensors'))
    flow.save(want, path(tag .. '_out.safetensors'))
    manifest:write(table.concat({tag, file, path(tag .. '_in.safetensors'), path(tag .. '_out.safetensors'),
                                 tostring(c.tol)}, '\t'), '\n')
  end
end

local function run_checker()
  local manifest = assert(io.open(path('manifest.txt'), 'w'))
  for _, c in ipairs(cases) do
    local ok, err = pcall(write_case, c, manifest)
    if not ok then exported[c.name] = {ok = false, error = 'building the case failed: ' .. tostring(err)} end
  end
  manifest:close()
  if not PYTHON then return end
  local p = io.popen(sh_quote(PYTHON) .. ' ' .. CHECKER .. ' ' .. sh_quote(path('manifest.txt')) .. ' 2>&1')
  for line in p:lines() do
    local name, status, err, msg = line:match('^([^\t]*)\t([^\t]*)\t([^\t]*)\t?(.*)$')
    if name then results[name] = {status = status, err = tonumber(err), msg = msg} end
    if os.getenv('ONNX_VERBOSE') then io.stderr:write(line, '\n') end
  end
  p:close()
end

describe('flow.onnx.export', function()
  setup(run_checker)

  for _, c in ipairs(cases) do
    it(c.name .. ' exports, reads back and matches onnxruntime', function()
      local e = exported[c.name]
      assert(e.ok, tostring(e.error))
      local m = D.read(e.file)
      assert.equal(c.opts.opset or 17, m.opsets[1].version)
      assert.equal(#e.model.graph.nodes, #m.graph.nodes)
      assert.equal(#e.model.graph.initializers, #m.graph.initializers)
      if not PYTHON then
        pending('python with onnx and onnxruntime not found (run spec/onnx/setup_onnxruntime.sh)')
        return
      end
      local k = 0
      for tag, r in pairs(results) do
        if tag:match('^(.*)_%d+$') == c.name then
          k = k + 1
          assert(r.status == 'ok', ('%s: %s'):format(tag, r.msg))
          assert(r.err <= c.tol * 10, tag .. ': error ' .. r.err)
        end
      end
      assert(k > 0, 'no onnxruntime result for ' .. c.name)
    end)
  end

  it('maps the MLP to Gemm/Relu/LogSoftmax with named initializers and dynamic batch', function()
    local m = D.read(exported.mlp.file)
    assert.same({'Gemm', 'Relu', 'Gemm', 'LogSoftmax'}, D.op_types(m.graph))
    assert.equal(8, m.ir_version)
    assert.equal('oneflow-lua', m.producer_name)
    local inits = D.inits(m.graph)
    assert.same({16, 6}, inits['0.weight'].dims)
    assert.same({16}, inits['0.bias'].dims)
    assert.same({4, 16}, inits['3.weight'].dims)
    assert.equal(1, inits['0.weight'].data_type)
    assert.equal(16 * 6 * 4, #inits['0.weight'].raw)
    assert.same({'batch', 6}, m.graph.inputs[1].dims)
    assert.same({'batch', 4}, m.graph.outputs[1].dims)
    assert.equal('input', m.graph.inputs[1].name)
    assert.equal('output', m.graph.outputs[1].name)
    assert.equal(1, m.graph.nodes[1].attrs.transB.i)
  end)

  it('exports a compiled nn.Graph with its modules\' names; a loaded graph is refused', function()
    local m = D.read(exported.compiled_graph.file)
    assert.same({'Conv', 'BatchNormalization', 'Relu', 'Reshape', 'Gemm', 'Softmax'}, D.op_types(m.graph))
    local inits = D.inits(m.graph)
    assert.same({4, 3, 3, 3}, inits['model.0.weight'].dims)
    assert.same({4}, inits['model.1.running_var'].dims)
    assert.is_truthy(m.graph.nodes[1].name:find('/model.0/', 1, true), m.graph.nodes[1].name)
    local g = ExportGraph(nn.Linear(3, 2))
    local x = flow.randn(1, 3)
    g(x)
    g:save(path('g.ofg'))
    local loaded = nn.Graph.load(path('g.ofg'))
    H.raises(function() flow.onnx.export(loaded, {x}, path('loaded.onnx')) end,
             'a loaded graph (flow.nn.Graph.load) holds no model code')
  end)

  it('writes LeNet as Conv / MaxPool / AveragePool / Gemm with 0-based attributes', function()
    local m = D.read(exported.lenet.file)
    local ops = D.op_types(m.graph)
    assert.same({'Conv', 'Relu', 'MaxPool', 'Conv', 'Relu', 'AveragePool', 'Reshape', 'Gemm', 'Relu', 'Gemm',
                 'Relu', 'Gemm'}, ops)
    local conv = m.graph.nodes[1]
    assert.same({2, 2, 2, 2}, conv.attrs.pads.ints)
    assert.same({5, 5}, conv.attrs.kernel_shape.ints)
    assert.same({'input', 'conv1.weight', 'conv1.bias'}, conv.inputs)
    assert.same({6, 1, 5, 5}, D.inits(m.graph)['conv1.weight'].dims)
    assert.same({2, 2}, m.graph.nodes[3].attrs.strides.ints)
  end)

  it('translates 1-based ids and indices (Embedding: Sub before Gather; argmax: Add after ArgMax)', function()
    local m = D.read(exported.tagger.file)
    local producer = {}
    for _, n in ipairs(m.graph.nodes) do
      for _, o in ipairs(n.outputs) do producer[o] = n end
    end
    local gather, argmax
    for _, n in ipairs(m.graph.nodes) do
      if n.op_type == 'Gather' then gather = n end
      if n.op_type == 'ArgMax' then argmax = n end
    end
    assert.equal('emb.weight', gather.inputs[1])
    local sub = producer[gather.inputs[2]]
    assert.equal('Sub', sub.op_type)
    assert.equal('input', sub.inputs[1])
    local add
    for _, n in ipairs(m.graph.nodes) do
      if n.op_type == 'Add' and n.inputs[1] == argmax.outputs[1] then add = n end
    end
    assert.truthy(add)
    assert.equal(2, argmax.attrs.axis.i)
    assert.equal(7, m.graph.inputs[1].elem_type)
    assert.same({1, 7}, {m.graph.outputs[1].elem_type, m.graph.outputs[2].elem_type})
    local types = {}
    for _, t in ipairs(D.op_types(m.graph)) do types[t] = true end
    assert.truthy(types.LayerNormalization and types.BatchNormalization and types.Erf and types.Softmax)
  end)

  it('names inputs and outputs as asked, with dynamic axes', function()
    local m = D.read(exported.two_inputs.file)
    assert.equal('features', m.graph.inputs[1].name)
    assert.equal('tokens', m.graph.inputs[2].name)
    assert.same({'features_dim1', 4}, m.graph.inputs[1].dims)
    assert.same({'logits', 'best'}, {m.graph.outputs[1].name, m.graph.outputs[2].name})
    assert.same({'best_dim1', 1}, m.graph.outputs[2].dims)
  end)

  it('exports PyTorch-positional F calls like their options form', function()
    local function make(positional)
      local Net = nn.Module:subclass('PosNet')
      function Net:__init()
        nn.Module.__init(self)
        self.w, self.b = nn.Parameter(flow.randn(6)), nn.Parameter(flow.randn(6))
      end
      function Net:forward(x)
        local y
        if positional then
          y = F.layer_norm(F.pad(x, {1, 1}, 'constant', 2), {6}, self.w, self.b, 1e-3)
          y = F.group_norm(y:unsqueeze(2), 1, nil, nil, 1e-4)
          return F.interpolate(y, nil, 2, 'nearest')
        end
        y = F.layer_norm(F.pad(x, {1, 1}, {value = 2}), {6}, {weight = self.w, bias = self.b, eps = 1e-3})
        y = F.group_norm(y:unsqueeze(2), 1, {eps = 1e-4})
        return F.interpolate(y, {scale_factor = 2})
      end
      return Net()
    end
    local a, b = make(true), make(false)
    b:load_state_dict(a:state_dict())
    local x = flow.randn(2, 4)
    assert.equal(flow.onnx.encode(flow.onnx.trace(b, x)), flow.onnx.encode(flow.onnx.trace(a, x)))
  end)

  it('is deterministic', function()
    local net = nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(12, 2))
    local x = flow.randn(1, 2, 4, 4)
    local a = flow.onnx.encode(flow.onnx.trace(net, x))
    local b = flow.onnx.encode(flow.onnx.trace(net, x))
    assert.equal(a, b)
  end)
end)

describe('flow.onnx.export errors', function()
  local file = path('bad.onnx')
  teardown(function() os.execute('rm -rf ' .. sh_quote(tmpdir)) end)
  local Bad = nn.Module:subclass('Bad')
  function Bad.forward(_, x) return x:cumprod(2) end
  local Outer = nn.Module:subclass('Outer')
  function Outer:__init()
    nn.Module.__init(self)
    self.fc = nn.Linear(3, 3)
    self.block = Bad()
  end
  function Outer:forward(x) return self.block(self.fc(x)) end

  local function snapshot()
    local mt = T.metatable_ops
    return {T.methods.add, T.methods.cumprod, T.methods.item, T.flow.matmul, flow.matmul, F.relu, F.conv2d,
            mt.__add, mt.__index, mt.__newindex, mt.__unm, jit.status()}
  end

  it('names an op without a mapping and the module it is in', function()
    local before = snapshot()
    local err = H.raises(function() flow.onnx.export(Outer(), flow.randn(2, 3), file) end,
                        'onnx.export', 'no ONNX mapping', 'cumprod', 'block', 'Bad')
    assert.is_nil(err:find('internal error', 1, true))
    assert.is_false(exists(file))
    assert.same(before, snapshot())
    -- tensors work as before
    H.close(flow.tensor({1, 2}) + flow.tensor({3, 4}), {4, 6})
    H.close(flow.tensor({{1, 2}, {3, 4}})[2], {3, 4})
  end)

  it('reports wrong example inputs with the model error', function()
    H.raises(function() flow.onnx.export(nn.Linear(4, 2), flow.randn(2, 5), file) end,
             'onnx.export', 'Linear', 'in_features')
    H.raises(function() flow.onnx.export(nn.Linear(4, 2), nil, file) end, 'onnx.export', 'example_inputs')
    H.raises(function() flow.onnx.export(nn.Linear(4, 2), {1, 2}, file) end, 'onnx.export', 'no tensor')
    assert.is_false(exists(file))
  end)

  it('refuses random ops, data-dependent reads and index assignment', function()
    H.raises(function() flow.onnx.export(function(x) return F.dropout(x, 0.5, true) end, flow.randn(3), file) end,
             'onnx.export', 'random')
    H.raises(function()
      flow.onnx.export(function(x) if x:sum():item() > 0 then return x end return -x end, flow.randn(3), file)
    end, 'onnx.export', 'item', 'data')
    H.raises(function()
      flow.onnx.export(function(x) local y = x:clone(); y[1] = 0; return y end, flow.randn(3, 2), file)
    end, 'onnx.export', 'index assignment')
    H.raises(function() flow.onnx.export(function(x) return x[x:gt(0)] end, flow.randn(3), file) end,
             'onnx.export', 'mask')
    H.raises(function() flow.onnx.export(nn.ReLU(), flow.randn(3), file, {opset = 9}) end, 'onnx.export', 'opset')
    H.raises(function() flow.onnx.export(nn.ReLU(), flow.randn(3), file, {dynamic_axes = {nope = {1}}}) end,
             'onnx.export', 'nope')
    H.raises(function() flow.onnx.export(nn.ReLU(), flow.randn(3), file, {fold = true}) end,
             'onnx.export', 'unknown option')
    H.raises(function() flow.onnx.export(function() return 3 end, flow.randn(3), file) end,
             'onnx.export', 'not a tensor')
    H.raises(function() flow.onnx.export(nn.ReLU(), flow.randn(3)) end, 'onnx.export', 'file path')
    assert.is_false(exists(file))
  end)

  it('leaves the training mode and the model as they were', function()
    local net = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5), nn.BatchNorm1d(3))
    net:train()
    local mean = net[3].running_mean:clone()
    flow.onnx.export(net, flow.randn(4, 3), file)
    assert.is_true(net.training)
    assert.is_true(net[2].training)
    H.close(net[3].running_mean, mean)
    assert.is_nil(rawget(net, '_forward_hooks'))
    assert.is_nil(rawget(net[1], '_forward_pre_hooks'))
    local m = D.read(file)
    assert.same({'Gemm', 'BatchNormalization'}, D.op_types(m.graph))
    os.remove(file)
  end)

  it('writes atomically (no temporary file left)', function()
    flow.onnx.export(nn.Linear(2, 2), flow.randn(1, 2), file)
    local p = io.popen('ls ' .. sh_quote(tmpdir))
    local listing = p:read('*a')
    p:close()
    assert.is_nil(listing:find('.tmp-', 1, true))
    assert.is_true(exists(file))
    os.remove(file)
  end)
end)
