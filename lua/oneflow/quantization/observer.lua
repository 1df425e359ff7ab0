-- oneflow.quantization.observer: observers record the range of the tensors
-- that flow through them and turn it into quantization parameters, with
-- torch.ao.quantization's definitions (float32 arithmetic as PyTorch's):
--   affine:    scale = max((max' - min') / (qmax - qmin), eps)
--              zero_point = clamp(qmin - rint(min' / scale), qmin, qmax)
--   symmetric: scale = max(max(-min', max') / ((qmax - qmin) / 2), eps)
--              zero_point = 0 (qint8) or 128 (quint8)
-- with min' = min(min, 0), max' = max(max, 0) (zero is always exact),
-- eps = float32's machine epsilon, and reduce_range halving the integer
-- range (fbgemm's 7-bit activations). The minima and maxima are buffers
-- updated with tensor ops only (no host reads), so observers also work
-- inside nn.Graph (QAT); calculate_qparams reads them.
--   MinMaxObserver, MovingAverageMinMaxObserver, PerChannelMinMaxObserver,
--   MovingAveragePerChannelMinMaxObserver, HistogramObserver (PyTorch's
--   L2-error search over a histogram; host side, eager only),
--   PlaceholderObserver (dynamic quantization: ranges taken at run time).
-- Options as PyTorch's keywords: {dtype = flow.quint8, qscheme =
-- 'per_tensor_affine', reduce_range = false, quant_min =, quant_max =,
-- averaging_constant = 0.01, ch_axis = 1 (1-based), bins = 2048}.
-- Observer.with_args{...} gives a constructor, as PyTorch's.
local ffi = require 'ffi'
local flow = require 'oneflow'
local A = require 'oneflow._args'
local Q = require 'oneflow.quantization.qtensor'

local nn = flow.nn
local M = {}
local EPS = 1.1920928955078125e-07   -- torch.finfo(torch.float32).eps
local function f32(v) return tonumber(ffi.new('float', v)) end

local SCHEMES = {per_tensor_affine = true, per_tensor_symmetric = true,
                 per_channel_affine = true, per_channel_symmetric = true, per_channel_affine_float_qparams = true}
local COMMON = {dtype = true, qscheme = true, reduce_range = true, quant_min = true,
                quant_max = true, eps = true, is_dynamic = true}

local function copy(t) local r = {} for k, v in pairs(t or {}) do r[k] = v end return r end

------------------------------------------------------------------ base
--- quantization.ObserverBase: the base class of observers (forward records statistics,
-- calculate_qparams gives scale and zero point).
-- @function quantization.ObserverBase
local Observer = nn.Module:subclass('ObserverBase')
M.ObserverBase = Observer

-- opts checked against allowed (COMMON plus extra keys)
function Observer:_setup(name, opts, extra, defaults)
  local allowed = copy(COMMON)
  for k in pairs(extra or {}) do allowed[k] = true end
  opts = copy(A.check_options(name, opts, allowed) or {})   -- (a read-only empty table without options)
  for k, v in pairs(defaults or {}) do if opts[k] == nil then opts[k] = v end end
  local dt = Q.qdtype(name, opts.dtype or Q.quint8)
  local qscheme = opts.qscheme or 'per_tensor_affine'
  if not SCHEMES[qscheme] then
    A.fail(('%s: qscheme must be one of per_tensor_affine, per_tensor_symmetric, '
      .. 'per_channel_affine, per_channel_symmetric, per_channel_affine_float_qparams, got %s'):format(
        name, tostring(qscheme)))
  end
  local qmin, qmax = dt.qmin, dt.qmax
  rawset(self, 'has_customized_qrange', opts.quant_min ~= nil or opts.quant_max ~= nil)
  if opts.quant_min ~= nil or opts.quant_max ~= nil then
    qmin, qmax = opts.quant_min or qmin, opts.quant_max or qmax
    if qmin > 0 or qmax < 0 or qmin >= qmax or qmin < dt.qmin or qmax > dt.qmax then
      A.fail(('%s: quant_min %s and quant_max %s must include 0 and fit %s'):format(
        name, tostring(qmin), tostring(qmax), dt.name))
    end
  end
  if opts.reduce_range then   -- PyTorch's calculate_qmin_qmax: a given range is halved
    if rawget(self, 'has_customized_qrange') then
      qmin, qmax = math.floor(qmin / 2), math.floor(qmax / 2)
    elseif dt == Q.qint8 then qmin, qmax = -64, 63
    else qmin, qmax = 0, 127 end
  end
  rawset(self, 'dtype', dt)
  rawset(self, 'qscheme', qscheme)
  rawset(self, 'reduce_range', opts.reduce_range or false)
  rawset(self, 'quant_min', qmin)
  rawset(self, 'quant_max', qmax)
  rawset(self, 'eps', opts.eps or EPS)
  rawset(self, 'is_dynamic', opts.is_dynamic or false)
  return opts
end

function Observer:is_symmetric() return self.qscheme:find('symmetric') ~= nil end
function Observer:is_per_channel() return self.qscheme:find('per_channel') ~= nil end

-- PyTorch's _calculate_qparams over float32 tensors min_val, max_val
-- (same shape); -> scale float32, zero_point int64 (same shape)
function Observer:_calculate_qparams(min_val, max_val)
  local qmin, qmax = self.quant_min, self.quant_max
  if self.qscheme == 'per_channel_affine_float_qparams' then
    -- the range as seen (not widened to 0); float zero points: x = min maps to 0
    local scale = (max_val - min_val) / f32(qmax - qmin)
    scale = flow.where(scale:gt(self.eps), scale, flow.ones_like(scale))
    return scale, -min_val / scale
  end
  local zero = flow.zeros_like(min_val)
  local min_neg = flow.minimum(min_val, zero)
  local max_pos = flow.maximum(max_val, zero)
  local scale, zp
  if self:is_symmetric() then
    max_pos = flow.maximum(-min_neg, max_pos)
    scale = flow.clamp(max_pos / f32((qmax - qmin) / 2), self.eps)
    local z = 0
    if self.dtype == Q.quint8 then
      z = rawget(self, 'has_customized_qrange') and math.floor((qmin + qmax) / 2) or 128
    end
    zp = flow.full_like(min_val, z):to(flow.int64)
  else
    scale = flow.clamp((max_pos - min_neg) / f32(qmax - qmin), self.eps)
    zp = (qmin - (min_neg / scale):round()):clamp(qmin, qmax):to(flow.int64)
  end
  return scale, zp
end

-- the observed minima and maxima must have been set (not +-inf)
function Observer:_check_seen(min_val, max_val, who)
  if not (min_val:isfinite():all():item() and max_val:isfinite():all():item()) then
    A.fail(('%s: the observer has seen no data (min/max still infinite); run calibration '
      .. 'batches through the prepared model before convert'):format(who or self.__name))
  end
  if min_val:gt(max_val):any():item() then
    A.fail(('%s: observed min > max'):format(who or self.__name))
  end
end

--- Observer.with_args(opts) -> a constructor (a function of no arguments).
function Observer.with_args(cls, opts)
  if type(cls) == 'table' and opts == nil and not flow.class.is_class(cls) then
    A.fail('with_args: call it as Observer.with_args(Observer, opts) or Observer:with_args(opts)')
  end
  return function(more)
    local o = copy(opts)
    for k, v in pairs(more or {}) do o[k] = v end
    return cls(o)
  end
end

------------------------------------------------------------------ min/max
local MinMax = Observer:subclass('MinMaxObserver')
--- MinMaxObserver({dtype =, qscheme =, reduce_range =}): records the running min and max.
-- @function quantization.MinMaxObserver
M.MinMaxObserver = MinMax

function MinMax:__init(opts, extra, defaults)
  Observer.__init(self)
  self:_setup(self.__name, opts, extra, defaults)
  if self:is_per_channel() and self.__name:find('PerChannel') == nil then
    A.fail(self.__name .. ': per-channel schemes need PerChannelMinMaxObserver')
  end
  self:register_buffer('min_val', flow.tensor(math.huge))
  self:register_buffer('max_val', flow.tensor(-math.huge))
end

-- range of x as float32 scalars (detached)
local function range_of(x)
  local d = x:detach():to(flow.float32)
  return d:min(), d:max()
end

function MinMax:forward(x)
  if x:numel() == 0 then return x end
  local lo, hi = range_of(x)
  self.min_val:copy_(flow.minimum(self.min_val, lo))
  self.max_val:copy_(flow.maximum(self.max_val, hi))
  return x
end

--- scale, zero_point: numbers for per-tensor observers, tensors (float32, int64) per channel
function MinMax:calculate_qparams(who)
  self:_check_seen(self.min_val, self.max_val, who)
  local s, z = self:_calculate_qparams(self.min_val, self.max_val)
  if self:is_per_channel() then return s, z end
  return s:item(), z:item()
end

--- observer:reset_min_max_vals(): forgets the range seen so far (PyTorch's).
function MinMax:reset_min_max_vals()
  if self:is_per_channel() then
    self.min_val, self.max_val = flow.empty(0), flow.empty(0)
  else
    self.min_val:fill_(math.huge)
    self.max_val:fill_(-math.huge)
  end
end

function MinMax:extra_repr()
  return ('min_val=%s, max_val=%s'):format(tostring(self.min_val:item()), tostring(self.max_val:item()))
end

local MovingAvg = MinMax:subclass('MovingAverageMinMaxObserver')
--- MovingAverageMinMaxObserver({averaging_constant = 0.01, ...}): a moving average of min and max.
-- @function quantization.MovingAverageMinMaxObserver
M.MovingAverageMinMaxObserver = MovingAvg

function MovingAvg:__init(opts)
  MinMax.__init(self, opts, {averaging_constant = true})
  rawset(self, 'averaging_constant', (opts and opts.averaging_constant) or 0.01)
end

-- first batch: its range; then min += c * (batch min - min)
local function moving(old, cur, c)
  return flow.where(old:isinf(), cur, old + (cur - old) * c)
end

function MovingAvg:forward(x)
  if x:numel() == 0 then return x end
  local lo, hi = range_of(x)
  self.min_val:copy_(moving(self.min_val, lo, self.averaging_constant))
  self.max_val:copy_(moving(self.max_val, hi, self.averaging_constant))
  return x
end

------------------------------------------------------------------ per channel
local PerChannel = MinMax:subclass('PerChannelMinMaxObserver')
--- PerChannelMinMaxObserver({ch_axis = 1, dtype =, qscheme =}): min and max per channel (1-based axis).
-- @function quantization.PerChannelMinMaxObserver
M.PerChannelMinMaxObserver = PerChannel

function PerChannel:__init(opts, extra)
  local ex = {ch_axis = true}
  for k in pairs(extra or {}) do ex[k] = true end
  Observer.__init(self)
  opts = self:_setup(self.__name, opts, ex, {qscheme = 'per_channel_affine'})
  if not self:is_per_channel() then
    A.fail(self.__name .. ': qscheme must be per_channel_affine, per_channel_symmetric or '
      .. 'per_channel_affine_float_qparams')
  end
  rawset(self, 'ch_axis', opts.ch_axis or 1)
  -- empty until the first batch says how many channels there are
  self:register_buffer('min_val', flow.empty(0))
  self:register_buffer('max_val', flow.empty(0))
end

local function channel_range(self, x)
  local d = x:detach():to(flow.float32)
  local axis = self.ch_axis
  if axis < 0 then axis = d:dim() + axis + 1 end
  if axis < 1 or axis > d:dim() then
    A.fail(('%s: ch_axis %d is not a dim of the %d-d input'):format(self.__name, self.ch_axis, d:dim()))
  end
  local y = d:movedim(axis, 1):reshape(d:size(axis), -1)
  return y:amin(2), y:amax(2)
end

-- the first batch sizes the buffers; a different channel count is an error
local function per_channel_update(self, lo, hi, combine)
  if self.min_val:numel() == 0 then
    self.min_val = lo:clone()
    self.max_val = hi:clone()
    return
  end
  if self.min_val:numel() ~= lo:numel() then
    A.fail(('%s: %d channels now, %d before'):format(self.__name, lo:numel(), self.min_val:numel()))
  end
  self.min_val:copy_(combine(self.min_val, lo, true))
  self.max_val:copy_(combine(self.max_val, hi, false))
end

function PerChannel:forward(x)
  if x:numel() == 0 then return x end
  local lo, hi = channel_range(self, x)
  per_channel_update(self, lo, hi, function(old, cur, is_min)
    return is_min and flow.minimum(old, cur) or flow.maximum(old, cur)
  end)
  return x
end

function PerChannel:calculate_qparams(who)
  if self.min_val:numel() == 0 then
    A.fail(('%s: the observer has seen no data; run calibration batches through the prepared '
      .. 'model before convert'):format(who or self.__name))
  end
  return MinMax.calculate_qparams(self, who)
end

function PerChannel:extra_repr() return ('ch_axis=%d, channels=%d'):format(self.ch_axis, self.min_val:numel()) end

local MovingPerChannel = PerChannel:subclass('MovingAveragePerChannelMinMaxObserver')
--- MovingAveragePerChannelMinMaxObserver({ch_axis = 1, averaging_constant = 0.01, ...}): per-channel moving averages.
-- @function quantization.MovingAveragePerChannelMinMaxObserver
M.MovingAveragePerChannelMinMaxObserver = MovingPerChannel

function MovingPerChannel:__init(opts)
  PerChannel.__init(self, opts, {averaging_constant = true})
  rawset(self, 'averaging_constant', (opts and opts.averaging_constant) or 0.01)
end

function MovingPerChannel:forward(x)
  if x:numel() == 0 then return x end
  local lo, hi = channel_range(self, x)
  local c = self.averaging_constant
  per_channel_update(self, lo, hi, function(old, cur) return moving(old, cur, c) end)
  return x
end

------------------------------------------------------------------ histogram
-- PyTorch's HistogramObserver: a histogram of `bins` bins over the range
-- seen so far (re-binned when a batch widens it), and qparams from the
-- sub-range [start bin, end bin] that minimises the L2 quantization error
-- (_non_linear_param_search). Host side (reads the histogram), so eager
-- only. Where PyTorch upsamples by upsample_rate to merge histograms of
-- different ranges, this re-bins the old counts by the overlap of each old
-- bin with the new bins (the same in the limit); for a single calibration
-- batch the two are identical.
local Hist = MinMax:subclass('HistogramObserver')
--- HistogramObserver({bins = 2048, dtype =, qscheme =}): PyTorch's histogram search for the range with the least
-- quantization error.
-- @function quantization.HistogramObserver
M.HistogramObserver = Hist

function Hist:__init(opts)
  Observer.__init(self)
  opts = self:_setup(self.__name, opts, {bins = true, upsample_rate = true})
  if self:is_per_channel() then A.fail('HistogramObserver: per-tensor schemes only') end
  rawset(self, 'bins', opts.bins or 2048)
  rawset(self, 'dst_nbins', 2 ^ (self.dtype.itemsize * 8))
  self:register_buffer('histogram', flow.zeros(self.bins, {dtype = flow.float64}))
  self:register_buffer('min_val', flow.tensor(math.huge))
  self:register_buffer('max_val', flow.tensor(-math.huge))
end

-- counts of the old histogram [lo0, hi0] moved into bins over [lo, hi]
local function rebin(old, lo0, hi0, lo, hi, nb)
  local out = {}
  for i = 1, nb do out[i] = 0 end
  local w0, w = (hi0 - lo0) / nb, (hi - lo) / nb
  if w0 == 0 then
    local j = math.min(nb, math.floor((lo0 - lo) / w) + 1)
    local s = 0
    for i = 1, nb do s = s + old[i] end
    out[j] = out[j] + s
    return out
  end
  for i = 1, nb do
    local c = old[i]
    if c ~= 0 then
      local a, b = lo0 + (i - 1) * w0, lo0 + i * w0
      local ja, jb = math.max(1, math.floor((a - lo) / w) + 1), math.min(nb, math.floor((b - lo) / w) + 1)
      for j = ja, jb do
        local l, r = math.max(a, lo + (j - 1) * w), math.min(b, lo + j * w)
        if r > l then out[j] = out[j] + c * (r - l) / (b - a) end
      end
    end
  end
  return out
end

function Hist:forward(x)
  if x:numel() == 0 then return x end
  local d = x:detach():to(flow.float32)
  local lo, hi = d:min():item(), d:max():item()
  local old_lo, old_hi = self.min_val:item(), self.max_val:item()
  local nb = self.bins
  if old_lo == math.huge then
    self.min_val:fill_(lo)
    self.max_val:fill_(hi)
    self.histogram:copy_(flow.histc(d, nb, lo, hi):to(flow.float64))
    return x
  end
  local new_lo, new_hi = math.min(lo, old_lo), math.max(hi, old_hi)
  local cur = flow.histc(d, nb, new_lo, new_hi):to(flow.float64):totable()
  local moved = (new_lo == old_lo and new_hi == old_hi) and self.histogram:totable()
    or rebin(self.histogram:totable(), old_lo, old_hi, new_lo, new_hi, nb)
  for i = 1, nb do cur[i] = cur[i] + moved[i] end
  self.histogram:copy_(flow.tensor(cur, {dtype = flow.float64}))
  self.min_val:fill_(new_lo)
  self.max_val:fill_(new_hi)
  return x
end

-- PyTorch's _get_norm: L2 error of values uniform on [delta_begin, delta_end]
local function get_norm(db, de, density)
  return density * (de * de * de - db * db * db) / 3
end

-- PyTorch's _compute_quantization_error for bins [nb_lo, nb_hi] (0-based)
local function quant_error(hist, bin_width, nbins, dst_nbins, nb_lo, nb_hi)
  local dst_bin_width = bin_width * (nb_hi - nb_lo + 1) / dst_nbins
  if dst_bin_width == 0 then return 0 end
  local norm = 0
  for i = 0, nbins - 1 do
    local c = hist[i + 1]
    if c ~= 0 then
      local src_begin = (i - nb_lo) * bin_width
      local src_end = src_begin + bin_width
      local db_bin = math.min(dst_nbins - 1, math.max(0, math.floor(src_begin / dst_bin_width)))
      local de_bin = math.min(dst_nbins - 1, math.max(0, math.floor(src_end / dst_bin_width)))
      local density = c / bin_width
      local dst_bin_begin = db_bin * dst_bin_width
      local dst_bin_center = dst_bin_begin + dst_bin_width / 2
      local delta_begin = src_begin - dst_bin_center
      local delta_end
      if db_bin == de_bin then
        delta_end = src_end - dst_bin_center
        norm = norm + get_norm(delta_begin, delta_end, density)
      else
        delta_end = dst_bin_width / 2
        norm = norm + get_norm(delta_begin, delta_end, density)
        norm = norm + (de_bin - db_bin - 1) * get_norm(-dst_bin_width / 2, dst_bin_width / 2, density)
        local dst_bin_of_end_center = de_bin * dst_bin_width + dst_bin_width / 2
        norm = norm + get_norm(-dst_bin_width / 2, src_end - dst_bin_of_end_center, density)
      end
    end
  end
  return norm
end

-- PyTorch's _non_linear_param_search -> new min, max
function Hist:_non_linear_param_search()
  local hist = self.histogram:totable()
  local lo, hi, nbins = self.min_val:item(), self.max_val:item(), self.bins
  local bin_width = (hi - lo) / nbins
  local total = 0
  for i = 1, nbins do total = total + hist[i] end
  local cumsum, s = {}, 0
  for i = 1, nbins do s = s + hist[i]; cumsum[i] = s end
  local stepsize, alpha, beta = 1e-5, 0, 1
  local start_bin, end_bin = 0, nbins - 1
  local norm_min = math.huge
  while alpha < beta do
    local next_alpha, next_beta = alpha + stepsize, beta - stepsize
    local l, r = start_bin, end_bin
    -- bins below next_alpha and above next_beta of the mass
    while l < end_bin and cumsum[l + 1] < next_alpha * total do l = l + 1 end
    while r > start_bin and cumsum[r + 1] > next_beta * total do r = r - 1 end
    local next_start, next_end = start_bin, end_bin
    if (l - start_bin) > (end_bin - r) then
      next_start, alpha = l, next_alpha
    else
      next_end, beta = r, next_beta
    end
    if next_start ~= start_bin or next_end ~= end_bin then
      local norm = quant_error(hist, bin_width, nbins, self.dst_nbins, next_start, next_end)
      if norm > norm_min then break end
      norm_min, start_bin, end_bin = norm, next_start, next_end
    end
  end
  return lo + bin_width * start_bin, lo + bin_width * (end_bin + 1)
end

function Hist:calculate_qparams(who)
  local lo, hi = self.min_val:item(), self.max_val:item()
  if lo == math.huge then
    A.fail(('%s: the observer has seen no data; run calibration batches through the prepared '
      .. 'model before convert'):format(who or self.__name))
  end
  local new_lo, new_hi = lo, hi
  if hi > lo then new_lo, new_hi = self:_non_linear_param_search() end
  local s, z = self:_calculate_qparams(flow.tensor(new_lo), flow.tensor(new_hi))
  return s:item(), z:item()
end

function Hist:extra_repr()
  return ('bins=%d, min_val=%g, max_val=%g'):format(self.bins, self.min_val:item(), self.max_val:item())
end

------------------------------------------------------------------ placeholder
-- Dynamic quantization's activation "observer": no state, qparams are
-- chosen per batch at run time (ChooseQuantizationParams).
local Placeholder = Observer:subclass('PlaceholderObserver')
--- PlaceholderObserver({dtype =}): observes nothing; marks a dtype (dynamic quantization).
-- @function quantization.PlaceholderObserver
M.PlaceholderObserver = Placeholder
function Placeholder:__init(opts)
  Observer.__init(self)
  -- a float dtype (float16_dynamic_qconfig's) marks float16 weights
  local float = opts and (opts.dtype == flow.float16 or opts.dtype == flow.float32) and opts.dtype
  if float then
    opts = copy(opts)
    opts.dtype = nil
  end
  self:_setup(self.__name, opts)
  if float then rawset(self, 'dtype', float) end
end
function Placeholder.forward(_, x) return x end
function Placeholder:calculate_qparams()
  A.fail(self.__name .. ': a placeholder has no fixed qparams (dynamic quantization chooses them per batch)')
end

--- fbgemm's ChooseQuantizationParams (the run-time choice of dynamic
-- quantization): -> scale (a float32 value; double with as_double, as
-- ATen's copy of it returns), zero_point.
function M.choose_qparams(lo, hi, qmin, qmax, reduce_range, as_double)
  A.arg('choose_qparams', 1, 'min', lo, 'number')
  A.arg('choose_qparams', 2, 'max', hi, 'number')
  A.arg('choose_qparams', 3, 'qmin', qmin, 'integer')
  A.arg('choose_qparams', 4, 'qmax', qmax, 'integer')
  lo, hi = math.min(f32(lo), 0), math.max(f32(hi), 0)
  -- C's integer division (toward zero), min and max floats, scale a double
  local function half(q) return q < 0 and -math.floor(-q / 2) or math.floor(q / 2) end
  if reduce_range then qmin, qmax = half(qmin), half(qmax) end
  local scale = (hi - lo) / (qmax - qmin)
  if f32(scale) == 0 or 1 / f32(scale) == math.huge then scale = 0.1 end
  local SMALL = f32(6.1e-5)   -- a float constant there
  if scale < SMALL then
    local org = f32(scale)
    scale = SMALL
    if lo == 0 then hi = f32(SMALL * (qmax - qmin))
    elseif hi == 0 then lo = f32(-SMALL * (qmax - qmin))
    else
      local amp = f32(SMALL / org)
      lo, hi = f32(lo * amp), f32(hi * amp)
    end
  end
  local zfm, zfx = qmin - lo / scale, qmax - hi / scale
  local efm, efx = math.abs(qmin) - math.abs(lo / scale), math.abs(qmax) - math.abs(hi / scale)
  local z0 = efm < efx and zfm or zfx
  local z
  if z0 < qmin then z = qmin elseif z0 > qmax then z = qmax
  else
    z = math.floor(z0 + 0.5)
    if z - z0 == 0.5 and z % 2 == 1 then z = z - 1 end   -- nearbyint: half to even
  end
  return as_double and scale or f32(scale), z
end

------------------------------------------------------------------ named defaults
-- torch.ao.quantization's, with its arguments (7-bit activations)
--- quantization.default_observer(): MinMaxObserver with quant_min 0, quant_max 127 (PyTorch's default_observer).
M.default_observer = MinMax:with_args({quant_min = 0, quant_max = 127})
--- quantization.default_histogram_observer(): HistogramObserver with quant_min 0, quant_max 127.
M.default_histogram_observer = M.HistogramObserver:with_args({quant_min = 0, quant_max = 127})
--- quantization.default_weight_observer(): MinMaxObserver for int8 weights, per-tensor symmetric.
M.default_weight_observer = MinMax:with_args({dtype = Q.qint8, qscheme = 'per_tensor_symmetric'})
--- quantization.default_per_channel_weight_observer(): PerChannelMinMaxObserver for int8 weights, symmetric.
M.default_per_channel_weight_observer = M.PerChannelMinMaxObserver:with_args({dtype = Q.qint8,
                                                                             qscheme = 'per_channel_symmetric'})
--- quantization.default_float_qparams_observer(): PerChannelMinMaxObserver over rows (ch_axis 1),
-- quint8, per_channel_affine_float_qparams: embedding tables' (PyTorch's).
M.default_float_qparams_observer = M.PerChannelMinMaxObserver:with_args({
  dtype = Q.quint8, qscheme = 'per_channel_affine_float_qparams', ch_axis = 1})
--- quantization.default_float_qparams_observer_4bit(): the same with quint4x2 (16 levels a row).
M.default_float_qparams_observer_4bit = M.PerChannelMinMaxObserver:with_args({
  dtype = Q.quint4x2, qscheme = 'per_channel_affine_float_qparams', ch_axis = 1})
--- quantization.default_placeholder_observer(): PlaceholderObserver (a float activation, weight-only qconfigs).
M.default_placeholder_observer = M.PlaceholderObserver:with_args({})

return M
