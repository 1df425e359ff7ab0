-- oneflow.ops.reduce: reductions -- sum, mean, prod, amax/amin, all/any,
-- logsumexp, norm, var/std; max/min (values and 1-based indices), argmax/argmin;
-- softmax/log_softmax (cumsum/cumprod are in scan.lua). Dims are 1-based, negative from the end.
--
-- Arguments follow PyTorch's order with a trailing options table:
--   x:sum()  x:sum(2)  x:sum({1, 2})  x:sum(2, true)  x:sum(2, {keepdim = true})
--   x:sum({dtype = flow.float64})  x:var(1, {unbiased = false})  x:norm(1, 2)
-- The module returns the functions nn.functional reuses (softmax, ...).
local core = require 'oneflow._C'
local types = require 'oneflow.types'
local A = require 'oneflow._args'
local T = require 'oneflow.tensor'

local C, out1, out2, raise, wrap = core.C, core.out1, core.out2, core.raise, core.wrap
local def, is_tensor, is_options, check_tensor = T.def, T.is_tensor, A.is_options, A.check_tensor
local ALL_DIMS = -100

local M = {}


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
  return A.dims_ptr(d, op, 4)
end

local REDUCE_OPTS = {dim = true, keepdim = true, dtype = true}

-- (dim?, keepdim?, opts?) in any of the accepted forms -> dims, n, keepdim, opts
local function reduce_args(op, d, a, b, allowed)
  local opts, keepdim
  if is_options(d) then opts, d = d, nil end
  if type(a) == 'boolean' then keepdim = a elseif type(a) == 'table' then opts = a end
  if type(b) == 'table' then opts = b end
  opts = A.check_options(op, opts, allowed or REDUCE_OPTS)
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
    check_tensor(name, x)
    local ptr, n, keep, opts = reduce_args(name, d, a, b)
    if C.of_reduce(op, x.p, ptr, n, keep, 0, dtype_id(opts), out1) ~= 0 then raise(2) end
    return wrap(out1[0])
  end
end

--- x:sum(dim?, keepdim?, {keepdim =, dtype =}): the sum over dim(s), all when nil.
-- @function flow.sum
M.sum = def('sum', reducer(C.OF_RED_SUM, 'sum'))
--- x:mean(dim?, keepdim?, {keepdim =, dtype =}): the mean over dim(s), all when nil.
-- @function flow.mean
M.mean = def('mean', reducer(C.OF_RED_MEAN, 'mean'))
--- x:prod(dim?, keepdim?, {dtype =}): the product over dim, all when nil.
-- @function flow.prod
M.prod = def('prod', reducer(C.OF_RED_PROD, 'prod'))
--- x:amax(dim?, keepdim?): the maximum over dim(s) (all when nil), without indices.
-- @function flow.amax
M.amax = def('amax', reducer(C.OF_RED_AMAX, 'amax'))
--- x:amin(dim?, keepdim?): the minimum over dim(s) (all when nil), without indices.
-- @function flow.amin
M.amin = def('amin', reducer(C.OF_RED_AMIN, 'amin'))
--- x:all(dim?, keepdim?): true where every element (along dim) is non-zero.
-- @function flow.all
M.all = def('all', reducer(C.OF_RED_ALL, 'all'))
--- x:any(dim?, keepdim?): true where any element (along dim) is non-zero.
-- @function flow.any
M.any = def('any', reducer(C.OF_RED_ANY, 'any'))
--- x:logsumexp(dim[, keepdim]): log(sum(exp(x))) computed stably; ints give float32.
M.logsumexp = def('logsumexp', reducer(C.OF_RED_LOGSUMEXP, 'logsumexp'))

local norm_names = {fro = 2, inf = math.huge, ['-inf'] = -math.huge}

