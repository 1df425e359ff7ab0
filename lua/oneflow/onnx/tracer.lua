-- oneflow.onnx.tracer: records the ops a model runs, as ONNX nodes.
--
-- While tracing, the entries of the tensor methods table, of flow.*, of
-- flow.nn.functional and the tensor operators are replaced by wrappers that
-- run the real op and then:
--   * no input is computed from the graph inputs: nothing is recorded (the
--     result is a constant, written as an initializer when an op reads it);
--   * the op has a rule (oneflow.onnx.ops): the op runs with recording off,
--     then the rule adds the ONNX nodes and binds the results;
--   * otherwise the op is transparent: the ops it calls are recorded one by
--     one. If a result is still not bound afterwards, the op (or something
--     it calls through a path we cannot see) has no mapping: a Lua error
--     names it.
-- Ops drawing random numbers and reads of traced values into Lua numbers
-- (x:item(), x:totable()) are errors: the graph cannot reproduce them.
-- Every replaced entry is restored when tracing ends, also on errors, and
-- the JIT is off meanwhile (compiled traces may hold metamethods as
-- constants, so the trace cache is flushed on both ends).
local T = require 'oneflow.tensor'
local graph = require 'oneflow.onnx.graph'

local is_tensor, key = T.is_tensor, graph.key

local M = {}

-- never wrapped: metadata, autograd plumbing
local SKIP = {
  backward = true, register_hook = true, requires_grad_ = true, detach_ = true, size = true,
  dim = true, ndimension = true, numel = true, nelement = true, stride = true,
  storage_offset = true, is_contiguous = true, is_floating_point = true, element_size = true,
  data_ptr = true,
}
-- reading traced values into Lua
local DATA_READS = {item = true, totable = true, tolist = true}
-- random number generation
local RANDOM = {
  rand = true, randn = true, randint = true, randperm = true, normal = true, rand_like = true,
  randn_like = true, randint_like = true, uniform_ = true, normal_ = true, random_ = true,
  bernoulli = true, bernoulli_ = true, multinomial = true, exponential_ = true,
  native_dropout = true,
}
-- tensor operators -> rule name, display name
local OPERATORS = {
  __add = {'add', 'operator +'}, __sub = {'sub', 'operator -'}, __mul = {'mul', 'operator *'},
  __div = {'div', 'operator /'}, __mod = {'remainder', 'operator %'},
  __pow = {'pow', 'operator ^'}, __unm = {'neg', 'unary operator -'},
}

local function pack(...) return {n = select('#', ...), ...} end

------------------------------------------------------------------ tracer
local Tracer = {}
Tracer.__index = Tracer

local active = nil   -- the tracer recording now

-- The tensor a wrapped value is traced through: a value whose metatable
-- has __onnx_tensor (a quantized tensor: its integers) is recorded as that
-- tensor, so the ops run on its integers bind it like any tensor.
local function inner(v)
  if type(v) ~= 'table' then return nil end
  local mt = getmetatable(v)
  local f = type(mt) == 'table' and rawget(mt, '__onnx_tensor')
  return f and f(v) or nil
end
M.inner = inner

--- Whether an argument list holds a tensor bound in the graph (looking
-- into plain tables two levels deep: lists of tensors, options tables).
local function any_bound(g, n, ...)
  for i = 1, n do
    local v = select(i, ...)
    v = inner(v) or v
    if is_tensor(v) then
      if g.dyn[key(v)] then return true end
    elseif type(v) == 'table' and getmetatable(v) == nil then
      for _, e in pairs(v) do
        if is_tensor(e) then
          if g.dyn[key(e)] then return true end
        elseif type(e) == 'table' and getmetatable(e) == nil then
          for _, f in pairs(e) do
            if is_tensor(f) and g.dyn[key(f)] then return true end
          end
        end
      end
    end
  end
  return false
end

-- calls fn(t) for each tensor of a result list (and of lists in it; a
-- wrapped value counts as its tensor)
local function each_tensor(res, fn)
  for i = 1, res.n do
    local v = res[i]
    v = inner(v) or v
    if is_tensor(v) then fn(v)
    elseif type(v) == 'table' and getmetatable(v) == nil then
      for _, e in ipairs(v) do
        if is_tensor(e) then fn(e) end
      end
    end
  end
end

local function fail(msg) error('onnx.export: ' .. msg, 0) end

