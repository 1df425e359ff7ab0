-- bfloat16 elementwise ops on the CPU: dense operands go through one blocked
-- pass (core/ops/ew_run.c, bf16_blocked: widen a block to float32, the
-- float32 kernel, round into the output). The numbers must be exactly those
-- of the float32 op on the same values rounded once, as before: checked bit
-- for bit across block and thread boundaries, with scalar operands, NaN,
-- in place and overlapping writes (which take the copying path).
local flow = require 'oneflow'

local bf16 = flow.bfloat16

-- got (bfloat16) equals want (float32) rounded to bfloat16, bit for bit
local function same(got, want, what)
  assert.are.equal(bf16, got.dtype, what)
  assert.are.same(want:size():totable(), got:size():totable(), what)
  local g, e = got:float():flatten():totable(), want:bfloat16():float():flatten():totable()
  for i = 1, #e do
    if e[i] ~= e[i] then
      assert(g[i] ~= g[i], ('%s: NaN expected at %d, got %g'):format(what, i, g[i]))
    else
      assert(g[i] == e[i], ('%s: element %d is %.9g, expected %.9g'):format(what, i, g[i], e[i]))
    end
  end
end

describe('bfloat16 elementwise (blocked float32 pass)', function()
  before_each(function() flow.manual_seed(6) end)

  it('unary and binary ops across block and thread boundaries', function()
    for _, n in ipairs({1, 7, 1024, 3 * 1024 + 7, 70001}) do
      local x, y = flow.randn(n):bfloat16(), flow.randn(n):bfloat16()
      local xf, yf = x:float(), y:float()
      same(x + y, xf + yf, 'add ' .. n)
      same(x * y, xf * yf, 'mul ' .. n)
      same(x / y, xf / yf, 'div ' .. n)
      same(flow.relu(x), flow.relu(xf), 'relu ' .. n)
      same(flow.sigmoid(x), flow.sigmoid(xf), 'sigmoid ' .. n)
      same(x:clamp(-0.5, 0.25), xf:clamp(-0.5, 0.25), 'clamp ' .. n)
      same(x * 3 + 1, (xf * 3):bfloat16():float() + 1, 'scalars ' .. n)
    end
  end)

  it('one-element operands, shapes, NaN and infinities', function()
    local x = flow.randn(3, 5, 7):bfloat16()
    local s = flow.tensor({2.5}):bfloat16()
    same(x * s, x:float() * 2.5, 'times a one-element tensor')
    same(s - x, 2.5 - x:float(), 'one-element first')
    local v = flow.tensor({0 / 0, 1 / 0, -1 / 0, 0, -0.0, 1e38, -3}):bfloat16()
    local w = flow.tensor({1, 1, 1, 0, 1, 1e38, 0 / 0}):bfloat16()
    same(v + w, v:float() + w:float(), 'specials add')
    same(v * w, v:float() * w:float(), 'specials mul (overflow to inf)')
    same(flow.relu(v), flow.relu(v:float()), 'specials relu')
  end)

  it('in place and overlapping writes', function()
    local x, y = flow.randn(5000):bfloat16(), flow.randn(5000):bfloat16()
    local want = x:float() + y:float()
    local z = x:clone()
    z:add_(y)
    same(z, want, 'add_')
    local w = y:clone()
    w:mul_(x)
    same(w, y:float() * x:float(), 'mul_ (into the second operand\'s values)')
    -- a shifted view of the same storage: the copying path, as before
    local a = flow.randn(40000):bfloat16()
    local af = a:float()
    local exp = af:narrow(1, 2, 39999) + af:narrow(1, 1, 39999)
    a:narrow(1, 2, 39999):add_(a:narrow(1, 1, 39999))
    same(a:narrow(1, 2, 39999), exp, 'overlapping add_')
    -- non-contiguous and broadcast operands: the copying path
    local m = flow.randn(64, 33):bfloat16()
    same(m:t() * 2, m:float():t() * 2, 'transposed')
    local row = flow.randn(33):bfloat16()
    same(m + row, m:float() + row:float(), 'broadcast row')
  end)
end)
