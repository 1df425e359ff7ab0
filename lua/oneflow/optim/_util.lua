-- oneflow.optim._util: the small class helper, argument parsing and the
-- fused-looking tensor updates (lerp_, addcmul_, addcdiv_) that optimizers
-- share. The tensor helpers evaluate in the same order as PyTorch's CPU
-- kernels, so float64 trajectories agree to the last few ulps.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local types = require 'oneflow.types'

local C = core.C
local is_tensor = T.is_tensor
local U = {}

------------------------------------------------------------------ errors
-- Errors are reported at the first caller outside oneflow/optim, so the
-- position in the message points at user code.
function U.fail(msg)
  local level = 2
  while true do
    local info = debug.getinfo(level, 'S')
    if not info then level = 0; break end
    if not info.source:find('oneflow/optim/', 1, true) then break end
    level = level + 1
  end
  error(msg, level)
end
local fail = U.fail

------------------------------------------------------------------ classes
-- local Foo = Base:subclass('Foo'); function Foo:__init(...) end; Foo(...)
local Object = {__name = 'Object'}
Object.__index = Object
U.Object = Object

local function new(cls, ...)
  local obj = setmetatable({}, cls)
  obj:__init(...)
  return obj
end

function Object.__init() end

function Object:subclass(name)
  local cls = {}
  -- metamethods are looked up raw, so copy them down the hierarchy
  for k, v in pairs(self) do
    if type(k) == 'string' and k:sub(1, 2) == '__' and k ~= '__index' and k ~= '__init' and k ~= '__name' then
      cls[k] = v
    end
  end
  cls.__name = name
  cls.__index = cls
  cls.super = self
  return setmetatable(cls, {__index = self, __call = new,
                            __tostring = function() return name end})
end

--- Whether obj is an instance of cls or of one of its subclasses.
function U.isinstance(obj, cls)
  if type(obj) ~= 'table' then return false end
  local c = getmetatable(obj)
  while type(c) == 'table' do
    if c == cls then return true end
    c = rawget(c, 'super')
  end
  return false
end

------------------------------------------------------------------ arguments
U.REQUIRED = setmetatable({}, {__tostring = function() return '<required>' end})

-- A trailing table is an options table when it is a plain table without an
-- array part ({30, 80} is a positional list, a scheduler is an object).
local function is_options(v)
  return type(v) == 'table' and getmetatable(v) == nil and #v == 0
end
U.is_options = is_options

