-- Attribute ranges of every op kind are checked when a saved graph loads:
-- for each op of core/ops/ops.def that has an attribute record, a graph of
-- that one op is written from scratch (spec/graph/ir_build.lua: the IR
-- record with its checksum recomputed, as a crafted file would be); with a
-- valid record it loads, with one field out of range it is refused with an
-- error naming node 1, the op and the attribute -- through flow.nn.Graph.load
-- and through the C host API (of_graph_load).
local flow = require 'oneflow'
local ffi = require 'ffi'
local B = require 'spec.graph.ir_build'

local ROOT = '.'
local X = {{2, 3, 4, 4}}          -- the default input: float32 [2, 3, 4, 4]
local M2 = {{3, 3}}
local I64 = {{2, 3, 4, 4}, 'int64'}
local S = {{}}                    -- a scalar float32

-- op -> {ins, outs, ok = valid record fields, bad = {{field edits, expect}, ...}}
-- outs default to one result shaped as the first input.
local CASES = {
  alias = {ok = {ndim = 1, shape = {4}, strides = {1}}, bad = {{{ndim = 9}, 'attrs.ndim'}}},
  view = {ok = {ndim = 1, shape = {-1}}, outs = {{{96}}}, bad = {{{ndim = 1, shape = {-5}}, 'attrs.shape[1]'}}},
  reshape = {ok = {ndim = 1, shape = {-1}}, outs = {{{96}}}, bad = {{{ndim = 9}, 'attrs.ndim'}}},
  expand = {ok = {ndim = 4, shape = {2, 3, 4, 4}}, bad = {{{ndim = 1, shape = {2 ^ 41}}, 'attrs.shape[1]'}}},
  as_strided = {ok = {ndim = 1, shape = {4}, strides = {1}}, outs = {{{4}}},
                bad = {{{ndim = 1, shape = {4}, strides = {1}, offset = -1}, 'attrs.offset'}}},
  transpose = {ok = {a = 0, b = 1}, outs = {{{3, 2, 4, 4}}}, bad = {{{a = 7}, 'attrs.dims'}}},
  permute = {ok = {n = 4, dims = {0, 1, 2, 3}}, bad = {{{n = 1, dims = {9}}, 'attrs.dims[1]'}}},
  narrow = {ok = {dim = 1, a = 0, b = 1}, bad = {{{dim = 9}, 'attrs.dim'}, {{b = -1}, 'attrs.length'}}},
  slice = {ok = {dim = 1, a = 0, b = 2, c = 1}, bad = {{{c = 0}, 'attrs.step'}, {{dim = -9}, 'attrs.dim'}}},
  select = {ok = {dim = 1}, bad = {{{dim = 4}, 'attrs.dim'}}},
  unsqueeze = {ok = {v = 0}, bad = {{{v = 6}, 'attrs.dim'}}},
  squeeze = {ok = {v = 0}, bad = {{{v = 9}, 'attrs.dim'}}},
  flatten = {ok = {a = 1, b = 3}, outs = {{{2, 48}}}, bad = {{{b = 9}, 'attrs.dims'}}},
  contiguous = {bad = {{{v = 1}, 'attrs.v'}}},
  clone = {bad = {{{v = 1}, 'attrs.v'}}},
  detach = {bad = {{{v = 1}, 'attrs.v'}}},
  to = {ok = {v = 8}, bad = {{{v = 99}, 'attrs.dtype'}}},
  copy_ = {ins = {X, X}, outs = {}, bad = {{{v = 1}, 'attrs.v'}}},
  empty = {ins = {}, ok = {ndim = 1, shape = {3}, dtype = 7}, outs = {{{3}}},
           bad = {{{dtype = 99}, 'attrs.dtype'}, {{device = 7}, 'attrs.device'}}},
  zeros = {ins = {}, ok = {ndim = 1, shape = {3}, dtype = 7}, outs = {{{3}}},
    bad = {{{ndim = 1, shape = {-3}}, 'attrs.shape[1]'}}},
  full = {ins = {}, ok = {ndim = 1, shape = {3}, dtype = 7}, outs = {{{3}}}, bad = {{{ndim = 12}, 'attrs.ndim'}}},
  rand = {ins = {}, ok = {ndim = 1, shape = {3}, dtype = 7}, outs = {{{3}}}, bad = {{{dtype = -2}, 'attrs.dtype'}}},
  randn = {ins = {}, ok = {ndim = 1, shape = {3}, dtype = 7}, outs = {{{3}}}, bad = {{{device = -1}, 'attrs.device'}}},
  eye = {ins = {}, ok = {a = 2, b = 2, dtype = 7}, outs = {{{2, 2}}}, bad = {{{a = 1e6, b = 1e6}, 'attrs: asks for'}}},
  arange = {ins = {}, ok = {a = 0, b = 3, c = 1, dtype = 7}, outs = {{{3}}}, bad = {{{dtype = 42}, 'attrs.dtype'}}},
  linspace = {ins = {}, ok = {a = 0, b = 1, c = 3, dtype = 7}, outs = {{{3}}}, bad = {{{c = 1e12}, 'attrs: asks for'}}},
  binary = {ins = {X, X}, bad = {{{op = 999}, 'attrs.op'}}},
  binary_scalar = {bad = {{{reverse = 2}, 'attrs.reverse'}, {{op = -1}, 'attrs.op'}}},
  unary = {bad = {{{op = -1}, 'attrs.op'}}},
  clamp = {ok = {has_lo = 1}, bad = {{{has_hi = 5}, 'attrs.has_hi'}, {{has_lo = 0}, 'neither min nor max'}}},
  leaky_relu = {ok = {slope = 0.01}, bad = {{{slope = 1 / 0}, 'attrs.negative_slope'}}},
  where = {ins = {{{2, 3, 4, 4}, 'bool'}, X, X}, bad = {{{v = 1}, 'attrs.v'}}},
  reduce = {ok = {dtype = -1}, outs = {S}, bad = {{{op = 99}, 'attrs.op'}, {{keepdim = 2}, 'attrs.keepdim'},
                                                 {{ndims = 1, dims = {7}}, 'attrs.dims[1]'}}},
  max_dim = {ok = {dim = 1}, outs = {{{2, 4, 4}}, {{2, 4, 4}, 'int64'}}, bad = {{{keepdim = 3}, 'attrs.keepdim'}}},
  argmax = {ok = {dim = 1}, outs = {{{2, 4, 4}, 'int64'}},
    bad = {{{base = 5}, 'attrs.index_base'}, {{dim = 4}, 'attrs.dim'}}},
  var = {outs = {S}, bad = {{{is_std = 2}, 'attrs.is_std'}, {{correction = 0 / 0}, 'attrs.correction'}}},
  softmax = {ok = {dim = 1}, bad = {{{dim = 9}, 'attrs.dim'}, {{flag = 3}, 'attrs.flag'}}},
  cumulative = {ok = {dim = 1}, bad = {{{dim = -5}, 'attrs.dim'}}},
  matmul = {ins = {M2, M2}, bad = {{{v = 2}, 'attrs.b_t'}}},
  mm = {ins = {M2, M2}, bad = {{{v = -1}, 'attrs.b_t'}}},
  bmm = {ins = {{{2, 3, 3}}, {{2, 3, 3}}}, bad = {{{v = 7}, 'attrs.b_t'}}},
  addmm = {ins = {M2, M2, M2}, ok = {alpha = 1, beta = 1},
    bad = {{{alpha = 0 / 0}, 'attrs.alpha'}, {{b_t = 3}, 'attrs.b_t'}}},
  cat = {ins = {X, X}, outs = {{{4, 3, 4, 4}}}, bad = {{{v = 4}, 'attrs.dim'}}},
  stack = {ins = {X, X}, outs = {{{2, 2, 3, 4, 4}}}, bad = {{{v = 6}, 'attrs.dim'}}},
  gather = {ins = {X, I64}, bad = {{{base = 2}, 'attrs.index_base'}, {{dim = 4}, 'attrs.dim'}}},
  index_select = {ins = {X, {{2}, 'int64'}}, bad = {{{base = -1}, 'attrs.index_base'}}},
  scatter = {ins = {X, I64, X}, ok = {has_src = 1},
    bad = {{{reduce = 5}, 'attrs.reduce'}, {{use_value = 3}, 'attrs.use_value'}}},
  index_add = {ins = {X, {{2}, 'int64'}, X}, ok = {alpha = 1}, bad = {{{dim = 9}, 'attrs.dim'}}},
  sort = {outs = {X, I64}, bad = {{{flag1 = 2}, 'attrs.descending'}, {{k = 3}, 'attrs.k'}}},
  topk = {ok = {k = 1, dim = -1}, outs = {{{2, 3, 4, 1}}, {{2, 3, 4, 1}, 'int64'}},
          bad = {{{k = 99}, 'attrs.k'}, {{flag2 = 9}, 'attrs.sorted'}}},
  tri = {bad = {{{upper = 2}, 'attrs.upper'}}},
  flip = {ok = {n = 1, dims = {0}}, bad = {{{n = 1, dims = {9}}, 'attrs.dims[1]'}, {{n = 10}, 'attrs.n'}}},
  roll = {ok = {n = 1, dims = {0}, shifts = {1}}, bad = {{{n = 1, dims = {-9}}, 'attrs.dims[1]'}}},
  ['repeat'] = {ok = {n = 4, shifts = {1, 1, 1, 1}}, bad = {{{n = 4, shifts = {-1, 1, 1, 1}}, 'attrs.repeats[1]'}}},
  one_hot = {ins = {{{4}, 'int64'}}, ok = {n = 3}, outs = {{{4, 3}, 'int64'}}, bad = {{{n = -5}, 'attrs.n'}}},
  masked_select = {ins = {X, {{2, 3, 4, 4}, 'bool'}}, outs = {{{5}}}, bad = {{{v = 1}, 'attrs.v'}}},
  nonzero = {outs = {{{5, 4}, 'int64'}}, bad = {{{base = 3}, 'attrs.index_base'}, {{n = 1}, 'attrs.n'}}},
  uniform_ = {ok = {a = 0, b = 1}, outs = {}, bad = {{{b = -1}, 'an empty range'}, {{a = 0 / 0}, 'attrs.from'}}},
  normal_ = {ok = {a = 0, b = 1}, outs = {}, bad = {{{b = -1}, 'a negative std'}}},
  randint_ = {ok = {a = 0, b = 10}, outs = {}, bad = {{{b = 0}, 'an empty range'}}},
  bernoulli_ = {ok = {a = 0.5}, outs = {}, bad = {{{a = 2}, 'attrs.p'}}},
  bernoulli = {bad = {{{v = 1}, 'attrs.v'}}},
  randperm = {ins = {}, ok = {n = 3, dtype = 4}, outs = {{{3}, 'int64'}}, bad = {{{base = 7}, 'attrs.index_base'}}},
  conv = {ins = {X, {{5, 3, 3, 3}}, false}, ok = {nsp = 2, groups = 1}, outs = {{{2, 5, 2, 2}}},
          bad = {{{groups = 0}, 'attrs.groups'}, {{nsp = 4}, 'attrs.nsp'}}},
  conv_transpose = {ins = {X, {{3, 5, 3, 3}}, false}, ok = {nsp = 2, groups = 1}, outs = {{{2, 5, 6, 6}}},
                    bad = {{{has = 1, stride = {0, 1}}, 'attrs.stride[1]'}}},
  conv_weight_grad = {ins = {X, X, false}, ok = {nsp = 2, groups = 1}, outs = {{{5, 3, 3, 3}}},
                      bad = {{{has = 4, dilation = {1, 0}}, 'attrs.dilation[2]'}}},
  quantized_linear = {ins = {M2, M2, M2, M2, M2}, ok = {out_dtype = 7, x_scale = 1, out_scale = 1},
                      bad = {{{x_scale = 0}, 'attrs.x_scale'}, {{out_dtype = 4}, 'attrs.out_dtype'}}},
  quantized_conv2d = {ins = {X, X, X, X, X},
                      ok = {out_dtype = 7, x_scale = 1, out_scale = 1, groups = 1, stride = {1, 1}, dilation = {1, 1}},
                      bad = {{{groups = 0}, 'attrs.groups'}, {{out_zp = 9999}, 'attrs.out_zero_point'}}},
  quantized_max_pool2d = {ok = {groups = 2 * 65536 + 2, stride = {1, 1}, dilation = {1, 1}},
                          bad = {{{groups = 0}, 'attrs.kernel'}, {{padding = {-1, 0}}, 'attrs.padding[1]'}}},
  max_pool = {ok = {nsp = 2, has = 1, kernel = {2, 2}}, outs = {{{2, 3, 2, 2}}, {{2, 3, 2, 2}, 'int64'}},
              bad = {{{ceil_mode = 2}, 'attrs.ceil_mode'}, {{kernel = {0, 2}}, 'attrs.kernel[1]'}}},
  avg_pool = {ok = {nsp = 2, has = 1, kernel = {2, 2}}, outs = {{{2, 3, 2, 2}}},
              bad = {{{cip = 3}, 'attrs.count_include_pad'}, {{divisor = -1}, 'attrs.divisor_override'}}},
  adaptive_avg_pool = {ok = {nsp = 2, has = 1, kernel = {1, 1}}, outs = {{{2, 3, 1, 1}}},
    bad = {{{nsp = 0}, 'attrs.nsp'}}},
  adaptive_max_pool = {ok = {nsp = 2, has = 1, kernel = {1, 1}}, outs = {{{2, 3, 1, 1}}, {{2, 3, 1, 1}, 'int64'}},
                       bad = {{{has = 64}, 'attrs.has'}}},
  batch_norm = {ins = {X, false, false, false, false}, ok = {eps = 1e-5},
    bad = {{{eps = -1}, 'attrs.eps'}, {{flag = 2}, 'attrs.training'}}},
  instance_norm = {ins = {X, false, false, false, false}, ok = {eps = 1e-5},
    bad = {{{momentum = 1 / 0}, 'attrs.momentum'}}},
  layer_norm = {ins = {X, false, false, false, false}, ok = {eps = 1e-5, groups = 1},
    bad = {{{groups = 5}, 'attrs.groups'}}},
  rms_norm = {ins = {X, false, false, false, false}, ok = {eps = 1e-5, groups = 1},
    bad = {{{groups = 5}, 'attrs.groups'}, {{eps = -1}, 'attrs.eps'}}},
  group_norm = {ins = {X, false, false, false, false}, ok = {eps = 1e-5, groups = 1},
    bad = {{{groups = 2}, 'attrs.groups'}}},
  interpolate = {ok = {nsp = 2, size = {8, 8}}, outs = {{{2, 3, 8, 8}}},
    bad = {{{mode = 7}, 'attrs.mode'}, {{align = 2}, 'attrs.align_corners'}}},
  pad = {ok = {npad = 1, pad = {1, 1}}, outs = {{{2, 3, 4, 6}}}, bad = {{{mode = 9}, 'attrs.mode'}}},
  cross_entropy = {ins = {{{2, 3}}, {{2}, 'int64'}, false}, ok = {reduction = 1}, outs = {S},
                   bad = {{{reduction = 7}, 'attrs.reduction'}, {{smoothing = 2}, 'attrs.label_smoothing'}}},
  nll_loss = {ins = {{{2, 3}}, {{2}, 'int64'}, false}, ok = {reduction = 1}, outs = {S},
    bad = {{{base = 4}, 'attrs.index_base'}}},
  scaled_dot_product_attention = {ins = {X, X, X, X},
    bad = {{{dropout_p = 1.5}, 'attrs.dropout_p'}, {{causal = 2}, 'attrs.is_causal'}}},
  sgd_update = {ins = {X, X, X, S}, outs = {},
    bad = {{{momentum = -1}, 'attrs.momentum'}, {{nesterov = 5}, 'attrs.nesterov'}}},
  adam_update = {ins = {X, X, X, X, X, S}, ok = {beta1 = 0.9, beta2 = 0.999, eps = 1e-8}, outs = {},
                 bad = {{{beta1 = 1}, 'attrs.beta1'}, {{eps = -1}, 'attrs.eps'}}},
  amp_unscale_ = {ins = {X, S, S}, outs = {}, bad = {{{v = 1}, 'attrs.v'}}},
  amp_update_scale_ = {ins = {S, {{}, 'int32'}, S}, ok = {growth = 2, backoff = 0.5, interval = 1}, outs = {},
                       bad = {{{interval = 0}, 'attrs.growth_interval'}, {{backoff = 2}, 'attrs.backoff_factor'}}},
  special = {bad = {{{fn = 9999}, 'attrs.fn'}}},
  fft_c2c = {ins = {{{2, 3}, 'complex64'}}, ok = {ndims = 1, dims = {1}, kind = 0, forward = 1},
             outs = {{{2, 3}, 'complex64'}},
             bad = {{{norm = 7}, 'attrs.norm'}, {{forward = 2}, 'attrs.forward'}, {{kind = 2}, 'attrs.kind'},
                    {{dims = {5}}, 'attrs.dims[1]'}}},
  fft_r2c = {ins = {{{2, 4}}}, ok = {ndims = 1, dims = {1}, kind = 1, forward = 1},
             outs = {{{2, 3}, 'complex64'}},
             bad = {{{ndims = 0}, 'attrs.ndims'}, {{last_size = 3}, 'attrs.last_size'}}},
  fft_c2r = {ins = {{{2, 3}, 'complex64'}}, ok = {ndims = 1, dims = {1}, kind = 2, last_size = 4},
             outs = {{{2, 4}}}, bad = {{{last_size = 0}, 'attrs.last_size'}, {{norm = -1}, 'attrs.norm'}}},
  relu_max_pool = {ok = {kernel = {2, 2}, ['in'] = {4, 4}}, outs = {{{2, 3, 2, 2}}, {{2, 3, 2, 2}, 'uint8'}},
                   bad = {{{kernel = {0, 2}}, 'attrs'}}},
  relu_max_pool_backward = {ins = {{{2, 3, 2, 2}}, {{2, 3, 2, 2}, 'uint8'}}, ok = {kernel = {2, 2}, ['in'] = {4, 4}},
                            bad = {{{kernel = {2, 2}, ['in'] = {-4, 4}}, 'attrs'}}},
}