-- The op ran (recording paused, depth raised): rule(g, out, ...) adds its
-- nodes; every result must be bound afterwards. Lowers the depth again.
function Tracer:record(display, rule, out, ...)
  local g = self.g
  local ok, err = pcall(rule, g, out, ...)
  self.depth = self.depth - 1
  if not ok then
    if type(err) == 'string' and not err:find('onnx.export', 1, true) then
      err = ('onnx.export: %s: %s'):format(display, err)
    end
    error(err, 0)
  end
  each_tensor(out, function(t)
    if not g:knows(t) then fail(('internal error: the rule for %s left a result unbound'):format(display)) end
  end)
  return unpack(out, 1, out.n)
end

function Tracer:call(name, display, orig, ...)
  local g, n = self.g, select('#', ...)
  if RANDOM[name] then
    fail(('%s draws random numbers while tracing; random ops cannot be exported ' ..
          '(is the model in eval mode?)'):format(display))
  end
  if not any_bound(g, n, ...) then
    -- constants only: run it, record nothing
    self.depth = self.depth + 1
    local res = pack(pcall(orig, ...))
    self.depth = self.depth - 1
    if not res[1] then error(res[2], 0) end
    if name:sub(-1) == '_' and n > 0 and is_tensor((...)) then g:forget((...)) end
    local out = pack(unpack(res, 2, res.n))
    local unfold = self.unfold[name]
    if unfold and #g.dim_sources > 0 then
      -- a shape built from the example sizes of dynamic axes: record it
      self.depth = self.depth + 1
      local ok, err = pcall(function(...)
        if unfold(g, out, ...) then self.rules[name](g, out, ...) end
      end, ...)
      self.depth = self.depth - 1
      if not ok then error(err, 0) end
    end
    each_tensor(out, function(t) if not g:knows(t) then g:mark_folded(t) end end)
    return unpack(out, 1, out.n)
  end
  if DATA_READS[name] then
    fail(('%s reads the values of a tensor computed from the inputs into Lua; the exported ' ..
          'graph cannot depend on data'):format(display))
  end
  -- a wrapped argument: its own rule if there is one, else transparent
  -- (the float rule cannot read it)
  local rule = self.rules[name]
  for i = 1, n do
    if inner((select(i, ...))) then
      rule = self.wrapped[name]
      break
    end
  end
  if rule then
    local x = (...)
    if name:sub(-1) == '_' and is_tensor(x) and not g.dyn[key(x)] then
      g:val(x)   -- in place on a constant: keep its value from before the op
    end
    self.depth = self.depth + 1
    local res = pack(pcall(orig, ...))
    if not res[1] then
      self.depth = self.depth - 1
      error(res[2], 0)
    end
    return self:record(display, rule, pack(unpack(res, 2, res.n)), ...)
  end
  -- transparent: the ops it calls are recorded
  local out = pack(orig(...))
  each_tensor(out, function(t)
    if not g:knows(t) then
      fail(("no ONNX mapping for %s (op '%s'); see doc/onnx.md for the supported ops")
           :format(display, name))
    end
  end)
  return unpack(out, 1, out.n)
end

--- A module whose forward has an export rule: rule(g, out, module, ...)
-- adds the nodes after the forward ran with recording off (with constants,
-- also when no input is bound to the graph: else the results are folded).
function Tracer:call_module(display, rule, orig, constants, mod, ...)
  local g, n = self.g, select('#', ...)
  self.depth = self.depth + 1
  local res = pack(pcall(orig, mod, ...))
  if not res[1] then
    self.depth = self.depth - 1
    error(res[2], 0)
  end
  local out = pack(unpack(res, 2, res.n))
  if not constants and not any_bound(g, n, ...) then
    self.depth = self.depth - 1
    each_tensor(out, function(t) if not g:knows(t) then g:mark_folded(t) end end)
    return unpack(out, 1, out.n)
  end
  return self:record(display, rule, out, mod, ...)
end

------------------------------------------------------------------ patching
local function wrap(name, display, orig)
  return function(...)
    local tr = active
    if tr == nil or tr.depth > 0 then return orig(...) end
    return tr:call(name, display, orig, ...)
  end
end

