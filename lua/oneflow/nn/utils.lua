-- oneflow.nn.utils: gradient clipping, parameter <-> vector, and pruning
-- (nn.utils.prune).
--   local total = nn.utils.clip_grad_norm_(net:parameters(), 1.0)
local flow = require 'oneflow'   -- the table being built (used at call time)
local T = require 'oneflow.tensor'
local autograd = require 'oneflow.autograd'
local U = require 'oneflow.nn._util'

local is_tensor, fail = T.is_tensor, U.fail
local M = {}

-- a tensor, an array, or an iterator (e.g. m:named_parameters()) -> array
local function param_list(params, op)
  if is_tensor(params) then return {params} end
  if type(params) == 'function' then
    return require('oneflow._args').iter_tensors(op, params)
  end
  if type(params) ~= 'table' then
    fail(('%s: expected a tensor, a list of tensors or an iterator, got %s'):format(op, type(params)))
  end
  if type(params.parameters) == 'function' then return params:parameters() end
  for i = 1, #params do
    if not is_tensor(params[i]) then
      fail(('%s: params[%d] must be a tensor, got %s'):format(op, i, require('oneflow._args').describe(params[i])))
    end
  end
  return params
end

local function grads_of(params)
  local gs = {}
  for _, p in ipairs(params) do
    local g = p.grad
    if g then gs[#gs + 1] = g end
  end
  return gs
end

--- clip_grad_norm_(params, max_norm, {norm_type = 2, error_if_nonfinite = false}):
-- scales all grads by max_norm / (total + 1e-6) when the total norm (of all
-- grads together) exceeds max_norm; returns the total norm (a tensor).
function M.clip_grad_norm_(params, max_norm, opts)
  if type(opts) == 'number' then opts = {norm_type = opts} end
  opts = require('oneflow._args').check_options('clip_grad_norm_', opts, {norm_type = true, error_if_nonfinite = true})
  local p = opts.norm_type or 2
  if p == 'inf' then p = math.huge end
  local gs = grads_of(param_list(params, 'clip_grad_norm_'))
  return autograd.no_grad(function()
    if #gs == 0 then return flow.tensor(0) end
    local norms = {}
    for i, g in ipairs(gs) do
      norms[i] = p == math.huge and g:abs():amax() or g:norm(p)
    end
    local stacked = flow.stack(norms, 1)
    local total = p == math.huge and stacked:amax() or stacked:norm(p)
    local tv = total:item()
    if opts.error_if_nonfinite and (tv ~= tv or tv == math.huge) then
      fail(('clip_grad_norm_: the total norm of order %s for gradients is non-finite, so it cannot be clipped. '
            .. 'To disable this error, set error_if_nonfinite = false'):format(tostring(p)))
    end
    local coef = max_norm / (tv + 1e-6)
    if coef < 1 then
      for _, g in ipairs(gs) do g:mul_(coef) end
    end
    return total
  end)
end
M.clip_grad_norm = M.clip_grad_norm_

--- clip_grad_value_(params, clip_value): grads clamped to [-v, v] in place.
function M.clip_grad_value_(params, clip_value)
  require('oneflow._args').arg('clip_grad_value_', 2, 'clip_value', clip_value, 'number')
  local gs = grads_of(param_list(params, 'clip_grad_value_'))
  autograd.no_grad(function()
    for _, g in ipairs(gs) do g:clamp_(-clip_value, clip_value) end
  end)
end

--- parameters_to_vector(params): one 1-D tensor of all parameters (differentiable).
function M.parameters_to_vector(params)
  local flat = {}
  for i, p in ipairs(param_list(params, 'parameters_to_vector')) do flat[i] = p:reshape(-1) end
  return flow.cat(flat, 1)
end

--- vector_to_parameters(vec, params): copies slices of vec into the parameters.
function M.vector_to_parameters(vec, params)
  if not is_tensor(vec) then fail('vector_to_parameters: expected vec to be a tensor, got ' .. type(vec)) end
  local list = param_list(params, 'vector_to_parameters')
  local total = 0
  for _, p in ipairs(list) do total = total + p:numel() end
  if vec:numel() ~= total then
    fail(('vector_to_parameters: vec has %d elements, parameters need %d'):format(vec:numel(), total))
  end
  autograd.no_grad(function()
    local pos = 1
    for _, p in ipairs(list) do
      local n = p:numel()
      p:copy_(vec:narrow(1, pos, n):view(p:size()))
      pos = pos + n
    end
  end)
end

M.prune = require 'oneflow.nn.prune'
for k, f in pairs(require 'oneflow.nn.reparam') do M[k] = f end
M.rnn = require 'oneflow.nn.packed'

return M
