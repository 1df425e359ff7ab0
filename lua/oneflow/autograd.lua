-- oneflow.autograd: the Lua face of the C autograd engine -- tensor
-- properties (requires_grad, grad, grad_fn, is_leaf), backward(), no_grad,
-- autograd.grad, hooks, custom Functions and gradcheck.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local class = require 'oneflow.class'

local C, wrap, raise, out1 = core.C, core.wrap, core.raise, core.out1
local methods, getters = T.methods, T.getters
T.setters = T.setters or {}
local setters = T.setters

local M = {}

------------------------------------------------------------------ host callbacks
-- One FFI callback serves every hook and Function: C passes an id that
-- names a Lua function in `host_fns`. (Callbacks are a scarce resource in
-- LuaJIT, so they are not made per hook.)
local host_fns, next_id = {}, 0

local drain_released
local function register(fn)
  drain_released()
  next_id = next_id + 1
  host_fns[next_id] = fn
  return next_id
end

local function borrow(p)
  C.of_tensor_retain(p)
  return wrap(p)
end

local function give(t)
  C.of_tensor_retain(t.p)
  return t.p
end

local host_cb = ffi.cast('of_host_fn', function(id, ins, nin, outs, nout)
  local fn = host_fns[tonumber(id)]
  local args = {}
  for i = 1, nin do args[i] = borrow(ins[i - 1]) end
  local ok, res = pcall(fn, args, nout)
  if not ok then
    C.of_set_error(C.OF_ERR_STATE, tostring(res))
    return C.OF_ERR_STATE
  end
  for j = 1, nout do
    local r = res and res[j]
    if r ~= nil and not T.is_tensor(r) then
      C.of_set_error(C.OF_ERR_ARG, ('backward: expected a tensor or nil as result %d, got %s')
                     :format(j, type(r)))
      return C.OF_ERR_ARG
    end
    outs[j - 1] = r and give(r) or nil
  end
  return 0
end)
C.of_set_host_callback(host_cb)
M._host_cb = host_cb   -- keep it alive

-- Drop the Lua functions whose hooks / nodes C has released.
local released = ffi.new('int64_t[256]')
function drain_released()
  local n = C.of_host_take_released(released, 256)
  while n > 0 do
    for i = 0, n - 1 do host_fns[tonumber(released[i])] = nil end
    n = C.of_host_take_released(released, 256)
  end
end

-- Any Lua function that may run hooks or Functions must call C from the
-- interpreter: LuaJIT cannot enter a callback from a JIT-compiled FFI call.
local function interpreted(fn)
  jit.off(fn)
  return fn
end

------------------------------------------------------------------ properties
getters.requires_grad = function(t) return C.of_tensor_requires_grad(t.p) ~= 0 end
setters.requires_grad = function(t, v) t:requires_grad_(v) end
getters.is_leaf = function(t) return C.of_tensor_is_leaf(t.p) ~= 0 end
-- Sparse gradients (sparse embeddings) live here, beside C's dense ones:
-- C's grad slot holds tensors only. Weak keys: a dropped parameter drops it.
local sparse_grads = setmetatable({}, {__mode = 'k'})
M._sparse_grads = sparse_grads
getters.grad = function(t)
  local g = C.of_tensor_grad(t.p)
  local s = sparse_grads[t]
  if g == nil then return s end
  if s ~= nil then
    -- a weight used densely and sparsely (tied weights) gets one dense grad, as PyTorch
    sparse_grads[t] = nil
    M.no_grad(function() borrow(g):add_(s:to_dense()) end)
  end
  return borrow(g)
end
setters.grad = function(t, g)
  if g ~= nil and g.is_sparse then
    if C.of_tensor_set_grad(t.p, nil) ~= 0 then raise(3) end
    sparse_grads[t] = g
    return
  end
  sparse_grads[t] = nil
  if C.of_tensor_set_grad(t.p, g and g.p or nil) ~= 0 then raise(3) end
end
--- adds a sparse gradient (oneflow.sparse_grad) into t's grad
function M._accumulate_sparse(t, s)
  local old = sparse_grads[t]
  sparse_grads[t] = old and old:add(s) or s
end

local A = require 'oneflow._args'
local Node = A.value_type({})
Node.__index = Node
Node.__tostring = function(n) return '<' .. n:name() .. '>' end
function Node:name() return ffi.string(C.of_node_name(self.ptr)) end
--- next_functions: a Lua array of {node_or_false} per input.
function Node:next_functions()
  local res = {}
  for i = 1, C.of_node_num_next(self.ptr) do
    local p = C.of_node_next(self.ptr, i - 1)
    res[i] = p ~= nil and setmetatable({ptr = p, owner = self.owner}, Node) or false
  end
  return res
