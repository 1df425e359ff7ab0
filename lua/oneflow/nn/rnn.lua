-- oneflow.nn.rnn: RNN, LSTM, GRU and their cells, composed from matmul and
-- elementwise ops (autograd flows through the time loop). Parameter names,
-- shapes, gate order (LSTM i, f, g, o; GRU r, z, n) and init are PyTorch's.
--   local out, h = gru(x, h0)            -- x [L, N, in] ([N, L, in] if batch_first)
--   local out, state = lstm(x, {h0, c0}) -- state = {h_n, c_n}
--   local h, c = lstm_cell(x, {h, c})
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local init = require 'oneflow.nn.initialization'
local F = require 'oneflow.nn.functional'
local packed = require 'oneflow.nn.packed'
local T = require 'oneflow.tensor'

local Module, Parameter = module.Module, module.Parameter
local parse, fail, shape_str, pyrepr = U.parse, U.fail, U.shape_str, U.pyrepr
local is_tensor = T.is_tensor
local M = {}

local gate_count = {RNN_TANH = 1, RNN_RELU = 1, LSTM = 4, GRU = 3}

------------------------------------------------------------------ cell maths
-- gi = x W_ih^T + b_ih, gh = h W_hh^T + b_hh (each [N, G])
local cells = {}

function cells.RNN_TANH(gi, gh) return (gi + gh):tanh() end
function cells.RNN_RELU(gi, gh) return (gi + gh):relu() end

--- nn.LSTM(input_size, hidden_size, {num_layers = 1, bias = true, batch_first = false, dropout = 0, bidirectional
-- = false, proj_size = 0}): a multi-layer LSTM.
function cells.LSTM(gi, gh, _, c)
  local g = (gi + gh):chunk(4, -1)
  local i, f, o = g[1]:sigmoid(), g[2]:sigmoid(), g[4]:sigmoid()
  local c1 = f * c + i * g[3]:tanh()
  return o * c1:tanh(), c1
end

--- nn.GRU(input_size, hidden_size, {num_layers = 1, bias = true, batch_first = false, dropout = 0, bidirectional
-- = false}): a multi-layer GRU.
function cells.GRU(gi, gh, h)
  local a, b = gi:chunk(3, -1), gh:chunk(3, -1)
  local r = (a[1] + b[1]):sigmoid()
  local z = (a[2] + b[2]):sigmoid()
  local n = (a[3] + r * b[3]):tanh()
  return n + z * (h - n)
end

local function affine(x, w, b)
  local y = x:matmul(w:t())
  if b ~= nil then y = y + b end
  return y
end

------------------------------------------------------------------ RNNBase
local RNNBase = Module:subclass('RNNBase')
--- The base class of nn.RNN, nn.LSTM and nn.GRU: weights named weight_ih_l0, weight_hh_l0, ... as in PyTorch.
-- @function nn.RNNBase
M.RNNBase = RNNBase

local base_spec = {{'input_size', U.REQUIRED}, {'hidden_size', U.REQUIRED}, {'num_layers', 1},
                   {'bias', true}, {'batch_first', false}, {'dropout', 0},
                   {'bidirectional', false}, {'proj_size', 0}, {'device', nil}, {'dtype', nil}}

function RNNBase:__init(mode, a)
  Module.__init(self)
  require('oneflow._args').arg('RNNBase', 1, 'mode', mode, 'string')
  require('oneflow._args').arg('RNNBase', 2, 'args', a, 'table')
  if a.proj_size ~= 0 then fail(self.__name .. ': proj_size is not supported') end
  if type(a.dropout) ~= 'number' or a.dropout < 0 or a.dropout > 1 then
    fail(self.__name .. ': dropout should be a number in range [0, 1]')
  end
  self.mode, self.input_size, self.hidden_size = mode, a.input_size, a.hidden_size
  self.num_layers, self.bias, self.batch_first = a.num_layers, a.bias, a.batch_first
  self.dropout, self.bidirectional = a.dropout, a.bidirectional
  local dirs = a.bidirectional and 2 or 1
  local gs = gate_count[mode] * a.hidden_size
  local o = {dtype = a.dtype}
  for l = 0, a.num_layers - 1 do
    local in_size = l == 0 and a.input_size or a.hidden_size * dirs
    for d = 0, dirs - 1 do
      local sfx = ('_l%d%s'):format(l, d == 1 and '_reverse' or '')
      self:register_parameter('weight_ih' .. sfx, Parameter(flow.empty({gs, in_size}, o)))
      self:register_parameter('weight_hh' .. sfx, Parameter(flow.empty({gs, a.hidden_size}, o)))
      if a.bias then
        self:register_parameter('bias_ih' .. sfx, Parameter(flow.empty({gs}, o)))
        self:register_parameter('bias_hh' .. sfx, Parameter(flow.empty({gs}, o)))
      end
    end
  end
  self:reset_parameters()
