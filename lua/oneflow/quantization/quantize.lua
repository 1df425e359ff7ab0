-- oneflow.quantization.quantize: the eager-mode workflow of
-- torch.ao.quantization, the Lua way (1-based, options tables):
--   model:eval()
--   Q.fuse_modules(model, {{'conv1', 'bn1', 'relu1'}, {'fc1', 'relu2'}})
--   model.qconfig = Q.get_default_qconfig('x86')
--   local prepared = Q.prepare(model)           -- observers on outputs
--   Q.calibrate(prepared, loader)                -- or run batches yourself
--   local qmodel = Q.convert(prepared)           -- int8 modules
--   Q.quantize_dynamic(model, {nn.Linear}, {dtype = flow.qint8})
--   Q.prepare_qat(model) ... train ... Q.convert(model)
-- A module's qconfig applies to its submodules unless they set their own;
-- `m.qconfig = false` keeps m (and what it contains) float. A leaf layer
-- under a qconfig that has no quantized version (LSTM,
-- LayerNorm, Sigmoid ...) is an error at prepare naming it, rather than a
-- model that fails later.
local flow = require 'oneflow'
local A = require 'oneflow._args'
local class = require 'oneflow.class'
local module = require 'oneflow.nn.module'
local Q = require 'oneflow.quantization.qtensor'
local O = require 'oneflow.quantization.observer'
local FQ = require 'oneflow.quantization.fake_quantize'
local QM = require 'oneflow.quantization.modules'

local nn = flow.nn
local isinstance = class.isinstance
local M = {}

------------------------------------------------------------------ qconfig
local QConfig = A.value_type({})
QConfig.__index = QConfig
QConfig.__tostring = function(q) return ('QConfig(activation=%s, weight=%s)'):format(q.name_a, q.name_w) end

--- QConfig{activation = ctor, weight = ctor}: constructors of observers (or FakeQuantize).
function M.QConfig(t)
  t = A.check_options('QConfig', t, {activation = true, weight = true, name_a = true, name_w = true})
  if type(t) ~= 'table' or type(t.activation) ~= 'function' and not class.is_class(t.activation)
     or type(t.weight) ~= 'function' and not class.is_class(t.weight) then
    A.fail('QConfig: activation and weight must be observer constructors (Observer:with_args{...})')
  end
  return setmetatable({activation = t.activation, weight = t.weight,
                       name_a = t.name_a or 'custom', name_w = t.name_w or 'custom'}, QConfig)
end
--- quantization.is_qconfig(v): true for a QConfig.
function M.is_qconfig(v) return getmetatable(v) == QConfig end

local BACKENDS = {x86 = true, fbgemm = true, onednn = true, qnnpack = true}
local function backend_of(op, b)
  b = b or 'x86'
  if not BACKENDS[b] then
    A.fail(('%s: backend must be x86, fbgemm, onednn or qnnpack, got %s'):format(op, tostring(b)))
  end
  return b
end

local per_channel_weight = O.PerChannelMinMaxObserver:with_args({dtype = Q.qint8, qscheme = 'per_channel_symmetric'})
local per_tensor_weight = O.MinMaxObserver:with_args({dtype = Q.qint8, qscheme = 'per_tensor_symmetric'})

--- get_default_qconfig(backend = 'x86'): PyTorch's defaults -- histogram
-- observer on activations (quint8; 7-bit on x86/fbgemm, reduce_range) and
-- per-channel symmetric int8 weights (per-tensor on qnnpack).
function M.get_default_qconfig(backend)
  backend = backend_of('get_default_qconfig', backend)
  local rr = backend == 'x86' or backend == 'fbgemm'
  return M.QConfig({activation = O.HistogramObserver:with_args({reduce_range = rr}),
                    weight = backend == 'qnnpack' and per_tensor_weight or per_channel_weight,
                    name_a = ('HistogramObserver(reduce_range=%s)'):format(tostring(rr)),
                    name_w = backend == 'qnnpack' and 'MinMaxObserver(qint8, per_tensor_symmetric)'
                      or 'PerChannelMinMaxObserver(qint8, per_channel_symmetric)'})
end

--- get_default_qat_qconfig(backend = 'x86'): fake quantization with moving-average observers.
function M.get_default_qat_qconfig(backend)
  backend = backend_of('get_default_qat_qconfig', backend)
  local rr = backend == 'x86' or backend == 'fbgemm'
  return M.QConfig({
    activation = FQ.FakeQuantize:with_args({observer = O.MovingAverageMinMaxObserver, dtype = Q.quint8,
                                            reduce_range = rr}),
    weight = FQ.FakeQuantize:with_args({observer = O.MovingAveragePerChannelMinMaxObserver, dtype = Q.qint8,
                                        qscheme = 'per_channel_symmetric'}),
    name_a = 'FakeQuantize(MovingAverageMinMaxObserver)',
    name_w = 'FakeQuantize(MovingAveragePerChannelMinMaxObserver)'})
end

-- torch.ao.quantization's named qconfigs (their constructors: observer.lua,
-- fake_quantize.lua)
M.default_qconfig = M.QConfig({activation = O.default_observer, weight = per_tensor_weight,
                               name_a = 'MinMaxObserver(quant_min=0, quant_max=127)',
                               name_w = 'MinMaxObserver(qint8, per_tensor_symmetric)'})
M.default_per_channel_qconfig = M.QConfig({activation = O.default_observer, weight = per_channel_weight,
                                           name_a = 'MinMaxObserver(quant_min=0, quant_max=127)',
                                           name_w = 'PerChannelMinMaxObserver(qint8, per_channel_symmetric)'})
