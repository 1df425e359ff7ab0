-- oneflow.nn.module: nn.Module and nn.Parameter.
--
--   local Net = nn.Module:subclass('Net')
--   function Net:__init() nn.Module.__init(self); self.fc = nn.Linear(4, 2) end
--   function Net:forward(x) return self.fc(x) end
--   local net = Net(); local y = net(x)
--
-- Assignment registers: a Module goes to `_modules`, a Parameter to
-- `_parameters` (insertion order kept), so state-dict keys are PyTorch's.
-- Tensors are FFI cdata and cannot carry fields, so parameters are marked
-- in a weak-keyed set (`nn.is_parameter`).
local T = require 'oneflow.tensor'
local class = require 'oneflow.class'
local autograd = require 'oneflow.autograd'
local U = require 'oneflow.nn._util'

local is_tensor, fail, OD = T.is_tensor, U.fail, U.OD
local M = {}

------------------------------------------------------------------ Parameter
local param_set = setmetatable({}, {__mode = 'k'})

--- nn.Parameter(t[, requires_grad | {requires_grad =}]): a leaf sharing t's
-- storage, requiring grad unless told otherwise.
function M.Parameter(t, rg)
  if type(rg) == 'table' then rg = U.check_options('Parameter', rg, {requires_grad = true}).requires_grad end
  if rg == nil then rg = true end
  if t == nil then t = T.flow.empty(0) end
  if not is_tensor(t) then fail('Parameter: expected a tensor, got ' .. type(t)) end
  local p = t:detach()
  if rg then p:requires_grad_(true) end
  param_set[p] = true
  return p
end

--- nn.is_parameter(v): true when v is an nn.Parameter.
function M.is_parameter(t) return param_set[t] == true end
local is_parameter = M.is_parameter

------------------------------------------------------------------ class machinery
local Module = class('Module')
Module.__is_module, Module.__label = true, 'nn.'
--- nn.Module(): the base class of every layer; subclass it with nn.Module:subclass('Name') and define __init and
-- forward.
-- @function nn.Module
M.Module = Module

--- nn.is_module(v): true when v is an nn.Module instance.
function M.is_module(v)
  local mt = type(v) == 'table' and getmetatable(v)
  return type(mt) == 'table' and mt.__is_module == true
end
local is_module = M.is_module

local function init_fields(self)
  rawset(self, '_parameters', OD.new())
  rawset(self, '_buffers', OD.new())
  rawset(self, '_modules', OD.new())
  rawset(self, '_non_persistent', {})
  rawset(self, 'training', true)
end

-- oneflow.class hook: a fresh instance has its registries before __init.
function Module.__alloc(cls)
  local self = setmetatable({}, cls)
  init_fields(self)
  return self
end

-- The methods of m.config (nn.Graph settings of one module).
local ModuleConfig = {}
ModuleConfig.__index = ModuleConfig

--- m.config:set_stage(i, placement) (OneFlow: config.set_stage): in an
-- nn.Graph, m is pipeline stage i (1-based) and runs on the ranks of
-- placement (flow.placement); see doc/distributed.md, "Pipeline parallelism".
function ModuleConfig:set_stage(i, placement)
  if type(i) ~= 'number' or i < 1 or i ~= math.floor(i) then
    error(('set_stage: the stage must be a positive integer (1-based), got %s'):format(tostring(i)), 2)
  end
  if type(placement) ~= 'table' or type(placement.ranks) ~= 'table' or placement.has_me == nil then
    error(('set_stage: expected a flow.placement for stage %d, got %s'):format(i, type(placement)), 2)
  end
  self.stage, self.placement = i, placement
end

