-- F.scaled_dot_product_attention, the fused kernel (core/ops/attention.c):
-- against PyTorch 1.13's reference math (softmax(q k^T * scale + mask) v in
-- float64, grads by its autograd), against the composed ops here, on every
-- instruction set this CPU has; gradcheck in float64; dropout's draws;
-- errors.
local flow = require 'oneflow'
local F = flow.nn.functional
local H = require 'spec.helpers'

local f64 = flow.float64
local unpack = unpack   -- LuaJIT (Lua 5.1)
local sdpa = F.scaled_dot_product_attention
local each_isa = H.each_isa

-- deterministic inputs both sides build: sin(i * a + c) * s over a shape
local function pattern(shape, a, c, s, dt)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local i = flow.arange(0, n, {dtype = f64})
  return ((i * a + c):sin() * s):reshape(unpack(shape)):to(dt or flow.float32)
end

-- The cases: shapes of q, k, v; the mask (kind, shape) and options.
local cases = {
  {name = 'odd sizes', q = {2, 3, 70, 16}, k = {2, 3, 150, 16}, v = {2, 3, 150, 9}},
  {name = 'bool mask [L, S]', q = {2, 2, 67, 8}, k = {2, 2, 131, 8}, v = {2, 2, 131, 8},
   mask = 'bool', mshape = {67, 131}},
  {name = 'bool mask [B, 1, L, S]', q = {2, 2, 20, 8}, k = {2, 2, 33, 8}, v = {2, 2, 33, 5},
   mask = 'bool', mshape = {2, 1, 20, 33}},
  {name = 'additive mask [H, 1, S]', q = {2, 3, 40, 12}, k = {2, 3, 140, 12},
   v = {2, 3, 140, 12}, mask = 'float', mshape = {3, 1, 140}},
  {name = 'causal L = S', q = {1, 2, 130, 16}, k = {1, 2, 130, 16}, v = {1, 2, 130, 16},
   causal = true},
  {name = 'causal L < S', q = {2, 1, 50, 8}, k = {2, 1, 200, 8}, v = {2, 1, 200, 8},
   causal = true},
  {name = 'GQA 6 query heads over 2', q = {2, 6, 33, 16}, k = {2, 2, 70, 16},
   v = {2, 2, 70, 7}, gqa = true},
  {name = '3-D, scale 0.3', q = {3, 10, 5}, k = {3, 129, 5}, v = {3, 129, 4}, scale = 0.3},
  -- head dim 64 (the AVX-512 tiles of 4 vectors) at lengths that are no multiple of the
  -- 64-query and 128-key blocks nor of the 6-row tiles; 96 (4 vectors and a 2-vector tail)
  {name = 'head dim 64, odd lengths', q = {1, 2, 67, 64}, k = {1, 2, 200, 64},
   v = {1, 2, 200, 64}},
  {name = 'head dim 96, causal', q = {1, 1, 70, 96}, k = {1, 1, 70, 96}, v = {1, 1, 70, 40},
   causal = true},
  -- unscaled scores (-70..70): exp of differences beyond float's range (zero and
  -- subnormal weights); float32's own error grows with the scores' size
  {name = 'scale 1, head dim 64', q = {1, 1, 20, 64}, k = {1, 1, 150, 64}, v = {1, 1, 150, 64},
   scale = 1},
  -- odd rows attend keys >= 130 only: a whole first key block masked, then
  -- the running maximum starts in the second (the rescale factor exp(-inf) = 0)
  {name = 'first key block masked', q = {1, 2, 35, 16}, k = {1, 2, 260, 16},
   v = {1, 2, 260, 16}, mask = 'late', mshape = {35, 260}},
}