M.default_qat_qconfig = M.QConfig({activation = FQ.default_fake_quant, weight = FQ.default_weight_fake_quant,
                                   name_a = 'FakeQuantize(MovingAverageMinMaxObserver, reduce_range)',
                                   name_w = 'FakeQuantize(MovingAverageMinMaxObserver, qint8, per_tensor_symmetric)'})
M.default_dynamic_qconfig = M.QConfig({activation = O.PlaceholderObserver:with_args({is_dynamic = true}),
                                       weight = per_tensor_weight, name_a = 'PlaceholderObserver',
                                       name_w = 'MinMaxObserver(qint8, per_tensor_symmetric)'})

------------------------------------------------------------------ module tree helpers
local registry = module.registry

local function kind(m)
  local c = class.of(m)
  while c do
    local n = rawget(c, '__name')
    if n then return n end
    c = rawget(c, 'super')
  end
  return '?'
end

-- visits (path, module, parent, name, qconfig) depth first; qconfig inherited
local function walk(m, fn, path, parent, name, qc)
  local own = rawget(m, 'qconfig')
  if own ~= nil then qc = own or nil end
  local skip = fn(path, m, parent, name, qc)
  if skip then return end
  for cname, c in registry(m, '_modules'):items() do
    walk(c, fn, path == '' and cname or (path .. '.' .. cname), m, cname, qc)
  end
end

-- list containers (Sequential, ModuleList) keep their elements in the array
-- part too: their add_module replaces in place
local function replace(parent, name, new)
  if parent.__container_index then parent:add_module(name, new)
  else registry(parent, '_modules'):set(name, new) end
end
local function label(path, m) return ('%s (%s)'):format(path == '' and '<model>' or path, kind(m)) end

-- classes that produce an output to observe, and those that pass a
-- quantized tensor through unchanged
local QAT_BN_FLOAT = {QM.ConvBn2d, QM.ConvBnReLU2d, QM.LinearBn1d}
local function float_bn(m)
  for _, c in ipairs(QAT_BN_FLOAT) do if isinstance(m, c) then return true end end
  return false
end
local function observed(m)
  if isinstance(m, nn.NonDynamicallyQuantizableLinear) then return false end   -- MultiheadAttention's
  return isinstance(m, nn.Conv2d) or isinstance(m, nn.Linear) or isinstance(m, QM.ConvReLU2d)
    or isinstance(m, QM.LinearReLU) or isinstance(m, QM.QuantStub)
    or isinstance(m, QM.qat.Conv2d) or isinstance(m, QM.qat.ConvReLU2d)
    or isinstance(m, QM.qat.Linear) or isinstance(m, QM.qat.LinearReLU)
    or QM.has_bn(m) or float_bn(m) or (isinstance(m, nn.BatchNorm2d) and not isinstance(m, QM.BatchNorm2d_q))
end
local PASS = {'ReLU', 'MaxPool2d', 'AvgPool2d', 'AdaptiveAvgPool2d', 'Flatten', 'Identity', 'Dropout',
              'DeQuantStub', 'FloatFunctional'}
local function passes(m)
  for _, k in ipairs(PASS) do
    if nn[k] and isinstance(m, nn[k]) then return true end
    if QM[k] and isinstance(m, QM[k]) then return true end
  end
  return isinstance(m, O.ObserverBase) or isinstance(m, FQ.FakeQuantize)
end

