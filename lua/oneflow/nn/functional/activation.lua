-- oneflow.nn.functional.activation: activations and softmax variants, each
-- a kernel-backed unary op or composed from differentiable ops.
--   F.relu(x), F.gelu(x, {approximate = 'tanh'}), F.softplus(x, {beta = 2}),
--   F.leaky_relu(x, 0.2), F.softmax(x, -1)
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'

local parse, fail = U.parse, U.fail
local F = {}

local INPLACE = {inplace = true}
local function inplace_of(name, opts)
  if type(opts) == 'boolean' then return opts end
  return U.check_options(name, opts, INPLACE).inplace == true
end

--- max(x, 0) elementwise: `F.relu(x)`, `F.relu(x, {inplace = true})`.
-- F.silu, F.mish, F.hardswish, F.hardsigmoid, F.sigmoid and F.tanh take the
-- same arguments.
-- @function F.relu
-- @tparam Tensor x
-- @tparam[opt] table|boolean opts `{inplace = false}` (or the boolean)
-- @treturn Tensor

-- unary kernels: F.name(x, {inplace =})
for _, name in ipairs({'relu', 'silu', 'mish', 'hardswish', 'hardsigmoid', 'sigmoid', 'tanh'}) do
  F[name] = function(x, opts)
    if inplace_of(name, opts) then return x[name .. '_'](x) end
    return x[name](x)
  end
end

--- F.relu6(x, inplace = false): min(max(0, x), 6).
function F.relu6(x, opts)
  if inplace_of('relu6', opts) then return x:clamp_(0, 6) end
  return x:clamp(0, 6)
end

local hardtanh_spec = {{'min_val', -1}, {'max_val', 1}, {'inplace', false}}
--- F.hardtanh(x, min_val = -1, max_val = 1, inplace = false): x clamped to [min_val, max_val].
function F.hardtanh(x, ...)
  local a = parse('hardtanh', hardtanh_spec, ...)
  if a.min_val > a.max_val then fail('hardtanh: min_val cannot be greater than max_val') end
  if a.inplace then return x:clamp_(a.min_val, a.max_val) end
  return x:clamp(a.min_val, a.max_val)
end

--- F.gelu(x, {approximate = 'none' | 'tanh'})
function F.gelu(x, opts)
  local approx = opts or 'none'
  if type(opts) == 'table' then approx = U.check_options('gelu', opts, {'approximate'}).approximate or 'none' end
  if approx == 'none' then return x:gelu() end
  if approx == 'tanh' then return x:gelu_tanh() end
  fail("gelu: approximate must be 'none' or 'tanh', got " .. tostring(approx))
end

local leaky_spec = {{'negative_slope', 0.01}, {'inplace', false}}
--- F.leaky_relu(x, negative_slope = 0.01, inplace = false): x for x > 0, negative_slope * x otherwise.
function F.leaky_relu(x, ...)
  local a = parse('leaky_relu', leaky_spec, ...)
  local y = flow.leaky_relu(x, a.negative_slope)
  if a.inplace then return x:copy_(y) end
  return y
end

-- alpha * (exp(x) - 1) for x <= 0 (clamped so the unused branch stays finite)
local function neg_branch(x, alpha, scale)
  local e = (x:clamp(nil, 0) * scale):expm1()
  return e * alpha
end

local elu_spec = {{'alpha', 1}, {'inplace', false}}
--- F.elu(x, alpha = 1)
function F.elu(x, ...)
  local a = parse('elu', elu_spec, ...)
  local y = flow.where(x:gt(0), x, neg_branch(x, a.alpha, 1))
  if a.inplace then return x:copy_(y) end
  return y
end

local SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
--- F.selu(x, inplace = false): scale * elu(x, alpha) with the self-normalising constants.
function F.selu(x, opts)
  local y = flow.where(x:gt(0), x, neg_branch(x, SELU_ALPHA, 1)) * SELU_SCALE
  if inplace_of('selu', opts) then return x:copy_(y) end
  return y
end

--- F.celu(x, alpha = 1): max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
function F.celu(x, ...)
  local a = parse('celu', elu_spec, ...)
  if a.alpha == 0 then fail('celu: alpha cannot be 0') end
  local y = flow.where(x:gt(0), x, neg_branch(x, a.alpha, 1 / a.alpha))
  if a.inplace then return x:copy_(y) end
  return y
end

local softplus_spec = {{'beta', 1}, {'threshold', 20}}
--- F.softplus(x, {beta = 1, threshold = 20}): log(1 + exp(beta x)) / beta,
-- linear where beta x > threshold.
function F.softplus(x, ...)
  local a = parse('softplus', softplus_spec, ...)
  if a.beta == 1 and a.threshold == 20 then return x:softplus() end
  local bx = x * a.beta
  return flow.where(bx:gt(a.threshold), x, bx:softplus() / a.beta)
