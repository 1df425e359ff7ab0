-- oneflow.optim.optimizer: the Optimizer base class -- parameter groups,
-- zero_grad, step(closure), and PyTorch-layout state dicts.
--
-- A subclass declares `hyper`, its keyword arguments in PyTorch's order as
-- {name, default}, a `validate(group)` method and a `_step_group(group)`
-- method that updates the group's parameters in place (it runs under
-- no_grad). Per-parameter state lives in `opt.state[p]`, a table keyed by
-- the parameter tensor. A custom optimizer can also call
-- Optimizer.__init(self, params, defaults) itself (a value of
-- optim.REQUIRED in defaults must then be given by every group) and
-- override _step_group, or step itself as in PyTorch.
local T = require 'oneflow.tensor'
local autograd = require 'oneflow.autograd'
local U = require 'oneflow.optim._util'

local is_tensor, fail = T.is_tensor, U.fail

local Optimizer = U.Object:subclass('Optimizer')
Optimizer.hyper = {}

-- Accepted for PyTorch compatibility, no effect here.
Optimizer.ignored_options = {foreach = true, fused = true, capturable = true, differentiable = true}

-- params -> a list of group tables
local function to_groups(name, params)
  if is_tensor(params) then return {{params = {params}}} end
  if type(params) == 'function' then   -- an iterator, e.g. pairs over named params
    params = require('oneflow._args').iter_tensors(name, params)
  end
  if type(params) ~= 'table' then
    fail(('%s: params must be a tensor, a list of tensors or a list of parameter groups, got %s')
         :format(name, type(params)))
  end
  if type(params.parameters) == 'function' then
    fail(('%s: params is a module; pass module:parameters()'):format(name))
  end
  if params.params ~= nil then return {params} end
  if #params == 0 and next(params) == nil then return {} end
  if #params == 0 then
    fail(('%s: params must be an array of tensors or parameter groups, got a table with non-array keys')
         :format(name))
  end
  if #params > 0 and not is_tensor(params[1]) and type(params[1]) == 'table'
     and not params[1].is_global then return params end
  return {{params = params}}
end

--- Optimizer(params, defaults): params is a tensor, an array of tensors or
-- an array of parameter groups ({params = {...}, lr = ...}).
function Optimizer:__init(params, defaults)
  local name = self.__name
  require('oneflow._args').arg(name, 2, 'defaults', defaults, 'table|nil')
  self.defaults = defaults or {}
  self.state = {}
  self.param_groups = {}
  self:validate(self.defaults)
  local groups = to_groups(name, params)
  if #groups == 0 then fail(name .. ': optimizer got an empty parameter list') end
  for _, g in ipairs(groups) do self:add_param_group(g) end
end

--- Subclass constructors: Class(params, [lr,] {options}).
function Optimizer:_construct(params, ...)
  local defaults = U.parse_args(self.__name, self.hyper, self.ignored_options, ...)
  Optimizer.__init(self, params, defaults)
end

function Optimizer.validate() end

