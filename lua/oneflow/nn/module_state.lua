-- oneflow.nn.module_state: the nn.Module methods that copy or convert its
-- tensors -- state_dict / load_state_dict (PyTorch key names), _apply and
-- the dtype/device conversions, and clone (a deep copy). Installed on
-- nn.Module by oneflow.nn.module.
local A = require 'oneflow._args'
local T = require 'oneflow.tensor'
local autograd = require 'oneflow.autograd'
local mf = require 'oneflow.memory_format'
local types = require 'oneflow.types'
local U = require 'oneflow.nn._util'

local is_tensor, fail, OD = T.is_tensor, U.fail, U.OD

local S = {}
-- set by install (oneflow.nn.module requires this file while it loads)
local registry, is_parameter, is_module, Parameter

------------------------------------------------------------------ state dict
local function save_into(m, prefix, out, keys)
  for name, p in registry(m, '_parameters'):items() do
    local k = prefix .. name
    out[k] = p:detach()
    keys[#keys + 1] = k
  end
  for name, b in m._buffers:items() do
    if not m._non_persistent[name] then
      local k = prefix .. name
      out[k] = b:detach()
      keys[#keys + 1] = k
    end
  end
  -- modules whose state is not tensors (flow.quantization's quantized
  -- modules: a quantized weight, output scale and zero point) add their own
  local extra = m.__extra_state
  if extra then extra(m, prefix, out, keys) end
  for name, c in registry(m, '_modules'):items() do save_into(c, prefix .. name .. '.', out, keys) end
end

--- A flat table name -> tensor with PyTorch's key names ('0.weight',
-- 'layer1.0.conv1.weight', 'bn1.running_mean'); the tensors share storage
-- with the module's. The second result lists the keys in module order.
-- @function Module:state_dict
-- @tparam[opt] table opts `{prefix = ''}`: prepended to every key
-- @treturn table name -> tensor
-- @treturn {string,...} the keys in module order
function S:state_dict(opts)
  local out, keys = {}, {}
  save_into(self, opts and opts.prefix or '', out, keys)
  return out, keys
end

-- every (key, tensor) the module expects, in order
local function expected_entries(m, prefix, out)
  for name, p in registry(m, '_parameters'):items() do out[#out + 1] = {prefix .. name, p} end
  for name, b in m._buffers:items() do
    if not m._non_persistent[name] then out[#out + 1] = {prefix .. name, b} end
  end
  for name, c in registry(m, '_modules'):items() do expected_entries(c, prefix .. name .. '.', out) end
  return out
end

-- every (module, prefix) whose class loads its own state
local function extra_entries(m, prefix, out)
  if m.__load_extra then out[#out + 1] = {m, prefix} end
  for name, c in registry(m, '_modules'):items() do extra_entries(c, prefix .. name .. '.', out) end
  return out
end

local function load_problems(self, sd, strict)
  local problems, missing, unexpected, seen = {}, {}, {}, {}
  local to_copy = {}
  for _, e in ipairs(expected_entries(self, '', {})) do
    local k, dst = e[1], e[2]
    seen[k] = true
    local src = sd[k]
    if src == nil then missing[#missing + 1] = k
    elseif not is_tensor(src) then
      problems[#problems + 1] = ('value for %s is a %s, not a tensor'):format(k, type(src))
    elseif not A.same_shape(src, dst) then
      problems[#problems + 1] = ('size mismatch for %s: checkpoint %s, model %s'):format(
        k, U.shape_str(src), U.shape_str(dst))
    else
      to_copy[#to_copy + 1] = {dst, src}
    end
  end
  -- modules with their own state check their entries and give a setter
  for _, e in ipairs(extra_entries(self, '', {})) do
    local ok, apply = pcall(e[1].__load_extra, e[1], e[2], sd, seen)
    if ok then to_copy[#to_copy + 1] = {apply}
    else problems[#problems + 1] = (tostring(apply):gsub('^.-load_state_dict: ', '')) end
  end
  for k in pairs(sd) do if not seen[k] then unexpected[#unexpected + 1] = tostring(k) end end
  table.sort(unexpected)
  if strict and #missing > 0 then
    problems[#problems + 1] = 'missing keys in state_dict: ' .. table.concat(missing, ', ')
  end
  if strict and #unexpected > 0 then
    problems[#problems + 1] = 'unexpected keys in state_dict: ' .. table.concat(unexpected, ', ')
  end
  return problems, missing, unexpected, to_copy
end

--- Copies a state dict into the module's existing tensors:
-- `net:load_state_dict(flow.load('net.safetensors'))`. Raises on size
-- mismatches and, when strict, on missing or unexpected keys (naming all).
-- @function Module:load_state_dict
-- @tparam table sd name -> tensor (PyTorch's key names)
-- @tparam[opt] table opts `{strict = true}`
-- @treturn table `{missing_keys =, unexpected_keys =}`
function S:load_state_dict(sd, opts)
  if type(sd) ~= 'table' then fail('load_state_dict: expected a table of tensors, got ' .. type(sd)) end
  local strict = not (opts == false or (type(opts) == 'table' and opts.strict == false))
  local problems, missing, unexpected, to_copy = load_problems(self, sd, strict)
  if #problems > 0 then
    fail('load_state_dict: ' .. table.concat(problems, '\nload_state_dict: '))
  end
  autograd.no_grad(function()
    for _, c in ipairs(to_copy) do
      if c[2] == nil then c[1]() else c[1]:copy_(c[2]) end
    end
  end)
  return {missing_keys = missing, unexpected_keys = unexpected}
end

------------------------------------------------------------------ conversion
--- Replaces every parameter and buffer t by fn(t) (keeping the Parameter
-- mark, requires_grad and a converted grad).
function S:_apply(fn)
  for _, m in registry(self, '_modules'):items() do m:_apply(fn) end
  local params = registry(self, '_parameters')
  for name, p in params:items() do
    local np = autograd.no_grad(fn, p)
    if np ~= p then
      local g = p.grad
      np = Parameter(np, p.requires_grad)
      if g then np.grad = autograd.no_grad(fn, g) end
      params:set(name, np)
    end
  end
  for name, b in self._buffers:items() do
    self._buffers:set(name, autograd.no_grad(fn, b))
  end
  if self.__unsync then self:__unsync() end
  return self
end

local function float_only(convert)
  return function(t)
    if t:is_floating_point() then return convert(t) end
    return t
  end
end

-- (a, b) of m:to(...) -> dtype or nil, device or nil, memory format or nil
local function to_args(a, b)
  local dt, dev, fmt
  for _, v in ipairs({a, b}) do
    if type(v) == 'table' and getmetatable(v) == nil then
      dt, dev, fmt = v.dtype or dt, v.device or dev, v.memory_format or fmt
    elseif mf.is_format(v) then
      fmt = v
    elseif getmetatable(v) == types.DType or (type(v) == 'string' and types.by_name[v]) then
      dt = v
    elseif v ~= nil then
      dev = v
    end
  end
  return dt, dev, fmt
end

--- m:to(dtype), m:to('cpu'), m:to{dtype =, device =, memory_format =}:
-- floating tensors change dtype, all tensors move; with a channels-last
-- memory_format the 4-D (5-D) ones, i.e. convolution weights, are laid out
-- NHWC (NDHWC), as in PyTorch.
function S:to(a, b)
  local dt, dev, fmt = to_args(a, b)
  return self:_apply(function(t)
    if dt and t:is_floating_point() then t = t:to(dt) end
    if dev then t = t:to(dev) end
    if fmt and (fmt.ndim == nil or t:dim() == fmt.ndim) then
      t = t:contiguous{memory_format = fmt}
    end
    return t
  end)
end
function S:double() return self:_apply(float_only(function(t) return t:double() end)) end
function S:float() return self:_apply(float_only(function(t) return t:float() end)) end
function S:half() return self:_apply(float_only(function(t) return t:half() end)) end
function S:bfloat16() return self:_apply(float_only(function(t) return t:bfloat16() end)) end
function S:type(dt) return self:_apply(function(t) return t:to(dt) end) end
function S:cpu() return self end
function S:cuda() return self:to('cuda') end

------------------------------------------------------------------ copies
-- plain tables, modules and their registries are copied; other objects
-- (dtypes, devices, functions) are shared
local function copyable(v)
  local mt = getmetatable(v)
  return mt == nil or mt == OD or is_module(v)
end

local function deepcopy(v, memo)
  if memo[v] then return memo[v] end
  if is_tensor(v) then
    local c = v:detach():clone()
    if is_parameter(v) then c = Parameter(c, v.requires_grad) end
    memo[v] = c
    return c
  end
  if type(v) ~= 'table' or not copyable(v) then return v end
  local c = {}
  memo[v] = c
  for k, x in pairs(v) do rawset(c, deepcopy(k, memo), deepcopy(x, memo)) end
  return setmetatable(c, getmetatable(v))
end

--- A deep copy (Python's copy.deepcopy): new parameters and buffers.
function S:clone()
  return deepcopy(self, {})
end

--- Puts these methods on nn.Module.
function S.install(M)
  registry, is_parameter, is_module, Parameter = M.registry, M.is_parameter, M.is_module, M.Parameter
  for k, v in pairs(S) do
    if k ~= 'install' then M.Module[k] = v end
  end
end

return S
