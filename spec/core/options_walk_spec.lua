-- The walk of tools/options_walk.lua over the public API (about 1100
-- functions): every function that looks up keys in an options table must
-- reject an unknown one with an error naming it and the nearest known key,
-- and no function may crash the process when handed a table, a string or
-- nil where a tensor belongs, and fewer and fewer may leak one of Lua's own
-- errors for a wrong-typed argument. spec/core/options_spec.lua checks a hand-made
-- list of calls with real arguments; this walk finds the functions that list
-- misses.
local ROOT = (function()
  local src = debug.getinfo(1, 'S').source:sub(2)
  local dir = src:match('^(.*)/spec/core/[^/]*$')
  if not dir or dir == '' then return io.popen('pwd'):read('*l') end
  if dir:sub(1, 1) ~= '/' then dir = io.popen('pwd'):read('*l') .. '/' .. dir end
  return dir
end)()

local flow = require 'oneflow'
local A = require 'oneflow._args'
local walk = require 'tools.options_walk'

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

describe('the options walk', function()
  it('tells a lax function, a strict one and one without options apart', function()
    -- looks up keepdim, ignores the rest: what issue 20 found in x:sum
    local function lax(x, opts) return opts and opts.keepdim and x or x end
    local function strict(x, opts)
      opts = A.check_options('strict_fn', opts, {keepdim = true})
      return opts.keepdim and x or x
    end
    local function plain(x) return x end
    local function no_suggest(x, opts)
      local _ = opts and opts.keepdim
      for k in pairs(opts or {}) do
        if k ~= 'keepdim' then A.fail("no_suggest: unknown option '" .. k .. "'") end
      end
      return x
    end
    assert.equal('lax', (walk.classify(lax)))
    assert.equal('strict', (walk.classify(strict)))
    assert.equal('ignored', (walk.classify(plain)))
    local cls, detail = walk.classify(no_suggest)
    assert.equal('nosuggest', cls, detail)
    local cls2 = walk.classify(function() error('always fails') end)
    assert.equal('unprobed', cls2)
  end)

  it('finds no lax function, no crash and no error without a suggestion in the public API', function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute('mkdir -p ' .. sh_quote(dir)) == 0)
    local err = dir .. '/trace'
    local cmd = ('cd %s && OPTIONS_WALK_TRACE=1 LUA_PATH=%s timeout 600 luajit %s 2>%s; echo "__rc=$?"'):format(
      sh_quote(dir), sh_quote(ROOT .. '/lua/?.lua;' .. ROOT .. '/lua/?/init.lua;;'),
      sh_quote(ROOT .. '/tools/options_walk.lua'), sh_quote(err))
    local p = io.popen(cmd)
    local out = p:read('*a')
    p:close()
    local f = io.open(err)
    local trace = f and f:read('*a') or ''
    if f then f:close() end
    os.execute('rm -rf ' .. sh_quote(dir))
    local rc = tonumber(out:match('__rc=(%d+)'))
    -- a crash (a NULL handed to C) names the function being probed
    local last = ''
    for line in trace:gmatch('[^\n]+') do
      if not line:match('^%s') then last = line end
    end
    assert(rc == 0, ('the walk exited with %s while probing %s:\n%s'):format(tostring(rc), last,
                                                                              trace:sub(-2000)))
    local bad = {}
    for line in out:gmatch('[^\n]+') do
      if line:match('^lax ') or line:match('^nosuggest ') or line:match('^strict%-elsewhere ') then
        bad[#bad + 1] = line
      end
    end
    assert(#bad == 0, #bad .. ' functions:\n' .. table.concat(bad, '\n'))
    local total, strict = out:match('options walk: (%d+) functions, (%d+) strict')
    assert.truthy(total, out:sub(-500))
    -- the walk reaches the API: over a thousand functions, 400 of them with
    -- checked options (428 when written)
    assert.is_true(tonumber(total) >= 1000, out:sub(-300))
    assert.is_true(tonumber(strict) >= 400, out:sub(-300))
    -- wrong-typed arguments that reach Lua's own errors inside the package
    -- ("attempt to index local 'x' (a number value)"): 183 before the
    -- flow.*, nn.init and operand checks, 64 after them, none since the
    -- checks with _args.arg (containers, losses, views, data, tensorboard,
    -- onnx, autograd, quantization, distributions, nn.utils, flowvision)
    -- functions no argument list reaches (110 before the templates for
    -- datasets, distributions, modules, names and images; 67 after, 66
    -- with the complex and handle templates flow.fft's names needed): the
    -- rest take positional values where the probe lands (Bernoulli's
    -- logits), need a float tensor's opposite (bitwise_* on self) or state
    -- (register_hook), or a file (onnx.read)
    local unprobed = tonumber(out:match('(%d+) unprobed'))
    assert(unprobed and unprobed <= 66, out:sub(-300))
    local internal = tonumber(out:match('(%d+) raised a Lua error from inside the package'))
    local lines = {}
    for line in out:gmatch('[^\n]+') do
      if line:match('^internal ') then lines[#lines + 1] = line end
    end
    assert(internal == 0, ('%s functions raise Lua errors from inside:\n%s')
      :format(tostring(internal), table.concat(lines, '\n')))
  end)
end)

describe('non-tensor inputs', function()
  local x = flow.ones(2, 3)
  -- these reached the C library as NULL and crashed the process
  it('are errors naming the op and argument, at the caller\'s line', function()
    local cases = {
      {function() return flow.abs({}) end, 'abs: argument 1 (input) must be a tensor, got table'},
      {function() return flow.exp('s') end, 'exp: argument 1 (input) must be a tensor, got string'},
      {function() return flow.flatten(nil) end, 'flatten: argument 1 (input) must be a tensor, got nil'},
      {function() return flow.gather({}, 1, x) end, 'gather: argument 1 (input) must be a tensor, got table'},
      {function() return flow.bitwise_and(2, {}) end, 'bitwise_and: expected tensors or numbers, got number and table'},
      {function() return x:add_({}) end, 'add: expected tensors or numbers, got tensor and table'},
      {function() return x:mul_('s') end, 'mul: expected tensors or numbers, got tensor and string'},
      {function() return x:copy_({}) end, 'copy_: argument 1 (src) must be a tensor, got table'},
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      err = tostring(err)
      assert.truthy(err:find(c[2], 1, true), err)
      assert.truthy(err:find('options_walk_spec.lua:', 1, true), err)
    end
    -- numbers where a tensor belongs, operands and nn.init's tensor
    local more = {
      {function() return flow.abs(3) end, 'abs: argument 1 (input) must be a tensor, got number'},
      {function() return flow.fmax(x, {}) end, 'expected a tensor or a number as operand, got table'},
      {function() return flow.nn.init.xavier_uniform_(nil) end,
       'xavier_uniform_: argument 1 (tensor) must be a tensor, got nil'},
      {function() return x:clamp(flow.zeros(1)) end, 'clamp: min must be a number or nil, got tensor'},
      {function() return x:clamp({mn = 0}) end, "clamp: unknown option 'mn' (did you mean 'min'?)"},
      {function() return x:masked_fill(1, 2) end, 'masked_fill: argument 2 (mask) must be a tensor, got number'},
      {function() return x:masked_fill(x:gt(0), nil) end,
       'masked_fill: value must be a number or a one-element tensor, got nil'},
      {function() return x:clone():fill_({}) end, 'fill_: value must be a number or a one-element tensor, got table'},
      {function() return x:leaky_relu({}) end, 'leaky_relu: negative_slope must be a number, got table'},
    }
    for _, c in ipairs(more) do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err))
      assert.truthy(tostring(err):find('options_walk_spec.lua:', 1, true), tostring(err))
    end
    -- the shared checker (_args.arg) at the entry points the walk found
    local D = flow.distributions
    local cases3 = {
      {function() return flow.nn.functional.bilinear(x, nil, x) end,
       'bilinear: argument 2 (input2) must be a tensor, got nil'},
      {function() return flow.nn.functional.pixel_shuffle(flow.ones(1, 4, 2, 2), {}) end,
       'pixel_shuffle: argument 2 (upscale_factor) must be an integer, got table'},
      {function() return flow.nn.functional.margin_ranking_loss(x, x, nil) end,
       'margin_ranking_loss: argument 3 (target) must be a tensor, got nil'},
      {function() return flow.nn.functional.prelu(x, 0.25) end,
       'prelu: argument 2 (weight) must be a tensor, got number'},
      {function() return x:view_as(nil) end, 'view_as: argument 1 (other) must be a tensor, got nil'},
      {function() return x:type_as(3) end, 'type_as: argument 1 (other) must be a tensor, got number'},
      {function() return flow.where(nil, x, x) end, 'where: argument 1 (condition) must be a tensor, got nil'},
      {function() return flow.nn.ModuleList(x) end, 'ModuleList: argument 1 (list) must be a table, got tensor'},
      {function() return flow.nn.ModuleDict({1, 2}) end,
       'ModuleDict: entries[1] must be a {name, value} pair, got number'},
      {function() return flow.utils.data.default_collate(3) end,
       'default_collate: argument 1 (batch) must be a table, got number'},
      {function() return flow.utils.data.random_split(x, {1, 1}) end,
       'random_split: argument 1 (dataset) must be a dataset (with a len method), got tensor'},
      {function() return flow.autograd.grad({x}, {1}) end,
       'autograd.grad: expected a tensor or a list of tensors, got number at [1]'},
      {function() return flow.nn.init.dirac_(flow.ones(2, 2, 3), {}) end,
       'dirac_: argument 2 (groups) must be an integer, got table'},
      {function() return flow.nn.utils.clip_grad_value_({x}, nil) end,
       'clip_grad_value_: argument 2 (clip_value) must be a number, got nil'},
      {function() return flow.nn.utils.parameters_to_vector({1}) end,
       'parameters_to_vector: params[1] must be a tensor, got number'},
      {function() return D.kl_divergence(D.Normal(0, 1), nil) end,
       'kl_divergence: argument 2 (q) must be a distribution, got nil'},
      {function() return flow.utils.tensorboard.pr_curve({1}, {0.5}, {}) end,
       'pr_curve: argument 3 (num_thresholds) must be an integer, got table'},
      {function() return flow.quantization.choose_qparams({}, 1, 0, 255) end,
       'choose_qparams: argument 1 (min) must be a number, got table'},
      {function() return require('flowvision.transforms.functional').rotate(flow.ones(3, 4, 4), {}) end,
       'rotate: argument 2 (angle) must be a number, got table'},
      {function() return flow.nn.Linear(3, 2)(nil) end,
       'linear: argument 1 (input) must be a tensor, got nil'},
      {function() return flow.nn.Conv2d(1, 1, 3)('x') end,
       'Conv2d: argument 1 (input) must be a tensor or a global tensor, got string'},
    }
    for _, c in ipairs(cases3) do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err))
      assert.truthy(tostring(err):find('options_walk_spec.lua:', 1, true), tostring(err))
    end
    -- the checks leave the valid forms alone
    assert.equal(4, flow.xlogy(2, flow.ones(2)):sum():item() + 4)
    assert.equal(4, flow.max(2, flow.ones(2)):sum():item())
    assert.equal(6, flow.abs(x):sum():item())
    assert.equal(12, (x:clone():add_(true)):sum():item())
    assert.equal(18, (2 + x + false):sum():item())
  end)

  it('nil, a table or a string as input of every checked flow function is an error', function()
    local T = require 'oneflow.tensor'
    local n, bad = 0, {}
    for name, f in pairs(T.flow) do
      if type(f) == 'function' and T.unguard(f) ~= f then
        n = n + 1
        for _, v in ipairs({false, {}, 's'}) do
          local ok, err = pcall(f, v or nil)
          err = tostring(err)
          -- an alias (flow.absolute) names the op it shares (abs)
          local want = (': argument 1 (input) must be a tensor, got %s'):format(v and type(v) or 'nil')
          if ok or not err:find(want, 1, true) or not err:find('options_walk_spec.lua:', 1, true) then
            bad[#bad + 1] = name .. ': ' .. err
          end
        end
      end
    end
    -- 168 alone; fewer once a global tensor has been made (distributed.global
    -- then wraps the ops with SBP rules around these checks)
    assert.is_true(n > 90, n .. ' checked flow functions')
    assert.same({}, bad)
  end)

  it('newly strict options name the nearest key', function()
    local H = require 'spec.helpers'
    H.raises(function() return flow.nn.functional.relu(x, {inplce = true}) end,
             "relu: unknown option 'inplce' (did you mean 'inplace'?)")
    H.raises(function() return x:tril({diagnal = 1}) end, "tril: unknown option 'diagnal' (did you mean 'diagonal'?)")
    H.raises(function() return flow.cat({x, x}, {dims = 2}) end, "cat: unknown option 'dims' (did you mean 'dim'?)")
    H.raises(function() return x:median({dim = 1, keepdims = true}) end,
             "median: unknown option 'keepdims' (did you mean 'keepdim'?)")
    H.raises(function() return flow.linalg.norm(x, {keepdims = true}) end,
             "linalg.norm: unknown option 'keepdims' (did you mean 'keepdim'?)")
    H.raises(function() return flow.linalg.svd(x, {full_matrix = false}) end,
             "linalg.svd: unknown option 'full_matrix' (did you mean 'full_matrices'?)")
    H.raises(function() return flow.amp.autocast('cpu', {enable = false}) end,
             "autocast: unknown option 'enable' (did you mean 'enabled'?)")
    H.raises(function() return flow.nn.Parameter(x, {require_grad = false}) end,
             "Parameter: unknown option 'require_grad' (did you mean 'requires_grad'?)")
    -- the lax ones the templates of the last walk found
    local ids = flow.tensor({1, 2}, {dtype = flow.int64})
    H.raises(function() return flow.put(x, ids, flow.ones(2), {accumulat = true}) end,
             "put: unknown option 'accumulat' (did you mean 'accumulate'?)")
    H.raises(function() return flow.tensordot(x, x:t(), 1, {outs = 1}) end,
             "tensordot: unknown option 'outs' (did you mean 'out'?)")
    H.raises(function() return flow.nn.TransformerEncoder(flow.nn.TransformerEncoderLayer(4, 2), 1, {nrm = 1}) end,
             "TransformerEncoder: unknown option 'nrm' (did you mean 'norm'?)")
    H.raises(function() return flow.nn.utils.remove_weight_norm(flow.nn.utils.weight_norm(flow.nn.Linear(3, 2)),
                                                                 {nam = 'weight'}) end,
             "remove_weight_norm: unknown option 'nam' (did you mean 'name'?)")
    H.raises(function()
      return require('flowvision.transforms.functional').erase(flow.ones(3, 4, 4), 1, 1, 2, 2, 0, {inplce = true})
    end, "erase: unknown option 'inplce' (did you mean 'inplace'?)")
    -- and still take the known ones
    assert.same({2, 1}, x:median({dim = 2, keepdim = true}):size():totable())
    assert.same({2, 6}, flow.cat({x, x}, {dim = 2}):size():totable())
    assert.equal(0, flow.nn.functional.relu(-x, {inplace = false}):sum():item())
  end)
end)