--- x:norm(p = 2, dim = all, {keepdim =, dtype =}): the vector p-norm over dim(s).
-- p is a number (inf = math.huge, 0 counts non-zeros) or 'fro'.
M.norm = def('norm', function(x, p, d, a, b)
  check_tensor('norm', x)
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
  local ptr, n, keep, opts = reduce_args('norm', d, a, b, {p = true, dim = true, keepdim = true, dtype = true})
  if C.of_reduce(C.OF_RED_NORM, x.p, ptr, n, keep, p, dtype_id(opts), out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end)

------------------------------------------------------------------ var / std
-- x:var(dim?, unbiased?, keepdim?) or x:var(dim, {unbiased =, correction =, keepdim =});
-- x:var(false) is the biased variance over all elements.
local function variance(is_std, name)
  return function(x, d, a, b)
    check_tensor(name, x)
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
    opts = A.check_options(name, opts, {dim = true, keepdim = true, unbiased = true, correction = true})
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
--- x:var(dim?, {unbiased = true, correction =, keepdim = false}): the variance over dim(s).
-- @function flow.var
M.var = def('var', variance(0, 'var'))
--- x:std(dim?, {unbiased = true, correction =, keepdim = false}): the standard deviation over dim(s).
-- @function flow.std
M.std = def('std', variance(1, 'std'))

------------------------------------------------------------------ max / min
-- x:max() -> 0-d tensor; x:max(dim[, keepdim | {keepdim =}]) -> values, indices
-- (1-based int64); x:max(y) -> elementwise maximum (PyTorch's overload).
local function extreme(is_max, name, whole_op, elementwise)
  local whole_name = is_max and 'amax' or 'amin'
  return function(x, d, a, b)
    if is_tensor(d) then return T.flow[elementwise](x, d) end
    check_tensor(name, x)
    local opts
    if is_options(d) then opts, d = d, nil end
    if type(a) == 'table' then opts = a end
    if type(b) == 'table' then opts = b end
    opts = A.check_options(name, opts, {dim = true, keepdim = true})
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
    if C.of_max_dim(x.p, A.dim(d, name), keepdim and 1 or 0, is_max, 1, out1, out2) ~= 0 then
      raise(2)
    end
    return wrap(out1[0]), wrap(out2[0])
  end
end
--- x:max(dim?, keepdim?): the maximum; with dim, values and 1-based indices; x:max(y): elementwise maximum.
-- @function flow.max
M.max = def('max', extreme(1, 'max', C.OF_RED_AMAX, 'maximum'))
--- x:min(dim?, keepdim?): the minimum; with dim, values and 1-based indices; x:min(y): elementwise minimum.
-- @function flow.min
M.min = def('min', extreme(0, 'min', C.OF_RED_AMIN, 'minimum'))

--- x:argmax(dim?, {keepdim =}): 1-based int64 indices; no dim: over the flattened tensor.
local function arg_extreme(is_max, name)
  return function(x, d, a, b)
    check_tensor(name, x)
    local opts
    if is_options(d) then opts, d = d, nil end
    if type(a) == 'table' then opts = a end
    if type(b) == 'table' then opts = b end
    opts = A.check_options(name, opts, {dim = true, keepdim = true})
    if d == nil then d = opts.dim end
    local keepdim = a == true or opts.keepdim
    local cd = d == nil and ALL_DIMS or A.dim(d, name)
    if C.of_argmax(x.p, cd, keepdim and 1 or 0, is_max, 1, out1) ~= 0 then raise(2) end
    return wrap(out1[0])
  end
end
--- x:argmax(dim?, {keepdim =}): 1-based int64 index of the maximum; no dim: over the flattened tensor.
-- @function flow.argmax
M.argmax = def('argmax', arg_extreme(1, 'argmax'))
--- x:argmin(dim?, {keepdim =}): 1-based int64 index of the minimum; no dim: over the flattened tensor.
-- @function flow.argmin
M.argmin = def('argmin', arg_extreme(0, 'argmin'))

------------------------------------------------------------------ softmax
-- One op along one dim with an optional {dtype =} cast of the input first:
-- softmax/log_softmax here, cumsum/cumprod in ops/scan.lua. `flag` is the
-- C op's variant (log, is_prod); `hint` completes the missing-dim error.
function M.along_dim(cfn, flag, name, hint)
  return function(x, d, opts)
    check_tensor(name, x)
    if is_options(d) then opts, d = d, d.dim end
    opts = A.check_options(name, opts, {dim = true, dtype = true})
    if d == nil then error(name .. ': dim is required, e.g. ' .. hint, 2) end
    if opts and opts.dtype then
      x = T.call1(C.of_to_dtype, x.p, types.dtype(opts.dtype, 4).id, out1)
    end
    if cfn(x.p, A.dim(d, name), flag, out1) ~= 0 then raise(2) end
    return wrap(out1[0])
  end
end
local function softmax_fn(log, name)
  return M.along_dim(C.of_softmax, log, name, name .. '(x, -1)')
end
--- x:softmax(dim): exp(x) / sum(exp(x)) along dim (1-based).
-- @function flow.softmax
M.softmax = def('softmax', softmax_fn(0, 'softmax'))
--- x:log_softmax(dim): log(softmax(x)) along dim (1-based), computed stably.
-- @function flow.log_softmax
M.log_softmax = def('log_softmax', softmax_fn(1, 'log_softmax'))

local flow, zeros = T.flow, T.zeros_of

------------------------------------------------------------------ composed reductions
--- x:count_nonzero(dim = all): the number of non-zero elements (int64);
-- dim a number or a list.
def('count_nonzero', function(x, d)
  check_tensor('count_nonzero', x)
  local nz = x:ne(0)
  if d == nil then return nz:sum() end
  return nz:sum(d)
end)

--- x:nansum(dim?, keepdim?, {keepdim =, dtype =}): sum treating NaN as 0.
def('nansum', function(x, ...)
  check_tensor('nansum', x)
  if x:is_floating_point() then x = flow.where(x:isnan(), zeros({}, x), x) end
  return x:sum(...)
end)

--- x:nanmean(dim?, keepdim?, {keepdim =}): mean of the non-NaN elements
-- (NaN where there are none).
def('nanmean', function(x, ...)
  check_tensor('nanmean', x)
  if not x:is_floating_point() then
    error(('nanmean: expected a floating point tensor, got %s'):format(tostring(x.dtype)), 2)
  end
  local keep = x:isnan():logical_not()
  local s = flow.where(keep, x, zeros({}, x)):sum(...)
  return s / keep:sum(...):to(x.dtype)
end)

-- (dim?, unbiased?, keepdim?) / (dim, {keepdim =}) as var takes them -> dim, keepdim
local function var_dims(d, a, b)
  local keepdim
  if type(d) == 'boolean' then d = nil end
  if is_options(d) then keepdim, d = d.keepdim, d.dim end
  if type(a) == 'boolean' and type(b) == 'boolean' then keepdim = b end
  local opts = type(b) == 'table' and b or (type(a) == 'table' and a) or nil
  if opts and opts.keepdim ~= nil then keepdim = opts.keepdim end
  return d, keepdim
end

local function with_mean(name, stat)
  return function(x, d, a, b)
    check_tensor(name, x)
    local v = x[stat](x, d, a, b)
    local dim, keepdim = var_dims(d, a, b)
    if dim == nil then
      if not keepdim then return v, x:mean() end
      dim = {}
      for i = 1, x:dim() do dim[i] = i end
    end
    return v, x:mean(dim, {keepdim = keepdim})
  end
end
--- x:var_mean(dim?, {unbiased =, correction =, keepdim =}) -> var, mean
def('var_mean', with_mean('var_mean', 'var'))
--- x:std_mean(...) -> std, mean (arguments as x:std)
def('std_mean', with_mean('std_mean', 'std'))

--- x:aminmax({dim =, keepdim =}) (or x:aminmax(dim, keepdim)) -> min, max
def('aminmax', function(x, d, keepdim)
  check_tensor('aminmax', x)
  if is_options(d) then
    A.check_options('aminmax', d, {dim = true, keepdim = true})
    d, keepdim = d.dim, d.keepdim
  end
  if type(keepdim) == 'table' then keepdim = A.check_options('aminmax', keepdim, {keepdim = true}).keepdim end
  if x:numel() == 0 and d == nil then
    error('aminmax: cannot reduce an empty tensor over all its elements', 2)
  end
  if d == nil then
    if keepdim then
      local shape = {}
      for i = 1, x:dim() do shape[i] = 1 end
      return x:amin():reshape(shape), x:amax():reshape(shape)
    end
    return x:amin(), x:amax()
  end
  return x:amin(d, keepdim == true), x:amax(d, keepdim == true)
end)

------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
T.sbp('sum', R.reduce('sum'))
T.sbp('mean', R.reduce('mean'))
T.sbp({'amax', 'amin', 'prod', 'logsumexp', 'all', 'any'}, R.reduce())
T.sbp({'softmax', 'log_softmax'}, R.along_dim(2))


-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- flow.cumprod(x, dim): the cumulative product along dim (1-based).
-- @function flow.cumprod

--- flow.cumsum(x, dim): the cumulative sum along dim (1-based).
-- @function flow.cumsum

return M
