-- The run-time dispatched row kernels (core/ops/rowk.c): layer_norm,
-- rms_norm, softmax and log_softmax, forward and backward, on float32 and bfloat16
-- rows, on every instruction set this CPU has (flow.backends.cpu), against
-- the generic float64 kernels and, where it is installed, PyTorch.
local flow = require 'oneflow'
local F = flow.nn.functional
local H = require 'spec.helpers'

local cpu = flow.backends.cpu
local f32, f64, bf16 = flow.float32, flow.float64, flow.bfloat16

-- the instruction sets this CPU runs (a set_cpu_capability above it fails)
local native = cpu.get_cpu_capability()
local each_isa = H.each_isa

-- |a - b| <= tol * (1 + |b|) everywhere (NaN matches NaN)
local function close(a, b, tol, what)
  local ok, err = pcall(H.close, a:double(), b:double(), tol, what)
  if not ok then error(err, 2) end
end

-- d(sum(y * g))/d(inputs)
local function backward(y, g) (y * g):sum():backward() end

local SIZES = {1, 3, 17, 1000, 1025, 2049, 4100}   -- 2049 and 4100: rows of several chunks

-- x [R, M] with a spread of values and a mean away from 0
local function input(R, M, dt)
  return (flow.randn(R, M) * 2 + 0.5):to(dt or f32)
end

-- float32 gradients of fwd(x, params...) (on every instruction set) against
-- float64, for R = 70 rows (more than one block of 64 rows for the parameter
-- grads), with the parameters and without (plain(x) alone)
local function grads_match_f64(nparams, fwd, plain)
  each_isa(function()
    for _, M in ipairs({1, 17, 1025, 2049}) do
      local R = 70
      local x0, g, p0 = input(R, M), flow.randn(R, M), {}
      for i = 1, nparams do p0[i] = flow.randn(M) end
      local function run(dt, with)
        local function leaf(t) return t:to(dt):detach():requires_grad_() end
        local x, ps = leaf(x0), {}
        for i = 1, nparams do ps[i] = leaf(p0[i]) end
        backward(with and fwd(x, M, unpack(ps)) or plain(x, M), g:to(dt))
        local r = {x.grad}
        for i = 1, nparams do r[i + 1] = ps[i].grad end
        return r
      end
      for _, with in ipairs({true, false}) do
        local got, want = run(f32, with), run(f64, with)
        assert.equal(f32, got[1].dtype)
        for i = 1, #got do
          close(got[i], want[i], 1e-4, ('grad %d M=%d%s'):format(i, M, with and '' or ', no parameters'))
        end
      end
    end
  end)
end

