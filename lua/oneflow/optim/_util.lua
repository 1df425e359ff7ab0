-- oneflow.optim._util: the optimizer base class (oneflow.class) and the
-- fused-looking tensor updates (lerp_, addcmul_, addcdiv_) that optimizers
-- share. The tensor helpers evaluate in the same order as PyTorch's CPU
-- kernels, so float64 trajectories agree to the last few ulps.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local types = require 'oneflow.types'
local class = require 'oneflow.class'
local A = require 'oneflow._args'

local C = core.C
local is_tensor = T.is_tensor
local U = {}

------------------------------------------------------------------ errors
-- Errors are reported at the first caller outside oneflow (oneflow._args).
U.fail = A.fail
local fail = U.fail

------------------------------------------------------------------ classes
-- local Foo = Base:subclass('Foo'); function Foo:__init(...) end; Foo(...)
-- (oneflow.class)
local Object = class('Object')
U.Object = Object

--- Whether obj is an instance of cls or of one of its subclasses.
U.isinstance = class.isinstance

------------------------------------------------------------------ arguments
U.REQUIRED, U.is_options, U.copy = A.REQUIRED, A.is_options, A.copy

--- Parses `name(pos1, pos2, ..., {opt = v})` against spec, a list of
-- {key, default} in PyTorch's positional order (oneflow._args.parse). Keys
-- in `ignored` are accepted and dropped. Returns a table of every key.
function U.parse_args(name, spec, ignored, ...)
  return A.parse_ignoring(name, spec, ignored, ...)
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
