-- CPU convolutions through oneDNN (core/device/dnnl.c) against the im2col +
-- OpenBLAS reference path (core/ops/conv.c), switched per call with
-- OF_CONV_BACKEND=ref|dnnl, and against PyTorch where /usr/bin/python3 has it.
-- float32: within 1e-5 relative to the largest output, at least 1e-4 absolute
-- (oneDNN sums the taps in another order than the gemm over im2col columns).
-- bfloat16: against float32 convolutions of the same (bfloat16) values, within
-- the rounding of the bfloat16 result.
-- In a build without oneDNN (-DOF_WITH_DNNL=OFF) both backends are the
-- reference path: the comparisons still run, the "oneDNN runs" checks are pending.
local ffi = require 'ffi'
local flow = require 'oneflow'
local H = require 'spec.helpers'
local F = flow.nn.functional

pcall(ffi.cdef, [[
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
]])

local function with_backend(be, fn, ...)
  local prev = os.getenv('OF_CONV_BACKEND')
  ffi.C.setenv('OF_CONV_BACKEND', be, 1)
  local ok, a, b, c = pcall(fn, ...)
  if prev then ffi.C.setenv('OF_CONV_BACKEND', prev, 1) else ffi.C.unsetenv('OF_CONV_BACKEND') end
  if not ok then error(a, 0) end
  return a, b, c
end

-- Whether this build has oneDNN: the build directory's CMake cache says.
local function dnnl_built()
  local dir = require('oneflow._C').library_path:match('^(.*)/[^/]+$') or '.'
  local f = io.open(dir .. '/CMakeCache.txt')
  if not f then return false end
  local s = f:read('*a')
  f:close()
  return s:find('OF_WITH_DNNL:BOOL=ON', 1, true) ~= nil
end
local BUILT = dnnl_built()

local function max_abs(t) return t:float():abs():max():item() end

-- a and b (same shape) within rel * max|b| (at least abs)
local function near(a, b, rel, abs, what)
  assert.are.same(a:size():totable(), b:size():totable(), what)
  if b:numel() == 0 then return end
  local tol = math.max(abs, rel * max_abs(b))
  local err = max_abs(a:float() - b:float())
  assert(err <= tol, ('%s: max difference %.3g > %.3g'):format(what, err, tol))
end

local function both(fn)
  local r = with_backend('ref', fn)
  local d = with_backend('dnnl', fn)
  return r, d
end

-- forward and every grad of conv(x, w, b) on both backends
local function check_conv(conv, xs, ws, opts, what, prep)
  flow.manual_seed(7)
  local x0, w0 = flow.randn(xs), flow.randn(ws)
  -- bias: one per output channel (conv_transpose: weight [C_in, C_out/groups, k...])
  local cout = opts.transpose and ws[2] * (opts.kw.groups or 1) or ws[1]
  local b0 = opts.bias and flow.randn({cout}) or nil
  local function run()
    local x = (prep and prep(x0) or x0:clone()):requires_grad_(true)
    local w = w0:clone():requires_grad_(true)
    local b = b0 and b0:clone():requires_grad_(true) or nil
    local y = conv(x, w, b, opts.kw)
    if y:numel() > 0 then (y * y):sum():backward() end
    return {y = y, gx = x.grad, gw = w.grad, gb = b and b.grad}
  end
  local r, d = both(run)
  near(d.y, r.y, 1e-5, 1e-4, what .. ' forward')
  if r.y:numel() > 0 then
    near(d.gx, r.gx, 1e-5, 1e-4, what .. ' grad input')
    near(d.gw, r.gw, 1e-5, 1e-4, what .. ' grad weight')
    if b0 then near(d.gb, r.gb, 1e-5, 1e-4, what .. ' grad bias') end
  end
  return r, d
end

