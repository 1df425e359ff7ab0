-- oneflow.ops.random: seeding, generator state and random tensors.
--
-- One Philox4x32-10 generator (core/ops/random.c) whose state is (seed, offset):
-- the seed is the key, the offset counts the 128-bit counter blocks used so
-- far. Element i of a fill depends only on (seed, offset, i), so results do
-- not depend on the thread count or on the tensor's memory layout.
--
--   flow.manual_seed(s)      reseed (offset back to 0); s an integer or a
--                            64-bit cdata; negative numbers wrap (two's complement)
--   flow.seed()              reseed from /dev/urandom; returns the new seed
--   flow.initial_seed()      the seed (a number, or uint64 cdata when >= 2^53)
--   flow.get_rng_state()     an int64 tensor {seed, offset} (seed as its int64
--                            bit pattern); flow.set_rng_state(state) restores it
--                            and replays the same numbers. set_rng_state also
--                            takes a Lua table {seed =, offset =} or {seed, offset}.
--
--   flow.rand(sizes..., opts)  U[0, 1); opts: dtype (floating), requires_grad
--   flow.randn(sizes..., opts) N(0, 1)
--   flow.randint([low,] high, size, opts)   [low, high), int64 unless dtype
--   flow.randperm(n, opts)     a permutation of 1..n (1-based), int64
--   flow.normal(mean, std, size, opts); mean/std may be tensors (then no size)
--   flow.bernoulli(p) / p:bernoulli()    0/1 with probabilities p, p's dtype
--   flow.rand_like, randn_like, randint_like(x, [low,] high)
--   x:uniform_(a, b), x:normal_(mean, std), x:random_([lo,] hi),
--   x:bernoulli_(p)  (p a number or a tensor broadcastable to x)
--   flow.native_dropout(x, p, train)  (output, bool mask) in one pass
local ffi = require 'ffi'
local core = require 'oneflow._C'
local types = require 'oneflow.types'
local A = require 'oneflow._args'
local T = require 'oneflow.tensor'

local C, out1, raise = core.C, core.out1, core.raise
local def, methods, is_tensor = T.def, T.methods, T.is_tensor

local u64 = ffi.typeof('uint64_t')
local i64 = ffi.typeof('int64_t')
local TWO53 = 2 ^ 53

local function is_int64_cdata(v)
  return type(v) == 'cdata' and (ffi.istype(u64, v) or ffi.istype(i64, v))
end

-- A Lua integer or 64-bit cdata -> int64 for C. `what` names the argument.
local function to_i64(v, op, what, level)
  if is_int64_cdata(v) then return v end
  if type(v) ~= 'number' or v ~= math.floor(v) or v ~= v or v >= 2 ^ 63 or v < -2 ^ 63 then
    error(('%s: %s must be an integer, got %s'):format(op, what, tostring(v)), (level or 2) + 1)
  end
  return v
end

------------------------------------------------------------------ seeding
local function to_seed(s, op)
  if is_int64_cdata(s) then return ffi.cast(u64, s) end
  if type(s) ~= 'number' or s ~= math.floor(s) or s >= 2 ^ 64 or s < -2 ^ 63 then
    error(('%s: seed must be an integer, got %s'):format(op, tostring(s)), 3)
  end
  if s < 0 then return ffi.cast(u64, ffi.cast(i64, s)) end
  return ffi.cast(u64, s)
end

-- uint64 cdata -> Lua number when exact
local function seed_value(s)
  if s < TWO53 then return tonumber(s) end
  return s
end

--- Seeds the default random generator (CPU and CUDA): `flow.manual_seed(42)`.
-- @tparam int s the seed (a number, or an int64 cdata for seeds beyond 2^53)
def('manual_seed', function(s) C.of_manual_seed(to_seed(s, 'manual_seed')) end, 'func')

--- flow.initial_seed(): the seed of the default generator.
def('initial_seed', function() return seed_value(C.of_initial_seed()) end, 'func')

local function entropy()
  local f = io.open('/dev/urandom', 'rb')
  if f then
    local bytes = f:read(6)
    f:close()
    if bytes and #bytes == 6 then
      local v = 0
      for i = 1, 6 do v = v * 256 + bytes:byte(i) end
      return v
    end
  end
  return (os.time() * 1000003 + math.floor(os.clock() * 1e6)) % 2 ^ 48
end

--- Reseeds from the system's entropy and returns the seed.
def('seed', function()
  local s = entropy()
  C.of_manual_seed(s)
  return s
end, 'func')

local state_seed, state_offset = ffi.new('uint64_t[1]'), ffi.new('uint64_t[1]')
local state_buf = ffi.new('int64_t[2]')
local two = ffi.new('int64_t[1]', 2)

--- The generator state as an int64 tensor {seed, offset}.
def('get_rng_state', function()
  C.of_rng_get_state(state_seed, state_offset)
  state_buf[0] = ffi.cast(i64, state_seed[0])
  state_buf[1] = ffi.cast(i64, state_offset[0])
  return T.call1(C.of_from_buffer, state_buf, two, 1, C.OF_INT64, out1)
end, 'func')

--- flow.set_rng_state(state): restores the generator state from flow.get_rng_state().
def('set_rng_state', function(state)
  local seed, offset
  if is_tensor(state) then
    if state.dtype.name ~= 'int64' or state:numel() ~= 2 then
      error(('set_rng_state: expected an int64 tensor of 2 elements {seed, offset} (from '
             .. 'get_rng_state), got %s with %d elements'):format(state.dtype.name, state:numel()), 2)
    end
    local c = state:cpu():contiguous()   -- read on the host
    local p = ffi.cast('int64_t*', C.of_tensor_data(c.p))
    seed, offset = ffi.cast(u64, p[0]), ffi.cast(u64, p[1])
  elseif type(state) == 'table' then
    seed, offset = state.seed or state[1], state.offset or state[2]
    if seed == nil or offset == nil then
      error('set_rng_state: a table state needs seed and offset ({seed =, offset =})', 2)
    end
    seed = to_seed(seed, 'set_rng_state')
    if not is_int64_cdata(offset) and (type(offset) ~= 'number' or offset < 0) then
      error('set_rng_state: offset must be a non-negative integer, got ' .. tostring(offset), 2)
    end
    offset = to_seed(offset, 'set_rng_state')
  else
    error('set_rng_state: expected a tensor from get_rng_state or a table, got ' .. type(state), 2)
  end
  C.of_rng_set_state(seed, offset)
end, 'func')

------------------------------------------------------------------ factories
local function device_code(opts)
  if opts.device == nil then return C.OF_CPU end
  return types.device_code(types.device(opts.device))
end

-- An uninitialised tensor of `sizes` (checked here so errors name op).
local FACTORY = {dtype = true, device = true, requires_grad = true, pin_memory = true}

local function new_empty(op, sizes, dt, opts)
  A.check_options(op, opts, FACTORY)
  for i = 1, #sizes do
    if sizes[i] < 0 then
      error(('%s: negative size %d at dim %d in [%s]'):format(op, sizes[i], i,
            table.concat(sizes, ',')), 4)
    end
  end
  local ptr, n = A.shape_ptr(sizes)
  return T.call1(C.of_empty, ptr, n, dt.id, device_code(opts), out1)
end

local function finish(t, st, opts)
  if st ~= 0 then raise(3) end
  if opts and opts.requires_grad then t:requires_grad_(true) end
  return t
end

local function float_dtype(op, opts)
  local dt = A.dtype_opt(opts, T.get_default_dtype())
  if not dt.is_floating_point then
    error(('%s: dtype must be a floating point type, got %s'):format(op, dt.name), 4)
  end
  return dt
end

--- Uniform random numbers in [0, 1): `flow.rand(2, 3)`.
-- @param ... sizes, as numbers or one table
-- @tparam[opt] table opts `{dtype =, device =, requires_grad =, generator =}` (a floating dtype)
-- @treturn Tensor
def('rand', function(...)
  local sizes, opts = A.sizes_and_options('rand', ...)
  local t = new_empty('rand', sizes, float_dtype('rand', opts), opts)
  return finish(t, C.of_uniform_(t.p, 0, 1), opts)
end, 'func')

--- Standard normal random numbers: `flow.randn(2, 3)`.
-- @param ... sizes, as numbers or one table
-- @tparam[opt] table opts `{dtype =, device =, requires_grad =, generator =}` (a floating dtype)
-- @treturn Tensor
def('randn', function(...)
  local sizes, opts = A.sizes_and_options('randn', ...)
  local t = new_empty('randn', sizes, float_dtype('randn', opts), opts)
  return finish(t, C.of_normal_(t.p, 0, 1), opts)
end, 'func')

local function size_list(op, size)
  if type(size) == 'number' then size = {size} end
  if type(size) ~= 'table' then
    error(('%s: expected a size (a number or a table), got %s'):format(op, type(size)), 4)
  end
  return (A.sizes_and_options(op, size))
end

--- Random integers in [low, high): values, not indices, so `low` defaults to 0.
-- @usage flow.randint(low, high, size[, opts]); flow.randint(high, size[, opts])
-- @tparam int a `low`, or `high` when `b` is the size
-- @param b `high`, or the size
-- @param[opt] c the size (a number or a table), or the options
-- @tparam[opt] table d `{dtype = flow.int64, device =, generator =}`
-- @treturn Tensor
def('randint', function(a, b, c, d)
  local low, high, size, opts
  if type(b) == 'number' or is_int64_cdata(b) then
    low, high, size, opts = a, b, c, d
  else
    low, high, size, opts = 0, a, b, c
  end
  if size == nil then error('randint: expected a size after the bounds', 2) end
  opts = opts or {}
  low, high = to_i64(low, 'randint', 'low'), to_i64(high, 'randint', 'high')
  local sizes = size_list('randint', size)
  local t = new_empty('randint', sizes, A.dtype_opt(opts, types.by_name.int64), opts)
  return finish(t, C.of_randint_(t.p, low, high), opts)
end, 'func')

--- flow.randperm(n[, opts]): the numbers 1..n in random order.
def('randperm', function(n, opts)
  opts = A.check_options('randperm', opts, FACTORY)
  n = to_i64(n, 'randperm', 'n')
  local dt = A.dtype_opt(opts, types.by_name.int64)
  if C.of_randperm(n, 1, dt.id, out1) ~= 0 then raise(2) end
  local t = core.wrap(out1[0])
  if device_code(opts) ~= C.OF_CPU then t = t:to(opts.device) end
  return finish(t, 0, opts)
end, 'func')

--- flow.normal(mean, std, size[, opts]) with numbers, or with tensor mean
-- and/or std (the result has their broadcast shape; no size).
def('normal', function(mean, std, size, opts)
  if std == nil then std = 1 end
  if is_tensor(mean) or is_tensor(std) then
    local like = mean
    if is_tensor(mean) and is_tensor(std) then like = mean + std
    elseif is_tensor(std) then like = std end
    local dt = like.dtype.is_floating_point and like.dtype or T.get_default_dtype()
    local z = T.flow.randn(like:size():totable(), {dtype = dt})
    return z * std + mean
  end
  if type(mean) ~= 'number' or type(std) ~= 'number' then
    error('normal: mean and std must be numbers or tensors', 2)
  end
  if size == nil then error('normal: expected a size when mean and std are numbers', 2) end
  opts = opts or {}
  local t = new_empty('normal', size_list('normal', size), float_dtype('normal', opts), opts)
  return finish(t, C.of_normal_(t.p, mean, std), opts)
end, 'func')

local function like_opts(x, opts, op)
  opts = A.check_options(op, opts, {dtype = true, requires_grad = true})
  return {dtype = opts.dtype or x.dtype, requires_grad = opts.requires_grad}
end

--- flow.rand_like(x, opts): uniform [0, 1) numbers of x's shape.
def('rand_like', function(x, opts) return T.flow.rand(x:size():totable(), like_opts(x, opts, 'rand_like')) end,
    'func')
--- flow.randn_like(x, opts): standard normal numbers of x's shape.
def('randn_like', function(x, opts) return T.flow.randn(x:size():totable(), like_opts(x, opts, 'randn_like')) end,
    'func')
--- flow.randint_like(x, [low,] high[, opts])
def('randint_like', function(x, a, b, c)
  local low, high, opts = a, b, c
  if not (type(b) == 'number' or is_int64_cdata(b)) then low, high, opts = 0, a, b end
  return T.flow.randint(low, high, x:size():totable(), like_opts(x, opts, 'randint_like'))
end, 'func')

------------------------------------------------------------------ in place
local function num(v, default, op, what)
  if v == nil then return default end
  if type(v) ~= 'number' then
    error(('%s: %s must be a number, got %s'):format(op, what, type(v)), 3)
  end
  return v
end

--- x:uniform_(a = 0, b = 1): fills x with uniform numbers in [a, b); returns x.
function methods.uniform_(x, a, b)
  a, b = num(a, 0, 'uniform_', 'from'), num(b, 1, 'uniform_', 'to')
  if C.of_uniform_(x.p, a, b) ~= 0 then raise(2) end
  return x
end

function methods.normal_(x, mean, std)
  mean, std = num(mean, 0, 'normal_', 'mean'), num(std, 1, 'normal_', 'std')
  if C.of_normal_(x.p, mean, std) ~= 0 then raise(2) end
  return x
end

-- Exclusive upper bound of random_() without bounds: every integer the
-- dtype holds exactly (PyTorch: [0, 2^mantissa] for floats).
local random_hi = {bool = 2, uint8 = 256, int8 = 128, int32 = 2 ^ 31,
                   int64 = ffi.new('int64_t', 0x7fffffffffffffffLL), float16 = 2049,
                   int16 = 2 ^ 15, uint16 = 2 ^ 16, uint32 = 2 ^ 32,
                   uint64 = ffi.new('int64_t', 0x7fffffffffffffffLL),   -- bounds are int64
                   bfloat16 = 257, float32 = 2 ^ 24 + 1, float64 = 2 ^ 53 + 1}

--- x:random_() / x:random_(hi) / x:random_(lo, hi): integers in [lo, hi).
function methods.random_(x, a, b)
  local lo, hi
  if a == nil then
    lo, hi = 0, random_hi[x.dtype.name]
  elseif b == nil then
    lo, hi = 0, to_i64(a, 'random_', 'to')
  else
    lo, hi = to_i64(a, 'random_', 'from'), to_i64(b, 'random_', 'to')
  end
  if C.of_randint_(x.p, lo, hi) ~= 0 then raise(2) end
  return x
end

--- x:bernoulli_(p): p a number (default 0.5) or a tensor broadcastable to x.
function methods.bernoulli_(x, p)
  if is_tensor(p) then
    return x:copy_(T.flow.bernoulli(p:expand(x:size())))
  end
  if C.of_bernoulli_(x.p, num(p, 0.5, 'bernoulli_', 'p')) ~= 0 then raise(2) end
  return x
end

--- flow.bernoulli(p) / p:bernoulli(): 0/1 drawn with probabilities p (same
-- shape and dtype). x:bernoulli(q) with a number q fills a tensor like x.
def('bernoulli', function(p, q)
  if not is_tensor(p) then error('bernoulli: expected a tensor of probabilities, got ' .. type(p), 2) end
  if q ~= nil then
    local t = new_empty('bernoulli', p:size():totable(), p.dtype, {})
    if C.of_bernoulli_(t.p, num(q, 0.5, 'bernoulli', 'p')) ~= 0 then raise(2) end
    return t
  end
  return T.call1(C.of_bernoulli, p.p, out1)
end)
--- flow.native_dropout(x, p, train): PyTorch's fused dropout, returning
-- (output, mask): output = x * mask / (1 - p) and mask a bool tensor of the
-- kept elements, in one pass (core/ops/random.c). Element i is kept when the
-- float32 uniform draw flow.rand would give element i from the same
-- generator state is >= p. train = false gives (a copy of x, all true).
def('native_dropout', function(x, p, train)
  if not is_tensor(x) then error('native_dropout: expected a tensor, got ' .. type(x), 2) end
  p = num(p, 0.5, 'native_dropout', 'p')
  if train == false then
    return x:clone(), T.flow.ones(x:size():totable(), {dtype = 'bool', device = x.device})
  end
  if C.of_dropout(x.p, p, out1, core.out2) ~= 0 then raise(2) end
  return core.wrap(out1[0]), core.wrap(core.out2[0])
end)
local flow, check_tensor, shape_str, int64 = T.flow, A.check_tensor, A.shape_str, types.by_name.int64

------------------------------------------------------------------ sampling
--- flow.multinomial(weights, n, {replacement = false}) (or x:multinomial):
-- n 1-based category indices per row of the non-negative weights (1-D or
-- 2-D), drawn in proportion to them from flow's generator (flow.manual_seed);
-- without replacement each category is drawn at most once.
def('multinomial', function(w, n, opts)
  check_tensor('multinomial', w)
  local replacement = opts == true
  if type(opts) == 'table' then
    replacement = A.check_options('multinomial', opts, {replacement = true}).replacement or false
  end
  if w:dim() < 1 or w:dim() > 2 or not w:is_floating_point() then
    error(('multinomial: expected a 1-D or 2-D float tensor of weights, got shape %s and %s'):format(
      shape_str(w), tostring(w.dtype)), 2)
  end
  local k = w:size(-1)
  if type(n) ~= 'number' or n < 1 or n ~= math.floor(n) then
    error(('multinomial: the number of samples must be a positive integer, got %s'):format(tostring(n)), 2)
  end
  if not replacement and n > k then
    error(('multinomial: cannot draw %d samples from %d categories without replacement'):format(n, k), 2)
  end
  local rows = w:detach():reshape(-1, k):double():totable()
  local u = flow.rand(#rows, n, {dtype = types.by_name.float64}):totable()
  local out = {}
  for r, ws in ipairs(rows) do
    local total = 0
    for j = 1, k do
      local v = ws[j]
      if v < 0 or v ~= v or v == math.huge then
        error('multinomial: weights must be finite and non-negative', 3)
      end
      total = total + v
    end
    out[r] = {}
    for i = 1, n do
      if total <= 0 then
        error(('multinomial: row %d has no weight left to draw sample %d from'):format(r, i), 3)
      end
      local target, acc, pick = u[r][i] * total, 0, nil
      for j = 1, k do
        if ws[j] > 0 then
          acc = acc + ws[j]
          pick = j
          if target < acc then break end
        end
      end
      out[r][i] = pick
      if not replacement then total = total - ws[pick]; ws[pick] = 0 end
    end
  end
  local res = flow.tensor(out, {dtype = int64, device = w.device})
  return w:dim() == 1 and res:reshape(n) or res
end)


return {}