function Tracer:patch(tbl, k, fn)
  local list = self.patches
  list[#list + 1] = {tbl, k, rawget(tbl, k)}
  rawset(tbl, k, fn)
end

function Tracer:restore()
  local list = self.patches
  for i = #list, 1, -1 do
    local p = list[i]
    rawset(p[1], p[2], p[3])
  end
  self.patches = {}
end

local function sorted_functions(tbl)
  local names = {}
  for k, v in pairs(tbl) do
    if type(k) == 'string' and type(v) == 'function' then names[#names + 1] = k end
  end
  table.sort(names)
  return names
end

function Tracer:install()
  local flow = package.loaded.oneflow
  local F = require 'oneflow.nn.functional'
  for _, k in ipairs(sorted_functions(T.methods)) do
    if not SKIP[k] then self:patch(T.methods, k, wrap(k, 'x:' .. k .. '()', T.methods[k])) end
  end
  local ops = {}
  for _, k in ipairs(sorted_functions(T.flow)) do
    ops[k] = T.flow[k]
    self:patch(T.flow, k, wrap(k, 'flow.' .. k .. '()', T.flow[k]))
  end
  if type(flow) == 'table' then
    -- flow.* holds copies of T.flow's functions; the rest (no_grad, save...) is not an op
    for _, k in ipairs(sorted_functions(flow)) do
      if ops[k] ~= nil and flow[k] == ops[k] then
        self:patch(flow, k, wrap(k, 'flow.' .. k .. '()', flow[k]))
      end
    end
  end
  for _, k in ipairs(sorted_functions(F)) do
    self:patch(F, k, wrap('F.' .. k, 'F.' .. k .. '()', F[k]))
  end
  for _, m in ipairs(self.modules) do
    local cls, rule, display, method, constants = m[1], m[2], m[3], m[4] or 'forward', m.constants
    local orig = cls[method]
    self:patch(cls, method, function(mod, ...)
      local tr = active
      if tr == nil or tr.depth > 0 then return orig(mod, ...) end
      return tr:call_module(display, rule, orig, constants, mod, ...)
    end)
  end
  local mt = T.metatable_ops
  for mm, d in pairs(OPERATORS) do
    if mt[mm] then self:patch(mt, mm, wrap(d[1], d[2], mt[mm])) end
  end
  local index, newindex, tostr = mt.__index, mt.__newindex, mt.__tostring
  self:patch(mt, '__index', function(t, k)
    local tr = active
    if type(k) == 'string' or tr == nil or tr.depth > 0 then return index(t, k) end
    if type(k) == 'number' then return tr:call('index', 'x[i]', index, t, k) end
    return tr:call('index_table', 'x[{...}]', index, t, k)
  end)
  self:patch(mt, '__newindex', function(t, k, v)
    local tr = active
    if type(k) ~= 'string' and tr ~= nil and tr.depth == 0
       and (tr.g.dyn[key(t)] or (is_tensor(v) and tr.g.dyn[key(v)])) then
      fail('index assignment x[...] = v on a traced tensor cannot be exported; build the ' ..
           'value with flow.where, flow.cat or masked_fill instead')
    end
    return newindex(t, k, v)
  end)
  if tostr then
    self:patch(mt, '__tostring', function(t)
      local tr = active
      if tr == nil then return tostr(t) end
      tr.depth = tr.depth + 1
      local ok, s = pcall(tostr, t)
      tr.depth = tr.depth - 1
      if not ok then error(s, 0) end
      return s
    end)
  end
end

--- Runs fn() with recording into graph g by `rules` (and `unfold`, see
-- oneflow.onnx.ops); returns fn's results (packed). Everything patched is
-- restored before returning or raising. extra (optional): `wrapped`, rules
-- by op name for calls with a wrapped argument; `modules`, a list of
-- {class, rule, display name[, method], constants = true} for modules whose
-- forward (or the named method) is recorded as a whole -- with constants,
-- also when its inputs are constants (else their results are folded).
function M.run(g, rules, fn, unfold, extra)
  if active ~= nil then error('onnx.export: already tracing (nested export)', 2) end
  extra = extra or {}
  local tr = setmetatable({g = g, rules = rules, unfold = unfold or {}, depth = 0, patches = {},
                           wrapped = extra.wrapped or {}, modules = extra.modules or {}}, Tracer)
  local jit_on = jit.status()
  jit.off()
  jit.flush()
  local core = require 'oneflow._C'
  core.hold_values(1)   -- values are keyed by address: none released early meanwhile
  local ok, res = pcall(function()
    tr:install()
    active = tr
    return pack(fn())
  end)
  active = nil
  core.hold_values(-1)
  tr:restore()
  jit.flush()
  if jit_on then jit.on() end
  if not ok then error(res, 0) end
  return res
end

--- Runs fn() with recording paused (for rules that call ops).
function M.paused(fn, ...)
  local tr = active
  if tr == nil then return fn(...) end
  tr.depth = tr.depth + 1
  local res = pack(pcall(fn, ...))
  tr.depth = tr.depth - 1
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

function M.active() return active end

return M