describe('conv through oneDNN vs the im2col reference (float32)', function()
  it('conv2d: stride, padding, dilation, bias, odd sizes', function()
    check_conv(F.conv2d, {3, 5, 11, 7}, {6, 5, 3, 2},
      {bias = true, kw = {stride = {2, 1}, padding = {1, 0}, dilation = {1, 2}}}, 'odd')
    check_conv(F.conv2d, {2, 16, 14, 14}, {32, 16, 3, 3},
      {bias = true, kw = {padding = 1}}, '3x3 same')
    check_conv(F.conv2d, {2, 3, 23, 23}, {8, 3, 7, 7},
      {kw = {stride = 2, padding = 3}}, 'stem 7x7 stride 2')
  end)

  it('groups, depthwise, 1x1 and batch 1', function()
    check_conv(F.conv2d, {2, 4, 9, 9}, {6, 2, 3, 3}, {bias = true, kw = {groups = 2, padding = 1}},
      'groups 2')
    check_conv(F.conv2d, {2, 8, 10, 10}, {8, 1, 3, 3},
      {kw = {groups = 8, stride = 2, padding = 1}}, 'depthwise')
    check_conv(F.conv2d, {1, 24, 6, 5}, {40, 24, 1, 1}, {bias = true, kw = {}}, '1x1 batch 1')
    check_conv(F.conv2d, {1, 7, 5, 5}, {3, 7, 5, 5}, {kw = {}}, 'whole-map kernel')
  end)

  it('empty batch, non-contiguous and channels-last inputs', function()
    local r, d = check_conv(F.conv2d, {0, 3, 5, 5}, {4, 3, 3, 3}, {kw = {padding = 1}}, 'empty')
    assert.are.same({0, 4, 5, 5}, d.y:size():totable())
    assert.are.same({0, 4, 5, 5}, r.y:size():totable())
    -- no input channels: the bias alone; no output channels: an empty result
    for _, be in ipairs({'ref', 'dnnl'}) do
      local y = with_backend(be, F.conv2d, flow.randn(2, 0, 5, 5), flow.randn(4, 0, 3, 3),
        flow.full({4}, 1.5))
      assert.are.same({2, 4, 3, 3}, y:size():totable())
      assert.are.equal(1.5 * 72, y:sum():item())
      local e = with_backend(be, F.conv2d, flow.randn(2, 3, 5, 5), flow.randn(0, 3, 3, 3))
      assert.are.same({2, 0, 3, 3}, e:size():totable())
    end
    check_conv(F.conv2d, {2, 6, 9, 8}, {5, 6, 3, 3}, {bias = true, kw = {padding = 1}},
      'transposed view', function(x) return x:transpose(3, 4) end)
    local _, dc = check_conv(F.conv2d, {2, 6, 8, 8}, {5, 6, 3, 3}, {bias = true, kw = {stride = 2}},
      'channels-last', function(x) return x:to({memory_format = flow.channels_last}) end)
    assert.is_true(dc.y:is_contiguous({memory_format = flow.channels_last}))
  end)

  it('conv1d, conv3d and conv_transpose2d', function()
    check_conv(F.conv1d, {2, 4, 17}, {6, 4, 3}, {bias = true, kw = {stride = 2, padding = 2,
      dilation = 2}}, 'conv1d')
    check_conv(F.conv3d, {1, 3, 5, 6, 7}, {4, 3, 2, 3, 3}, {bias = true, kw = {padding = 1}},
      'conv3d')
    check_conv(F.conv_transpose2d, {2, 6, 5, 4}, {6, 3, 3, 3},
      {transpose = true, kw = {stride = 2, padding = 1, output_padding = 1}}, 'transpose')
    check_conv(F.conv_transpose2d, {2, 4, 5, 5}, {4, 3, 3, 3},
      {transpose = true, bias = true, kw = {stride = 2, groups = 2}}, 'transpose grouped bias')
  end)

  it('oneDNN runs the convolutions when built in', function()
    if not BUILT then pending('built without oneDNN (OF_WITH_DNNL=OFF)') return end
    local script = os.tmpname()
    local f = assert(io.open(script, 'w'))
    f:write([[
local flow = require 'oneflow'
local y = flow.nn.functional.conv2d(flow.randn(1, 4, 8, 8), flow.randn(4, 4, 3, 3))
print(y:size(1))
]])
    f:close()
    local function verbose(be)
      local p = io.popen(('OF_CONV_BACKEND=%s DNNL_VERBOSE=1 luajit %s 2>&1'):format(be, script))
      local out = p:read('*a')
      p:close()
      return out
    end
    local on, off = verbose('dnnl'), verbose('ref')
    os.remove(script)
    assert.truthy(on:find('exec,cpu,convolution', 1, true), on)
    assert.falsy(off:find('exec,cpu,convolution', 1, true), off)
  end)
end)