-- Lookup order: raw fields, the class (methods), then parameters, buffers
-- and submodules; numeric keys go to the class's __getitem (containers).
local function make_index(cls)
  return function(self, k)
    if type(k) == 'number' then
      local get = cls.__getitem
      if get then return get(self, k) end
      return nil
    end
    local v = cls[k]
    if v ~= nil then return v end
    local reg = rawget(self, '_parameters')
    if reg == nil then return nil end
    v = reg.vals[k]
    if v ~= nil then return v end
    v = rawget(self, '_buffers').vals[k]
    if v ~= nil then return v end
    v = rawget(self, '_modules').vals[k]
    if v == nil and k == 'config' then
      -- per-module nn.Graph settings (m.config.activation_checkpointing = true,
      -- m.config:set_stage(i, placement))
      v = setmetatable({}, ModuleConfig)
      rawset(self, 'config', v)
    end
    return v
  end
end

-- A registry after the class's __sync (list containers keep their
-- elements in the array part too, so #seq and ipairs work; a raw store
-- seq[i] = m is picked up here).
local function registry(m, reg)
  local sync = m.__sync
  if sync then sync(m) end
  return rawget(m, reg)
end
M.registry = registry

local function remove_from(self, k, except)
  for _, reg in ipairs({'_parameters', '_buffers', '_modules'}) do
    if reg ~= except then rawget(self, reg):remove(k) end
  end
end

local function module_newindex(self, k, v)
  local setattr = getmetatable(self).__setattr
  if setattr and type(k) ~= 'number' then return setattr(self, k, v) end
  if type(k) == 'number' then
    local set = getmetatable(self).__setitem
    if not set then fail(('%s: cannot assign to index %d'):format(self.__name, k)) end
    return set(self, k, v)
  end
  local params, bufs, mods = rawget(self, '_parameters'), rawget(self, '_buffers'),
                             rawget(self, '_modules')
  if is_module(v) then
    remove_from(self, k, '_modules')
    mods:set(k, v)
  elseif is_tensor(v) and is_parameter(v) then
    remove_from(self, k, '_parameters')
    params:set(k, v)
  elseif params:has(k) then
    if v ~= nil then
      fail(("%s: cannot assign a %s as parameter '%s' (nn.Parameter or nil expected)")
           :format(self.__name, is_tensor(v) and 'plain tensor' or type(v), k))
    end
    params:set(k, nil)
  elseif bufs:has(k) then
    if v ~= nil and not is_tensor(v) then
      fail(("%s: cannot assign a %s as buffer '%s' (tensor or nil expected)"):format(
        self.__name, type(v), k))
    end
    bufs:set(k, v)
  elseif mods:has(k) then
    if v ~= nil then
      fail(("%s: cannot assign a %s as child module '%s' (nn.Module or nil expected)"):format(
        self.__name, type(v), k))
    end
    mods:set(k, nil)
  else
    rawset(self, k, v)
  end
end

------------------------------------------------------------------ calling, error context
-- A forward that fails unwinds through each module's __call; every module
-- on the way is recorded, and the outermost call adds the path of the one
-- that failed: "in layer1.0.conv1 (Conv2d): ...", or Torch7's "In 2 module
-- of nn.Sequential: ..." (nested) when every parent is a list container.
local depth, chain, chain_err = 0, {}, nil

local function find_path(parent, child)
  for name, m in registry(parent, '_modules'):items() do
    if m == child then return name end
  end
  for name, m in parent:named_modules() do
    if m == child then return name end
  end
  return '?'
end