--- quantization.float_qparams_weight_only_qconfig: weight-only quint8 rows with float scale and zero point
-- (PyTorch's; the only qconfig for nn.Embedding / nn.EmbeddingBag).
M.float_qparams_weight_only_qconfig = M.QConfig({activation = O.default_placeholder_observer,
                                                 weight = O.default_float_qparams_observer,
                                                 name_a = 'PlaceholderObserver',
                                                 name_w = 'PerChannelMinMaxObserver(quint8, '
                                                   .. 'per_channel_affine_float_qparams)'})

--- quantization.float_qparams_weight_only_qconfig_4bit: the same with quint4x2 rows (two values a
-- byte: tables 8x smaller than float32; PyTorch's, for nn.EmbeddingBag and nn.Embedding).
M.float_qparams_weight_only_qconfig_4bit = M.QConfig({activation = O.default_placeholder_observer,
                                                      weight = O.default_float_qparams_observer_4bit,
                                                      name_a = 'PlaceholderObserver',
                                                      name_w = 'PerChannelMinMaxObserver(quint4x2, '
                                                        .. 'per_channel_affine_float_qparams)'})

-- whether qc quantizes weights per row with float qparams (embeddings')
local function is_float_qparams(qc)
  return qc.weight().qscheme == 'per_channel_affine_float_qparams'
end

-- the weight-only classes (embeddings): float_qparams_weight_only_qconfig only
local function weight_only_map()
  return {{nn.Embedding, QM.Embedding, 'nn.Embedding'}, {nn.EmbeddingBag, QM.EmbeddingBag, 'nn.EmbeddingBag'}}
end

-- a float embedding's weight as quint8 rows, by qc's observer
local function quantize_rows(op, w, qc)
  local obs = qc.weight()
  if obs.qscheme ~= 'per_channel_affine_float_qparams' then
    A.fail(('%s: embeddings are quantized only with float_qparams_weight_only_qconfig (quint8 rows, '
      .. 'float scale and zero point), got a %s weight observer'):format(op, obs.qscheme))
  end
  obs(w:detach())
  local s, z = obs:calculate_qparams()
  return Q.quantize_float_qparams(op, w:detach(), s, z, obs.ch_axis or 1, obs.dtype)
end

-- a float embedding module's weight-only quantized copy
local function quantize_embedding(op, m, qc)
  if isinstance(m, nn.EmbeddingBag) then
    return QM.EmbeddingBag({weight = quantize_rows(op, m.weight, qc), mode = m.mode,
                            include_last_offset = m.include_last_offset, padding_idx = m.padding_idx})
  end
  if m.max_norm then
    A.fail(op .. ': an nn.Embedding with max_norm renormalises its float rows at lookup; it cannot be quantized')
  end
  return QM.Embedding({weight = quantize_rows(op, m.weight, qc), padding_idx = m.padding_idx})
end

local function check_supported(op, model)
  walk(model, function(path, m, _, _, qc)
    if not qc then return false end
    if observed(m) then
      if float_bn(m) and op ~= 'prepare_qat' then
        A.fail(('%s: %s keeps its BatchNorm for quantization-aware training (fuse_modules_qat); use '
          .. 'prepare_qat, or fuse_modules in eval mode to fold the BatchNorm for post-training '
          .. 'quantization'):format(op, label(path, m)))
      end
      local conv = float_bn(m) and m:part(1) or m
      if isinstance(conv, nn.Conv2d) then
        if conv.padding_mode ~= 'zeros' then
          A.fail(('%s: %s has padding_mode %s; quantized convolutions pad with zeros only'):format(
            op, label(path, m), tostring(conv.padding_mode)))
        end
      end
      return true
    end
    if isinstance(m, nn.Embedding) or isinstance(m, nn.EmbeddingBag) then
      -- weight-only: no observer; convert quantizes the table per row
      if not is_float_qparams(qc) then
        A.fail(('%s: %s: embedding quantization is only supported with float_qparams_weight_only_qconfig '
          .. '(or set its qconfig to false to keep it float)'):format(op, label(path, m)))
      end
      return true
    end
    if passes(m) then return true end
    if isinstance(m, nn.NonDynamicallyQuantizableLinear) then
      A.fail(('%s: %s is MultiheadAttention\'s output projection, which has no quantized version here; '
        .. 'set the attention\'s qconfig to false to keep it float (quantize_dynamic quantizes the layers '
        .. 'around it)'):format(op, label(path, m)))
    end
    if registry(m, '_modules'):len() == 0 then
      A.fail(('%s: %s has no quantized version; fuse it first (fuse_modules: Conv2d+BatchNorm2d(+ReLU), '
        .. 'Linear+ReLU), or set its qconfig to false to keep it float between a DeQuantStub and a '
        .. 'QuantStub'):format(op, label(path, m)))
    end
    return false
  end, '', nil, nil, nil)
end

------------------------------------------------------------------ fusion
-- checks the arguments, fills in the optional ones (nil bias: zeros; nil
-- affine: ones and zeros) and returns formula's weight and bias as parameters
local function fold_weights(op, wname, w, b, rm, rv, eps, bn_w, bn_b, formula)
  A.check_tensor(op, w, wname, 1)
  A.check_tensor(op, rm, 'bn_rm', 3)
  A.check_tensor(op, rv, 'bn_rv', 4)
  if type(eps) ~= 'number' then A.fail(op .. ': argument 5 (bn_eps) must be a number, got ' .. A.describe(eps)) end
  return flow.no_grad(function()
    local fw, fb = formula(w:detach(), b ~= nil and b:detach() or flow.zeros_like(rm), rm, rv, eps,
                           bn_w ~= nil and bn_w:detach() or flow.ones_like(rm),
                           bn_b ~= nil and bn_b:detach() or flow.zeros_like(rm))
    return nn.Parameter(fw), nn.Parameter(fb)
  end)
end

--- fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
-- the weight and bias of a convolution with the BatchNorm (its running
-- statistics) folded in, PyTorch's formula term for term
-- (torch.nn.utils.fuse_conv_bn_weights); conv_b, bn_w, bn_b may be nil.
function M.fuse_conv_bn_weights(conv_w, conv_b, rm, rv, eps, bn_w, bn_b)
  return fold_weights('fuse_conv_bn_weights', 'conv_w', conv_w, conv_b, rm, rv, eps, bn_w, bn_b,
    function(w, b, m, v, e, g, beta)
      local rsqrt = (v + e):rsqrt()
      local sh = {-1}
      for i = 2, w:dim() do sh[i] = 1 end
      return w * (g * rsqrt):reshape(sh), (b - m) * rsqrt * g + beta
    end)
end

--- fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
-- as fuse_conv_bn_weights for a Linear (torch.nn.utils.fuse_linear_bn_weights).
function M.fuse_linear_bn_weights(lin_w, lin_b, rm, rv, eps, bn_w, bn_b)
  return fold_weights('fuse_linear_bn_weights', 'linear_w', lin_w, lin_b, rm, rv, eps, bn_w, bn_b,
    function(w, b, m, v, e, g, beta)
      local sc = g * (v + e):rsqrt()
      return w * sc:unsqueeze(-1), (b - m) * sc + beta
    end)
end

-- a BatchNorm's folded weight and bias for the conv/linear (or QAT) module lin
local function folded(lin, bn, is_conv)
  local fuse = is_conv and M.fuse_conv_bn_weights or M.fuse_linear_bn_weights
  return fuse(lin.weight, lin.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
end

-- BatchNorm folded into the preceding conv/linear (eval statistics)
local function fold_bn(op, lin, bn, path)
  if bn.training or lin.training then
    A.fail(('%s: fusing %s with BatchNorm needs eval mode (call model:eval() first)'):format(op, path))
  end
  if not bn.track_running_stats and bn.running_mean == nil then
    A.fail(('%s: %s BatchNorm has no running statistics to fold'):format(op, path))
  end
  local out = lin:clone()
  out.weight, out.bias = folded(lin, bn, isinstance(lin, nn.Conv2d))
  return out
end
--- quantization.fuse_conv_bn_eval(conv, bn): a Conv2d with the eval-mode BatchNorm folded into its weight and bias.
M.fuse_conv_bn_eval = function(conv, bn)
  A.arg('fuse_conv_bn_eval', 1, 'conv', conv, 'module')
  A.arg('fuse_conv_bn_eval', 2, 'bn', bn, 'module')
  return fold_bn('fuse_conv_bn_eval', conv, bn, 'conv') end
--- quantization.fuse_linear_bn_eval(linear, bn): a Linear with the eval-mode BatchNorm1d folded in.
M.fuse_linear_bn_eval = function(linear, bn)
  A.arg('fuse_linear_bn_eval', 1, 'linear', linear, 'module')
  A.arg('fuse_linear_bn_eval', 2, 'bn', bn, 'module')
  return fold_bn('fuse_linear_bn_eval', linear, bn, 'linear') end

local FUSIONS = {
  {{'Conv2d', 'BatchNorm2d'}, function(op, p, c, b) return fold_bn(op, c, b, p) end},
  {{'Conv2d', 'BatchNorm2d', 'ReLU'}, function(op, p, c, b, r) return QM.ConvReLU2d(fold_bn(op, c, b, p), r) end},
  {{'Conv2d', 'ReLU'}, function(_, _, c, r) return QM.ConvReLU2d(c, r) end},
  {{'Linear', 'ReLU'}, function(_, _, l, r) return QM.LinearReLU(l, r) end},
  {{'Linear', 'BatchNorm1d'}, function(op, p, l, b) return fold_bn(op, l, b, p) end},
}
-- for QAT: BatchNorm kept (prepare_qat makes the fused modules QAT modules)
local function same_mode(op, p, a, b)
  if a.training ~= b.training then
    A.fail(('%s: %s and its BatchNorm must both be in training or both in eval mode'):format(op, p))
  end
end
local FUSIONS_QAT = {
  {{'Conv2d', 'BatchNorm2d'}, function(op, p, c, b) same_mode(op, p, c, b); return QM.ConvBn2d(c, b) end},
  {{'Conv2d', 'BatchNorm2d', 'ReLU'}, function(op, p, c, b, r)
    same_mode(op, p, c, b); return QM.ConvBnReLU2d(c, b, r) end},
  FUSIONS[3], FUSIONS[4],
  {{'Linear', 'BatchNorm1d'}, function(op, p, l, b) same_mode(op, p, l, b); return QM.LinearBn1d(l, b) end},
}

local function lookup(model, path, op)
  local parent, name = nil, nil
  local m = model
  for part in path:gmatch('[^.]+') do
    parent, name = m, part
    m = registry(m, '_modules'):get(part)
    if m == nil then A.fail(('%s: the model has no submodule %s'):format(op, path)) end
  end
  return m, parent, name
end

-- each group of paths fused by the first matching entry of fusions
local function fuse(op, fusions, model, groups, opts)
  opts = A.check_options(op, opts, {inplace = true}) or {}
  if not module.is_module(model) then A.fail(op .. ': expected a module') end
  if type(groups) ~= 'table' then A.fail(op .. ': groups must be a list of lists of module paths') end
  if type(groups[1]) == 'string' then groups = {groups} end
  if not opts.inplace then model = model:clone() end
  for _, g in ipairs(groups) do
    local mods, kinds, where = {}, {}, {}
    for i, path in ipairs(g) do
      local m, parent, name = lookup(model, path, op)
      mods[i], kinds[i], where[i] = m, kind(m), {parent, name}
    end
    local fn
    for _, f in ipairs(fusions) do
      if #f[1] == #kinds then
        local ok = true
        for i = 1, #kinds do
          if not (nn[f[1][i]] and isinstance(mods[i], nn[f[1][i]])) then ok = false end
        end
        if ok then fn = f[2] end
      end
    end
    if not fn then
      A.fail(('%s: no fusion for (%s) at %s; supported: Conv2d+BatchNorm2d(+ReLU), Conv2d+ReLU, '
        .. 'Linear+ReLU, Linear+BatchNorm1d'):format(op, table.concat(kinds, ', '), table.concat(g, ', ')))
    end
    for i = 2, #mods do
      if mods[i] == mods[1] then A.fail(('%s: %s names one module twice'):format(op, table.concat(g, ', '))) end
    end
    local fused = fn(op, g[1], unpack(mods))
    replace(where[1][1], where[1][2], fused)
    for i = 2, #g do replace(where[i][1], where[i][2], nn.Identity()) end
  end
  return model
end

--- fuse_modules(model, groups, {inplace = false}): each group, a list of
-- dotted paths, becomes one module in the first path (the others become
-- nn.Identity). Conv2d+BatchNorm2d(+ReLU), Conv2d+ReLU, Linear+ReLU,
-- Linear+BatchNorm1d; BatchNorm is folded into the weights (eval mode).
function M.fuse_modules(model, groups, opts) return fuse('fuse_modules', FUSIONS, model, groups, opts) end

--- fuse_modules_qat(model, groups, {inplace = false}): as fuse_modules, for
-- quantization-aware training: Conv2d+BatchNorm2d(+ReLU) and
-- Linear+BatchNorm1d keep their BatchNorm (ConvBn2d, ConvBnReLU2d,
-- LinearBn1d; prepare_qat makes them QAT modules that train it, convert
-- folds it), in either mode. Conv2d+ReLU and Linear+ReLU as fuse_modules.
function M.fuse_modules_qat(model, groups, opts)
  return fuse('fuse_modules_qat', FUSIONS_QAT, model, groups, opts)
end

------------------------------------------------------------------ prepare
local function observe_output(m, obs)
  m.activation_post_process = obs
  rawset(m, '_q_hook', m:register_forward_hook(function(mod, _, out)
    return mod.activation_post_process(out)
  end))
end

local function attach_observers(model, op)
  walk(model, function(_, m, _, _, qc)
    if not qc then return false end
    if isinstance(m, QM.FloatFunctional) then
      m.activation_post_process = qc.activation()
      return true
    end
    if observed(m) then
      if not (isinstance(registry(m, '_modules'):get('activation_post_process') or {}, O.ObserverBase)
              or isinstance(registry(m, '_modules'):get('activation_post_process') or {}, FQ.FakeQuantize)) then
        observe_output(m, qc.activation())
      end
      return true
    end
    return false
  end, '', nil, nil, nil)
  local _ = op
end

--- prepare(model, {inplace = false}): a copy of the model with observers
-- after every layer that will be quantized (per the qconfigs).
function M.prepare(model, opts)
  local op = 'prepare'
  opts = A.check_options(op, opts, {inplace = true}) or {}
  if not module.is_module(model) then A.fail(op .. ': expected a module') end
  if not opts.inplace then model = model:clone() end
  local any = false
  walk(model, function(_, _, _, _, qc) if qc then any = true end end, '', nil, nil, nil)
  if not any then
    A.fail(op .. ': no qconfig set; assign model.qconfig = flow.quantization.get_default_qconfig() first')
  end
  check_supported(op, model)
  attach_observers(model, op)
  return model
end

local QAT_SWAP = {
  {QM.ConvReLU2d, QM.qat.ConvReLU2d}, {QM.LinearReLU, QM.qat.LinearReLU},
  {QM.ConvBn2d, QM.qat.ConvBn2d}, {QM.ConvBnReLU2d, QM.qat.ConvBnReLU2d}, {QM.LinearBn1d, QM.qat.LinearBn1d},
  {nn.Conv2d, QM.qat.Conv2d}, {nn.Linear, QM.qat.Linear},
}

--- prepare_qat(model, {inplace = false}): conv/linear layers become QAT
-- modules (fake-quantized weights) and fake quantization follows every
-- quantized layer; train as usual (eagerly or in an nn.Graph), then convert.
-- The modules fuse_modules_qat made keep training their BatchNorm.
function M.prepare_qat(model, opts)
  local op = 'prepare_qat'
  opts = A.check_options(op, opts, {inplace = true}) or {}
  if not module.is_module(model) then A.fail(op .. ': expected a module') end
  if not opts.inplace then model = model:clone() end
  check_supported(op, model)
  walk(model, function(_, m, parent, name, qc)
    if not qc or not parent then return false end
    for _, sw in ipairs(QAT_SWAP) do
      if isinstance(m, sw[1]) and not isinstance(m, QM.qat.Conv2d) then
        local inner = m
        if isinstance(m, QM.ConvReLU2d) or isinstance(m, QM.LinearReLU) then inner = m:part(1) end
        local q = sw[2](inner, qc)
        rawset(q, 'qconfig', qc)
        q:train(m.training)
        replace(parent, name, q)
        return true
      end
    end
    return false
  end, '', nil, nil, nil)
  attach_observers(model, op)
  return model
end

------------------------------------------------------------------ calibrate
--- calibrate(model, batches, {max_batches =}): runs the prepared model on
-- each batch (a DataLoader, or a list; a batch is an input tensor or
-- {input, ...}) without gradients. Returns the number of batches seen.
function M.calibrate(model, batches, opts)
  local op = 'calibrate'
  opts = A.check_options(op, opts, {max_batches = true}) or {}
  local n = 0
  local function run(x)
    if type(x) == 'table' and not flow.is_tensor(x) then x = x[1] end
    A.check_tensor(op, x, 'batch')
    model(x)
    n = n + 1
  end
  flow.no_grad(function()
    if type(batches) == 'table' and batches.iter then
      for x in batches:iter() do
        if opts.max_batches and n >= opts.max_batches then break end
        run(x)
      end
    elseif type(batches) == 'table' then
      for _, x in ipairs(batches) do
        if opts.max_batches and n >= opts.max_batches then break end
        run(x)
      end
    else
      A.fail(op .. ': batches must be a DataLoader or a list of batches, got ' .. A.describe(batches))
    end
  end)
  if n == 0 then A.fail(op .. ': no batches (an empty loader or list); the observers need data') end
  return n
end

------------------------------------------------------------------ convert
local function obs_qparams(m, path)
  local obs = registry(m, '_modules'):get('activation_post_process')
  if not obs then A.fail(('convert: %s was not prepared (no observer); call prepare first'):format(path)) end
  local s, z = obs:calculate_qparams(('convert: %s'):format(path))
  return s, z, obs.dtype
end

-- the float weight quantized with the qconfig's weight observer (or the
-- QAT module's own weight fake-quantizer)
local function quantize_weight(w, qc, fq)
  -- a QAT module's fake quantizer sees the final weights (as PyTorch's
  -- from_float does; a disabled observer keeps its range)
  local obs = fq or qc.weight()
  obs(w:detach())
  local s, z = obs:calculate_qparams()
  local dt = obs.dtype
  if dt ~= Q.qint8 then A.fail('convert: weights must be observed as qint8, got ' .. dt.name) end
  if flow.is_tensor(s) then
    return Q.quantize_per_channel(w:detach(), s:to(flow.float64), z, obs.ch_axis or 1, dt)
  end
  return Q.quantize_per_tensor(w:detach(), s, z, dt)
end

local function conv_of(m) return (isinstance(m, QM.ConvReLU2d) or isinstance(m, QM.LinearReLU)) and m:part(1) or m end
local function is_qat_conv(m)
  return isinstance(m, QM.qat.Conv2d) or isinstance(m, QM.qat.ConvReLU2d) or isinstance(m, QM.qat.ConvBn2d)
    or isinstance(m, QM.qat.ConvBnReLU2d)
end

local function padding_of(path, c)
  local p = c.padding
  if p == 'valid' then return {0, 0} end
  if p == 'same' then
    local r = {}
    for i = 1, 2 do
      local span = c.dilation[i] * (c.kernel_size[i] - 1)
      if span % 2 == 1 then A.fail(('convert: %s uses padding same with an even kernel'):format(path)) end
      r[i] = span / 2
    end
    return r
  end
  return p
end

local function convert_one(path, m, qc)
  local is_conv = isinstance(m, nn.Conv2d) or isinstance(m, QM.ConvReLU2d) or is_qat_conv(m)
  local relu = isinstance(m, QM.ConvReLU2d) or isinstance(m, QM.LinearReLU) or isinstance(m, QM.qat.ConvReLU2d)
    or isinstance(m, QM.qat.LinearReLU) or isinstance(m, QM.qat.ConvBnReLU2d)
  local s, z, dt = obs_qparams(m, path)
  local inner = conv_of(m)
  local fq = registry(inner, '_modules'):get('weight_fake_quant')
  local weight, bias = inner.weight, inner.bias
  -- a QAT module's BatchNorm is folded in (running statistics), and its
  -- fake quantizer then sees the folded weight (PyTorch's from_float)
  if QM.has_bn(m) then weight, bias = folded(inner, inner.bn, is_conv) end
  local w = quantize_weight(weight, qc, fq)
  local b = bias ~= nil and bias:detach() or nil
  if is_conv then
    local cls = relu and QM.ConvReLU2d_q or QM.Conv2d
    return cls({weight = w, bias = b, stride = inner.stride, padding = padding_of(path, inner),
                dilation = inner.dilation, groups = inner.groups, scale = s, zero_point = z, dtype = dt})
  end
  local cls = relu and QM.LinearReLU_q or QM.Linear
  return cls({weight = w, bias = b, scale = s, zero_point = z, dtype = dt})
end

--- convert(model, {inplace = false}): the prepared (or QAT) model with its
-- observed layers replaced by int8 modules.
function M.convert(model, opts)
  local op = 'convert'
  opts = A.check_options(op, opts, {inplace = true}) or {}
  if not module.is_module(model) then A.fail(op .. ': expected a module') end
  if not opts.inplace then model = model:clone() end
  check_supported(op, model)
  walk(model, function(path, m, parent, name, qc)
    if not qc or not parent then return false end
    local new
    if isinstance(m, QM.QuantStub) then
      local s, z, dt = obs_qparams(m, path)
      new = QM.Quantize(s, z, dt)
    elseif isinstance(m, QM.DeQuantStub) then
      new = QM.DeQuantize()
    elseif isinstance(m, QM.FloatFunctional) then
      local s, z, dt = obs_qparams(m, path)
      new = QM.QFunctional(s, z, dt)
    elseif isinstance(m, nn.BatchNorm2d) and not isinstance(m, QM.BatchNorm2d_q) then
      local s, z, dt = obs_qparams(m, path)
      new = QM.BatchNorm2d_q(m, s, z, dt)
    elseif isinstance(m, nn.Embedding) or isinstance(m, nn.EmbeddingBag) then
      new = quantize_embedding(op, m, qc)
    elseif observed(m) then
      new = convert_one(path, m, qc)
    elseif isinstance(m, nn.ReLU) then
      new = QM.ReLU()
    elseif isinstance(m, nn.Dropout) then
      new = nn.Identity()
    end
    if new then
      new:eval()
      replace(parent, name, new)
      return true
    end
    return false
  end, '', nil, nil, nil)
  model:eval()
  return model
end

------------------------------------------------------------------ one-call forms
-- run_args: a plain list of arguments after the model (PyTorch's *run_args),
-- or one argument (a tensor, a DataLoader ...)
local function run_with(model, run_fn, run_args)
  if type(run_args) == 'table' and getmetatable(run_args) == nil then run_fn(model, unpack(run_args))
  elseif run_args == nil then run_fn(model)
  else run_fn(model, run_args) end
end

-- prepare (or prepare_qat) in the given mode, run_fn, convert
local function one_call(op, prep, training, model, run_fn, run_args, opts)
  opts = A.check_options(op, opts, {inplace = true}) or {}
  A.arg(op, 1, 'model', model, 'module')
  A.arg(op, 2, 'run_fn', run_fn, 'function')
  if not opts.inplace then model = model:clone() end
  model:train(training)
  prep(model, {inplace = true})
  run_with(model, run_fn, run_args)
  return M.convert(model, {inplace = true})
end

--- quantize(model, run_fn, run_args, {inplace = false}): post-training static
-- quantization in one call, as torch.ao.quantization.quantize: eval mode,
-- prepare, run_fn(prepared, unpack(run_args)) to calibrate, convert.
function M.quantize(model, run_fn, run_args, opts)
  return one_call('quantize', M.prepare, false, model, run_fn, run_args, opts)
end

--- quantize_qat(model, run_fn, run_args, {inplace = false}): quantization-aware
-- training in one call (torch.ao.quantization.quantize_qat): training mode,
-- prepare_qat, run_fn(model, unpack(run_args)) trains, convert.
function M.quantize_qat(model, run_fn, run_args, opts)
  return one_call('quantize_qat', M.prepare_qat, true, model, run_fn, run_args, opts)
end

--- propagate_qconfig_(model[, qconfig_dict]): sets every submodule's own
-- qconfig to the one that applies to it (torch.ao.quantization's): its own,
-- else qconfig_dict[its dotted path], else qconfig_dict[its class], else its
-- parent's. In place; returns nothing, as PyTorch's.
function M.propagate_qconfig_(model, qconfig_dict)
  local op = 'propagate_qconfig_'
  A.arg(op, 1, 'model', model, 'module')
  A.arg(op, 2, 'qconfig_dict', qconfig_dict, 'table|nil')
  qconfig_dict = qconfig_dict or {}
  for k, v in pairs(qconfig_dict) do
    if v ~= false and not M.is_qconfig(v) then
      A.fail(('%s: qconfig_dict[%s] must be a QConfig or false, got %s'):format(op, tostring(k), A.describe(v)))
    end
  end
  local function visit(m, path, parent_qc)
    local qc = parent_qc
    local c = class.of(m)
    while c do   -- the most derived class named in the dict
      if qconfig_dict[c] ~= nil then qc = qconfig_dict[c]; break end
      c = rawget(c, 'super')
    end
    if qconfig_dict[path] ~= nil then qc = qconfig_dict[path] end
    local own = rawget(m, 'qconfig')
    if own ~= nil then qc = own end
    if qc ~= nil then rawset(m, 'qconfig', qc) end
    for name, child in registry(m, '_modules'):items() do
      visit(child, path == '' and name or (path .. '.' .. name), qc)
    end
  end
  visit(model, '', nil)
end

--- add_quant_dequant(model): wraps every leaf module that has its own
-- qconfig in a QuantWrapper (after propagate_qconfig_: every leaf under a
-- qconfig), in place; returns the model (or the wrapper, for a leaf).
function M.add_quant_dequant(m)
  if not module.is_module(m) then A.fail('add_quant_dequant: expected a module, got ' .. A.describe(m)) end
  local mods = registry(m, '_modules')
  if mods:len() == 0 and rawget(m, 'qconfig') then return QM.QuantWrapper(m) end
  local names = {}
  for name in mods:items() do names[#names + 1] = name end
  for _, name in ipairs(names) do replace(m, name, M.add_quant_dequant(mods:get(name))) end
  return m
end

------------------------------------------------------------------ dynamic
--- quantization.float16_dynamic_qconfig: float16 weights, float32 inputs and products (PyTorch's).
M.float16_dynamic_qconfig = M.QConfig({
  activation = O.PlaceholderObserver:with_args({dtype = flow.float16, is_dynamic = true}),
  weight = O.PlaceholderObserver:with_args({dtype = flow.float16}),
  name_a = 'PlaceholderObserver(float16, is_dynamic)', name_w = 'PlaceholderObserver(float16)'})
M.per_channel_dynamic_qconfig = M.QConfig({activation = O.PlaceholderObserver:with_args({is_dynamic = true}),
                                           weight = per_channel_weight, name_a = 'PlaceholderObserver',
                                           name_w = 'PerChannelMinMaxObserver(qint8, per_channel_symmetric)'})

-- the float classes quantize_dynamic knows and their dynamic versions (the
-- classes' names for messages)
local function dynamic_map()
  return {{nn.Linear, QM.dynamic.Linear, 'nn.Linear'}, {nn.LSTM, QM.dynamic.LSTM, 'nn.LSTM'},
          {nn.GRU, QM.dynamic.GRU, 'nn.GRU'}, {nn.LSTMCell, QM.dynamic.LSTMCell, 'nn.LSTMCell'},
          {nn.GRUCell, QM.dynamic.GRUCell, 'nn.GRUCell'}, {nn.RNNCell, QM.dynamic.RNNCell, 'nn.RNNCell'}}
end

--- quantize_dynamic(model, spec, {dtype = flow.qint8, inplace = false}):
-- Linear, LSTM, GRU and the LSTM/GRU/RNN cells get int8 weights and quantize
-- their inputs per call (an LSTM/GRU: the sequence, then the hidden state at
-- each step); input and output stay float. spec (PyTorch's qconfig_spec):
-- a list of those classes (default: all six; per-tensor symmetric weights),
-- or a table of class or dotted module path -> QConfig (its weight observer
-- quantizes the weights: per_channel_dynamic_qconfig for per-channel), or
-- both. A path's qconfig also covers what is inside that module and wins
-- over a class's; false there keeps a module float. {dtype = flow.float16}
-- (float16_dynamic_qconfig): float16 weights, float products instead.
-- nn.Embedding / nn.EmbeddingBag: with float_qparams_weight_only_qconfig only
-- (quint8 rows). MultiheadAttention's out_proj stays float, as PyTorch's.
function M.quantize_dynamic(model, spec, opts)
  local op = 'quantize_dynamic'
  opts = A.check_options(op, opts, {dtype = true, inplace = true}) or {}
  A.arg(op, 1, 'model', model, 'module')
  local dt = opts.dtype or Q.qint8
  if dt ~= Q.qint8 and dt ~= flow.float16 then
    A.fail(('%s: dtype must be flow.qint8 (int8 weights) or flow.float16, got %s'):format(op, tostring(dt)))
  end
  -- the qconfig of the classes a list names (PyTorch's choice by dtype)
  local default_qc = dt == flow.float16 and M.float16_dynamic_qconfig or M.default_dynamic_qconfig
  A.arg(op, 2, 'spec', spec, 'table|nil')
  local map, wmap = dynamic_map(), weight_only_map()
  local by_class, by_path = {}, {}
  local function known(cls)
    for _, e in ipairs(map) do if e[1] == cls then return true end end
    return false
  end
  local function weight_only(cls)
    for _, e in ipairs(wmap) do if e[1] == cls then return e[3] end end
    return nil
  end
  local function names()
    local n = {}
    for _, e in ipairs(map) do n[#n + 1] = e[3] end
    for _, e in ipairs(wmap) do n[#n + 1] = e[3] end
    return table.concat(n, ', ')
  end
  if spec == nil then
    for _, e in ipairs(map) do by_class[e[1]] = default_qc end
  else
    for k, v in pairs(spec) do
      if type(k) == 'number' then
        if weight_only(v) then
          A.fail(('%s: %s quantization is only supported with float_qparams_weight_only_qconfig: '
            .. 'spec = {[%s] = flow.quantization.float_qparams_weight_only_qconfig}'):format(
              op, weight_only(v), weight_only(v)))
        end
        if not known(v) then
          A.fail(('%s: spec[%d] must be one of %s, got %s'):format(op, k, names(), A.describe(v)))
        end
        by_class[v] = by_class[v] or default_qc
      elseif type(k) == 'string' then
        if v ~= false and not M.is_qconfig(v) then
          A.fail(("%s: spec['%s'] must be a QConfig or false, got %s"):format(op, k, A.describe(v)))
        end
        by_path[k] = v
      else
        if not known(k) and not weight_only(k) then
          A.fail(('%s: spec keys must be module paths or one of %s, got %s'):format(op, names(), A.describe(k)))
        end
        if not M.is_qconfig(v) then
          A.fail(('%s: spec[%s] must be a QConfig, got %s'):format(op, tostring(k), A.describe(v)))
        end
        if weight_only(k) and not is_float_qparams(v) then
          A.fail(('%s: %s quantization is only supported with float_qparams_weight_only_qconfig'):format(
            op, weight_only(k)))
        end
        by_class[k] = v
      end
    end
  end
  if not opts.inplace then model = model:clone() end
  local function swap(m, parent, name, qc)
    if isinstance(m, nn.Embedding) or isinstance(m, nn.EmbeddingBag) then
      local new = quantize_embedding(op, m, qc)
      new:eval()
      if parent then replace(parent, name, new) end
      return new
    end
    local function qweight(w)
      local obs = qc.weight()
      if obs.dtype == flow.float16 then return QM.fp16_weight(w) end
      if obs.dtype ~= Q.qint8 then
        A.fail(('%s: the qconfig must observe weights as qint8, got %s'):format(op, obs.dtype.name))
      end
      return quantize_weight(w, qc, obs)
    end
    local new
    for _, e in ipairs(map) do
      if isinstance(m, e[1]) then
        if e[1] == nn.Linear then
          new = QM.dynamic.Linear({weight = qweight(m.weight), bias = m.bias ~= nil and m.bias:detach() or nil})
        else
          new = e[2](m, qweight)
        end
        break
      end
    end
    new:eval()
    if parent then replace(parent, name, new) end
    return new
  end
  -- the qconfig for m: its path's (or an enclosing path's), else its class's
  local function qconfig_of(m, path_qc)
    if isinstance(m, nn.NonDynamicallyQuantizableLinear) then return nil end   -- PyTorch's exclusion
    if path_qc ~= nil then return path_qc or nil end
    for _, e in ipairs(map) do
      if isinstance(m, e[1]) then
        if isinstance(m, e[2]) then return nil end   -- already dynamic
        return by_class[e[1]]
      end
    end
    for _, e in ipairs(wmap) do if isinstance(m, e[1]) then return by_class[e[1]] end end
    return nil
  end
  local function dynamic_kind(m)
    for _, e in ipairs(map) do if isinstance(m, e[1]) and not isinstance(m, e[2]) then return true end end
    for _, e in ipairs(wmap) do if isinstance(m, e[1]) then return true end end
    return false
  end
  local function visit(m, parent, name, path, path_qc)
    if by_path[path] ~= nil then path_qc = by_path[path] end
    if dynamic_kind(m) then
      local qc = qconfig_of(m, path_qc)
      if qc then return swap(m, parent, name, qc) end
      return m
    end
    local kids = {}
    for cname, c in registry(m, '_modules'):items() do kids[#kids + 1] = {cname, c} end
    for _, kc in ipairs(kids) do
      visit(kc[2], m, kc[1], path == '' and kc[1] or (path .. '.' .. kc[1]), path_qc)
    end
    return m
  end
  return visit(model, nil, nil, '', nil)
end

return M