describe('auto routing of float32 convolutions (OF_CONV_BACKEND unset)', function()
  -- On AVX-512 CPUs auto sends float32 convolutions with a kernel above 1x1,
  -- no groups, maps of 7x7 or more and at least 196 output pixels over the
  -- batch to oneDNN;
  -- 1x1, grouped and small ones stay on im2col (channels-last inputs: 1x1
  -- and grouped forwards go to oneDNN too). On AVX2 only NCHW forwards with
  -- a kernel above 1x1, no groups and maps of 28x28 or more go (gradients
  -- stay on im2col; channels-last inputs follow the AVX-512 rules), and
  -- below AVX2 (or with OF_CPU_ISA capping it) every float32 convolution
  -- takes im2col.
  local function routed(env)
    local script = os.tmpname()
    local f = assert(io.open(script, 'w'))
    f:write([[
local flow = require 'oneflow'
local F = flow.nn.functional
-- CLX=1: channels-last inputs
local function L(t)
  return os.getenv('CLX') == '1' and t:contiguous({memory_format = flow.channels_last}) or t
end
local x = L(flow.randn(1, 16, 16, 16))
local cases = {
  function() return F.conv2d(x, flow.randn(16, 16, 3, 3), nil, {padding = 1}) end,   -- 256 pixels
  function() return F.conv2d(x, flow.randn(16, 16, 1, 1)) end,                        -- 1x1
  function() return F.conv2d(x, flow.randn(16, 1, 3, 3), nil, {padding = 1, groups = 16}) end,
  function() return F.conv2d(L(flow.randn(1, 16, 7, 7)), flow.randn(16, 16, 3, 3), nil, {padding = 1}) end,
  function() return F.conv2d(L(flow.randn(4, 16, 7, 7)), flow.randn(16, 16, 3, 3), nil, {padding = 1}) end,
  function() return F.conv2d(L(flow.randn(16, 16, 4, 4)), flow.randn(16, 16, 3, 3), nil, {padding = 1}) end,
  function() return F.conv2d(L(flow.randn(1, 8, 28, 28)), flow.randn(8, 8, 3, 3), nil, {padding = 1}) end,
  function() return F.conv2d(L(flow.randn(1, 8, 28, 28)), flow.randn(8, 8, 1, 1)) end,
}
-- the gradients of a 3x3 layer on 28x28 maps (its forward is case 7's)
local gx, gw = flow.randn(1, 8, 28, 28):requires_grad_(), flow.randn(8, 8, 3, 3):requires_grad_()
local gy = F.conv2d(gx, gw, nil, {padding = 1})
io.stdout:write('BACKWARD\n') io.stdout:flush()
gy:sum():backward()
for i, c in ipairs(cases) do
  io.stdout:write('CASE', i, '\n') io.stdout:flush()
  c()
end
io.stdout:write('CASE', #cases + 1, '\n') io.stdout:flush()
]])
    f:close()
    local p = io.popen(('%s DNNL_VERBOSE=1 luajit %s 2>&1'):format(env, script))
    local out = p:read('*a')
    p:close()
    os.remove(script)
    local got = {}
    for i = 1, 8 do
      local a = assert(out:find('CASE' .. i .. '\n', 1, true), out)
      local b = assert(out:find('CASE' .. (i + 1) .. '\n', a, true), out)
      got[i] = out:sub(a, b):find('exec,cpu,convolution', 1, true) ~= nil
    end
    -- the gradients run before the cases: their lines lie between the markers
    local at, stop = out:find('BACKWARD\n', 1, true), out:find('CASE1\n', 1, true)
    assert(at and stop and at < stop, out)
    return got, out, out:sub(at, stop):find('backward', 1, true) ~= nil
  end
  local isa = flow.backends.cpu.get_cpu_capability()

  -- per instruction set: the routes of cases 1-8 (NCHW, channels-last) and
  -- whether the gradients of case 7 go to oneDNN. The cases: 3x3 on 16x16,
  -- 1x1, depthwise, 3x3 on 7x7 (49 pixels), 3x3 on 4 x 7x7 (196), 3x3 on
  -- 16 x 4x4 (256 pixels, but 4-wide rows), 3x3 on 28x28, 1x1 on 28x28
  local want = {
    AVX512 = {{true, false, false, false, true, false, true, false},
              {true, true, true, false, true, false, true, true}, true},
    AVX2 = {{false, false, false, false, false, false, true, false},
            {true, true, true, false, true, false, true, true}, false},
    DEFAULT = {{false, false, false, false, false, false, false, false},
               {false, false, false, false, false, false, false, false}, false},
  }

  it('oneDNN for 3x3 layers, im2col for 1x1, grouped and small ones, as the CPU has it', function()
    if not BUILT then pending('built without oneDNN (OF_WITH_DNNL=OFF)') return end
    local got, out, bwd = routed('env -u OF_CONV_BACKEND -u OF_CPU_ISA')
    assert.are.same(want[isa][1], got, out)
    assert.are.equal(want[isa][3], bwd, out)
  end)

  it('channels-last inputs: 1x1 and grouped layers go to oneDNN too (AVX2 and AVX-512)', function()
    -- oneDNN computes NHWC without reorders; im2col would copy to NCHW and back
    if not BUILT then pending('built without oneDNN (OF_WITH_DNNL=OFF)') return end
    local got, out = routed('env -u OF_CONV_BACKEND -u OF_CPU_ISA CLX=1')
    assert.are.same(want[isa][2], got, out)
  end)

  it('on AVX2 (native or OF_CPU_ISA=avx2): forwards on 28x28 maps or more, no gradients', function()
    if not BUILT then pending('built without oneDNN (OF_WITH_DNNL=OFF)') return end
    if isa ~= 'AVX512' and isa ~= 'AVX2' then pending('the CPU has no AVX2 (' .. isa .. ')') return end
    local got, out, bwd = routed('env -u OF_CONV_BACKEND OF_CPU_ISA=avx2')
    assert.are.same(want.AVX2[1], got, out)
    assert.is_false(bwd, out)
    got, out = routed('env -u OF_CONV_BACKEND OF_CPU_ISA=avx2 CLX=1')
    assert.are.same(want.AVX2[2], got, out)
  end)

  it('below AVX2 (OF_CPU_ISA=default) every float32 convolution takes im2col', function()
    if not BUILT then pending('built without oneDNN (OF_WITH_DNNL=OFF)') return end
    local got, out, bwd = routed('env -u OF_CONV_BACKEND OF_CPU_ISA=default')
    assert.are.same(want.DEFAULT[1], got, out)
    assert.is_false(bwd, out)
    got, out = routed('env -u OF_CONV_BACKEND OF_CPU_ISA=default CLX=1')
    assert.are.same(want.DEFAULT[2], got, out)
  end)
end)

describe('the weight-reorder cache (inference through oneDNN)', function()
  -- no_grad forwards keep a parameter's reordered weight, keyed by its
  -- storage and version: an in-place change, a new parameter, another dtype
  -- must all be seen, and a repeated call gives the same bits
  local function infer(conv, x)
    return flow.no_grad(function() return with_backend('dnnl', conv, x) end)
  end
  local function ref(conv, x)
    return flow.no_grad(function() return with_backend('ref', conv, x) end)
  end

  it('sees in-place updates, load_state_dict and new parameters', function()
    flow.manual_seed(21)
    local conv = flow.nn.Conv2d(8, 16, 3, {padding = 1})
    local x = flow.randn(2, 8, 10, 10)
    local y1 = infer(conv, x)
    near(y1, ref(conv, x), 1e-5, 1e-4, 'first call')
    assert.are.equal(0, (infer(conv, x) - y1):abs():max():item())   -- the kept copy
    flow.no_grad(function() conv.weight:mul_(-2) end)               -- in place: version bump
    near(infer(conv, x), ref(conv, x), 1e-5, 1e-4, 'after mul_')
    near(infer(conv, x), y1 * -2 + conv.bias:reshape(1, 16, 1, 1) * 3, 1e-5, 1e-4,
      'after mul_, by hand')
    local other = flow.nn.Conv2d(8, 16, 3, {padding = 1})           -- same shapes
    conv:load_state_dict(other:state_dict())
    near(infer(conv, x), ref(other, x), 1e-5, 1e-4, 'after load_state_dict')
    near(infer(other, x), ref(other, x), 1e-5, 1e-4, 'the other module')
    local opt = flow.optim.SGD(conv:parameters(), {lr = 0.5})
    with_backend('dnnl', function() conv(x):sum():backward() end)
    opt:step()
    near(infer(conv, x), ref(conv, x), 1e-5, 1e-4, 'after an optimizer step')
    flow.empty_cache()
    near(infer(conv, x), ref(conv, x), 1e-5, 1e-4, 'after empty_cache')
  end)

  it('in a compiled graph (arena memory) with bfloat16 weights updated between runs', function()
    flow.manual_seed(23)
    local net = flow.nn.Sequential(flow.nn.Conv2d(8, 16, 3, {padding = 1}), flow.nn.ReLU(),
      flow.nn.Conv2d(16, 16, 3, {padding = 1}), flow.nn.Conv2d(16, 16, 3, {padding = 1}))
    net:eval():to(flow.bfloat16)
    local G = flow.nn.Graph:subclass('KeptWeightGraph')
    function G:__init() flow.nn.Graph.__init(self); self.net = net end
    function G:build(t) return self.net(t) end
    local g = G()
    local x = flow.randn(2, 8, 9, 9):to(flow.bfloat16)
    local function want() return ref(net, x):float() end
    for round = 1, 4 do
      local y = flow.no_grad(function() return g(x) end):float()
      near(y, want(), 2 ^ -6, 1e-2, 'graph run ' .. round)
      if round == 2 then
        flow.no_grad(function() net[3].weight:mul_(-1); net[4].weight:add_(0.25) end)
      end
    end
  end)

  it('skips the weight reorder on a repeated call when built in', function()
    if not BUILT then pending('built without oneDNN (OF_WITH_DNNL=OFF)') return end
    local script = os.tmpname()
    local f = assert(io.open(script, 'w'))
    f:write([[
local flow = require 'oneflow'
local conv = flow.nn.Conv2d(16, 32, 3, {padding = 1})
local x = flow.randn(1, 16, 12, 12)
io.stdout:write('MARK1\n') io.stdout:flush()
flow.no_grad(function() conv(x) end)
io.stdout:write('MARK2\n') io.stdout:flush()
flow.no_grad(function() conv(x) end)
io.stdout:write('MARK3\n') io.stdout:flush()
conv(x)   -- grad recorded: not kept
io.stdout:write('MARK4\n') io.stdout:flush()
]])
    f:close()
    local p = io.popen(('OF_CONV_BACKEND=dnnl DNNL_VERBOSE=1 luajit %s 2>&1'):format(script))
    local out = p:read('*a')
    p:close()
    os.remove(script)
    local function count(from, to)
      local a = assert(out:find(from, 1, true), out)
      local b = assert(out:find(to, a, true), out)
      local n = 0
      for _ in out:sub(a, b):gmatch('exec,cpu,reorder') do n = n + 1 end
      return n
    end
    local first, second, third = count('MARK1', 'MARK2'), count('MARK2', 'MARK3'),
      count('MARK3', 'MARK4')
    assert.is_true(out:find('exec,cpu,convolution', 1, true) ~= nil, out)
    assert.are.equal(first - 1, second, out)   -- the weight's reorder is gone
    assert.are.equal(first, third, out)
  end)
end)

describe('conv in bfloat16', function()
  -- the bfloat16 result against float32 maths on the same bfloat16 values:
  -- one rounding of the result (2^-8 relative) plus the float32 sums
  local function check_bf16(xs, ws, kw, what)
    flow.manual_seed(3)
    local x = flow.randn(xs):to(flow.bfloat16)
    local w = flow.randn(ws):to(flow.bfloat16)
    local want = F.conv2d(x:float(), w:float(), nil, kw)
    for _, be in ipairs({'ref', 'dnnl'}) do
      local y = with_backend(be, F.conv2d, x, w, nil, kw)
      assert.are.equal(flow.bfloat16, y.dtype)
      local tol = 2 ^ -8 * max_abs(want) + 1e-3
      local err = max_abs(y:float() - want)
      assert(err <= tol, ('%s (%s): max difference %.3g > %.3g'):format(what, be, err, tol))
    end
  end

  it('bfloat16 tensors', function()
    check_bf16({2, 8, 9, 9}, {16, 8, 3, 3}, {padding = 1}, '3x3')
    check_bf16({1, 6, 7, 7}, {6, 2, 3, 3}, {groups = 3, stride = 2}, 'groups')
  end)

  it('autocast: conv in bfloat16, grads in the parameters\' float32', function()
    flow.manual_seed(5)
    local conv = flow.nn.Conv2d(4, 6, 3, {padding = 1})
    local x = flow.randn(2, 4, 8, 8)
    local function run()
      conv:zero_grad()
      local y = flow.amp.autocast('cpu', {dtype = flow.bfloat16}, function() return conv(x) end)
      assert.are.equal(flow.bfloat16, y.dtype)
      y:float():sum():backward()
      return y:float(), conv.weight.grad:clone()
    end
    local yr, gr = with_backend('ref', run)
    local yd, gd = with_backend('dnnl', run)
    assert.are.equal(flow.float32, gd.dtype)
    local want = conv(x)
    near(yd, want, 2 ^ -6, 1e-2, 'autocast forward vs float32')
    near(yd, yr, 2 ^ -7, 1e-2, 'autocast forward, dnnl vs ref')
    near(gd, gr, 2 ^ -6, 1e-2, 'autocast weight grad, dnnl vs ref')
  end)
end)

describe('conv through oneDNN vs PyTorch', function()
  local has_torch = os.execute('/usr/bin/python3 -c "import torch" >/dev/null 2>&1') == 0

  it('conv2d forward and grads, float32', function()
    if not has_torch then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(11)
    local x, w, b = flow.randn(2, 6, 9, 8), flow.randn(4, 3, 3, 2), flow.randn(4)
    local function list(t) return '[' .. table.concat(t:flatten():totable(), ',') .. ']' end
    local script = ([[
import torch
x = torch.tensor(%s, dtype=torch.float32).reshape(2, 6, 9, 8).requires_grad_()
w = torch.tensor(%s, dtype=torch.float32).reshape(4, 3, 3, 2).requires_grad_()
b = torch.tensor(%s, dtype=torch.float32).requires_grad_()
y = torch.nn.functional.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
(y * y).sum().backward()
for t in (y, x.grad, w.grad):
    print(' '.join(repr(v) for v in t.flatten().tolist()))
]]):format(list(x), list(w), list(b))
    local lines = H.python_lines(script)
    assert.are.equal(3, #lines)
    local function tensor_of(line, like)
      local v = {}
      for s in line:gmatch('%S+') do v[#v + 1] = tonumber(s) end
      return flow.tensor(v):reshape(like:size():totable())
    end
    with_backend('dnnl', function()
      local xg, wg = x:clone():requires_grad_(true), w:clone():requires_grad_(true)
      local y = F.conv2d(xg, wg, b, {stride = {2, 1}, padding = {1, 2}, dilation = {1, 2},
        groups = 2})
      ;(y * y):sum():backward()
      near(y, tensor_of(lines[1], y), 1e-5, 1e-4, 'forward vs PyTorch')
      near(xg.grad, tensor_of(lines[2], xg), 1e-5, 1e-4, 'grad input vs PyTorch')
      near(wg.grad, tensor_of(lines[3], wg), 1e-5, 1e-4, 'grad weight vs PyTorch')
    end)
  end)
end)
