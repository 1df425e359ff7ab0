-- oneflow.nn.reparam: weight_norm and spectral_norm (nn.utils), PyTorch 1.13's
-- reparametrisations by forward pre-hook.
--   nn.utils.weight_norm(lin)               -- lin.weight_g [out, 1], lin.weight_v
--   nn.utils.spectral_norm(conv, {n_power_iterations = 2})
--   nn.utils.remove_weight_norm(lin); nn.utils.remove_spectral_norm(conv)
-- dim is 1-based (dim = 1 is the first dimension, PyTorch's 0).
local flow = require 'oneflow'   -- the table being built (used at call time)
local autograd = require 'oneflow.autograd'
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'

local fail, no_grad, Parameter = U.fail, autograd.no_grad, module.Parameter
local M = {}

-- per-module registry field -> {name -> {hook =, ...}}
local function registry(m, field)
  local r = rawget(m, field)
  if not r then r = {}; rawset(m, field, r) end
  return r
end

local function take_parameter(m, name, op)
  if not module.is_module(m) then fail(op .. ': expected a module, got ' .. type(m)) end
  local p = m._parameters:get(name)
  if p == nil then fail(("%s: module %s has no parameter named '%s'"):format(op, m.__name, tostring(name))) end
  return p
end

local function norm_dim(dim, nd, op)
  if dim < 0 then dim = nd + dim + 1 end
  if dim < 1 or dim > nd then fail(('%s: dim %d out of range for a %d-D weight'):format(op, dim, nd)) end
  return dim
end

------------------------------------------------------------------ weight_norm
-- 2-norm over every dim but `dim` (kept as size-1 dims); dim = false: the whole norm
local function norm_except_dim(v, dim)
  if not dim then return v:norm() end
  local others = {}
  for d = 1, v:dim() do if d ~= dim then others[#others + 1] = d end end
  if #others == 0 then return v:abs() end
  return v:norm(2, others, {keepdim = true})
end

local function wn_weight(m, name, dim)
  local g, v = m[name .. '_g'], m[name .. '_v']
  return v * (g / norm_except_dim(v, dim))
end

--- weight_norm(m, {name = 'weight', dim = 1}): w = g * v / ||v||, the norm taken
-- over every dim but dim (1-based; dim = false: over the whole tensor). m.<name>
-- becomes the parameters <name>_g and <name>_v, and is recomputed before each forward.
function M.weight_norm(m, opts)
  if type(opts) == 'string' then opts = {name = opts} end
  opts = require('oneflow._args').check_options('weight_norm', opts, {'dim', 'name'})
  local name = opts.name or 'weight'
  local reg = registry(m, '_weight_norm')
  if reg[name] then
    fail(('weight_norm: cannot register two weight_norm hooks on the same parameter %s'):format(name))
  end
  local w = take_parameter(m, name, 'weight_norm')
  local dim = opts.dim
  if dim == nil then dim = 1 end
  if dim then dim = norm_dim(dim, w:dim(), 'weight_norm') end
  local g = no_grad(function() return norm_except_dim(w:detach(), dim) end)
  m:delete(name)
  m:register_parameter(name .. '_g', Parameter(g))
  m:register_parameter(name .. '_v', Parameter(w:detach()))
  rawset(m, name, wn_weight(m, name, dim))
  reg[name] = {dim = dim, hook = m:register_forward_pre_hook(function(mod)
    rawset(mod, name, wn_weight(mod, name, dim))
  end)}
  return m
end

--- remove_weight_norm(m, {name = 'weight'}): m.<name> a plain parameter again.
function M.remove_weight_norm(m, opts)
  require('oneflow._args').arg('remove_weight_norm', 1, 'module', m, 'module')
  if type(opts) == 'string' then opts = {name = opts} end
  opts = require('oneflow._args').check_options('remove_weight_norm', opts, {'name'})
  local name = opts.name or 'weight'
  local reg = rawget(m, '_weight_norm')
  local e = reg and reg[name]
  if not e then fail(("remove_weight_norm: weight_norm of '%s' not found in %s"):format(tostring(name), m.__name)) end
  local w = no_grad(function() return wn_weight(m, name, e.dim) end)
  e.hook:remove()
  reg[name] = nil
  m:delete(name .. '_g')
  m:delete(name .. '_v')
  m:delete(name)
  m:register_parameter(name, Parameter(w))
  return m
end

------------------------------------------------------------------ spectral_norm
local function normalize(x, eps)
  return x / math.max(x:norm():item(), eps)
end

-- weight [d1, ...] -> [size(dim), rest] (dim moved to the front)
local function as_matrix(w, dim)
  if dim ~= 1 then
    local perm = {dim}
    for d = 1, w:dim() do if d ~= dim then perm[#perm + 1] = d end end
    w = w:permute(perm)
  end
  return w:reshape(w:size(1), -1)
end

local function sn_weight(m, name, e, power)
  local w = m[name .. '_orig']
  local u, v = m[name .. '_u'], m[name .. '_v']
  local mat = as_matrix(w, e.dim)
  if power then
    no_grad(function()
      local md = mat:detach()
      for _ = 1, e.n_power_iterations do
        v:copy_(normalize(flow.mv(md:t(), u), e.eps))
        u:copy_(normalize(flow.mv(md, v), e.eps))
      end
    end)
    if e.n_power_iterations > 0 then u, v = u:clone(), v:clone() end
  end
  local sigma = flow.dot(u, flow.mv(mat, v))
  return w / sigma
end

local function is_conv_transpose(m)
  return m.__name:match('^ConvTranspose') ~= nil
end

--- spectral_norm(m, {name = 'weight', n_power_iterations = 1, eps = 1e-12, dim}):
-- w = w_orig / sigma(w_orig), sigma estimated by power iteration (one round per
-- forward in training mode) on the weight seen as a [size(dim), -1] matrix.
-- dim defaults to 1 (2 for ConvTranspose). Adds the parameter <name>_orig and
-- the buffers <name>_u, <name>_v.
function M.spectral_norm(m, opts)
  if type(opts) == 'string' then opts = {name = opts} end
  opts = require('oneflow._args').check_options('spectral_norm', opts, {'dim', 'eps', 'n_power_iterations', 'name'})
  local name = opts.name or 'weight'
  local reg = registry(m, '_spectral_norm')
  if reg[name] then
    fail(('spectral_norm: cannot register two spectral_norm hooks on the same parameter %s'):format(name))
  end
  local w = take_parameter(m, name, 'spectral_norm')
  local n_iter = opts.n_power_iterations or 1
  if n_iter <= 0 then
    fail(('spectral_norm: expected n_power_iterations to be positive, but got n_power_iterations=%d'):format(n_iter))
  end
  local dim = opts.dim or (is_conv_transpose(m) and 2 or 1)
  local e = {dim = norm_dim(dim, w:dim(), 'spectral_norm'), n_power_iterations = n_iter, eps = opts.eps or 1e-12}
  local u, v = no_grad(function()
    local mat = as_matrix(w:detach(), e.dim)
    return normalize(flow.randn(mat:size(1), {dtype = w.dtype}), e.eps),
           normalize(flow.randn(mat:size(2), {dtype = w.dtype}), e.eps)
  end)
  m:delete(name)
  m:register_parameter(name .. '_orig', w)
  rawset(m, name, w:detach())
  m:register_buffer(name .. '_u', u)
  m:register_buffer(name .. '_v', v)
  e.hook = m:register_forward_pre_hook(function(mod)
    rawset(mod, name, sn_weight(mod, name, e, mod.training))
  end)
  reg[name] = e
  return m
end

--- remove_spectral_norm(m, {name = 'weight'}): m.<name> a plain parameter
-- holding w_orig / sigma (no power iteration).
function M.remove_spectral_norm(m, opts)
  require('oneflow._args').arg('remove_spectral_norm', 1, 'module', m, 'module')
  if type(opts) == 'string' then opts = {name = opts} end
  opts = require('oneflow._args').check_options('remove_spectral_norm', opts, {'name'})
  local name = opts.name or 'weight'
  local reg = rawget(m, '_spectral_norm')
  local e = reg and reg[name]
  if not e then
    fail(("remove_spectral_norm: spectral_norm of '%s' not found in %s"):format(tostring(name), m.__name))
  end
  local w = no_grad(function() return sn_weight(m, name, e, false) end)
  e.hook:remove()
  reg[name] = nil
  m:delete(name .. '_orig')
  m:delete(name .. '_u')
  m:delete(name .. '_v')
  m:delete(name)
  m:register_parameter(name, Parameter(w))
  return m
end

return M