end

--- Every weight and bias ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
function RNNBase:reset_parameters()
  local stdv = self.hidden_size > 0 and 1 / math.sqrt(self.hidden_size) or 0
  for _, p in ipairs(self:parameters()) do init.uniform_(p, -stdv, stdv) end
end

function RNNBase:extra_repr()
  local s = ('%d, %d'):format(self.input_size, self.hidden_size)
  if self.num_layers ~= 1 then s = s .. ', num_layers=' .. self.num_layers end
  if self.mode == 'RNN_RELU' then s = s .. ", nonlinearity='relu'" end
  if not self.bias then s = s .. ', bias=False' end
  if self.batch_first then s = s .. ', batch_first=True' end
  if self.dropout ~= 0 then s = s .. ', dropout=' .. self.dropout end
  if self.bidirectional then s = s .. ', bidirectional=True' end
  return s
end

-- x W^T + b for weight_<which><sfx> (which: 'ih' or 'hh'); the dynamically
-- quantized LSTM and GRU (quantization.modules) override it with int8 weights
function RNNBase:_gates(x, which, sfx)
  return affine(x, self['weight_' .. which .. sfx], self['bias_' .. which .. sfx])
end

-- a (the bs sequences still running) over rows 1..bs of full, the rest of full's
local function merge_rows(a, full, bs)
  local n = full:size(1)
  if bs == n then return a end
  return flow.cat({a, full:narrow(1, bs + 1, n - bs)}, 1)
end

-- one direction of one layer over x [L, N, in]: outputs [L, N, H], final h (and c).
-- batch_sizes (packed input, sorted longest first): at step t only the first
-- batch_sizes[t] rows advance; the others keep their state and output zeros.
local function run_direction(self, x, l, d, h, c, batch_sizes)
  local sfx = ('_l%d%s'):format(l, d == 1 and '_reverse' or '')
  local pre = self:_gates(x, 'ih', sfx)   -- [L, N, G], over the whole sequence at once
  local cell, L = cells[self.mode], x:size(1)
  local outs = {}
  for step = 1, L do
    local t = d == 1 and L - step + 1 or step
    if batch_sizes then
      -- a packed batch: the step's active rows only (the first bs: sorted by
      -- length), as PyTorch's packed layer -- so a dynamically quantized
      -- module takes its hidden state's range over those rows alone
      local bs = batch_sizes[t]
      local ha, ca = h:narrow(1, 1, bs), c and c:narrow(1, 1, bs)
      local h1, c1 = cell(pre:select(1, t):narrow(1, 1, bs), self:_gates(ha, 'hh', sfx), ha, ca)
      h, c = merge_rows(h1, h, bs), c1 and merge_rows(c1, c, bs)
      outs[t] = merge_rows(h1, flow.zeros_like(h), bs)
    else
      local h1, c1 = cell(pre:select(1, t), self:_gates(h, 'hh', sfx), h, c)
      h, c = h1, c1
      outs[t] = h
    end
  end
  return flow.stack(outs, 1), h, c
end

-- [L, N, in] (or batch_first / unbatched) -> x [L, N, in], unbatched flag
local function layout(self, input)
  local nd = input:dim()
  if nd ~= 2 and nd ~= 3 then
    fail(('%s: expected input to be 2D (unbatched) or 3D, got input %s'):format(self.__name, shape_str(input)))
  end
  if input:size(-1) ~= self.input_size then
    fail(('%s: expected input with last dim %d (input_size), got %s'):format(
      self.__name, self.input_size, shape_str(input)))
  end
  if nd == 2 then return input:unsqueeze(2), true end
  if self.batch_first then return input:transpose(1, 2), false end
  return input, false
end