describe('backends.cpu', function()
  it('reports and sets the instruction set of the dispatched kernels', function()
    assert.truthy(native == 'AVX512' or native == 'AVX2' or native == 'DEFAULT')
    cpu.set_cpu_capability('default')
    assert.equal('DEFAULT', cpu.get_cpu_capability())
    cpu.set_cpu_capability(native:lower())
    assert.equal(native, cpu.get_cpu_capability())
    H.raises(function() cpu.set_cpu_capability('sse9') end, 'unknown instruction set', 'sse9')
    H.raises(function() cpu.set_cpu_capability(1) end, 'expected a string')
    if native ~= 'AVX512' then
      H.raises(function() cpu.set_cpu_capability('avx512') end, 'does not support AVX512')
    end
  end)

  -- what `code` prints in a fresh luajit, with `env` (env(1)'s arguments)
  local function fresh(env, code)
    local p = io.popen(('env %s LUA_PATH=%q luajit -e %q'):format(env, package.path, code))
    local out = p:read('*a')
    p:close()
    return out
  end

  it('takes a cap from OF_CPU_ISA', function()
    local out = fresh('OF_CPU_ISA=default',
      "print(require('oneflow').backends.cpu.get_cpu_capability())")
    assert.equal('DEFAULT', out:match('%S+'))
  end)

  -- Debian 12's OpenBLAS 0.3.21 does not know an Emerald Rapids Xeon and
  -- fell back to its SSE3 kernels there: 2-3x slower matmuls
  local function blas_core(env)
    return fresh(env, "local flow = require('oneflow') print(flow.backends.cpu.get_blas_core(), " ..
      "os.getenv('OPENBLAS_CORETYPE'))"):match('^(%S*)%s+(%S+)')
  end

  it("runs OpenBLAS's kernels for this CPU's vector units, not its SSE3 fallback", function()
    local core, env = blas_core('-u OPENBLAS_CORETYPE')
    assert.equal('nil', env)   -- the variable used to ask OpenBLAS is not left behind
    if core == '' then return end   -- not OpenBLAS: nothing to check
    if native == 'AVX512' then
      assert.truthy(core == 'SkylakeX' or core == 'Cooperlake' or core == 'SapphireRapids', core)
    elseif native == 'AVX2' then
      assert.are_not.equal('Prescott', core)
    end
    -- this process chose the same, unless its environment chose for it
    -- (some machines export OPENBLAS_CORETYPE=Haswell for every process)
    if not os.getenv('OPENBLAS_CORETYPE') then assert.equal(core, cpu.get_blas_core()) end
  end)

  it("keeps the user's OPENBLAS_CORETYPE", function()
    if cpu.get_blas_core() == '' then return end
    local core, env = blas_core('OPENBLAS_CORETYPE=Prescott')
    assert.equal('Prescott', core)
    assert.equal('Prescott', env)
  end)
end)

describe('layer_norm row kernel', function()
  it('matches the float64 kernel on every instruction set, odd row lengths, batch 1', function()
    each_isa(function()
      for _, M in ipairs(SIZES) do
        for _, R in ipairs({1, 5}) do
          local x = input(R, M)
          local w, b = flow.randn(M), flow.randn(M)
          close(F.layer_norm(x, {M}, w, b, 1e-5), F.layer_norm(x:double(), {M}, w:double(), b:double(), 1e-5),
                1e-5, ('affine M=%d R=%d'):format(M, R))
          close(F.layer_norm(x, {M}), F.layer_norm(x:double(), {M}), 1e-5, ('plain M=%d R=%d'):format(M, R))
        end
      end
    end)
  end)

  it('keeps precision for a mean far from zero', function()
    each_isa(function()
      local x = flow.randn(4, 3000) * 0.01 + 1000
      close(F.layer_norm(x, {3000}), F.layer_norm(x:double(), {3000}), 1e-3, 'offset')
    end)
  end)

  it('gives the float64 kernel\'s gradients for input, weight and bias', function()
    grads_match_f64(2, function(x, M, w, b) return F.layer_norm(x, {M}, w, b, 1e-5) end,
                    function(x, M) return F.layer_norm(x, {M}) end)
  end)

  it('runs bfloat16 rows in their dtype within bfloat16 rounding', function()
    each_isa(function()
      for _, M in ipairs({3, 1025, 2049}) do
        local x = input(3, M, bf16)
        local w, b = flow.randn(M):to(bf16), flow.randn(M):to(bf16)
        local y = F.layer_norm(x, {M}, w, b, 1e-5)
        assert.equal(bf16, y.dtype)
        close(y, F.layer_norm(x:double(), {M}, w:double(), b:double(), 1e-5), 1e-2, 'bf16 M=' .. M)
        local xg = x:clone():requires_grad_()
        local xd = x:double():requires_grad_()
        local g = flow.randn(3, M)
        backward(F.layer_norm(xg, {M}), g:to(bf16))
        backward(F.layer_norm(xd, {M}), g:to(bf16):double())
        assert.equal(bf16, xg.grad.dtype)
        close(xg.grad, xd.grad, 3e-2, 'bf16 grad M=' .. M)
      end
    end)
  end)

  it('handles non-contiguous and empty inputs', function()
    local base = flow.randn(33, 6)
    local x = base:t()   -- [6, 33], rows strided
    close(F.layer_norm(x, {33}), F.layer_norm(x:contiguous():double(), {33}), 1e-5, 'strided')
    local e = F.layer_norm(flow.randn(0, 5), {5})
    assert.same({0, 5}, e:size():totable())
    local xe = flow.randn(0, 5):requires_grad_()
    F.layer_norm(xe, {5}):sum():backward()
    assert.same({0, 5}, xe.grad:size():totable())
  end)
end)

describe('bfloat16 row kernels: results rounded as the float32 kernel\'s', function()
  -- With AVX512-BF16 the stores use the CPU's conversion, which reads a
  -- denormal float32 as zero; such vectors must round as every other path.
  -- A weight of 1e-39 puts most outputs among the denormals.
  it('layer_norm and rms_norm store denormal results bit for bit', function()
    each_isa(function()
      for _, M in ipairs({3, 100, 1024, 2049}) do
        local x = input(5, M, bf16)
        local w = flow.full({M}, 1e-39):to(bf16)
        w[1] = 1.5
        for name, f in pairs({
          layer_norm = function(a, ww) return F.layer_norm(a, {M}, ww, nil, 1e-5) end,
          rms_norm = function(a, ww) return F.rms_norm(a, {M}, ww, 1e-5) end,
        }) do
          local y, ref = f(x, w), f(x:float(), w:float()):to(bf16)
          assert.equal(bf16, y.dtype)
          assert.is_true(flow.equal(y, ref), ('%s M=%d'):format(name, M))
          assert.is_true(y:float():abs():lt(1.1754943508222875e-38):logical_and(y:ne(0)):any():item(),
                         'some outputs are denormal')
        end
      end
    end)
  end)
end)

describe('rms_norm row kernel', function()
  it('matches the float64 kernel on every instruction set, with and without weight', function()
    each_isa(function()
      for _, M in ipairs(SIZES) do
        for _, R in ipairs({1, 5}) do
          local x, w = input(R, M), flow.randn(M)
          close(F.rms_norm(x, {M}, w, 1e-5), F.rms_norm(x:double(), {M}, w:double(), 1e-5),
                1e-5, ('weight M=%d R=%d'):format(M, R))
          close(F.rms_norm(x, {M}), F.rms_norm(x:double(), {M}, nil, 1.1920928955078125e-07), 1e-5,
                ('plain M=%d R=%d'):format(M, R))
        end
      end
    end)
  end)

  it('gives the float64 kernel\'s gradients for input and weight', function()
    grads_match_f64(1, function(x, M, w) return F.rms_norm(x, {M}, w, 1e-5) end,
                    function(x, M) return F.rms_norm(x, {M}, nil, 1e-5) end)
  end)

  it('runs bfloat16 rows in their dtype within bfloat16 rounding', function()
    each_isa(function()
      for _, M in ipairs({3, 1025, 2049}) do
        local x, w = input(3, M, bf16), flow.randn(M):to(bf16)
        local y = F.rms_norm(x, {M}, w, 1e-5)
        assert.equal(bf16, y.dtype)
        close(y, F.rms_norm(x:double(), {M}, w:double(), 1e-5), 1e-2, 'bf16 M=' .. M)
        local xg, wg = x:clone():requires_grad_(), w:clone():requires_grad_()
        local xd, wd = x:double():requires_grad_(), w:double():requires_grad_()
        local g = flow.randn(3, M)
        backward(F.rms_norm(xg, {M}, wg, 1e-5), g:to(bf16))
        backward(F.rms_norm(xd, {M}, wd, 1e-5), g:to(bf16):double())
        assert.equal(bf16, xg.grad.dtype)
        close(xg.grad, xd.grad, 3e-2, 'bf16 grad x M=' .. M)
        close(wg.grad, wd.grad, 3e-2, 'bf16 grad w M=' .. M)
      end
    end)
  end)
end)

describe('softmax and log_softmax row kernels', function()
  it('match the float64 kernel on every instruction set', function()
    each_isa(function()
      for _, M in ipairs(SIZES) do
        for _, R in ipairs({1, 4}) do
          local x = input(R, M) * 3
          local xd = x:double()
          close(flow.softmax(x, -1), flow.softmax(xd, -1), 1e-5, ('softmax M=%d R=%d'):format(M, R))
          close(flow.log_softmax(x, -1), flow.log_softmax(xd, -1), 1e-5, ('log_softmax M=%d R=%d'):format(M, R))
        end
      end
    end)
  end)

  it('give the float64 gradients', function()
    each_isa(function()
      for _, M in ipairs({1, 17, 1025, 2049}) do
        local x0, g = input(3, M), flow.randn(3, M)
        for _, fn in ipairs({flow.softmax, flow.log_softmax}) do
          local x, xd = x0:clone():requires_grad_(), x0:double():requires_grad_()
          backward(fn(x, -1), g)
          backward(fn(xd, -1), g:double())
          close(x.grad, xd.grad, 1e-5, 'grad M=' .. M)
        end
      end
    end)
  end)

  it('keep -inf entries (masks) and large values exact enough', function()
    each_isa(function()
      for _, M in ipairs({5, 3000}) do
        local x = flow.randn(2, M)
        x[{1, {1, math.floor(M / 2)}}] = -math.huge   -- a whole chunk masked in the long row
        x[{2, 1}] = 1000
        local s, ls = flow.softmax(x, -1), flow.log_softmax(x, -1)
        close(s, flow.softmax(x:double(), -1), 1e-5, 'masked softmax M=' .. M)
        assert.equal(0, s[{1, 1}]:item())
        assert.equal(-math.huge, ls[{1, 1}]:item())
        close(ls[{{}, {math.floor(M / 2) + 1, M}}], flow.log_softmax(x:double(), -1)[{{}, {math.floor(M / 2) + 1, M}}],
              1e-5, 'masked log_softmax M=' .. M)
      end
      -- a row that is all -inf is NaN, as in PyTorch
      local r = flow.softmax(flow.full({1, 4}, -math.huge), -1)
      assert.is_true(r[{1, 1}]:item() ~= r[{1, 1}]:item())
    end)
  end)

  it('run bfloat16 in its dtype and strided or empty inputs', function()
    each_isa(function()
      for _, M in ipairs({3, 1025, 2049}) do
        local x = input(2, M, bf16)
        local s = flow.softmax(x, -1)
        assert.equal(bf16, s.dtype)
        close(s, flow.softmax(x:double(), -1), 1e-2, 'bf16 softmax M=' .. M)
        close(flow.log_softmax(x, -1), flow.log_softmax(x:double(), -1), 1e-2, 'bf16 log_softmax M=' .. M)
        local xg, xd, g = x:clone():requires_grad_(), x:double():requires_grad_(), flow.randn(2, M)
        backward(flow.softmax(xg, -1), g:to(bf16))
        backward(flow.softmax(xd, -1), g:to(bf16):double())
        close(xg.grad, xd.grad, 2e-2, 'bf16 softmax grad M=' .. M)
      end
    end)
    local x = flow.randn(40, 7):t()
    close(flow.softmax(x, -1), flow.softmax(x:contiguous():double(), -1), 1e-5, 'strided')
    for _, shape in ipairs({{0, 5}, {3, 0}}) do
      assert.same(shape, flow.softmax(flow.randn(shape), -1):size():totable())
      assert.same(shape, flow.log_softmax(flow.randn(shape), -1):size():totable())
    end
  end)
end)

describe('GELU and SiLU vector kernels', function()
  it('match the float64 kernels on every instruction set, odd lengths, strided and special values', function()
    each_isa(function()
      for _, n in ipairs({1, 3, 17, 1000, 1025, 100003}) do
        local x = flow.linspace(-12, 12, n)
        for _, f in ipairs({F.gelu, F.silu}) do
          close(f(x), f(x:double()), 1e-6, 'n=' .. n)
        end
      end
      local s = flow.tensor({0, 1e-30, -1e-30, math.huge, -math.huge, 0 / 0, 88, -88, 30, -30})
      for _, f in ipairs({F.gelu, F.silu}) do
        close(f(s), f(s:double()), 1e-6, 'special values')
        local m = flow.randn(9, 40):t()   -- strided runs take the generic loop
        close(f(m), f(m:double()), 1e-6, 'strided')
        assert.same({0, 3}, f(flow.randn(0, 3)):size():totable())
      end
    end)
  end)

  it('give the float64 gradients (fused backward), float32 and bfloat16', function()
    each_isa(function()
      for _, n in ipairs({1, 17, 1025, 100003}) do
        local x0, g = flow.linspace(-9, 9, n), flow.randn(n)
        for _, f in ipairs({F.gelu, F.silu}) do
          local x, xd = x0:clone():requires_grad_(), x0:double():requires_grad_()
          backward(f(x), g)
          backward(f(xd), g:double())
          close(x.grad, xd.grad, 1e-5, 'grad n=' .. n)
          local xb = x0:to(bf16):requires_grad_()
          local xbd = x0:to(bf16):double():requires_grad_()
          backward(f(xb), g:to(bf16))
          backward(f(xbd), g:to(bf16):double())
          assert.equal(bf16, xb.grad.dtype)
          close(xb.grad, xbd.grad, 2e-2, 'bf16 grad n=' .. n)
        end
      end
      -- under create_graph the composed derivative keeps the history
      local x = flow.linspace(-2, 2, 7):requires_grad_()
      local gx = flow.autograd.grad(F.gelu(x):sum(), x, nil, {create_graph = true})[1]
      assert.truthy(gx.requires_grad)
      local xd = x:double():detach():requires_grad_()
      local gxd = flow.autograd.grad(F.gelu(xd):sum(), xd, nil, {create_graph = true})[1]
      close(flow.autograd.grad(gx:sum(), x)[1], flow.autograd.grad(gxd:sum(), xd)[1], 1e-5, 'double backward')
    end)
  end)
end)

describe('cross_entropy on float32 rows', function()
  it('matches the float64 kernel (loss and grad) on every instruction set', function()
    each_isa(function()
      for _, C in ipairs({1, 3, 17, 1025, 2049}) do
        local N = 6
        local x0 = flow.randn(N, C) * 3
        local t = flow.randint(0, C, {N}, {dtype = flow.int64}) + 1
        for _, o in ipairs({{}, {label_smoothing = 0.1}, {reduction = 'sum'}, {reduction = 'none'},
                            {weight = flow.rand(C) + 0.5}, {ignore_index = t[1]:item()}}) do
          local od = {}
          for k, v in pairs(o) do od[k] = flow.is_tensor(v) and v:double() or v end
          local x, xd = x0:clone():requires_grad_(), x0:double():requires_grad_()
          local l, ld = F.cross_entropy(x, t, o), F.cross_entropy(xd, t, od)
          close(l, ld, 1e-5, 'loss C=' .. C)
          l:sum():backward()
          ld:sum():backward()
          close(x.grad, xd.grad, 1e-5, 'grad C=' .. C)
        end
      end
    end)
  end)
end)

-- PyTorch on the same inputs (an exact formula, so both sides build them)
local check = H.torch_ok() and it or pending
describe('row kernels against PyTorch', function()
  check('layer_norm, softmax and log_softmax and their grads agree with torch', function()
    local R, M = 3, 1025
    local script = ([[
import torch
R, M = %d, %d
i = torch.arange(R * M, dtype=torch.float64)
x = (torch.sin(i * 0.37) * 3 + 0.5).reshape(R, M).float().requires_grad_()
g = torch.cos(i * 0.11).reshape(R, M).float()
w = torch.linspace(0.5, 1.5, M).requires_grad_(); b = torch.linspace(-1, 1, M).requires_grad_()
out = []
y = torch.nn.functional.layer_norm(x, (M,), w, b, 1e-5); (y * g).sum().backward()
out += [y, x.grad, w.grad, b.grad]
for f in (torch.softmax, torch.log_softmax):
    x.grad = None
    y = f(x, -1); (y * g).sum().backward(); out += [y, x.grad]
for t in out:
    print(' '.join('%%.9g' %% v for v in t.detach().reshape(-1).tolist()))
]]):format(R, M)
    local lines = H.python_lines(script)
    assert.equal(8, #lines)
    local i = flow.arange(0, R * M, {dtype = f64})
    local x0 = ((i * 0.37):sin() * 3 + 0.5):reshape(R, M):float()
    local g = (i * 0.11):cos():reshape(R, M):float()
    each_isa(function()
      local x = x0:clone():requires_grad_()
      local w = flow.linspace(0.5, 1.5, M):requires_grad_()
      local b = flow.linspace(-1, 1, M):requires_grad_()
      local y = F.layer_norm(x, {M}, w, b, 1e-5)
      backward(y, g)
      H.close(y, H.numbers(lines[1]), 1e-5, 'layer_norm')
      H.close(x.grad, H.numbers(lines[2]), 1e-4, 'layer_norm grad x')
      H.close(w.grad, H.numbers(lines[3]), 1e-4, 'layer_norm grad w')
      H.close(b.grad, H.numbers(lines[4]), 1e-4, 'layer_norm grad b')
      for k, fn in ipairs({flow.softmax, flow.log_softmax}) do
        local xs = x0:clone():requires_grad_()
        local ys = fn(xs, -1)
        backward(ys, g)
        H.close(ys, H.numbers(lines[3 + 2 * k]), 1e-5, 'softmax ' .. k)
        H.close(xs.grad, H.numbers(lines[4 + 2 * k]), 1e-5, 'softmax grad ' .. k)
      end
    end)
  end)
end)