--- Parses `name(pos1, pos2, ..., {opt = v})` against spec, a list of
-- {key, default} in PyTorch's positional order. Keys in `ignored` are
-- accepted and dropped. Returns a table of every key.
function U.parse_args(name, spec, ignored, ...)
  local n = select('#', ...)
  local args = {...}
  local opts = {}
  if n > 0 and is_options(args[n]) then
    opts = args[n]
    n = n - 1
  end
  if n > #spec then
    fail(('%s: expected at most %d positional arguments, got %d'):format(name, #spec, n))
  end
  local res, known = {}, {}
  for _, s in ipairs(spec) do known[s[1]] = true end
  for i = 1, n do
    local key = spec[i][1]
    if opts[key] ~= nil then fail(('%s: argument %s given twice'):format(name, key)) end
    res[key] = args[i]
  end
  for k, v in pairs(opts) do
    if not known[k] and not (ignored and ignored[k]) then
      fail(("%s: unknown option '%s'"):format(name, tostring(k)))
    end
    if known[k] then res[k] = v end
  end
  for _, s in ipairs(spec) do
    local key, default = s[1], s[2]
    if res[key] == nil then
      if default == U.REQUIRED then fail(('%s: missing required argument %s'):format(name, key)) end
      if type(default) == 'table' then default = U.copy(default) end
      res[key] = default
    end
  end
  return res
end

--- Deep copy of plain tables; tensors and other values are shared.
function U.copy(v)
  if type(v) ~= 'table' or getmetatable(v) ~= nil then return v end
  local r = {}
  for k, x in pairs(v) do r[k] = U.copy(x) end
  return r
end

------------------------------------------------------------------ checks
function U.check_number(name, what, v)
  if type(v) ~= 'number' then
    fail(('%s: %s must be a number, got %s'):format(name, what, type(v)))
  end
end

--- `name: invalid <what> v` unless v >= 0 (NaN fails too).
function U.check_nonneg(name, what, v)
  U.check_number(name, what, v)
  if v ~= v or v < 0 then fail(('%s: invalid %s %s'):format(name, what, tostring(v))) end
end

function U.check_betas(name, betas)
  if type(betas) ~= 'table' or #betas ~= 2 then
    fail(('%s: betas must be a table of two numbers, got %s'):format(name, tostring(betas)))
  end
  for i = 1, 2 do
    local b = betas[i]
    U.check_number(name, 'beta', b)
    if not (b >= 0 and b < 1) then
      fail(('%s: invalid beta parameter at index %d: %s'):format(name, i, tostring(b)))
    end
  end
end

------------------------------------------------------------------ tensor updates
U.is_tensor = is_tensor

--- a <- a + w * (b - a), evaluated like torch.lerp.
function U.lerp_(a, b, w)
  local d = b - a
  if math.abs(w) < 0.5 then
    d:mul_(w)
    return a:add_(d)
  end
  d:mul_(1 - w):neg_():add_(b)
  return a:copy_(d)
end

--- a <- a + v * t1 * t2
function U.addcmul_(a, t1, t2, v)
  local t = v == 1 and t1 * t2 or (t1 * v):mul_(t2)
  return a:add_(t)
end

--- a <- a + v * t1 / t2
function U.addcdiv_(a, t1, t2, v)
  local t = v == 1 and t1 / t2 or (t1 * v):div_(t2)
  return a:add_(t)
end

--- a <- a + alpha * b (one temporary at most)
function U.add_(a, b, alpha)
  if alpha == 1 then return a:add_(b) end
  return a:add_(b * alpha)
end

------------------------------------------------------------------ fused updates
-- SGD and Adam step a parameter with one fused C pass (of_optim_sgd_,
-- of_optim_adam_, the kernels nn.Graph records) when the parameter, its grad
-- and its state are dense CPU float32/float64 tensors of one shape. The
-- kernels do the float operations of the op-by-op path above in the same
-- order, so both paths give the same bits; the fused one reads and writes
-- each tensor once and allocates nothing.

--- The optimizer's {lr, step} float64 tensor the kernels read: one per
-- optimizer, rewritten before each call.
function U.hyper(opt)
  local h = rawget(opt, '_fused_hyper')
  if h == nil then
    local t = T.flow.zeros(2, {dtype = types.by_name.float64})
    h = {t = t, ptr = ffi.cast('double*', C.of_tensor_data(t.p))}
    rawset(opt, '_fused_hyper', h)
  end
  return h
end

local F32, F64 = C.OF_FLOAT32, C.OF_FLOAT64

-- t is dense, on the CPU, with p's dtype and shape (p already checked).
local function fits(p, t, dt, nd)
  local tp = t.p
  if C.of_tensor_dtype(tp) ~= dt or C.of_tensor_ndim(tp) ~= nd or C.of_tensor_device(tp) ~= 0
     or C.of_tensor_is_contiguous(tp) == 0 then
    return false
  end
  local a, b = C.of_tensor_shape(p.p), C.of_tensor_shape(tp)
  for i = 0, nd - 1 do
    if a[i] ~= b[i] then return false end
  end
  return true
end

--- The grad to hand to a fused update of p (made contiguous), or nil when
-- p, grad or one of the state tensors (nil ones are skipped) does not fit
-- the kernels and the op-by-op path must run.
function U.fused_grad(p, grad, s1, s2, s3)
  -- while nn.Graph traces, the op-by-op path is recorded as before (the
  -- optimizer's one shared hyper tensor would be replayed stale)
  if C.of_tracing() ~= 0 then return nil end
  local pp = p.p
  local dt = C.of_tensor_dtype(pp)
  if (dt ~= F32 and dt ~= F64) or C.of_tensor_device(pp) ~= 0
     or C.of_tensor_is_contiguous(pp) == 0 then
    return nil
  end
  local nd = C.of_tensor_ndim(pp)
  if (s1 ~= nil and not fits(p, s1, dt, nd)) or (s2 ~= nil and not fits(p, s2, dt, nd))
     or (s3 ~= nil and not fits(p, s3, dt, nd)) then
    return nil
  end
  if C.of_tensor_is_contiguous(grad.p) == 0 then grad = grad:contiguous() end
  if not fits(p, grad, dt, nd) then return nil end
  return grad
end

--- Raises the C error of a failed fused update.
function U.check(rc)
  if rc ~= 0 then core.raise(2) end
end

-- A state value that PyTorch saves as a 0-d tensor (loaded state dicts), as a number.
function U.num(v)
  if U.is_tensor(v) then return v:item() end
  return v
end

--- The loop of the element-wise optimizers: fn(p, grad, state, step) for each
-- parameter of the group that has a grad. state is made by fresh(p, grad)
-- when it has no `key` yet; step counts the calls; grad is negated under
-- maximize and gets weight_decay * p added when the group has weight decay
-- (PyTorch's order).
function U.each_grad(opt, group, key, fresh, fn)
  local wd, maximize = group.weight_decay or 0, group.maximize
  for _, p in ipairs(group.params) do
    local grad = p.grad
    if grad ~= nil then
      local state = opt.state[p]
      if state == nil or state[key] == nil then
        state = fresh(p, grad)
        state.step = 0
        opt.state[p] = state
      end
      state.step = state.step + 1
      if maximize then grad = -grad end
      if wd ~= 0 then grad = grad + p * wd end
      fn(p, grad, state, state.step)
    end
  end
end

return U
