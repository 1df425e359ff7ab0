-- oneflow.amp: automatic mixed precision (see doc/amp.md).
--
--   flow.amp.autocast({dtype = flow.bfloat16}, function()   -- or the with-style:
--     loss = loss_fn(model(x), y)                          --   local ac = flow.amp.autocast{...}
--   end)                                                   --   ac:enter() ... ac:exit()
--   local scaler = flow.amp.GradScaler()
--   scaler:scale(loss):backward(); scaler:step(opt); scaler:update()
--
-- The op classes live in C (core/ops/amp.c): matmul/linear/conv run in the
-- autocast dtype; reductions, softmax, cumsum, losses and norms in float32;
-- everything else follows its inputs. The state is thread-local and off
-- inside backward rules, so backward runs in the forward's dtypes.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local types = require 'oneflow.types'
local class = require 'oneflow.class'
local A = require 'oneflow._args'

local C = core.C
local M = {}

local function raise(level)
  error(ffi.string(C.of_last_error()), (level or 1) + 1)
end

local function as_dtype(dt, what)
  if type(dt) == 'string' then dt = types.by_name[dt] end
  local f16, bf16 = types.by_name.float16, types.by_name.bfloat16
  if dt ~= f16 and dt ~= bf16 then
    error(('%s: dtype must be flow.float16 or flow.bfloat16, got %s'):format(what, tostring(dt)), 3)
  end
  return dt
end

------------------------------------------------------------------ autocast
local Autocast = class('autocast')

function Autocast:__init(device, code, dtype, enabled)
  self.device_type, self.code, self.dtype, self.enabled, self.stack = device, code, dtype, enabled, {}
end

local DEVICE_TYPES = {cpu = 0, cuda = 1}

local function device_code(device, what)
  local code = DEVICE_TYPES[device]
  if code == nil then
    error(("%s: device_type must be 'cpu' or 'cuda', got '%s'"):format(what, tostring(device)), 3)
  end
  return code
end

--- flow.amp.is_autocast_enabled([device_type]), flow.amp.get_autocast_dtype([device_type])
-- (device_type 'cpu', the default, or 'cuda': each has its own state)
function M.is_autocast_enabled(device)
  return C.of_autocast_enabled_device(device_code(device or 'cpu', 'is_autocast_enabled')) ~= 0
end
--- flow.amp.get_autocast_dtype(device_type = 'cpu'): the dtype autocast uses on that device.
function M.get_autocast_dtype(device)
  return types.dtypes[tonumber(C.of_autocast_dtype_device(device_code(device or 'cpu',
                                                                      'get_autocast_dtype')))]
end

--- flow.amp.autocast([device_type,] [{dtype =, enabled =, device_type =}] [, fn, ...])
-- With fn: runs fn(...) under autocast and returns its results (the
-- previous state comes back even when fn raises). Without: an object with
-- :enter() and :exit() (with-style), also callable as ac(fn, ...).
-- device_type is 'cpu' (the default; dtype defaults to bfloat16) or 'cuda'
-- (dtype defaults to float16); ops cast by the state of their inputs' device.
function M.autocast(a, b, ...)
  local device, opts, rest
  if type(a) == 'string' then
    device = a
    if type(b) == 'table' then
      opts = A.check_options('autocast', b, {dtype = true, enabled = true})
      rest = {n = select('#', ...), ...}
    else opts, rest = {}, {n = select('#', ...) + 1, b, ...} end
  else
    opts = a or {}
    if type(opts) ~= 'table' then error('autocast: expected an options table or a device type', 2) end
    A.check_options('autocast', opts, {device_type = true, dtype = true, enabled = true})
    rest = {n = select('#', ...) + 1, b, ...}
    device = opts.device_type or 'cpu'
  end
  local code = device_code(device, 'autocast')
  local default = code == 1 and types.by_name.float16 or types.by_name.bfloat16
  local self = Autocast(device, code, as_dtype(opts.dtype or default, 'autocast'), opts.enabled ~= false)
  if rest.n >= 1 and type(rest[1]) == 'function' then
    return self(unpack(rest, 1, rest.n))
  end
  return self
end

local function set(code, enabled, dt)
  if C.of_set_autocast_device(code, enabled and 1 or 0, dt) ~= 0 then raise(3) end
end

