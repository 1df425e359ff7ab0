-- oneflow.ops.reduce: reductions -- sum, mean, prod, amax/amin, all/any,
-- logsumexp, norm, var/std; max/min (values and 1-based indices), argmax/argmin;
-- softmax/log_softmax; cumsum/cumprod. Dims are 1-based, negative from the end.
--
-- Arguments follow PyTorch's order with a trailing options table:
--   x:sum()  x:sum(2)  x:sum({1, 2})  x:sum(2, true)  x:sum(2, {keepdim = true})
--   x:sum({dtype = flow.float64})  x:var(1, {unbiased = false})  x:norm(1, 2)
-- The module returns the functions nn.functional reuses (softmax, ...).
local core = require 'oneflow._C'
local types = require 'oneflow.types'
local util = require 'oneflow._args'
local T = require 'oneflow.tensor'

local C, out1, out2, raise, wrap = core.C, core.out1, core.out2, core.raise, core.wrap
local def, is_tensor, is_options = T.def, T.is_tensor, util.is_options
local EMPTY = {}
local ALL_DIMS = -100

local M = {}

local function check_tensor(x, op)
  if not is_tensor(x) then
    error(('%s: expected a tensor, got %s'):format(op, type(x)), 3)
  end
end

-- dim: nil (all), a number or a list -> int32_t* (or nil), count.
local function dims_arg(op, d)
  if d == nil then return nil, 0 end
  local t = type(d)
  if t == 'table' and #d > 8 then
    error(('%s: at most 8 dims can be reduced, got %d'):format(op, #d), 4)
  end
  if t ~= 'number' and t ~= 'table' then
    error(('%s: dim must be a number or a list of numbers, got %s'):format(op, t), 4)
  end
  return util.dims_ptr(d, op, 4)
end

-- (dim?, keepdim?, opts?) in any of the accepted forms -> dims, n, keepdim, opts
local function reduce_args(op, d, a, b)
  local opts, keepdim
  if is_options(d) then opts, d = d, nil end
  if type(a) == 'boolean' then keepdim = a elseif type(a) == 'table' then opts = a end
  if type(b) == 'table' then opts = b end
  opts = opts or EMPTY
  if d == nil then d = opts.dim end
  if opts.keepdim ~= nil then keepdim = opts.keepdim end
  local ptr, n = dims_arg(op, d)
  return ptr, n, keepdim and 1 or 0, opts
end

local function dtype_id(opts)
  return opts.dtype and types.dtype(opts.dtype, 4).id or -1
end

------------------------------------------------------------------ of_reduce family
local function reducer(op, name)
  return function(x, d, a, b)
    check_tensor(x, name)
    local ptr, n, keep, opts = reduce_args(name, d, a, b)
    if C.of_reduce(op, x.p, ptr, n, keep, 0, dtype_id(opts), out1) ~= 0 then raise(2) end
    return wrap(out1[0])
  end
end

M.sum = def('sum', reducer(C.OF_RED_SUM, 'sum'))
M.mean = def('mean', reducer(C.OF_RED_MEAN, 'mean'))
M.prod = def('prod', reducer(C.OF_RED_PROD, 'prod'))
M.amax = def('amax', reducer(C.OF_RED_AMAX, 'amax'))
M.amin = def('amin', reducer(C.OF_RED_AMIN, 'amin'))
M.all = def('all', reducer(C.OF_RED_ALL, 'all'))
M.any = def('any', reducer(C.OF_RED_ANY, 'any'))
--- x:logsumexp(dim[, keepdim]): log(sum(exp(x))) computed stably; ints give float32.
M.logsumexp = def('logsumexp', reducer(C.OF_RED_LOGSUMEXP, 'logsumexp'))

local norm_names = {fro = 2, inf = math.huge, ['-inf'] = -math.huge}

--- x:norm(p = 2, dim = all, {keepdim =, dtype =}): the vector p-norm over dim(s).
-- p is a number (inf = math.huge, 0 counts non-zeros) or 'fro'.
M.norm = def('norm', function(x, p, d, a, b)
  check_tensor(x, 'norm')
  if is_options(p) then
    local o = p
    p, d, a = o.p, o.dim, o
  end
  if type(p) == 'string' then
    if norm_names[p] == nil then
      error(("norm: p = '%s' is not supported (use a number, 'fro' or math.huge)"):format(p), 2)
    end
    p = norm_names[p]
  end
  if p == nil then p = 2 end
  if type(p) ~= 'number' then error('norm: p must be a number, got ' .. type(p), 2) end
  local ptr, n, keep, opts = reduce_args('norm', d, a, b)
  if C.of_reduce(C.OF_RED_NORM, x.p, ptr, n, keep, p, dtype_id(opts), out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end)

------------------------------------------------------------------ var / std
-- x:var(dim?, unbiased?, keepdim?) or x:var(dim, {unbiased =, correction =, keepdim =});
-- x:var(false) is the biased variance over all elements.
local function variance(is_std, name)
  return function(x, d, a, b)
    check_tensor(x, name)
    local unbiased, keepdim, opts
    if type(d) == 'boolean' then unbiased, d = d, nil end
    if is_options(d) then opts, d = d, nil end
    if type(a) == 'boolean' then
      unbiased = a
      if type(b) == 'boolean' then keepdim, b = b, nil end
    elseif type(a) == 'table' then
      opts = a
    end
    if type(b) == 'table' then opts = b end
    opts = opts or EMPTY
    if d == nil then d = opts.dim end
    if opts.keepdim ~= nil then keepdim = opts.keepdim end
    if opts.unbiased ~= nil then unbiased = opts.unbiased end
    local correction = opts.correction
    if correction == nil then correction = unbiased == false and 0 or 1 end
    local ptr, n = dims_arg(name, d)
    if C.of_var(x.p, ptr, n, correction, keepdim and 1 or 0, is_std, out1) ~= 0 then raise(2) end
    return wrap(out1[0])
  end
end
M.var = def('var', variance(0, 'var'))
M.std = def('std', variance(1, 'std'))

------------------------------------------------------------------ max / min
-- x:max() -> 0-d tensor; x:max(dim[, keepdim | {keepdim =}]) -> values, indices
-- (1-based int64); x:max(y) -> elementwise maximum (PyTorch's overload).
local function extreme(is_max, name, whole_op, elementwise)
  local whole_name = is_max and 'amax' or 'amin'
  return function(x, d, a, b)
    if is_tensor(d) then return T.flow[elementwise](x, d) end
    check_tensor(x, name)
    local opts
    if is_options(d) then opts, d = d, nil end
    if type(a) == 'table' then opts = a end
    if type(b) == 'table' then opts = b end
    opts = opts or EMPTY
    if d == nil then d = opts.dim end
    if d == nil then
      if C.of_reduce(whole_op, x.p, nil, 0, 0, 0, -1, out1) ~= 0 then
        local msg = core.ffi.string(C.of_last_error()):gsub('^' .. whole_name, name)
        error(msg, 2)
      end
      return wrap(out1[0])
    end
    if type(d) ~= 'number' then
      error(('%s: dim must be a single number (use %s for several dims), got %s')
            :format(name, whole_name, type(d)), 2)
    end
    local keepdim = a == true or opts.keepdim
    if C.of_max_dim(x.p, util.dim(d, name), keepdim and 1 or 0, is_max, 1, out1, out2) ~= 0 then
      raise(2)
    end
    return wrap(out1[0]), wrap(out2[0])
  end
end
M.max = def('max', extreme(1, 'max', C.OF_RED_AMAX, 'maximum'))
M.min = def('min', extreme(0, 'min', C.OF_RED_AMIN, 'minimum'))

--- x:argmax(dim?, {keepdim =}): 1-based int64 indices; no dim: over the flattened tensor.
local function arg_extreme(is_max, name)
  return function(x, d, a, b)
    check_tensor(x, name)
    local opts
    if is_options(d) then opts, d = d, nil end
    if type(a) == 'table' then opts = a end
    if type(b) == 'table' then opts = b end
    opts = opts or EMPTY
    if d == nil then d = opts.dim end
    local keepdim = a == true or opts.keepdim
    local cd = d == nil and ALL_DIMS or util.dim(d, name)
    if C.of_argmax(x.p, cd, keepdim and 1 or 0, is_max, 1, out1) ~= 0 then raise(2) end
    return wrap(out1[0])
  end
end
M.argmax = def('argmax', arg_extreme(1, 'argmax'))
M.argmin = def('argmin', arg_extreme(0, 'argmin'))

------------------------------------------------------------------ softmax
local function cast(x, opts)
  if opts and opts.dtype then
    return T.call1(C.of_to_dtype, x.p, types.dtype(opts.dtype, 4).id, out1)
  end
  return x
end

-- softmax(x, dim[, {dtype =}]) and log_softmax: along one dim, numerically stable.
local function softmax_fn(log, name)
  return function(x, d, opts)
    check_tensor(x, name)
    if is_options(d) then opts, d = d, d.dim end
    if d == nil then error(name .. ': dim is required, e.g. ' .. name .. '(x, -1)', 2) end
    x = cast(x, opts)
    if C.of_softmax(x.p, util.dim(d, name), log, out1) ~= 0 then raise(2) end
    return wrap(out1[0])
  end
end
M.softmax = def('softmax', softmax_fn(0, 'softmax'))
M.log_softmax = def('log_softmax', softmax_fn(1, 'log_softmax'))

------------------------------------------------------------------ cumulative
-- x:cumsum(dim[, {dtype =}]): ints and bool accumulate into int64.
local function cumulative(is_prod, name)
  return function(x, d, opts)
    check_tensor(x, name)
    if is_options(d) then opts, d = d, d.dim end
    if d == nil then error(name .. ': dim is required, e.g. x:' .. name .. '(1)', 2) end
    x = cast(x, opts)
    if C.of_cumulative(x.p, util.dim(d, name), is_prod, out1) ~= 0 then raise(2) end
    return wrap(out1[0])
  end
end
M.cumsum = def('cumsum', cumulative(0, 'cumsum'))
M.cumprod = def('cumprod', cumulative(1, 'cumprod'))

------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
T.sbp('sum', R.reduce('sum'))
T.sbp('mean', R.reduce('mean'))
T.sbp({'amax', 'amin', 'prod', 'logsumexp', 'all', 'any'}, R.reduce())
T.sbp({'softmax', 'log_softmax', 'cumsum', 'cumprod'}, R.along_dim(2))

return M