-- Ops whose every record value is valid (no range to check), or that are
-- not single-node graphs, each with the reason.
local NO_RANGE = {
  fill_ = 'any value (NaN and infinities included, as fill_ takes them)',
  masked_fill = 'any value',
  view_as_real = 'the record is unused',
  view_as_complex = 'the record is unused',
  backward = 'names a captured forward node; its words are edited in a real graph by edit_spec.lua',
  fused_elementwise = 'a compiled elementwise program; of_fused_check checks it, edit_spec.lua edits it',
}

local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

local function merge(a, b)
  local r = {}
  for k, v in pairs(a or {}) do r[k] = v end
  for k, v in pairs(b or {}) do r[k] = v end
  return r
end

local function file_for(row, case, fields)
  local ins = case.ins or {X}
  local outs = case.outs
  if not outs then
    outs = {}
    local first = ins[1] or X
    for i = 1, math.max(row.outputs, 0) do outs[i] = first end
  end
  return B.graph(row.name, B.record(ROOT, row.attrs, fields), ins, outs)
end

describe('saved graphs: attribute ranges of every op kind', function()
  local path = os.tmpname()
  teardown(function() os.remove(path) end)

  local rows = {}
  for _, row in ipairs(flow._C.op_schema()) do
    if row.attr_size ~= 0 and not row.flags.collective then rows[#rows + 1] = row end
  end

  it('has a case (or a reason) for every op with an attribute record', function()
    local missing = {}
    for _, row in ipairs(rows) do
      if not CASES[row.name] and not NO_RANGE[row.name] then missing[#missing + 1] = row.name end
    end
    assert.are.same({}, missing)
    assert.is_true(#rows >= 88)   -- ops.def today: 88 records outside the collectives
  end)

  it('loads each op with a valid record and refuses each out-of-range field, naming node, op and field', function()
    local failures, checked = {}, 0
    for _, row in ipairs(rows) do
      local case = CASES[row.name]
      if case then
        write(path, file_for(row, case, case.ok))
        local ok, err = pcall(flow.nn.Graph.load, path)
        if not ok then failures[#failures + 1] = row.name .. ' (valid record): ' .. tostring(err) end
        for _, b in ipairs(case.bad) do
          write(path, file_for(row, case, merge(case.ok, b[1])))
          local bok, berr = pcall(flow.nn.Graph.load, path)
          local want = ('node 1 (%s): '):format(row.name)
          berr = tostring(berr)
          if bok or not berr:find(want, 1, true) or not berr:find(b[2], 1, true) then
            failures[#failures + 1] = ('%s %s: wanted "%s...%s", got %s'):format(
              row.name, b[2], want, b[2], bok and 'a loaded graph' or berr)
          end
          checked = checked + 1
        end
      end
    end
    assert.are.same({}, failures)
    assert.is_true(checked >= #rows)
  end)

  it('re-infers results at load with the op\'s own function where it has one (binary)', function()
    local row
    for _, r in ipairs(rows) do if r.name == 'binary' then row = r end end
    local function load(ins, outs, op)
      write(path, B.graph('binary', B.record(ROOT, row.attrs, {op = op or 0}), ins, outs))
      return pcall(flow.nn.Graph.load, path)
    end
    assert.is_true((load({X, {{4}}}, {X})))                                      -- broadcast
    assert.is_true((load({X, {{4}, 'int64'}}, {X})))                             -- promotion
    local ok, err = load({X, {{5}}}, {X})
    assert.is_false(ok)
    assert.truthy(tostring(err):find('node 1 (binary): the recorded inputs do not fit: add: shapes '
                                     .. '[2,3,4,4] and [5] cannot be broadcast', 1, true), tostring(err))
    ok, err = load({X, X}, {{{2, 3, 4, 5}}})
    assert.is_false(ok)
    assert.truthy(tostring(err):find('node 1 (binary): result %2 is recorded as [2,3,4,5] float32, '
                                     .. 'its inputs give [2,3,4,4] float32', 1, true), tostring(err))
    ok, err = load({{{2}, 'int64'}, {{2}, 'int64'}}, {{{2}, 'int64'}}, 3)   -- true division
    assert.is_false(ok)
    assert.truthy(tostring(err):find('is recorded as [2] int64, its inputs give [2] float32', 1, true),
                  tostring(err))
    -- with an output tensor (in[3]): its dtype, the broadcast shape
    assert.is_true((load({X, {{4}}, {{2, 3, 4, 4}, 'float64'}}, {{{2, 3, 4, 4}, 'float64'}})))
    ok, err = load({X, {{4}}, X}, {{{2, 3, 4, 4}, 'float64'}})
    assert.is_false(ok)
    assert.truthy(tostring(err):find('is recorded as [2,3,4,4] float64, its inputs give [2,3,4,4] float32',
                                     1, true), tostring(err))
  end)

  it('re-infers binary_scalar results: the scalar\'s dtype, reversed operands', function()
    local row
    for _, r in ipairs(rows) do if r.name == 'binary_scalar' then row = r end end
    local function load(ins, outs, fields)
      write(path, B.graph('binary_scalar', B.record(ROOT, row.attrs, fields), ins, outs))
      return pcall(flow.nn.Graph.load, path)
    end
    local L2 = {{2}, 'int64'}
    assert.is_true((load({L2}, {L2}, {op = 2, s = 3})))                          -- int64 * 3
    assert.is_true((load({L2}, {{{2}}}, {op = 2, s = 0.5})))                     -- int64 * 0.5: float32
    assert.is_true((load({L2}, {{{2}, 'bool'}}, {op = 11, s = 1, reverse = 1}))) -- 1 == x: bool
    local ok, err = load({L2}, {L2}, {op = 2, s = 0.5})
    assert.is_false(ok)
    assert.truthy(tostring(err):find('node 1 (binary_scalar): result %1 is recorded as [2] int64, '
                                     .. 'its inputs give [2] float32', 1, true), tostring(err))
    ok, err = load({X}, {{{2, 3}}}, {op = 0, s = 1})
    assert.is_false(ok)
    assert.truthy(tostring(err):find('is recorded as [2,3] float32, its inputs give [2,3,4,4] float32',
                                     1, true), tostring(err))
    -- the result the graph then computes is the eager one
    write(path, B.graph('binary_scalar', B.record(ROOT, row.attrs, {op = 1, s = 10, reverse = 1}),
                        {{{3}}}, {{{3}}}))
    local g = flow.nn.Graph.load(path)
    assert.are.same({9, 8, 7}, g(flow.tensor({1, 2, 3})):totable())
  end)

  it('re-infers unary results: the dtype each op gives, the dtypes it refuses', function()
    local row
    for _, r in ipairs(rows) do if r.name == 'unary' then row = r end end
    local function load(op, ins, outs)
      write(path, B.graph('unary', B.record(ROOT, row.attrs, {op = op}), ins, outs))
      return pcall(flow.nn.Graph.load, path)
    end
    local function refused(want, ...)
      local ok, err = load(...)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(want, 1, true), tostring(err))
    end
    local L2, F2, B2 = {{2}, 'int64'}, {{2}}, {{2}, 'bool'}
    assert.is_true((load(11, {X}, {X})))                    -- relu
    assert.is_true((load(4, {L2}, {F2})))                   -- sqrt of int64: float32
    assert.is_true((load(39, {F2}, {B2})))                  -- isnan: bool
    assert.is_true((load(1, {L2}, {L2})))                   -- abs keeps int64
    assert.is_true((load(4, {L2, {{2}, 'float64'}}, {{{2}, 'float64'}})))   -- output tensor
    refused('node 1 (unary): result %1 is recorded as [2] int64, its inputs give [2] float32', 4, {L2}, {L2})
    refused('result %1 is recorded as [3] float32, its inputs give [2] float32', 11, {F2}, {{{3}}})
    refused('node 1 (unary): the recorded inputs do not fit: neg: negation of a bool tensor', 0, {B2}, {B2})
    refused('the recorded inputs do not fit: bitwise_not: not supported for dtype float32', 38, {F2}, {F2})
    write(path, B.graph('unary', B.record(ROOT, row.attrs, {op = 4}), {L2}, {F2}))
    local g = flow.nn.Graph.load(path)
    local x = flow.tensor({4, 9}, {dtype = flow.int64})
    assert.are.same(flow.sqrt(x):totable(), g(x):totable())
  end)

  it('re-infers view, reshape and expand results from the record and the input shape', function()
    local recs = {}
    for _, r in ipairs(rows) do recs[r.name] = r.attrs end
    local function load(op, shape, ins, outs)
      write(path, B.graph(op, B.record(ROOT, recs[op], {ndim = #shape, shape = shape}), ins, outs))
      return pcall(flow.nn.Graph.load, path)
    end
    local function refused(want, ...)
      local ok, err = load(...)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(want, 1, true), tostring(err))
    end
    assert.is_true((load('view', {-1, 16}, {X}, {{{6, 16}}})))
    assert.is_true((load('reshape', {6, -1}, {{{2, 3, 4, 4}, 'int64'}}, {{{6, 16}, 'int64'}})))
    assert.is_true((load('expand', {3, -1}, {{{1, 4}}}, {{{3, 4}}})))
    refused('node 1 (view): the recorded inputs do not fit: view: shape [5,-1] is invalid for input of size 96',
            'view', {5, -1}, {X}, {{{5, 19}}})
    refused('node 1 (reshape): result %1 is recorded as [96] float32, its inputs give [2,48] float32',
            'reshape', {2, 48}, {X}, {{{96}}})
    refused('reshape: only one dimension can be -1', 'reshape', {-1, -1}, {X}, {{{96}}})
    refused('node 1 (expand): the recorded inputs do not fit: expand: cannot expand [2,4] to [3,4] (dim 1: 2 to 3)',
            'expand', {3, 4}, {{{2, 4}}}, {{{3, 4}}})
    refused('result %1 is recorded as [3,4] int64, its inputs give [3,4] float32',
            'expand', {3, 4}, {{{1, 4}}}, {{{3, 4}, 'int64'}})
    write(path, B.graph('reshape', B.record(ROOT, recs.reshape, {ndim = 2, shape = {4, -1}}), {{{2, 6}}}, {{{4, 3}}}))
    local x = flow.randn(2, 6)
    assert.are.same(x:reshape(4, 3):totable(), flow.nn.Graph.load(path)(x):totable())
  end)

  it('re-infers transpose, permute and flatten results', function()
    local recs = {}
    for _, r in ipairs(rows) do recs[r.name] = r.attrs end
    local function load(op, fields, ins, outs)
      write(path, B.graph(op, B.record(ROOT, recs[op], fields), ins, outs))
      return pcall(flow.nn.Graph.load, path)
    end
    local function refused(want, ...)
      local ok, err = load(...)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(want, 1, true), tostring(err))
    end
    local X2 = {{2, 3, 4, 5}}
    assert.is_true((load('transpose', {a = 0, b = 3}, {X2}, {{{5, 3, 4, 2}}})))
    assert.is_true((load('permute', {n = 4, dims = {3, 2, 0, 1}}, {X2}, {{{5, 4, 2, 3}}})))
    assert.is_true((load('flatten', {a = 1, b = 3}, {X2}, {{{2, 60}}})))
    assert.is_true((load('flatten', {a = 0, b = 3}, {{{2, 3, 4, 5}, 'int64'}}, {{{120}, 'int64'}})))
    refused('node 1 (transpose): result %1 is recorded as [2,3,4,5] float32, its inputs give [5,3,4,2] float32',
            'transpose', {a = 0, b = 3}, {X2}, {X2})
    refused('node 1 (permute): result %1 is recorded as [5,4,3,2] float32, its inputs give [5,4,2,3] float32',
            'permute', {n = 4, dims = {3, 2, 0, 1}}, {X2}, {{{5, 4, 3, 2}}})
    refused('node 1 (flatten): result %1 is recorded as [120] float32, its inputs give [2,60] float32',
            'flatten', {a = 1, b = 3}, {X2}, {{{120}}})
    write(path, B.graph('transpose', B.record(ROOT, recs.transpose, {a = 0, b = 1}), {{{2, 3}}}, {{{3, 2}}}))
    local x = flow.randn(2, 3)
    assert.are.same(x:t():totable(), flow.nn.Graph.load(path)(x):totable())
  end)

  it('re-infers softmax and cumsum / cumprod results: floating inputs, integer sums in int64', function()
    local recs = {}
    for _, r in ipairs(rows) do recs[r.name] = r.attrs end
    local function load(op, fields, ins, outs)
      write(path, B.graph(op, B.record(ROOT, recs[op], fields), ins, outs))
      return pcall(flow.nn.Graph.load, path)
    end
    local function refused(want, ...)
      local ok, err = load(...)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(want, 1, true), tostring(err))
    end
    local I32 = {{2, 3}, 'int32'}
    assert.is_true((load('softmax', {dim = 1, flag = 1}, {X}, {X})))               -- log_softmax
    assert.is_true((load('cumulative', {dim = 1}, {I32}, {{{2, 3}, 'int64'}})))    -- cumsum of int32: int64
    assert.is_true((load('cumulative', {dim = 0, flag = 1}, {{{2, 3}, 'float64'}}, {{{2, 3}, 'float64'}})))
    refused('node 1 (softmax): the recorded inputs do not fit: softmax: expected a floating point input, '
            .. 'got integral dtype int32', 'softmax', {dim = 1}, {I32}, {I32})
    refused('node 1 (softmax): result %1 is recorded as [2,3,4] float32, its inputs give [2,3,4,4] float32',
            'softmax', {dim = 1}, {X}, {{{2, 3, 4}}})
    refused('node 1 (cumulative): result %1 is recorded as [2,3] int32, its inputs give [2,3] int64',
            'cumulative', {dim = 1}, {I32}, {I32})
    write(path, B.graph('softmax', B.record(ROOT, recs.softmax, {dim = 1}), {{{2, 5}}}, {{{2, 5}}}))
    local x = flow.randn(2, 5)
    assert.are.same(flow.softmax(x, 2):totable(), flow.nn.Graph.load(path)(x):totable())
  end)

  it('re-infers matmul, mm, bmm and addmm results: ranks, dtypes, inner dims, batch broadcast', function()
    local recs = {}
    for _, r in ipairs(rows) do recs[r.name] = r.attrs end
    local function load(op, ins, outs, fields)
      write(path, B.graph(op, B.record(ROOT, recs[op], fields), ins, outs))
      return pcall(flow.nn.Graph.load, path)
    end
    local function refused(want, ...)
      local ok, err = load(...)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(want, 1, true), tostring(err))
    end
    local A34, B45 = {{3, 4}}, {{4, 5}}
    assert.is_true((load('matmul', {A34, B45}, {{{3, 5}}})))
    assert.is_true((load('matmul', {{{4}}, B45}, {{{5}}})))                        -- vector @ matrix
    assert.is_true((load('matmul', {{{2, 1, 3, 4}}, {{6, 4, 5}}}, {{{2, 6, 3, 5}}})))   -- batch broadcast
    assert.is_true((load('bmm', {{{2, 3, 4}}, {{2, 4, 5}}}, {{{2, 3, 5}}})))
    assert.is_true((load('addmm', {{{5}}, A34, B45}, {{{3, 5}}}, {alpha = 1, beta = 1})))
    assert.is_true((load('mm', {A34, B45, {{3, 5}, 'float64'}}, {{{3, 5}, 'float64'}})))  -- output tensor
    refused('node 1 (matmul): result %2 is recorded as [3,4] float32, its inputs give [3,5] float32',
            'matmul', {A34, B45}, {{{3, 4}}})
    refused('node 1 (matmul): the recorded inputs do not fit: matmul: shapes [3,4] and [5,6] do not '
            .. 'match (4 vs 5)', 'matmul', {A34, {{5, 6}}}, {{{3, 6}}})
    refused('matmul: batch dims of shapes [2,3,4] and [3,4,5] do not broadcast (2 vs 3)',
            'matmul', {{{2, 3, 4}}, {{3, 4, 5}}}, {{{3, 3, 5}}})
    refused('node 1 (mm): the recorded inputs do not fit: mm: expected 2-D tensors, got shapes [4] and [4,5]',
            'mm', {{{4}}, B45}, {{{5}}})
    refused('bmm: batch sizes of shapes [2,3,4] and [3,4,5] do not match (2 vs 3)',
            'bmm', {{{2, 3, 4}}, {{3, 4, 5}}}, {{{2, 3, 5}}})
    refused('addmm: input of shape [4] does not broadcast to the product\'s shape [3,5]',
            'addmm', {{{4}}, A34, B45}, {{{3, 5}}}, {alpha = 1, beta = 1})
    refused('matmul: operands of dtypes float32 and float64', 'matmul', {A34, {{4, 5}, 'float64'}}, {{{3, 5}}})
    refused('result %2 is recorded as [3,5] float32, its inputs give [3,5] int64',
            'matmul', {{{3, 4}, 'int64'}, {{4, 5}, 'int64'}}, {{{3, 5}}})
    -- what loads computes the eager product
    write(path, B.graph('matmul', B.record(ROOT, recs.matmul, {}), {A34, B45}, {{{3, 5}}}))
    local g = flow.nn.Graph.load(path)
    local a, b = flow.randn(3, 4), flow.randn(4, 5)
    assert.are.same(flow.matmul(a, b):totable(), g(a, b):totable())
  end)

  it('the C host API refuses the same records with the same message', function()
    local C = flow._C.C
    local row
    for _, r in ipairs(rows) do if r.name == 'softmax' then row = r end end
    write(path, file_for(row, CASES.softmax, {dim = 9}))
    local g = ffi.new('of_graph*[1]')
    assert.are_not.equal(0, C.of_graph_load(path, g))
    local msg = ffi.string(C.of_last_error())
    assert.truthy(msg:find('node 1 (softmax): attrs.dim: 9 is out of range for a 4-d input', 1, true), msg)
    -- and the results re-inferred at load
    local mm
    for _, r in ipairs(rows) do if r.name == 'matmul' then mm = r end end
    write(path, B.graph('matmul', B.record(ROOT, mm.attrs, {}), {{{3, 4}}, {{4, 5}}}, {{{3, 4}}}))
    assert.are_not.equal(0, C.of_graph_load(path, g))
    msg = ffi.string(C.of_last_error())
    assert.truthy(msg:find('node 1 (matmul): result %2 is recorded as [3,4] float32, its inputs give [3,5] float32',
                           1, true), msg)
  end)
end)