local function initial_state(self, hx, x, unbatched, what)
  local dirs = self.bidirectional and 2 or 1
  local n = x:size(2)
  local want = {self.num_layers * dirs, n, self.hidden_size}
  if hx == nil then return flow.zeros(want, {dtype = x.dtype}) end
  if unbatched then hx = hx:unsqueeze(2) end
  local s = hx:size()
  if #s ~= 3 or s[1] ~= want[1] or s[2] ~= want[2] or s[3] ~= want[3] then
    fail(('%s: expected %s of size %s, got %s'):format(self.__name, what,
      shape_str(unbatched and {want[1], want[3]} or want), shape_str(unbatched and hx:squeeze(2) or hx)))
  end
  return hx
end

-- PackedSequence -> sorted padded x [L, N, in], batch sizes, hx in sorted order
local function unpack_input(self, input, hx)
  local x = packed._pad_sorted(input.data, input.batch_sizes:totable(), 0)
  if x:size(-1) ~= self.input_size then
    fail(('%s: expected input with last dim %d (input_size), got %s'):format(
      self.__name, self.input_size, shape_str(input.data)))
  end
  local idx = input.sorted_indices
  if idx ~= nil and hx ~= nil then
    if type(hx) == 'table' and not is_tensor(hx) then
      hx = {hx[1] and hx[1]:index_select(2, idx), hx[2] and hx[2]:index_select(2, idx)}
    else
      hx = hx:index_select(2, idx)
    end
  end
  return x, input.batch_sizes:totable(), hx
end

