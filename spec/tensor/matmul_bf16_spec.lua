-- bfloat16 matmul: through oneDNN's bfloat16 kernels where the CPU has them
-- (AVX512-BF16 or AMX: core/device/dnnl.c, of_dnnl_matmul_bf16), else
-- through float32 BLAS. Either way the result is float32 maths on the same
-- bfloat16 values, rounded once to bfloat16: checked against that for
-- batched, broadcast, transposed, strided, expanded and 1-D operands.
local flow = require 'oneflow'

local bf16 = flow.bfloat16

-- y (bfloat16) against float32 maths on a and b's bfloat16 values: one
-- rounding of the result (2^-8 relative to the largest) plus float32 sums
local function check(a, b, what)
  local y = flow.matmul(a, b)
  assert.are.equal(bf16, y.dtype, what)
  local want = flow.matmul(a:float(), b:float())
  assert.are.same(want:size():totable(), y:size():totable(), what)
  if want:numel() == 0 then return end
  local err = (y:float() - want):abs():max():item()
  local tol = 2 ^ -8 * want:abs():max():item() + 1e-6
  assert(err <= tol, ('%s: max difference %.3g > %.3g'):format(what, err, tol))
end

local function r(...) return flow.randn(...):to(bf16) end

describe('bfloat16 matmul', function()
  before_each(function() flow.manual_seed(4) end)

  it('plain, transposed and strided operands', function()
    local a, b = r(64, 96), r(96, 80)
    check(a, b, '2-D')
    check(a, r(80, 96):t(), 'b transposed')
    check(r(96, 64):t(), b, 'a transposed')
    check(r(96, 64):t(), r(80, 96):t(), 'both transposed')
    check(r(4, 64, 200):narrow(3, 1, 96), b, 'rows with a longer stride')
    check(r(5, 96):expand(3, 5, 96), b, 'expanded (stride 0) batch')
    check(r(64, 96, 3):select(3, 2), b, 'no unit stride: copied')
    check(r(1, 1), r(1, 1), '1x1')
    check(r(7, 1), r(1, 9), 'outer product')
  end)

  it('batches, broadcast batches and 1-D operands', function()
    local b = r(96, 80)
    check(r(3, 5, 17, 96), b, 'batched a, one b')
    check(r(3, 1, 17, 96), r(1, 4, 96, 80), 'both broadcast')
    check(r(2, 17, 96), r(2, 96, 80), 'bmm-like')
    check(r(96), b, 'vector @ matrix')
    check(r(64, 96), r(96), 'matrix @ vector')
    check(r(96), r(96), 'dot')
    assert.are.equal(bf16, flow.bmm(r(2, 3, 4), r(2, 4, 5)).dtype)
    assert.are.equal(bf16, flow.mm(r(3, 4), r(4, 5)).dtype)
  end)

  it('empty sizes, odd sizes and special values', function()
    check(r(0, 3), r(3, 4), 'no rows')
    local z = flow.matmul(r(2, 0), r(0, 3))
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, z:float():totable())
    check(r(33, 129), r(129, 65), 'odd sizes')
    local a = flow.tensor({{1, 0 / 0}, {2, 3}}):to(bf16)
    local y = flow.matmul(a, flow.tensor({{1, 0}, {0, 1}}):to(bf16)):float()
    assert.is_true(y[1][2]:item() ~= y[1][2]:item())   -- NaN stays NaN
    assert.are.same({2, 3}, y[2]:totable())
  end)

  it('addmm and mm with out= still work on bfloat16', function()
    local c, a, b = r(3, 5), r(3, 4), r(4, 5)
    local y = flow.addmm(c, a, b)
    local want = c:float() + flow.matmul(a:float(), b:float())
    assert(((y:float() - want):abs():max():item()) <= 2 ^ -7 * want:abs():max():item() + 1e-6)
    local out = flow.empty({3, 5}, {dtype = bf16})
    flow.mm(a, b, {out = out})
    assert.are.same(flow.matmul(a, b):float():totable(), out:float():totable())
  end)

  it('runs on oneDNN\'s bfloat16 kernels where the CPU has them', function()
    local f = io.open('/proc/cpuinfo')
    local info = f and f:read('*a') or ''
    if f then f:close() end
    if not (info:find('avx512_bf16', 1, true) or info:find('amx_bf16', 1, true)) then
      pending('no AVX512-BF16/AMX on this CPU: float32 BLAS computes bfloat16 matmuls')
      return
    end
    local dir = require('oneflow._C').library_path:match('^(.*)/[^/]+$') or '.'
    local cache = io.open(dir .. '/CMakeCache.txt')
    local built = cache and cache:read('*a'):find('OF_WITH_DNNL:BOOL=ON', 1, true)
    if cache then cache:close() end
    if not built then pending('built without oneDNN (OF_WITH_DNNL=OFF)') return end
    local p = io.popen([[DNNL_VERBOSE=1 luajit -e "local flow = require 'oneflow'
flow.matmul(flow.randn(32, 48):bfloat16(), flow.randn(48, 16):bfloat16())" 2>&1]])
    local out = p:read('*a')
    p:close()
    assert.truthy(out:find('exec,cpu,matmul,[^,]*,undef,src_bf16') ~= nil, out)
  end)
end)