function Autocast:enter()
  local st = self.stack
  st[#st + 1] = {C.of_autocast_enabled_device(self.code) ~= 0, C.of_autocast_dtype_device(self.code)}
  set(self.code, self.enabled, self.dtype.id)
  return self
end

function Autocast:exit()
  local st = self.stack
  local prev = st[#st]
  if prev == nil then error('autocast: exit() without enter()', 2) end
  st[#st] = nil
  if C.of_set_autocast_device(self.code, prev[1] and 1 or 0, prev[2]) ~= 0 then raise(2) end
end

local function finish(self, ok, ...)
  self:exit()
  if not ok then error((...), 0) end
  return ...
end

function Autocast:__call(fn, ...)
  if type(fn) ~= 'function' then error('autocast: expected a function to run', 2) end
  self:enter()
  return finish(self, pcall(fn, ...))
end

function Autocast:__tostring()
  return ('autocast(%s, %s, enabled=%s)'):format(self.device_type, tostring(self.dtype),
                                                 tostring(self.enabled))
end

------------------------------------------------------------------ GradScaler
local GradScaler = class('GradScaler')
local READY, UNSCALED, STEPPED = 0, 1, 2

local function f32(name) return types.by_name[name] end

--- flow.amp.GradScaler{init_scale = 2^16, growth_factor = 2, backoff_factor = 0.5,
--   growth_interval = 2000, enabled = true}
-- The scale and the growth tracker are tensors (float32, int32), so that a
-- graph can bind them (nn.Graph:set_grad_scaler).
function GradScaler:__init(opts)
  opts = require('oneflow._args').check_options('GradScaler', opts,
      {'backoff_factor', 'device', 'enabled', 'growth_factor', 'growth_interval', 'init_scale'})
  self._enabled = opts.enabled ~= false
  self._growth_factor = opts.growth_factor or 2.0
  self._backoff_factor = opts.backoff_factor or 0.5
  self._growth_interval = opts.growth_interval or 2000
  if self._growth_factor <= 1 then A.fail('GradScaler: growth_factor must be > 1') end
  if self._backoff_factor >= 1 or self._backoff_factor <= 0 then
    A.fail('GradScaler: backoff_factor must be in (0, 1)')
  end
  if self._growth_interval < 1 or self._growth_interval % 1 ~= 0 then
    A.fail('GradScaler: growth_interval must be a positive integer')
  end
  -- on opts.device, else on the CPU until the first scaled output or grad
  -- shows where the work runs (PyTorch makes them lazily, on that device)
  local dev = opts.device
  self._device_fixed = dev ~= nil
  self._scale = T.flow.full({1}, opts.init_scale or 65536.0, {dtype = f32('float32'), device = dev})
  self._growth_tracker = T.flow.zeros(1, {dtype = f32('int32'), device = dev})
  self._found_inf = T.flow.zeros(1, {dtype = f32('float32'), device = dev})
  self._per_optimizer = setmetatable({}, {__mode = 'k'})
end
M.GradScaler, M.GradScaler_class = GradScaler, GradScaler

--- scaler:to(device): moves the scale, the growth tracker and the inf flags
-- (nn.Graph puts them on the graph's device).
function GradScaler:to(device)
  local dev = types.device(device)
  if tostring(self._scale.device) == tostring(dev) then return self end
  self._scale = self._scale:to(dev)
  self._growth_tracker = self._growth_tracker:to(dev)
  self._found_inf = self._found_inf:to(dev)
  for _, st in pairs(self._per_optimizer) do st.found_inf = st.found_inf:to(dev) end
  return self
end

-- the first tensor seen decides the device (unless given to the constructor)
local function follow(self, t)
  if not self._device_fixed then
    self._device_fixed = true
    self:to(t.device)
  end
end

function GradScaler:is_enabled() return self._enabled end
function GradScaler:get_scale() return self._enabled and self._scale:item() or 1.0 end
function GradScaler:get_growth_factor() return self._growth_factor end
function GradScaler:set_growth_factor(v) self._growth_factor = v end
function GradScaler:get_backoff_factor() return self._backoff_factor end
function GradScaler:set_backoff_factor(v) self._backoff_factor = v end
function GradScaler:get_growth_interval() return self._growth_interval end
function GradScaler:set_growth_interval(v) self._growth_interval = v end
function GradScaler:_get_growth_tracker() return self._growth_tracker:item() end

--- scaler:scale(outputs): outputs (a tensor or a nested table of tensors)
-- times the current scale.
function GradScaler:scale(outputs)
  if not self._enabled then return outputs end
  if T.is_tensor(outputs) then
    follow(self, outputs)
    local s = self._scale
    if s.dtype ~= outputs.dtype then s = s:to(outputs.dtype) end
    return outputs * s:reshape({})
  end
  if type(outputs) ~= 'table' then error('GradScaler.scale: expected a tensor or a table of tensors', 2) end
  local out = {}
  for k, v in pairs(outputs) do out[k] = self:scale(v) end
  return out
end

local function state_of(self, opt)
  local st = self._per_optimizer[opt]
  if st == nil then
    st = {stage = READY, found_inf = T.flow.zeros(1, {dtype = f32('float32'),
                                                      device = self._scale.device})}
    self._per_optimizer[opt] = st
  end
  return st
end

--- scaler:unscale_(opt): divides opt's grads by the scale (in place) and
-- notes whether any has an inf or nan.
function GradScaler:unscale_(opt)
  if not self._enabled then return end
  for _, group in ipairs(opt.param_groups) do
    for _, p in ipairs(group.params) do
      if p.grad ~= nil then follow(self, p.grad) end
    end
  end
  local st = state_of(self, opt)
  if st.stage == UNSCALED then
    error('GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update()', 2)
  elseif st.stage == STEPPED then
    error('GradScaler.unscale_: unscale_() is being called after step()', 2)
  end
  st.found_inf:zero_()
  for _, group in ipairs(opt.param_groups) do
    for _, p in ipairs(group.params) do
      local g = p.grad
      if g ~= nil then
        if C.of_tensor_is_contiguous(g.p) == 0 then
          g = g:contiguous()
          p.grad = g
        end
        if C.of_amp_unscale_(g.p, self._scale.p, st.found_inf.p) ~= 0 then raise(2) end
      end
    end
  end
  st.stage = UNSCALED
end

--- scaler:step(opt, ...): unscales (if not done yet) and runs opt:step(...)
-- unless a grad had an inf or nan; returns what opt:step returned (nil
-- when skipped).
function GradScaler:step(opt, ...)
  if not self._enabled then return opt:step(...) end
  local st = state_of(self, opt)
  if st.stage == STEPPED then
    error('GradScaler.step: step() has already been called since the last update()', 2)
  end
  if st.stage == READY then self:unscale_(opt) end
  local ret
  if st.found_inf:item() == 0 then ret = opt:step(...) end
  st.stage = STEPPED
  return ret
end

--- scaler:update([new_scale]): backs off after a step with inf/nan, grows
-- after growth_interval good steps (PyTorch's rule); or sets new_scale.
function GradScaler:update(new_scale)
  if not self._enabled then return end
  if new_scale ~= nil then
    local v = T.is_tensor(new_scale) and new_scale:item() or new_scale
    self._scale:fill_(v)
  else
    local found = self._found_inf
    found:zero_()
    for _, st in pairs(self._per_optimizer) do
      if st.stage ~= READY and st.found_inf:item() ~= 0 then found:fill_(1) end
    end
    if C.of_amp_update_scale_(self._scale.p, self._growth_tracker.p, found.p, self._growth_factor,
                              self._backoff_factor, self._growth_interval) ~= 0 then
      raise(2)
    end
  end
  for _, st in pairs(self._per_optimizer) do st.stage = READY end
end

function GradScaler:state_dict()
  if not self._enabled then return {} end
  return {scale = self:get_scale(), growth_factor = self._growth_factor,
          backoff_factor = self._backoff_factor, growth_interval = self._growth_interval,
          _growth_tracker = self:_get_growth_tracker()}
end

function GradScaler:load_state_dict(sd)
  if not self._enabled then return end
  if type(sd) ~= 'table' or sd.scale == nil then
    error('GradScaler.load_state_dict: the state dict is empty or has no scale', 2)
  end
  self._scale:fill_(sd.scale)
  self._growth_factor = sd.growth_factor or self._growth_factor
  self._backoff_factor = sd.backoff_factor or self._backoff_factor
  self._growth_interval = sd.growth_interval or self._growth_interval
  self._growth_tracker:fill_(sd._growth_tracker or 0)
end

function GradScaler:__tostring()
  return ('GradScaler(scale=%g, enabled=%s)'):format(self:get_scale(), tostring(self._enabled))
end

return M