-- Torch7's nested form when every parent is a list container
local function container_context(msg)
  local prefix = {}
  for i = #chain, 2, -1 do
    local outer = chain[i]
    local k = outer.__container_index and outer:__container_index(chain[i - 1])
    if not k then return nil end
    prefix[#prefix + 1] = ('In %d module of nn.%s: '):format(k, outer.__name)
  end
  return table.concat(prefix) .. msg
end

local function context(msg)
  local nested = container_context(msg)
  if nested then return nested end
  local parts = {}
  for i = #chain, 2, -1 do parts[#parts + 1] = find_path(chain[i], chain[i - 1]) end
  return ('in %s (%s): %s'):format(table.concat(parts, '.'), chain[1].__name, msg)
end

local function on_error(self, err)
  if type(err) ~= 'string' then return error(err, 0) end
  if err ~= chain_err then chain = {}; chain_err = err end
  chain[#chain + 1] = self
  if depth > 0 then return error(err, 0) end
  local msg = #chain > 1 and context(err) or err
  chain, chain_err = {}, nil
  return error(msg, 0)
end

local function finish(self, ok, ...)
  depth = depth - 1
  if ok then return ... end
  return on_error(self, (...))
end

local function run_hooks(self, ...)
  local input = {...}
  local n = select('#', ...)
  local pre = rawget(self, '_forward_pre_hooks')
  if pre then
    for _, h in pre:items() do
      local r = h(self, input)
      if r ~= nil then
        input = is_tensor(r) and {r} or r
        n = #input
      end
    end
  end
  local out = {self:forward(unpack(input, 1, n))}
  local post = rawget(self, '_forward_hooks')
  if post then
    for _, h in post:items() do
      local r = h(self, input, #out > 1 and out or out[1])
      if r ~= nil then out = (#out > 1 and type(r) == 'table' and not is_tensor(r)) and r or {r} end
    end
  end
  return unpack(out, 1, table.maxn(out))
end

local function call_forward(self, ...)
  if rawget(self, '_forward_pre_hooks') or rawget(self, '_forward_hooks') then
    return run_hooks(self, ...)
  end
  return self:forward(...)
end

local function module_call(self, ...)
  depth = depth + 1
  return finish(self, pcall(call_forward, self, ...))
end

------------------------------------------------------------------ values a forward can free
-- Eager mode frees a tensor when Lua's collector finds its handle dead, and
-- until then its memory stays taken (up to _C.lua's floor of 64 MiB of dead
-- tensors: ResNet-50 inference at batch 1 peaked at 2.8x PyTorch's RSS)
-- and the blocks the next ops get are cold. A forward that made a value
-- and passed it on knows when it is dead, if nobody else can hold it: the
-- modules that made it and read it keep no reference to their inputs or
-- outputs, no gradient is recorded (autograd would save it) and no graph is
-- traced. It then releases the value's C tensor at once (_C.release), and
-- the block goes back to the allocator's cache while still in the caches.
--
-- A class says its forward keeps nothing, given children that keep nothing,
-- with keeps_no_tensors(Cls), which notes that forward function: a subclass
-- says it again, and a forward put in its place later (on the class or an
-- instance) is not vouched for. An instance qualifies when its forward is
-- the one noted, it has no hooks, and every child qualifies.
local core = require 'oneflow._C'
local C, release = core.C, core.release

--- keeps_no_tensors(Cls): Cls's forward, as it is now, keeps no reference
-- to its inputs or outputs once it returns (given children that keep none).
function M.keeps_no_tensors(cls)
  rawset(cls, '_keeps_none', cls.forward)
end

--- Does m's forward keep no reference to its inputs and outputs?
function M.keeps_none(m)
  local cls = getmetatable(m)
  if type(cls) ~= 'table' or m.forward ~= rawget(cls, '_keeps_none') or m.forward == nil
     or rawget(m, '_forward_hooks') or rawget(m, '_forward_pre_hooks') then
    return false
  end
  local mods = registry(m, '_modules')
  local vals, names = mods.vals, mods.names
  for i = 1, #names do
    if not M.keeps_none(vals[names[i]]) then return false end
  end
  return true
end

-- may_free(): may a forward free its values now (nothing recorded, nothing
-- traced, no tracer holding values: _C.may_release)? hold_values(d) is _C's.
M.may_free, M.hold_values = core.may_release, core.hold_values

--- frees(m, x): may m's forward, called on x, free the values it makes
-- (may_free, and m keeps_none)? false, or a true value for free and step
-- that holds x: a forward's input is never freed, also where a layer gave
-- it back as its result (an in-place layer, Identity).
function M.frees(m, x)
  if M.may_free() and M.keeps_none(m) then return x or true end
  return false
end

-- Are tensors a and b apart (no shared storage), so that writing into a
-- leaves b alone?
local function apart(a, b)
  return is_tensor(a) and is_tensor(b) and C.of_tensor_storage_id(a.p) ~= C.of_tensor_storage_id(b.p)
end

--- free(t, f[, keep]): releases t, a value the forward passed on, when f
-- (its frees(self, x)) allows, unless t is the forward's input or `keep`
-- (the same tensor came back, as from an in-place op). t's makers and
-- readers are the forward's children, which keeps_none checked.
function M.free(t, f, keep)
  if f and is_tensor(t) and not rawequal(t, keep) and not rawequal(t, f) then release(t) end
end

--- step(m, v, f): m(v), and v freed after it (free(v, f, m(v))): a
-- forward's step from one of its values to the next.
function M.step(m, v, f)
  local y = m(v)
  M.free(v, f, y)
  return y
end

--- residual(x, branch, f): x + branch, a residual block's sum; with f
-- (its frees(self, x)) and no gradient recorded added into the branch's own
-- value (the same bits) when that is neither x nor shares its storage, else
-- the branch is freed after. (Recorded, the branch may be a view of a
-- tensor that requires grad or a value a node saved: no writing into it.)
function M.residual(x, branch, f)
  if f and C.of_is_grad_enabled() == 0 and not rawequal(branch, f) and apart(branch, x) then
    return branch:add_(x)
  end
  local y = x + branch
  if not rawequal(branch, x) then M.free(branch, f, y) end
  return y
end

------------------------------------------------------------------ repr
local function indent(s)
  return (s:gsub('\n', '\n  '))
end

local function module_tostring(self)
  local lines = {}
  local extra = self:extra_repr()
  if extra ~= '' then
    for line in (extra .. '\n'):gmatch('(.-)\n') do lines[#lines + 1] = line end
  end
  local nchild = 0
  for name, m in registry(self, '_modules'):items() do
    nchild = nchild + 1
    lines[#lines + 1] = '(' .. name .. '): ' .. indent(tostring(m))
  end
  local head = self.__name .. '('
  if #lines == 0 then return head .. ')' end
  if nchild == 0 and #lines == 1 then return head .. lines[1] .. ')' end
  return head .. '\n  ' .. table.concat(lines, '\n  ') .. '\n)'
end

------------------------------------------------------------------ subclassing
-- oneflow.class hook, run for every subclass (local Net = nn.Module:subclass('Net')):
-- instances look fields up through the registries and assign through them.
function Module.__setup(cls)
  cls.__index = make_index(cls)
  cls.__newindex = module_newindex
  cls.__call = module_call
  cls.__tostring = module_tostring
end
Module.__setup(Module)

------------------------------------------------------------------ registration
function Module:__init() if rawget(self, '_parameters') == nil then init_fields(self) end end

function Module:forward()
  fail(self.__name .. ": forward is not implemented (define " .. self.__name .. ':forward)')
end

function Module.extra_repr() return '' end

local function check_name(self, kind, name, reg)
  if type(name) ~= 'string' then
    fail(('%s: %s name must be a string, got %s'):format(self.__name, kind, type(name)))
  end
  if name == '' or name:find('.', 1, true) then
    fail(("%s: %s name can't be empty or contain '.', got '%s'"):format(self.__name, kind, name))
  end
  if rawget(self, name) ~= nil or (getmetatable(self)[name] ~= nil) then
    fail(("%s: attribute '%s' already exists"):format(self.__name, name))
  end
  for _, other in ipairs({'_parameters', '_buffers', '_modules'}) do
    if other ~= reg and rawget(self, other):has(name) then
      fail(("%s: attribute '%s' already exists"):format(self.__name, name))
    end
  end
end

--- m:register_parameter(name, p): p an nn.Parameter or nil.
function Module:register_parameter(name, p)
  check_name(self, 'parameter', name, '_parameters')
  if p ~= nil and not (is_tensor(p) and is_parameter(p)) then
    fail(("%s: cannot assign a %s as parameter '%s' (nn.Parameter or nil expected)"):format(
      self.__name, is_tensor(p) and 'plain tensor' or type(p), name))
  end
  self._parameters:set(name, p)
end

--- m:register_buffer(name, t, {persistent = true}): t a tensor or nil.
function Module:register_buffer(name, t, opts)
  check_name(self, 'buffer', name, '_buffers')
  if t ~= nil and not is_tensor(t) then
    fail(("%s: cannot assign a %s as buffer '%s' (tensor or nil expected)"):format(
      self.__name, type(t), name))
  end
  self._buffers:set(name, t)
  local persistent = not (type(opts) == 'table' and opts.persistent == false) and opts ~= false
  self._non_persistent[name] = (not persistent) or nil
end

--- m:add_module(name, child): child an nn.Module or nil.
function Module:add_module(name, m)
  check_name(self, 'module', name, '_modules')
  if m ~= nil and not is_module(m) then
    fail(('%s: %s is not a Module subclass'):format(self.__name, type(m)))
  end
  self._modules:set(name, m)
end
Module.register_module = Module.add_module

--- Removes a parameter, buffer, submodule or plain field (Python's `del m.name`).
function Module:delete(name)
  remove_from(self, name)
  self._non_persistent[name] = nil
  rawset(self, name, nil)
end

------------------------------------------------------------------ hooks
local hook_id = 0
local function add_hook(self, field, fn)
  local reg = rawget(self, field)
  if not reg then reg = OD.new(); rawset(self, field, reg) end
  hook_id = hook_id + 1
  local id = hook_id
  reg:set(id, fn)
  return {remove = function()
    reg:remove(id)
    if reg:len() == 0 and rawget(self, field) == reg then rawset(self, field, nil) end
  end}
end

--- fn(module, input_array) may return a replacement input (a tensor or an array).
function Module:register_forward_pre_hook(fn) return add_hook(self, '_forward_pre_hooks', fn) end
--- fn(module, input_array, output) may return a replacement output.
function Module:register_forward_hook(fn) return add_hook(self, '_forward_hooks', fn) end

------------------------------------------------------------------ traversal
local function iter_list(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

local function join(prefix, name) return prefix == '' and name or (prefix .. '.' .. name) end

local function collect_modules(m, prefix, memo, out)
  if memo then
    if memo[m] then return end
    memo[m] = true
  end
  out[#out + 1] = {prefix, m}
  for name, child in registry(m, '_modules'):items() do
    collect_modules(child, join(prefix, name), memo, out)
  end
end

--- for name, m in net:named_modules() do ... end (self first, as '').
function Module:named_modules(opts)
  opts = require('oneflow._args').check_options('named_modules', opts, {'prefix', 'remove_duplicate'})
  local out = {}
  collect_modules(self, opts.prefix or '', opts.remove_duplicate ~= false and {} or nil, out)
  return iter_list(out)
end

function Module:modules()
  local r = {}
  for _, m in self:named_modules() do r[#r + 1] = m end
  return r
end

function Module:named_children()
  local out, memo = {}, {}
  for name, m in registry(self, '_modules'):items() do
    if not memo[m] then memo[m] = true; out[#out + 1] = {name, m} end
  end
  return iter_list(out)
end

function Module:children()
  local r = {}
  for _, m in self:named_children() do r[#r + 1] = m end
  return r
end

-- every module of the tree once, without names (the fast path of parameters())
local function all_modules(m, memo, out)
  if memo[m] then return out end
  memo[m] = true
  out[#out + 1] = m
  for _, child in registry(m, '_modules'):items() do all_modules(child, memo, out) end
  return out
end

-- members of registry `reg` (each once) as a list of values, or of
-- {name, value} when `named`
local function members(self, reg, opts, named)
  opts = opts or {}
  if type(opts) == 'boolean' then opts = {recurse = opts} end
  local prefix = opts.prefix or ''
  local mods
  if opts.recurse == false then mods = {named and {prefix, self} or self}
  elseif named then
    mods = {}
    collect_modules(self, prefix, {}, mods)
  else
    mods = all_modules(self, {}, {})
  end
  local out, memo = {}, {}
  for _, e in ipairs(mods) do
    local m = named and e[2] or e
    for name, v in registry(m, reg):items() do
      if opts.remove_duplicate == false or not memo[v] then
        memo[v] = true
        out[#out + 1] = named and {join(e[1], name), v} or v
      end
    end
  end
  return out
end

--- Iterates over (name, parameter) pairs, names as in the state dict:
-- `for name, p in net:named_parameters() do ... end`.
-- @tparam[opt] table opts `{prefix = '', recurse = true}`
-- @return an iterator for a generic for
function Module:named_parameters(opts) return iter_list(members(self, '_parameters', opts, true)) end
--- A Lua array of the parameters (recursively, each once), for an optimizer:
-- `flow.optim.SGD(net:parameters(), {lr = 0.1})`.
-- @tparam[opt=true] boolean recurse include submodules' parameters
-- @treturn {Tensor,...}
function Module:parameters(recurse) return members(self, '_parameters', {recurse = recurse}) end
function Module:named_buffers(opts) return iter_list(members(self, '_buffers', opts, true)) end
function Module:buffers(recurse) return members(self, '_buffers', {recurse = recurse}) end

--- m:get_submodule('layer1.0.conv1')
function Module:get_submodule(target)
  local m = self
  if target == '' then return m end
  for part in target:gmatch('[^.]+') do
    local c = m._modules:get(part)
    if not c then fail(('get_submodule: %s has no attribute `%s`'):format(m.__name, part)) end
    m = c
  end
  return m
end

function Module:get_parameter(target)
  local path, name = target:match('^(.*)%.([^.]+)$')
  local m = self:get_submodule(path or '')
  local p = m._parameters:get(name or target)
  if not p then fail(('get_parameter: %s has no parameter `%s`'):format(m.__name, name or target)) end
  return p
end

------------------------------------------------------------------ modes and grads
--- Sets training mode (dropout active, batch norm updating its statistics)
-- on this module and its children.
-- @tparam[opt=true] boolean mode false for evaluation mode
-- @return the module
function Module:train(mode)
  if mode == nil then mode = true end
  if type(mode) ~= 'boolean' then fail('train: mode is expected to be a boolean, got ' .. type(mode)) end
  rawset(self, 'training', mode)
  for _, m in registry(self, '_modules'):items() do m:train(mode) end
  return self
end
--- Evaluation mode: `m:train(false)`.
-- @return the module
function Module:eval() return self:train(false) end

--- fn(m) on every submodule (children first) and self.
function Module:apply(fn)
  for _, m in registry(self, '_modules'):items() do m:apply(fn) end
  fn(self)
  return self
end

--- m:zero_grad({set_to_none = true})
function Module:zero_grad(opts)
  local to_none = not (opts == false or (type(opts) == 'table' and opts.set_to_none == false))
  local params = self:parameters()
  if to_none then
    for _, p in ipairs(params) do p.grad = nil end
    return
  end
  autograd.no_grad(function()
    for _, p in ipairs(params) do
      local g = p.grad
      if g then g:zero_() end
    end
  end)
end

function Module:requires_grad_(on)
  if on == nil then on = true end
  for _, p in ipairs(self:parameters()) do p:requires_grad_(on) end
  return self
end

require('oneflow.nn.module_state').install(M)

return M
