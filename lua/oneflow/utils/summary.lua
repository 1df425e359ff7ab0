-- oneflow.utils.summary: a torchinfo-style table of a module.
--
--   local s, rows = flow.utils.summary(net, {1, 3, 224, 224})
--   print(s)
--   flow.utils.summary(net, {{1, 10}, {1, 20}})            -- two inputs
--   flow.utils.summary(net, nil, {input_data = {x, y}})    -- real tensors
--   flow.utils.summary(net, {1, 3, 32, 32}, {depth = 2, dtype = flow.float64})
--
-- One forward pass runs (under no_grad) with forward hooks on every
-- submodule; each call of a module is a row, in call order, indented by its
-- nesting depth, with its output shape(s) and the parameter count of the
-- module and all its children (torchinfo's convention: a container's row
-- shows the total below it). Rows deeper than opts.depth (3) are left out
-- of the text but not of the totals. Totals count each parameter once
-- (shared parameters once), split into trainable (requires_grad) and not.
--
-- Mult-adds, torchinfo's count (layer_info.py, calculate_macs) per call of a
-- leaf module, from its own parameters and its (first) output shape [N, ...]:
--   weight/bias of a Conv*   params x N x the output's spatial size
--   weight/bias of others    params x N (Linear, BatchNorm, Embedding, ...)
--   weight_ih_l0 & co (RNNs) params x N x L (the output's first two sizes)
-- A container's row shows the sum of its leaves; the total sums the leaves.
-- It is an estimate of the dense layers' work, not of elementwise ops.
--
-- Memory estimate, in MB of 10^6 bytes like torchinfo:
--   input size         bytes of the inputs;
--   forward/backward   2 x the bytes of the outputs of the leaf modules
--                      (an activation and its gradient);
--   params size        bytes of the parameters;
--   estimated total    their sum.
-- rows[i] = {name =, class =, depth =, output_shapes = {{...}...},
--            params =, trainable =, non_trainable =, leaf =, mult_adds =};
-- rows.total_params, rows.total_mult_adds,
-- rows.trainable_params, rows.non_trainable_params, rows.input_bytes,
-- rows.forward_backward_bytes, rows.params_bytes, rows.total_bytes.
local A = require 'oneflow._args'

local M = {}

local OPTS = {'depth', 'dtype', 'device', 'input_data', 'col_width'}

local function is_shape(v)
  if type(v) ~= 'table' or #v == 0 then return false end
  for i = 1, #v do if type(v[i]) ~= 'number' then return false end end
  return true
end

-- shapes of every tensor in an output (a tensor or a nested table)
local function shapes_of(flow, v, out)
  if flow.is_tensor(v) then
    local s = {}
    for i = 1, v:dim() do s[i] = v:size(i) end
    out[#out + 1] = s
    out.bytes = (out.bytes or 0) + v:numel() * v:element_size()
  elseif type(v) == 'table' and getmetatable(v) == nil then
    for _, x in ipairs(v) do shapes_of(flow, x, out) end
  end
  return out
end

-- 1234567 -> "1,234,567"
local function commas(n)
  local s = tostring(math.floor(n))
  local r = s:reverse():gsub('(%d%d%d)', '%1,'):reverse()
  return (r:gsub('^,', ''))
end
--- summary.commas(n): n with thousands separators ("1,234,567").
-- @function utils.summary.commas
M.commas = commas

local function count(params)
  local all, tr = 0, 0
  for _, p in ipairs(params) do
    local n = p:numel()
    all = all + n
    if p.requires_grad then tr = tr + n end
  end
  return all, tr
end

local function params_bytes(params)
  local b = 0
  for _, p in ipairs(params) do b = b + p:numel() * p:element_size() end
  return b
end

-- torchinfo's mult-adds of one call of a leaf module (see the header)
local function mult_adds(mod, shape)
  if not shape or #shape == 0 then return 0 end
  local conv = (mod.__name or ''):find('Conv') ~= nil
  local spatial = shape[1]
  for i = 3, #shape do spatial = spatial * shape[i] end
  local macs = 0
  for name, p in mod:named_parameters({recurse = false}) do
    local n = p:numel()
    if name == 'weight' or name == 'bias' then
      macs = macs + n * (conv and spatial or shape[1])
    elseif name:find('weight', 1, true) or name:find('bias', 1, true) then
      macs = macs + n * shape[1] * (shape[2] or 1)
    end
  end
  return macs
end
--- summary.mult_adds(module, output_shape): torchinfo's mult-adds of one call of a leaf module.
-- @function utils.summary.mult_adds
M.mult_adds = mult_adds

local function inputs_of(flow, input_shape, opts)
  if opts.input_data ~= nil then
    local d = opts.input_data
    if flow.is_tensor(d) then return {d} end
    if type(d) ~= 'table' then A.fail('summary: input_data must be a tensor or a list of tensors, got ' .. type(d)) end
    return d
  end
  if input_shape == nil then A.fail('summary: give input_shape (e.g. {1, 3, 224, 224}) or opts.input_data') end
  if type(input_shape) ~= 'table' then
    A.fail('summary: input_shape must be a shape like {1, 3, 224, 224} or a list of shapes, got '
           .. A.describe(input_shape))
  end
  local shapes = is_shape(input_shape) and {input_shape} or input_shape
  local xs = {}
  for i, s in ipairs(shapes) do
    if not is_shape(s) then A.fail(('summary: input shape %d is not a list of sizes'):format(i)) end
    xs[i] = flow.randn(s, {dtype = opts.dtype or flow.float32, device = opts.device})
  end
  if #xs == 0 then A.fail('summary: input_shape is empty') end
  return xs
end

--- summary(model, input_shape [, opts]) -> text, rows
function M.summary(model, input_shape, opts)
  local flow = require 'oneflow'
  if A.is_options(input_shape) and opts == nil then input_shape, opts = nil, input_shape end
  opts = A.check_options('summary', opts, OPTS)
  if not flow.nn.is_module(model) then
    A.fail('summary: expected an nn.Module, got ' .. A.describe(model))
  end
  local depth_limit = opts.depth or 3
  local xs = inputs_of(flow, input_shape, opts)

  local names = {}
  for name, m in model:named_modules() do names[m] = name end
  local rows, stack, handles = {}, {}, {}
  for m, name in pairs(names) do
    handles[#handles + 1] = m:register_forward_pre_hook(function(mod)
      local params = mod:parameters()
      local all, tr = count(params)
      local row = {name = name == '' and '(root)' or name, class = mod.__name or 'Module',
                   depth = #stack, params = all, trainable = tr, non_trainable = all - tr,
                   own = #mod:parameters(false), leaf = next(mod:children()) == nil,
                   output_shapes = {}, output_bytes = 0}
      rows[#rows + 1] = row
      stack[#stack + 1] = row
    end)
    handles[#handles + 1] = m:register_forward_hook(function(mod, _, out)
      local row = table.remove(stack)
      if row then
        local s = shapes_of(flow, out, {})
        row.output_bytes = s.bytes or 0
        s.bytes = nil
        row.output_shapes = s
        row.mult_adds = row.leaf and mult_adds(mod, s[1]) or 0
      end
    end)
  end
  local ok, err = pcall(flow.no_grad, function() return model(unpack(xs)) end)
  for _, h in ipairs(handles) do h.remove() end
  if not ok then A.fail('summary: the forward pass failed: ' .. tostring(err)) end

  local all_params = model:parameters()
  local total, trainable = count(all_params)
  local input_bytes, fb = 0, 0
  for _, x in ipairs(xs) do input_bytes = input_bytes + x:numel() * x:element_size() end
  for _, r in ipairs(rows) do if r.leaf then fb = fb + 2 * r.output_bytes end end
  -- a container's mult-adds: the sum of the leaf calls inside it
  local macs_total, open = 0, {}
  for _, r in ipairs(rows) do
    open[r.depth] = r
    r.mult_adds = r.mult_adds or 0
    if r.leaf then
      macs_total = macs_total + r.mult_adds
      for d = 0, r.depth - 1 do if open[d] then open[d].mult_adds = open[d].mult_adds + r.mult_adds end end
    end
  end
  rows.total_mult_adds = macs_total
  local pbytes = params_bytes(all_params)
  rows.total_params, rows.trainable_params = total, trainable
  rows.non_trainable_params = total - trainable
  rows.input_bytes, rows.forward_backward_bytes, rows.params_bytes = input_bytes, fb, pbytes
  rows.total_bytes = input_bytes + fb + pbytes

  -- the text
  local lines, w1 = {}, opts.col_width or 44
  local sep = string.rep('=', w1 + 54)
  local function line(a, b, c, d)
    lines[#lines + 1] = ('%-' .. w1 .. 's %-25s %12s %15s'):format(a, b, c, d)
  end
  lines[1] = sep
  line('Layer (type)', 'Output Shape', 'Param #', 'Mult-Adds')
  lines[#lines + 1] = sep
  for _, r in ipairs(rows) do
    if r.depth <= depth_limit then
      local own = r.depth == 0 and r.class or (r.name:match('[^.]+$') .. ' (' .. r.class .. ')')
      local label = string.rep('  ', r.depth) .. own
      local shapes = {}
      for i, s in ipairs(r.output_shapes) do shapes[i] = A.shape_str(s, ', ') end
      local pc = (r.params == 0) and '--' or commas(r.params)
      line(label, table.concat(shapes, ', '), pc, r.mult_adds == 0 and '--' or commas(r.mult_adds))
    end
  end
  lines[#lines + 1] = sep
  lines[#lines + 1] = 'Total params: ' .. commas(total)
  lines[#lines + 1] = 'Trainable params: ' .. commas(trainable)
  lines[#lines + 1] = 'Non-trainable params: ' .. commas(total - trainable)
  lines[#lines + 1] = ('Total mult-adds (M): %.2f'):format(macs_total / 1e6)
  lines[#lines + 1] = string.rep('-', w1 + 54)
  local function mb(b) return ('%.2f'):format(b / 1e6) end
  lines[#lines + 1] = 'Input size (MB): ' .. mb(input_bytes)
  lines[#lines + 1] = 'Forward/backward pass size (MB): ' .. mb(fb)
  lines[#lines + 1] = 'Params size (MB): ' .. mb(pbytes)
  lines[#lines + 1] = 'Estimated Total Size (MB): ' .. mb(rows.total_bytes)
  lines[#lines + 1] = sep
  return table.concat(lines, '\n'), rows
end

return setmetatable(M, {__call = function(_, ...) return M.summary(...) end})
