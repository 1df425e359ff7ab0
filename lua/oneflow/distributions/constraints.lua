-- oneflow.distributions.constraints: where a parameter or a sample may lie
-- (torch.distributions.constraints). c:check(v) is a bool tensor (per batch
-- element: the event dims are reduced for event_dim > 0); c.is_discrete and
-- c.event_dim as PyTorch's.
local M = {}
-- flow is loaded lazily (this module is required while oneflow loads)
local function flow_linalg() return require('oneflow').linalg end

local Constraint = {}
Constraint.__index = Constraint
Constraint.__tostring = function(c) return c.name end

local function constraint(name, check, o)
  o = o or {}
  return setmetatable({name = name, check = function(_, v) return check(v) end,
                       is_discrete = o.is_discrete or false, event_dim = o.event_dim or 0}, Constraint)
end

local function is_int(v) return v:eq(v:floor()) end

M.real = constraint('Real()', function(v) return v:eq(v) end)   -- not NaN
M.real_vector = constraint('IndependentConstraint(Real(), 1)',
  function(v) return v:eq(v):all(-1) end, {event_dim = 1})
M.real_vector.base_constraint, M.real_vector.reinterpreted_batch_ndims = M.real, 1
M.positive = constraint('GreaterThan(lower_bound=0.0)', function(v) return v:gt(0) end)
M.nonnegative = constraint('GreaterThanEq(lower_bound=0.0)', function(v) return v:ge(0) end)
M.unit_interval = constraint('Interval(lower_bound=0.0, upper_bound=1.0)',
  function(v) return v:ge(0):logical_and(v:le(1)) end)
M.positive.lower_bound, M.nonnegative.lower_bound = 0, 0
M.unit_interval.lower_bound, M.unit_interval.upper_bound = 0, 1
M.boolean = constraint('Boolean()', function(v) return v:eq(0):logical_or(v:eq(1)) end,
  {is_discrete = true})
M.nonnegative_integer = constraint('IntegerGreaterThan(lower_bound=0)',
  function(v) return is_int(v):logical_and(v:ge(0)) end, {is_discrete = true})
M.positive_integer = constraint('IntegerGreaterThan(lower_bound=1)',
  function(v) return is_int(v):logical_and(v:ge(1)) end, {is_discrete = true})
M.simplex = constraint('Simplex()', function(v)
  return v:ge(0):all(-1):logical_and((v:sum(-1) - 1):abs():lt(1e-6))
end, {event_dim = 1})

function M.greater_than(lo)
  local c = constraint(('GreaterThan(lower_bound=%s)'):format(lo), function(v) return v:gt(lo) end)
  c.lower_bound = lo
  return c
end
function M.greater_than_eq(lo)
  local c = constraint(('GreaterThanEq(lower_bound=%s)'):format(lo), function(v) return v:ge(lo) end)
  c.lower_bound = lo
  return c
end
function M.less_than(hi)
  local c = constraint(('LessThan(upper_bound=%s)'):format(hi), function(v) return v:lt(hi) end)
  c.upper_bound = hi
  return c
end
-- lo/hi may be numbers or tensors (broadcast against v)
function M.interval(lo, hi)
  local c = constraint(('Interval(lower_bound=%s, upper_bound=%s)'):format(tostring(lo), tostring(hi)),
    function(v) return v:ge(lo):logical_and(v:le(hi)) end)
  c.lower_bound, c.upper_bound = lo, hi
  return c
end
function M.half_open_interval(lo, hi)
  local c = constraint(('HalfOpenInterval(lower_bound=%s, upper_bound=%s)'):format(tostring(lo), tostring(hi)),
    function(v) return v:ge(lo):logical_and(v:lt(hi)) end)
  c.lower_bound, c.upper_bound = lo, hi
  return c
end
function M.integer_interval(lo, hi)
  return constraint(('IntegerInterval(lower_bound=%s, upper_bound=%s)'):format(tostring(lo), tostring(hi)),
    function(v) return is_int(v):logical_and(v:ge(lo)):logical_and(v:le(hi)) end, {is_discrete = true})
end
M.one_hot = constraint('OneHot()', function(v)
  return M.boolean:check(v):all(-1):logical_and(v:sum(-1):eq(1))
end, {is_discrete = true, event_dim = 1})
--- independent(c, n): c with its n rightmost dims as one event.
function M.independent(c, n)
  local r = constraint(('IndependentConstraint(%s, %d)'):format(c.name, n), function(v)
    local r = c:check(v)
    for _ = 1, n do r = r:all(-1) end
    return r
  end, {is_discrete = c.is_discrete, event_dim = c.event_dim + n})
  r.base_constraint, r.reinterpreted_batch_ndims = c, n
  return r
end

local function sym(v) return (v - v:transpose(-2, -1)):abs():le(1e-6 * (1 + v:abs())):all(-1):all(-1) end
M.lower_cholesky = constraint('LowerCholesky()', function(v)
  return v:tril():eq(v):all(-1):all(-1):logical_and(v:diagonal(0, -2, -1):gt(0):all(-1))
end, {event_dim = 2})
M.lower_triangular = constraint('LowerTriangular()', function(v) return v:tril():eq(v):all(-1):all(-1) end,
  {event_dim = 2})
M.positive_definite = constraint('PositiveDefinite()', function(v)
  return sym(v):logical_and(flow_linalg().eigvalsh(v):gt(0):all(-1))
end, {event_dim = 2})
-- lower Cholesky factors of correlation matrices: lower_cholesky with rows
-- of unit norm (torch's tolerance: eps * n * 10)
M.corr_cholesky = constraint('CorrCholesky()', function(v)
  local eps = v:element_size() == 8 and 2.220446049250313e-16 or 1.1920928955078125e-07
  local tol = eps * v:size(-1) * 10
  local unit = (v:detach():norm(2, -1) - 1):abs():le(tol):all(-1)
  return M.lower_cholesky:check(v):logical_and(unit)
end, {event_dim = 2})

M.Constraint = Constraint
return M