local function inputs(c, dt)
  local q = pattern(c.q, 0.37, 0.1, 1.5, dt)
  local k = pattern(c.k, 0.23, 0.7, 1.5, dt)
  local v = pattern(c.v, 0.11, 0.3, 1, dt)
  local oshape = {unpack(c.q)}
  oshape[#oshape] = c.v[#c.v]
  local g = pattern(oshape, 0.05, 0.2, 1, dt)
  local m
  if c.mask == 'bool' then
    m = pattern(c.mshape, 0.77, 0.0, 1, f64):gt(-0.6)
  elseif c.mask == 'float' then
    m = pattern(c.mshape, 0.31, 0.5, 2, dt)
  elseif c.mask == 'late' then
    local L, S = c.mshape[1], c.mshape[2]
    m = flow.arange(0, S):reshape(1, S):ge(130)
      :logical_or(flow.arange(0, L):reshape(L, 1):remainder(2):eq(0))
  end
  return q, k, v, g, m
end

local function opts(c, m)
  return {attn_mask = m, is_causal = c.causal, scale = c.scale, enable_gqa = c.gqa}
end

local function run(c, q, k, v, g, m)
  q, k, v = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
  local o = sdpa(q, k, v, opts(c, m))
  o:backward(g)
  return o, q.grad, k.grad, v.grad
end

local function torch_available()
  return os.execute('/usr/bin/python3 -c "import torch" >/dev/null 2>&1') == 0
end

-- PyTorch's reference math for the cases, in float64: one line per tensor
-- (out, grad q, grad k, grad v per case)
local function torch_reference()
  local lua_list = function(t) return '[' .. table.concat(t, ', ') .. ']' end
  local rows = {}
  for _, c in ipairs(cases) do
    rows[#rows + 1] = ('dict(q=%s, k=%s, v=%s, mask=%q, ms=%s, causal=%s, scale=%s, gqa=%s)')
      :format(lua_list(c.q), lua_list(c.k), lua_list(c.v), c.mask or '',
              lua_list(c.mshape or {}), c.causal and 'True' or 'False',
              c.scale and tostring(c.scale) or 'None', c.gqa and 'True' or 'False')
  end
  local script = [[
import math, torch
def pat(shape, a, c, s):
    n = math.prod(shape)
    i = torch.arange(n, dtype=torch.float64)
    return (torch.sin(i * a + c) * s).reshape(shape).float().double()
cases = [ROWS]
for c in cases:
    q = pat(c['q'], 0.37, 0.1, 1.5).requires_grad_()
    k = pat(c['k'], 0.23, 0.7, 1.5).requires_grad_()
    v = pat(c['v'], 0.11, 0.3, 1.0).requires_grad_()
    os_ = list(c['q']); os_[-1] = c['v'][-1]
    g = pat(os_, 0.05, 0.2, 1.0)
    kk, vv = k, v
    if c['gqa']:
        r = c['q'][-3] // c['k'][-3]
        kk, vv = k.repeat_interleave(r, -3), v.repeat_interleave(r, -3)
    scale = c['scale'] if c['scale'] is not None else 1 / math.sqrt(c['q'][-1])
    s = q @ kk.transpose(-2, -1) * scale
    if c['mask'] == 'bool':
        i = torch.arange(math.prod(c['ms']), dtype=torch.float64)
        m = (torch.sin(i * 0.77) > -0.6).reshape(c['ms'])
        s = s.masked_fill(~m, float('-inf'))
    elif c['mask'] == 'float':
        s = s + pat(c['ms'], 0.31, 0.5, 2.0)
    elif c['mask'] == 'late':
        L, S = c['ms']
        m = (torch.arange(S) >= 130)[None, :] | (torch.arange(L) % 2 == 0)[:, None]
        s = s.masked_fill(~m, float('-inf'))
    if c['causal']:
        L, S = s.shape[-2], s.shape[-1]
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float('-inf'))
    o = torch.softmax(s, -1) @ vv
    o.backward(g)
    for t in (o, q.grad, k.grad, v.grad):
        print(' '.join('%.12g' % x for x in t.detach().reshape(-1).tolist()))
]]
  script = script:gsub('ROWS', function() return table.concat(rows, ',\n         ') end)
  local lines = {}
  for i, l in ipairs(H.python_lines(script)) do lines[i] = H.numbers(l) end
  return lines
end

local check = torch_available() and it or pending
describe('F.scaled_dot_product_attention against PyTorch', function()
  check('matches the reference math and its grads (float32, every ISA; float64)', function()
    local ref = torch_reference()
    assert.equal(4 * #cases, #ref)
    for ci, c in ipairs(cases) do
      local q, k, v, g, m = inputs(c)
      local names = {'out', 'grad q', 'grad k', 'grad v'}
      each_isa(function(isa)
        local got = {run(c, q, k, v, g, m)}
        for j = 1, 4 do
          H.close(got[j], ref[4 * (ci - 1) + j], 2e-5, ('%s, %s: %s'):format(c.name, isa, names[j]))
        end
      end)
      local got = {run(c, q:double(), k:double(), v:double(), g:double(),
                       m and (m.dtype == flow.bool and m or m:double()))}
      for j = 1, 4 do
        H.close(got[j], ref[4 * (ci - 1) + j], 1e-10, ('%s, float64: %s'):format(c.name, names[j]))
      end
    end
  end)
end)

describe('F.scaled_dot_product_attention', function()
  it('agrees with the composed ops, bfloat16 and non-contiguous inputs too', function()
    local q = flow.randn(2, 40, 3, 16):transpose(2, 3)   -- [2, 3, 40, 16], strided
    local k, v = flow.randn(2, 3, 90, 16), flow.randn(2, 3, 90, 16)
    local want = F.softmax(q:matmul(k:transpose(-2, -1)) / 4, -1):matmul(v)
    H.close(sdpa(q, k, v), want, 1e-5)
    local ob = sdpa(q:bfloat16(), k:bfloat16(), v:bfloat16())
    assert.equal(flow.bfloat16, ob.dtype)
    H.close(ob:float(), want, 3e-2)
    -- under bfloat16 autocast it runs in bfloat16; grads reach the float32 leaves
    local ql = q:contiguous():requires_grad_()
    local oa = flow.amp.autocast('cpu', {dtype = flow.bfloat16},
                                 function() return sdpa(ql, k, v) end)
    assert.equal(flow.bfloat16, oa.dtype)
    oa:float():sum():backward()
    assert.equal(flow.float32, ql.grad.dtype)
    local qr = q:contiguous():requires_grad_()
    sdpa(qr, k, v):sum():backward()
    H.close(ql.grad, qr.grad, 5e-2)
  end)

  it('reads strided q, k, v in place: the same bits as contiguous copies', function()
    -- the forward reads rows through per-head offsets and a row stride:
    -- [B, L, H, E] projections transposed to [B, H, L, E], a slice of a wider
    -- last dim (row stride > E), an expanded batch (stride 0), and a last dim
    -- that is not contiguous (copied); short key counts (17 < 32 columns)
    -- take one narrow key block
    for _, dt in ipairs({flow.float32, f64}) do
      for _, S in ipairs({17, 40, 150}) do
        local q = flow.randn(2, 9, 4, 8, {dtype = dt}):transpose(2, 3)           -- [2, 4, 9, 8]
        local kw = flow.randn(2, 4, S, 12, {dtype = dt})
        local k = kw:narrow(4, 3, 8)                                             -- row stride 12
        local v = flow.randn(1, 4, S, 5, {dtype = dt}):expand(2, 4, S, 5)        -- batch stride 0
        local vt = flow.randn(2, 4, 5, S, {dtype = dt}):transpose(3, 4)          -- last dim strided
        local m = flow.randn(2, 1, 1, S):gt(-1)
        for _, o in ipairs({{}, {attn_mask = m}, {is_causal = true}}) do
          assert.is_true(flow.equal(sdpa(q, k, v, o), sdpa(q:contiguous(), k:contiguous(), v:contiguous(), o)))
          assert.is_true(flow.equal(sdpa(q, k, vt, o), sdpa(q:contiguous(), k:contiguous(), vt:contiguous(), o)))
        end
        -- GQA: two key/value heads for four query heads, transposed
        local kg = flow.randn(2, S, 2, 8, {dtype = dt}):transpose(2, 3)
        local vg = flow.randn(2, S, 2, 8, {dtype = dt}):transpose(2, 3)
        assert.is_true(flow.equal(sdpa(q, kg, vg, {enable_gqa = true}),
                                  sdpa(q:contiguous(), kg:contiguous(), vg:contiguous(), {enable_gqa = true})))
        local want = F.softmax(q:matmul(k:transpose(-2, -1)) / math.sqrt(8), -1):matmul(v)
        H.close(sdpa(q, k, v), want, dt == f64 and 1e-12 or 1e-5)
      end
    end
    -- gradients through strided leaves equal those through contiguous ones
    local qs = flow.randn(2, 9, 4, 8):requires_grad_()
    local qc = qs:detach():clone():requires_grad_()
    local k, v = flow.randn(2, 4, 17, 8), flow.randn(2, 4, 17, 8)
    sdpa(qs:transpose(2, 3), k, v):pow(2):sum():backward()
    sdpa(qc:transpose(2, 3):contiguous(), k, v):pow(2):sum():backward()
    assert.is_true(flow.equal(qs.grad, qc.grad))
  end)

  it('has correct gradients (gradcheck, float64): mask, causal, GQA', function()
    local function r(...) return flow.randn({...}, {dtype = f64, requires_grad = true}) end
    assert.is_true(flow.autograd.gradcheck(function(q, k, v) return sdpa(q, k, v) end,
                                           {r(1, 2, 5, 3), r(1, 2, 7, 3), r(1, 2, 7, 4)}))
    local m = flow.randn(5, 7, {dtype = f64})
    assert.is_true(flow.autograd.gradcheck(
      function(q, k, v) return sdpa(q, k, v, {attn_mask = m, scale = 0.7}) end,
      {r(2, 5, 3), r(2, 7, 3), r(2, 7, 2)}))
    assert.is_true(flow.autograd.gradcheck(
      function(q, k, v) return sdpa(q, k, v, {is_causal = true}) end,
      {r(1, 6, 3), r(1, 6, 3), r(1, 6, 3)}))
    assert.is_true(flow.autograd.gradcheck(
      function(q, k, v) return sdpa(q, k, v, {enable_gqa = true}) end,
      {r(1, 4, 3, 2), r(1, 2, 5, 2), r(1, 2, 5, 3)}))
  end)

  it('drops weights with the generator: the mask flow.rand would draw', function()
    local p = 0.25
    local q, k, v = flow.randn(2, 2, 37, 8, {dtype = f64}), flow.randn(2, 2, 70, 8, {dtype = f64}),
                    flow.randn(2, 2, 70, 6, {dtype = f64})
    local g = flow.randn(2, 2, 37, 6, {dtype = f64})
    flow.manual_seed(7)
    local keep = flow.rand(2, 2, 37, 70):ge(p):double() / (1 - p)
    local function composed(qq, kk, vv)
      return (F.softmax(qq:matmul(kk:transpose(-2, -1)) / math.sqrt(8), -1) * keep):matmul(vv)
    end
    local grads = {}
    for pass = 1, 2 do
      local x = {q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()}
      flow.manual_seed(7)
      local o = pass == 1 and sdpa(x[1], x[2], x[3], {dropout_p = p}) or composed(x[1], x[2], x[3])
      o:backward(g)
      grads[pass] = {o, x[1].grad, x[2].grad, x[3].grad}
    end
    for j = 1, 4 do H.close(grads[1][j], grads[2][j], 1e-12, 'dropout ' .. j) end
    -- float32 on every instruction set (the vector kernels' dropout and rescaling),
    -- head dim 64 and a key count past one block, against the same composition
    local q32, k32, v32 = flow.randn(1, 2, 70, 64), flow.randn(1, 2, 200, 64), flow.randn(1, 2, 200, 64)
    local g32 = flow.randn(1, 2, 70, 64)
    flow.manual_seed(11)
    local keep32 = flow.rand(1, 2, 70, 200):ge(p):float() / (1 - p)
    each_isa(function(isa)
      local got = {}
      for pass = 1, 2 do
        local x = {q32:clone():requires_grad_(), k32:clone():requires_grad_(), v32:clone():requires_grad_()}
        flow.manual_seed(11)
        local o = pass == 1 and sdpa(x[1], x[2], x[3], {dropout_p = p})
          or (F.softmax(x[1]:matmul(x[2]:transpose(-2, -1)) / 8, -1) * keep32):matmul(x[3])
        o:backward(g32)
        got[pass] = {o, x[1].grad, x[2].grad, x[3].grad}
      end
      for j = 1, 4 do H.close(got[1][j], got[2][j], 2e-5, ('dropout float32, %s: %d'):format(isa, j)) end
    end)
    -- two calls draw differently; dropout_p = 0 draws nothing
    local a, b = sdpa(q, k, v, {dropout_p = 0.5}), sdpa(q, k, v, {dropout_p = 0.5})
    assert.is_true((a - b):abs():max():item() > 0)
  end)

  it('splits the backward over threads by key/value heads and key blocks: grads as the composed ops', function()
    -- 2 threads: 2 heads take a task each (no partial dq), 1 or 3 heads split
    -- their keys (partial dq summed), causal keeps the finer split; head dims
    -- 64 (k read in place) and 40 (a padded copy)
    local prev = flow.get_num_threads()
    flow.set_num_threads(2)
    for _, c in ipairs({{2, 2, 64}, {4, 1, 64}, {3, 3, 40}, {6, 3, 32, true}}) do
      local Hq, Hk, E, causal = c[1], c[2], c[3], c[4] or false
      flow.manual_seed(5)
      local q = flow.randn(1, Hq, 300, E):requires_grad_()
      local k = flow.randn(1, Hk, 300, E):requires_grad_()
      local v = flow.randn(1, Hk, 300, E):requires_grad_()
      local g = flow.randn(1, Hq, 300, E)
      sdpa(q, k, v, {enable_gqa = Hq ~= Hk, is_causal = causal}):backward(g)
      local got = {q.grad, k.grad, v.grad}
      q.grad, k.grad, v.grad = nil, nil, nil
      local kk = k:repeat_interleave(Hq / Hk, 2)
      local vv = v:repeat_interleave(Hq / Hk, 2)
      local s = flow.matmul(q, kk:transpose(3, 4)) / math.sqrt(E)
      if causal then s = s:masked_fill(flow.ones(300, 300, {dtype = flow.bool}):triu(1), -math.huge) end
      flow.matmul(F.softmax(s, 4), vv):backward(g)
      for j, want in ipairs({q.grad, k.grad, v.grad}) do
        H.close(got[j], want, 1e-5, ('%d/%d heads, head dim %d, grad %d'):format(Hq, Hk, E, j))
      end
    end
    flow.set_num_threads(prev)
  end)

  it('weighs keys far below the row maximum exactly 0, on every ISA; head dim 0', function()
    -- key 3 scores ~205, the others within +-20: exp of the differences (< -180)
    -- underflows to 0 and the output is v's row 3 bit for bit
    each_isa(function(isa)
      local q = flow.ones(1, 2, 5, 64)
      local k = flow.randn(1, 2, 150, 64):mul(0.3)
      k[{{}, {}, 3}] = 3.2
      local v = flow.randn(1, 2, 150, 7)
      local o = sdpa(q, k, v, {scale = 1})
      assert(flow.equal(o, v[{{}, {}, {3, 3}}]:expand(1, 2, 5, 7)), isa)
      -- E = 0: every score is 0, the output is the mean of v's rows
      local e0 = sdpa(flow.randn(1, 2, 4, 0), flow.randn(1, 2, 5, 0), v:narrow(3, 1, 5), {scale = 1})
      H.close(e0, v:narrow(3, 1, 5):mean(-2, true):expand(1, 2, 4, 7), 1e-6, isa)
    end)
  end)

  it('gives NaN for a query that may attend no key, as softmax does', function()
    local m = flow.ones(3, 4, {dtype = flow.bool})
    m[2] = false
    each_isa(function(isa)
      local o = sdpa(flow.randn(1, 3, 2), flow.randn(1, 4, 2), flow.randn(1, 4, 2), {attn_mask = m})
      local t = o:totable()[1]
      assert(t[2][1] ~= t[2][1], isa)
      assert(t[1][1] == t[1][1] and t[3][2] == t[3][2], isa)
      -- a NaN score gives its query row NaN, the other rows stay finite
      local q = flow.randn(1, 3, 16)
      q[{1, 2, 5}] = 0 / 0
      local r = sdpa(q, flow.randn(1, 40, 16), flow.randn(1, 40, 3)):totable()[1]
      assert(r[2][1] ~= r[2][1] and r[1][1] == r[1][1] and r[3][3] == r[3][3], isa)
    end)
  end)

  it('carries nn.MultiheadAttention without weights (masks, causal, padding)', function()
    local m = flow.nn.MultiheadAttention(16, 4, {batch_first = true, dtype = f64})
    m:eval()
    local x, mem = flow.randn(2, 7, 16, {dtype = f64}), flow.randn(2, 9, 16, {dtype = f64})
    local kpm = flow.zeros(2, 9, {dtype = flow.bool})
    kpm[{2, {7, 9}}] = true
    local am = flow.zeros(7, 9, {dtype = flow.bool})
    am[{1, 2}] = true
    local fm = flow.randn(8, 7, 9, {dtype = f64})
    for _, o in ipairs({{}, {key_padding_mask = kpm}, {attn_mask = am},
                        {attn_mask = am, key_padding_mask = kpm}, {attn_mask = fm}}) do
      local want = m(x, mem, mem, o)
      o.need_weights = false
      H.close(m(x, mem, mem, o), want, 1e-12)
    end
    local causal = {is_causal = true, attn_mask = flow.ones(7, 7, {dtype = flow.bool}):triu(1)}
    local want = m(x, x, x, causal)
    causal.need_weights = false
    H.close(m(x, x, x, causal), want, 1e-12)
  end)

  it('traces into nn.Graph: a training step equals eager (mask, causal, backward)', function()
    local nn = flow.nn
    local function model()
      flow.manual_seed(3)
      return nn.Linear(8, 24, {dtype = f64})
    end
    local allowed = flow.ones(6, 6, {dtype = flow.bool}):tril(1)
    local function loss_of(m, x)
      local qkv = m(x):view(2, 6, 3, 8)
      local q, k, v = qkv:select(3, 1), qkv:select(3, 2), qkv:select(3, 3)
      return (sdpa(q, k, v, {attn_mask = allowed}) + sdpa(q, k, v, {is_causal = true}))
        :pow(2):mean()
    end
    local x = flow.randn(2, 6, 8, {dtype = f64})
    local eager, traced = model(), model()
    local oe = flow.optim.SGD(eager:parameters(), {lr = 0.1})
    local G = nn.Graph:subclass('SdpaTrain')
    function G:__init()
      nn.Graph.__init(self)
      self.m = traced
      self:add_optimizer(flow.optim.SGD(traced:parameters(), {lr = 0.1}))
    end
    function G:build(xx)
      local loss = loss_of(self.m, xx)
      loss:backward()
      return loss
    end
    local g = G()
    for _ = 1, 3 do
      oe:zero_grad()
      local le = loss_of(eager, x)
      le:backward()
      oe:step()
      H.close(g(x), le, 1e-12, 'loss')
    end
    H.close(traced.weight, eager.weight, 1e-12, 'weights')
  end)

  it('rejects bad input with the shapes named', function()
    local q, k, v = flow.randn(2, 3, 5, 4), flow.randn(2, 3, 6, 4), flow.randn(2, 3, 6, 4)
    H.raises(function() sdpa(q, flow.randn(2, 3, 6, 5), v) end, 'scaled_dot_product_attention',
             '[2,3,5,4]', '[2,3,6,5]', 'last dim')
    H.raises(function() sdpa(q, k, flow.randn(2, 3, 7, 4)) end, 'key [2,3,6,4]',
             'value [2,3,7,4]')
    H.raises(function() sdpa(q, flow.randn(2, 2, 6, 4), flow.randn(2, 2, 6, 4)) end,
             'enable_gqa')
    H.raises(function() sdpa(q, flow.randn(2, 2, 6, 4), flow.randn(2, 2, 6, 4),
                             {enable_gqa = true}) end, 'multiple')
    H.raises(function() sdpa(q, k, v, {attn_mask = flow.ones(5, 7, {dtype = flow.bool})}) end,
             'attn_mask [5,7]', '[2,3,5,6]')
    H.raises(function() sdpa(q, k, v, {attn_mask = flow.ones(5, 6, {dtype = flow.int64})}) end,
             'attn_mask must be bool')
    H.raises(function() sdpa(q, k, v, {dropout_p = 1}) end, 'dropout_p')
    H.raises(function() sdpa(q, k, v, {is_causal = true,
                                       attn_mask = flow.ones(5, 6, {dtype = flow.bool})}) end,
             'not both')
    H.raises(function() sdpa(q, k, v:double()) end, 'one dtype')
    H.raises(function() sdpa(q, k, v, {dropout = 0.1}) end, 'dropout_p')
  end)
end)