--- Adds a group: {params = tensor | {tensors}, <hyper-parameter> = value}.
-- Missing hyper-parameters come from the defaults. The table itself is kept
-- (as in PyTorch), with params replaced by a fresh array.
function Optimizer:add_param_group(group)
  local name = self.__name
  if type(group) ~= 'table' or is_tensor(group) then
    fail(('%s: add_param_group expects a table with a params field, got %s'):format(name, type(group)))
  end
  local params = group.params
  if is_tensor(params) then params = {params} end
  if type(params) == 'function' then params = to_groups(name, params)[1].params end
  if type(params) ~= 'table' then
    fail(('%s: parameter group needs params, a tensor or a list of tensors, got %s'):format(name, type(params)))
  end
  local list, seen = {}, {}
  for i = 1, #params do
    local p = params[i]
    if type(p) == 'table' and p.is_global then
      -- a global parameter: the optimizer updates this rank's shard
      -- (oneflow.optim._global boxes the gradient to the shard's sbp)
      p = require('oneflow.optim._global').adopt(self, p)
    end
    if not is_tensor(p) then
      fail(('%s: optimizer can only optimize tensors, but params[%d] is a %s'):format(name, i, type(p)))
    end
    if not p.is_leaf then
      fail(('%s: can\'t optimize a non-leaf tensor (params[%d], shape %s)'):format(
        name, i, table.concat(p:size():totable(), 'x')))
    end
    if seen[p] then
      fail(('%s: params[%d] appears twice in the parameter group'):format(name, i))
    end
    seen[p] = true
    list[i] = p
  end
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      if seen[p] then fail(name .. ': some parameters appear in more than one parameter group') end
    end
  end
  group.params = list
  for key, v in pairs(self.defaults) do
    if group[key] == nil then
      if v == U.REQUIRED then
        fail(("%s: parameter group didn't specify a value of required optimization parameter %s")
             :format(name, key))
      end
      group[key] = U.copy(v)
    end
  end
  self:validate(group)
  self.param_groups[#self.param_groups + 1] = group
  self:_init_group_state(group)
  return group
end

-- Hook for optimizers that create state eagerly (Adagrad).
function Optimizer._init_group_state() end

--- zero_grad({set_to_none = true}) or zero_grad(false): drops the grads
-- (default, as PyTorch 2.x) or zeroes them in place.
function Optimizer:zero_grad(opts)
  local set_to_none = true
  if type(opts) == 'boolean' then set_to_none = opts
  elseif type(opts) == 'table' and opts.set_to_none ~= nil then set_to_none = opts.set_to_none end
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      if set_to_none then
        p.grad = nil
      else
        local grad = p.grad
        if grad ~= nil then
          if grad.grad_fn ~= nil then
            grad = grad:detach()
            p.grad = grad
          end
          autograd.no_grad(grad.zero_, grad)
        end
      end
    end
  end
end

--- step(closure): closure (optional) re-evaluates the loss with grad
-- enabled; step returns its value after updating the parameters.
function Optimizer:step(closure)
  local loss
  if closure ~= nil then loss = autograd.enable_grad(closure) end
  autograd.no_grad(self._update, self)
  return loss
end

-- Which kind of gradient an optimizer takes: dense tensors (most), sparse
-- embedding gradients too (SGD), or only sparse ones (SparseAdam).
Optimizer.grad_kinds = {dense = true}

-- A gradient the optimizer cannot take is an error naming it and the
-- parameter, before any parameter is touched.
function Optimizer:_check_grad_kinds()
  local kinds = self.grad_kinds
  for gi, group in ipairs(self.param_groups) do
    for pi, p in ipairs(group.params) do
      local g = p.grad
      if g ~= nil then
        local kind = g.is_sparse and 'sparse' or 'dense'
        if not kinds[kind] then
          local shape = table.concat(p:size():totable(), ', ')
          local hint = kind == 'sparse' and 'use optim.SparseAdam or optim.SGD' or 'use optim.Adam'
          error(('%s: parameter %d of param group %d (shape [%s]) has a %s gradient, which %s does not support; %s')
            :format(self.__name, pi, gi, shape, kind, self.__name, hint), 0)
        end
      end
    end
  end
end

function Optimizer:_update()
  if next(autograd._sparse_grads) ~= nil or not self.grad_kinds.dense then self:_check_grad_kinds() end
  local globals = self._globals
  local saved = globals and require('oneflow.optim._global').box_grads(globals)
  for _, group in ipairs(self.param_groups) do self:_step_group(group) end
  if saved then require('oneflow.optim._global').restore_grads(globals, saved) end
end

function Optimizer:_step_group()
  error(self.__name .. ': _step_group is not implemented', 2)
end

------------------------------------------------------------------ state dict
local function copy_state(s)
  local r = {}
  for k, v in pairs(s) do r[k] = U.copy(v) end
  return r
end

--- {state = {[0] = {...}, ...}, param_groups = {{params = {0, 1}, lr = ...}}}
-- with PyTorch's layout: parameters are numbered from 0 in group order.
-- State tensors are references to the live state (as PyTorch): clone them,
-- or save the dict, to keep a snapshot.
function Optimizer:state_dict()
  local ids, next_id, groups = {}, 0, {}
  for gi, g in ipairs(self.param_groups) do
    local packed = {}
    for k, v in pairs(g) do
      if k ~= 'params' then packed[k] = U.copy(v) end
    end
    local list = {}
    for i, p in ipairs(g.params) do
      if ids[p] == nil then
        ids[p] = next_id
        next_id = next_id + 1
      end
      list[i] = ids[p]
    end
    packed.params = list
    groups[gi] = packed
  end
  local state = {}
  for p, s in pairs(self.state) do
    local id = ids[p]
    if id ~= nil then state[id] = copy_state(s) end
  end
  return {state = state, param_groups = groups}
end

-- A loaded state value: floating tensors are copied and cast to the
-- parameter's dtype (so the optimizer never shares storage with the
-- dict); 'step' becomes a number.
local function cast(p, key, v)
  if is_tensor(v) then
    if key == 'step' then return v:item() end
    if v:is_floating_point() and p:is_floating_point() and v.dtype ~= p.dtype then
      return autograd.no_grad(v.to, v, p.dtype)
    end
    return autograd.no_grad(v.clone, v)
  end
  if type(v) == 'table' and getmetatable(v) == nil then
    local r = {}
    for k, x in pairs(v) do r[k] = cast(p, k, x) end
    return r
  end
  return v
end

--- Loads a dict made by state_dict (here or, with a loader, by PyTorch).
-- Hyper-parameters of each group are taken from the dict.
function Optimizer:load_state_dict(sd)
  local name = self.__name
  if type(sd) ~= 'table' or type(sd.param_groups) ~= 'table' then
    fail(name .. ': load_state_dict expects a table with state and param_groups')
  end
  local groups, saved = self.param_groups, sd.param_groups
  if #groups ~= #saved then
    fail(('%s: loaded state dict has a different number of parameter groups (%d, optimizer has %d)')
         :format(name, #saved, #groups))
  end
  local id_map = {}
  for gi, g in ipairs(groups) do
    local sp = saved[gi].params or {}
    if #sp ~= #g.params then
      fail(("%s: loaded state dict contains a parameter group that doesn't match the size of " ..
            "optimizer's group (group %d: %d vs %d parameters)"):format(name, gi, #sp, #g.params))
    end
    for i, id in ipairs(sp) do id_map[tonumber(id)] = g.params[i] end
  end
  local state = {}
  for k, v in pairs(sd.state or {}) do
    local p = id_map[tonumber(k)]
    if p ~= nil then state[p] = cast(p, nil, v) end
  end
  local new_groups = {}
  for gi, g in ipairs(groups) do
    local ng = {}
    for k, v in pairs(saved[gi]) do
      if k ~= 'params' then
        ng[k] = (k == 'step' and is_tensor(v)) and v:item() or U.copy(v)
      end
    end
    ng.params = g.params
    new_groups[gi] = ng
  end
  self.state = state
  self.param_groups = new_groups
end

------------------------------------------------------------------ printing
local function fmt(v)
  if type(v) == 'table' and getmetatable(v) == nil then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = fmt(x) end
    return '(' .. table.concat(parts, ', ') .. ')'
  end
  if type(v) == 'number' then return ('%.10g'):format(v) end
  return tostring(v)
end

function Optimizer:__tostring()
  local lines = {self.__name .. ' ('}
  for gi, g in ipairs(self.param_groups) do
    lines[#lines + 1] = 'Parameter Group ' .. gi
    local keys = {}
    for k in pairs(g) do if k ~= 'params' then keys[#keys + 1] = k end end
    table.sort(keys)
    for _, k in ipairs(keys) do lines[#lines + 1] = '    ' .. k .. ': ' .. fmt(g[k]) end
  end
  lines[#lines + 1] = ')'
  return table.concat(lines, '\n')
end

return Optimizer