--- forward(input, hx): returns output and h_n ({h_n, c_n} for LSTM). input may
-- be a PackedSequence (nn.utils.rnn); the output is then one too, and h_n (c_n)
-- holds each sequence's state at its last step.
function RNNBase:forward(input, hx)
  local x, unbatched, batch_sizes
  local is_packed = packed.is_packed(input)
  if is_packed then
    x, batch_sizes, hx = unpack_input(self, input, hx)
    unbatched = false
  else
    x, unbatched = layout(self, input)
  end
  local is_lstm = self.mode == 'LSTM'
  local h0, c0
  if is_lstm then
    if hx ~= nil and (type(hx) ~= 'table' or #hx ~= 2) then
      fail('LSTM: expected hx to be a table {h_0, c_0}')
    end
    h0 = initial_state(self, hx and hx[1], x, unbatched, 'h_0')
    c0 = initial_state(self, hx and hx[2], x, unbatched, 'c_0')
  else
    h0 = initial_state(self, hx, x, unbatched, 'hx')
  end
  local dirs = self.bidirectional and 2 or 1
  local hn, cn = {}, {}
  for l = 0, self.num_layers - 1 do
    local outs = {}
    for d = 0, dirs - 1 do
      local k = l * dirs + d + 1
      local o, h, c = run_direction(self, x, l, d, h0[k], c0 and c0[k], batch_sizes)
      outs[d + 1], hn[k], cn[k] = o, h, c
    end
    x = dirs == 2 and flow.cat(outs, 3) or outs[1]
    if self.dropout > 0 and l < self.num_layers - 1 then
      x = F.dropout(x, self.dropout, self.training)
    end
  end
  local h_n, c_n = flow.stack(hn, 1), is_lstm and flow.stack(cn, 1) or nil
  if is_packed then
    x = packed.PackedSequence(packed._pack_sorted(x, batch_sizes), input.batch_sizes,
                              input.sorted_indices, input.unsorted_indices)
    local back = input.unsorted_indices
    if back ~= nil then
      h_n = h_n:index_select(2, back)
      if c_n then c_n = c_n:index_select(2, back) end
    end
  elseif unbatched then
    x, h_n = x:squeeze(2), h_n:squeeze(2)
    if c_n then c_n = c_n:squeeze(2) end
  elseif self.batch_first then
    x = x:transpose(1, 2)
  end
  if is_lstm then return x, {h_n, c_n} end
  return x, h_n
end

local function rnn_class(name, mode, extra_spec)
  local cls = RNNBase:subclass(name)
  local spec = {}
  for i, s in ipairs(base_spec) do spec[i] = s end
  if extra_spec then table.insert(spec, 3, extra_spec) end
  function cls:__init(...)
    local a = parse(name, spec, ...)
    local m = mode
    if name == 'RNN' then
      if a.nonlinearity == 'relu' then m = 'RNN_RELU'
      elseif a.nonlinearity ~= 'tanh' then
        fail(("RNN: unknown nonlinearity '%s' (tanh or relu)"):format(tostring(a.nonlinearity)))
      end
    end
    RNNBase.__init(self, m, a)
  end
  M[name] = cls
end

--- An Elman RNN (tanh or relu), as torch.nn.RNN; nn.LSTM and nn.GRU take the
-- same arguments (without `nonlinearity`). Called as `rnn(x[, h0])`, it
-- returns the output and the last hidden state (`{h, c}` for an LSTM).
-- @function nn.RNN
-- @tparam int input_size features of each input step
-- @tparam int hidden_size features of the hidden state
-- @tparam[opt] table opts `{num_layers = 1, nonlinearity = 'tanh', bias = true,
-- batch_first = false, dropout = 0, bidirectional = false}`
-- @treturn Module

rnn_class('RNN', 'RNN_TANH', {'nonlinearity', 'tanh'})
rnn_class('LSTM', 'LSTM')
rnn_class('GRU', 'GRU')

------------------------------------------------------------------ cells
local cell_spec = {{'input_size', U.REQUIRED}, {'hidden_size', U.REQUIRED}, {'bias', true},
                   {'device', nil}, {'dtype', nil}}

local function cell_class(name, mode)
  local cls = Module:subclass(name)
  local spec = {}
  for i, s in ipairs(cell_spec) do spec[i] = s end
  if name == 'RNNCell' then table.insert(spec, 4, {'nonlinearity', 'tanh'}) end
  function cls:__init(...)
    Module.__init(self)
    local a = parse(name, spec, ...)
    self.input_size, self.hidden_size, self.bias = a.input_size, a.hidden_size, a.bias
    self.mode = mode
    if a.nonlinearity == 'relu' then self.mode = 'RNN_RELU' end
    local gs, o = gate_count[mode] * a.hidden_size, {dtype = a.dtype}
    self.weight_ih = Parameter(flow.empty({gs, a.input_size}, o))
    self.weight_hh = Parameter(flow.empty({gs, a.hidden_size}, o))
    if a.bias then
      self.bias_ih = Parameter(flow.empty({gs}, o))
      self.bias_hh = Parameter(flow.empty({gs}, o))
    else
      self:register_parameter('bias_ih', nil)
      self:register_parameter('bias_hh', nil)
    end
    self:reset_parameters()
  end
  cls.reset_parameters = RNNBase.reset_parameters
  -- x W^T + b for weight_<which> ('ih' or 'hh'); the dynamically quantized
  -- cells (quantization.modules) override it with int8 weights
  function cls:_affine(x, which) return affine(x, self['weight_' .. which], self['bias_' .. which]) end
  function cls:extra_repr()
    local s = ('%d, %d'):format(self.input_size, self.hidden_size)
    if not self.bias then s = s .. ', bias=' .. pyrepr(false) end
    return s
  end
  --- forward(x [N, in] or [in], hx): h' (LSTMCell: h', c' from hx = {h, c})
  function cls:forward(x, hx)
    if x:size(-1) ~= self.input_size then
      fail(('%s: expected input with last dim %d (input_size), got %s'):format(
        name, self.input_size, shape_str(x)))
    end
    local unbatched = x:dim() == 1
    if unbatched then x = x:unsqueeze(1) end
    local function state(v)
      if v == nil then return flow.zeros({x:size(1), self.hidden_size}, {dtype = x.dtype}) end
      return unbatched and v:unsqueeze(1) or v
    end
    local h, c
    if mode == 'LSTM' then h, c = state(hx and hx[1]), state(hx and hx[2]) else h = state(hx) end
    local gi = self:_affine(x, 'ih')
    local h1, c1 = cells[self.mode](gi, self:_affine(h, 'hh'), h, c)
    if unbatched then
      h1 = h1:squeeze(1)
      if c1 then c1 = c1:squeeze(1) end
    end
    return h1, c1
  end
  M[name] = cls
end

--- nn.RNNCell(input_size, hidden_size, {bias = true, nonlinearity = 'tanh'}): one Elman RNN step.
-- @function nn.RNNCell
cell_class('RNNCell', 'RNN_TANH')
--- nn.LSTMCell(input_size, hidden_size, {bias = true}): one LSTM step; returns h, c.
-- @function nn.LSTMCell
cell_class('LSTMCell', 'LSTM')
--- nn.GRUCell(input_size, hidden_size, {bias = true}): one GRU step.
-- @function nn.GRUCell
cell_class('GRUCell', 'GRU')

return M