end

--- F.prelu(x, weight): weight has 1 or C (= x:size(2)) elements.
function F.prelu(x, weight)
  require('oneflow._args').check_tensor('prelu', x)
  require('oneflow._args').check_tensor('prelu', weight, 'weight', 2)
  local n = weight:numel()
  local w
  if n ~= 1 then
    if x:dim() < 2 or x:size(2) ~= n then
      fail(('prelu: weight has %d elements but input %s has %s channels (dim 2)'):format(
        n, U.shape_str(x), x:dim() >= 2 and tostring(x:size(2)) or 'no'))
    end
    local shape = {1, n}
    for i = 3, x:dim() do shape[i] = 1 end
    w = weight:reshape(shape)
  else
    w = weight:reshape({})
  end
  return flow.where(x:gt(0), x, x * w)
end

--- F.logsigmoid(x): log(sigmoid(x)), computed stably.
function F.logsigmoid(x) return -(-x):softplus() end
--- F.softsign(x): x / (1 + |x|).
function F.softsign(x) return x / (x:abs() + 1) end
--- F.tanhshrink(x): x - tanh(x).
function F.tanhshrink(x) return x - x:tanh() end

--- F.hardshrink(x, lambd = 0.5): x where |x| > lambd, else 0.
function F.hardshrink(x, lambd)
  lambd = type(lambd) == 'table' and lambd.lambd or lambd or 0.5
  return flow.where(x:abs():gt(lambd), x, 0)
end

--- F.softshrink(x, lambd = 0.5): x - lambd above lambd, x + lambd below -lambd, else 0.
function F.softshrink(x, lambd)
  lambd = type(lambd) == 'table' and lambd.lambd or lambd or 0.5
  return flow.where(x:gt(lambd), x - lambd, flow.where(x:lt(-lambd), x + lambd, 0))
end

--- F.threshold(x, threshold, value): x where x > threshold, else value.
function F.threshold(x, th, value)
  return flow.where(x:gt(th), x, value)
end

--- F.glu(x, dim = -1): a * sigmoid(b) with x split in halves along dim.
function F.glu(x, dim)
  dim = dim or -1
  local n = x:size(dim)
  if n % 2 ~= 0 then
    fail(('glu: halving dimension must be even, but dim %d has size %d'):format(dim, n))
  end
  local h = x:chunk(2, dim)
  return h[1] * h[2]:sigmoid()
end

------------------------------------------------------------------ softmax family
local function dim_and_dtype(name, dim, opts)
  if type(dim) == 'table' then dim, opts = dim.dim, dim end
  if dim == nil then fail(name .. ': dim is required, e.g. F.' .. name .. '(x, -1)') end
  return dim, opts
end

--- F.softmax(x, dim, {dtype =}): exp(x) / sum(exp(x)) along dim (1-based).
function F.softmax(x, dim, opts)
  dim, opts = dim_and_dtype('softmax', dim, opts)
  return flow.softmax(x, dim, opts)
end

--- F.log_softmax(x, dim, {dtype =}): log(softmax(x)) along dim (1-based), computed stably.
function F.log_softmax(x, dim, opts)
  dim, opts = dim_and_dtype('log_softmax', dim, opts)
  return flow.log_softmax(x, dim, opts)
end

--- F.softmin(x, dim, {dtype =}): softmax(-x) along dim (1-based).
function F.softmin(x, dim, opts)
  dim, opts = dim_and_dtype('softmin', dim, opts)
  return flow.softmax(-x, dim, opts)
end

local gumbel_spec = {{'tau', 1}, {'hard', false}, {'eps', 1e-10}, {'dim', -1}}

--- F.gumbel_softmax(logits, {tau = 1, hard = false, dim = -1}): samples from
-- the Gumbel-softmax distribution: softmax((logits + g) / tau) with
-- g = -log(Exp(1)) noise from flow's generator (flow.manual_seed). With
-- hard = true the result is one-hot in the forward pass and carries the soft
-- sample's gradient (the straight-through trick, as PyTorch).
function F.gumbel_softmax(logits, ...)
  local a = parse('gumbel_softmax', gumbel_spec, ...)
  if a.tau <= 0 then fail(('gumbel_softmax: tau must be positive, got %s'):format(a.tau)) end
  -- -log(E), E ~ Exp(1) = -log(U): draw U in (0, 1) away from 0
  local u = flow.rand(logits:size():totable(), {dtype = logits.dtype, device = logits.device})
  local g = -(-(u:clamp(1e-300, 1)):log()):log()
  local y = flow.softmax((logits + g) / a.tau, a.dim)
  if not a.hard then return y end
  local idx = y:argmax(a.dim, {keepdim = true})
  local hard = flow.zeros_like(logits):scatter(a.dim, idx, 1.0)
  return hard - y:detach() + y
end

return F