end
-- `owner` keeps the tensor (and so the node) alive while Lua looks at it.
getters.grad_fn = function(t)
  local p = C.of_tensor_grad_fn(t.p)
  if p == nil then return nil end
  return setmetatable({ptr = p, owner = t}, Node)
end

--- x:requires_grad_(flag = true): marks x (a leaf) for gradient recording; returns x.
function methods.requires_grad_(t, on)
  if on == nil then on = true end
  if C.of_tensor_set_requires_grad(t.p, on and 1 or 0) ~= 0 then raise(2) end
  return t
end

--- x:detach(): x without its autograd history (shares storage).
function methods.detach(t) return T.call1(C.of_detach, t.p, out1) end
function methods.detach_()
  error('detach_: not supported; use x = x:detach()', 2)
end

------------------------------------------------------------------ grad mode
--- Runs `fn(...)` with autograd recording off and returns its results:
-- `flow.no_grad(function() w:sub_(w.grad * 0.1) end)` (PyTorch's `with torch.no_grad()`).
-- @function flow.no_grad
-- @tparam function fn
-- @param ... its arguments
-- @return what `fn` returns
function M.no_grad(fn, ...)
  local prev = C.of_is_grad_enabled()
  C.of_set_grad_enabled(0)
  local res = {pcall(fn, ...)}
  C.of_set_grad_enabled(prev)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

--- flow.enable_grad(fn, ...): runs fn with gradient recording on; returns its results.
function M.enable_grad(fn, ...)
  local prev = C.of_is_grad_enabled()
  C.of_set_grad_enabled(1)
  local res = {pcall(fn, ...)}
  C.of_set_grad_enabled(prev)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

--- flow.set_grad_enabled(flag, fn?): turns gradient recording on or off (for fn only when given).
function M.set_grad_enabled(on) C.of_set_grad_enabled(on and 1 or 0) end
--- flow.is_grad_enabled(): true when operations are being recorded for autograd.
function M.is_grad_enabled() return C.of_is_grad_enabled() ~= 0 end

------------------------------------------------------------------ backward
local function tensor_list(x, what)
  if x == nil then return {} end
  if T.is_tensor(x) then return {x} end
  if type(x) ~= 'table' then error(what .. ': expected a tensor or a list of tensors', 3) end
  for i = 1, #x do
    if not T.is_tensor(x[i]) then
      A.fail(('%s: expected a tensor or a list of tensors, got %s at [%d]'):format(what, A.describe(x[i]), i))
    end
  end
  return x
end

local function ptr_array(list)
  local arr = ffi.new('of_tensor*[?]', math.max(#list, 1))
  for i = 1, #list do arr[i - 1] = list[i] and list[i].p or nil end
  return arr
end

--- Computes the gradients of this tensor with respect to the leaves that
-- require grad and accumulates them into their `.grad`: `loss:backward()`.
-- @function Tensor:backward
-- @tparam[opt] Tensor grad d(something)/d(self), needed when self is not a scalar
-- @tparam[opt] table opts `{retain_graph = false, create_graph = false}`
methods.backward = interpreted(function(t, grad, opts)
  if type(grad) == 'table' and not T.is_tensor(grad) then opts, grad = grad, nil end
  opts = A.check_options('backward', opts, {create_graph = true, retain_graph = true})
  -- nn.Graph AMP with loss scaling: the traced backward starts from the scale
  if grad == nil and M._loss_scale ~= nil then
    grad = M._loss_scale:to(t.dtype):view(t:size():totable())
  end
  local roots = ffi.new('of_tensor*[1]', t.p)
  local grads = ffi.new('of_tensor*[1]', grad and grad.p or nil)
  core.sweep_for_backward()
  if C.of_backward(roots, grads, 1, opts.retain_graph and 1 or 0,
                   opts.create_graph and 1 or 0) ~= 0 then
    raise(2)
  end
end)

--- flow.autograd.backward(tensors, grad_tensors, {retain_graph, create_graph})
M.backward = interpreted(function(tensors, grads, opts)
  tensors = tensor_list(tensors, 'backward')
  grads = tensor_list(grads, 'backward')
  opts = A.check_options('autograd.backward', opts, {create_graph = true, retain_graph = true})
  core.sweep_for_backward()
  if C.of_backward(ptr_array(tensors), ptr_array(grads), #tensors,
                   opts.retain_graph and 1 or 0, opts.create_graph and 1 or 0) ~= 0 then
    raise(2)
  end
end)

--- flow.autograd.grad(outputs, inputs, grad_outputs, {retain_graph,
-- create_graph, allow_unused}) -> a tensor per input (an array when inputs
-- is an array, a tensor when it is one tensor).
M.grad = interpreted(function(outputs, inputs, grad_outputs, opts)
  opts = A.check_options('autograd.grad', opts, {
    allow_unused = true, create_graph = true, retain_graph = true})
  local single = T.is_tensor(inputs)
  outputs = tensor_list(outputs, 'autograd.grad')
  inputs = tensor_list(inputs, 'autograd.grad')
  grad_outputs = tensor_list(grad_outputs, 'autograd.grad')
  local res = ffi.new('of_tensor*[?]', math.max(#inputs, 1))
  local retain = opts.retain_graph
  if retain == nil then retain = opts.create_graph end
  core.sweep_for_backward()
  if C.of_autograd_grad(ptr_array(outputs), ptr_array(grad_outputs), #outputs,
                        ptr_array(inputs), #inputs, retain and 1 or 0,
                        opts.create_graph and 1 or 0, opts.allow_unused and 1 or 0, res) ~= 0 then
    raise(2)
  end
  local out = {}
  for i = 1, #inputs do out[i] = res[i - 1] ~= nil and wrap(res[i - 1]) or nil end
  if single then return out[1] end
  return out
end)

--- x:register_hook(fn): fn(grad) runs when x's grad is computed; it may
-- return a replacement grad.
function methods.register_hook(t, fn)
  local id = register(function(args) return {fn(args[1])} end)
  if C.of_tensor_add_hook(t.p, id) ~= 0 then
    host_fns[id] = nil
    raise(2)
  end
  return {remove = function() host_fns[id] = function() return {} end end}
end

--- x:retain_grad(): a non-leaf tensor keeps its gradient in `.grad` after
-- backward (accumulating, as a leaf's does); a no-op on leaves. Made with a
-- hook that stores the grad arriving at x and returns none (no replacement).
local retaining = setmetatable({}, {__mode = 'k'})
--- x:retain_grad(): keeps .grad on a non-leaf tensor after backward.
function methods.retain_grad(t)
  if not t.requires_grad then
    error('retain_grad: called on a tensor that does not require grad', 2)
  end
  if t.is_leaf or retaining[t] then return t end
  retaining[t] = true
  t:register_hook(function(g)
    local old = t.grad
    t.grad = old and (old + g):detach() or g:detach():clone()
  end)
  return t
end
getters.retains_grad = function(t) return retaining[t] == true end

------------------------------------------------------------------ Function
-- local Square = flow.autograd.Function:subclass('Square')
-- function Square.forward(ctx, x) ctx:save_for_backward(x) return x * x end
-- function Square.backward(ctx, g) return g * 2 * ctx.saved_tensors[1] end
-- local y = Square.apply(x)
local Ctx = {}
Ctx.__index = Ctx
function Ctx:save_for_backward(...)
  self.saved_tensors = {...}
end
-- outputs of custom Functions are differentiable unless integral; accepted
-- for PyTorch compatibility
function Ctx.mark_non_differentiable() end

local Function = class('Function')
Function.name = 'Function'
--- flow.autograd.Function: subclass it with forward(ctx, ...) and backward(ctx, grads...), call Cls.apply(...).
M.Function = Function

-- oneflow.class hook: every subclass gets its name and apply.
function Function.__setup(cls)
  cls.name = cls.__name
  cls.apply = function(...) return Function.apply_class(cls, ...) end
end

local function as_list(...)
  local n = select('#', ...)
  if n == 1 and type((...)) == 'table' and not T.is_tensor((...)) then return (...), true end
  return {...}, false
end

Function.apply_class = interpreted(function(cls, ...)
  local ctx = setmetatable({}, Ctx)
  local args = {...}
  local inputs = {}
  for i = 1, select('#', ...) do
    if T.is_tensor(args[i]) then inputs[#inputs + 1] = args[i] end
  end
  local nargs = select('#', ...)
  local outs = M.no_grad(function() return {cls.forward(ctx, unpack(args, 1, nargs))} end)
  local outputs, packed = as_list(unpack(outs))
  -- outputs that alias an input get a fresh header, so history is not mixed
  for i, o in ipairs(outputs) do
    for _, x in ipairs(inputs) do if o == x then outputs[i] = o:detach() end end
  end
  local id = register(function(grads)
    local res = {cls.backward(ctx, unpack(grads))}
    -- map grads of tensor arguments back to the tensor inputs, in order
    local gin, k = {}, 0
    for i = 1, nargs do
      if T.is_tensor(args[i]) then
        k = k + 1
        gin[k] = res[i]
      end
    end
    return gin
  end)
  if C.of_custom_function(id, (cls.name or 'Custom') .. 'Backward', ptr_array(inputs), #inputs,
                          ptr_array(outputs), #outputs) ~= 0 then
    raise(2)
  end
  if packed then return outputs end
  return unpack(outputs)
end)

------------------------------------------------------------------ gradcheck
--- flow.autograd.gradcheck(fn, inputs, {eps = 1e-6, atol = 1e-5, rtol = 1e-3})
-- compares analytical grads of sum(fn(inputs) * random weights) with central
-- finite differences, in float64. Returns true or raises with the worst
-- element. Inputs that require grad are checked.
function M.gradcheck(fn, inputs, opts)
  opts = require('oneflow._args').check_options('gradcheck', opts, {'atol', 'create_graph', 'eps', 'rtol'})
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  A.arg('gradcheck', 1, 'fn', fn, 'function|table')
  if T.is_tensor(inputs) then inputs = {inputs} end
  A.arg('gradcheck', 2, 'inputs', inputs, 'table')
  local function scalar_out(...)
    local out = fn(...)
    if type(out) == 'table' and not T.is_tensor(out) then out = out[1] end
    return out
  end
  local out0 = scalar_out(unpack(inputs))
  -- fixed pseudo-random weights make every output element matter
  local w = {}
  local n = out0:numel()
  for i = 1, n do w[i] = math.sin(i * 12.9898) * 0.5 + 1 end
  local weights = T.flow.tensor(w, {dtype = out0.dtype}):view(out0:size())
  local function objective(...)
    return (scalar_out(...) * weights):sum()
  end
  local checked = {}
  for i, x in ipairs(inputs) do
    if T.is_tensor(x) and x.requires_grad then checked[#checked + 1] = i end
  end
  local grads = M.grad(objective(unpack(inputs)), (function()
    local l = {}
    for _, i in ipairs(checked) do l[#l + 1] = inputs[i] end
    return l
  end)(), nil, {allow_unused = true, create_graph = opts.create_graph})
  for k, i in ipairs(checked) do
    local x = inputs[i]
    local analytic = grads[k] and grads[k]:contiguous():view(-1):totable() or {}
    local flat = x:detach()
    local m = x:numel()
    for j = 1, m do
      local idx = {}
      local rem = j - 1
      local sizes = x:size():totable()
      for d = #sizes, 1, -1 do
        idx[d] = rem % sizes[d] + 1
        rem = math.floor(rem / sizes[d])
      end
      local cell = #sizes == 0 and flat or flat[idx]
      local orig = cell:item()
      local f = function(v)
        M.no_grad(function() cell:fill_(v) end)
        local r = M.no_grad(function() return objective(unpack(inputs)):item() end)
        return r
      end
      local fp, fm = f(orig + eps), f(orig - eps)
      f(orig)
      local numeric = (fp - fm) / (2 * eps)
      local a = analytic[j] or 0
      if math.abs(a - numeric) > atol + rtol * math.abs(numeric) then
        error(('gradcheck: input %d, element %d: analytical %.8g vs numerical %.8g')
              :format(i, j, a, numeric), 2)
      end
    end
  end
  return true
end

--- Second-order check: gradcheck of the gradient function itself.
function M.gradgradcheck(fn, inputs, opts)
  if T.is_tensor(inputs) then inputs = {inputs} end
  local first_grads_impl
  local function first_grads(...)
    -- gradcheck evaluates fn under no_grad; the first derivative needs a graph
    return M.enable_grad(function(...) return first_grads_impl(...) end, ...)
  end
  function first_grads_impl(...)
    local args = {...}
    local out = fn(...)
    local diff = {}
    for _, x in ipairs(args) do
      if T.is_tensor(x) and x.requires_grad then diff[#diff + 1] = x end
    end
    local w = T.flow.ones(out:size():totable(), {dtype = out.dtype})
    local g = M.grad({out}, diff, {w}, {create_graph = true, allow_unused = true})
    local s
    for _, gi in ipairs(g) do
      if gi then
        local term = (gi * gi):sum()
        s = s and s + term or term
      end
    end
    return s
  end
  return M.gradcheck(first_grads, inputs, opts)
end

return M
