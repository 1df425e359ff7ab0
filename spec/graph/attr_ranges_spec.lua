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
  narrow = {ok = {dim = 1, a = 0, b = 1}, outs = {{{2, 1, 4, 4}}},
    bad = {{{dim = 9}, 'attrs.dim'}, {{b = -1}, 'attrs.length'}}},
  slice = {ok = {dim = 1, a = 0, b = 2, c = 1}, outs = {{{2, 2, 4, 4}}},
    bad = {{{c = 0}, 'attrs.step'}, {{dim = -9}, 'attrs.dim'}}},
  select = {ok = {dim = 1}, outs = {{{2, 4, 4}}}, bad = {{{dim = 4}, 'attrs.dim'}}},
  unsqueeze = {ok = {v = 0}, outs = {{{1, 2, 3, 4, 4}}}, bad = {{{v = 6}, 'attrs.dim'}}},
  squeeze = {ok = {v = 0}, bad = {{{v = 9}, 'attrs.dim'}}},
  flatten = {ok = {a = 1, b = 3}, outs = {{{2, 48}}}, bad = {{{b = 9}, 'attrs.dims'}}},
  contiguous = {bad = {{{v = 1}, 'attrs.v'}}},
  clone = {bad = {{{v = 1}, 'attrs.v'}}},
  detach = {bad = {{{v = 1}, 'attrs.v'}}},
  to = {ok = {v = 8}, outs = {{{2, 3, 4, 4}, 'float64'}}, bad = {{{v = 99}, 'attrs.dtype'}}},
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
  batch_norm_eval = {ins = {X, {{3}}, {{3}}, {{3}}, {{3}}}, ok = {eps = 1e-5, has_lo = 1},
                     bad = {{{has_lo = 2}, 'attrs.has_lo'}, {{eps = -1}, 'attrs.eps'}}},
  where = {ins = {{{2, 3, 4, 4}, 'bool'}, X, X}, outs = {X}, bad = {{{v = 1}, 'attrs.v'}}},
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
  dropout = {ok = {a = 0.5}, outs = {X, {{2, 3, 4, 4}, 'bool'}}, bad = {{{a = -0.5}, 'attrs.p'}, {{b = 1}, 'attrs.b'}}},
  randperm = {ins = {}, ok = {n = 3, dtype = 4}, outs = {{{3}, 'int64'}}, bad = {{{base = 7}, 'attrs.index_base'}}},
  conv = {ins = {X, {{5, 3, 3, 3}}, false}, ok = {nsp = 2, groups = 1}, outs = {{{2, 5, 2, 2}}},
          bad = {{{groups = 0}, 'attrs.groups'}, {{nsp = 4}, 'attrs.nsp'}}},
  conv_transpose = {ins = {X, {{3, 5, 3, 3}}, false}, ok = {nsp = 2, groups = 1}, outs = {{{2, 5, 6, 6}}},
                    bad = {{{has = 1, stride = {0, 1}}, 'attrs.stride[1]'}}},
  conv_weight_grad = {ins = {X, X, false}, ok = {nsp = 2, groups = 1, has = 8, extra = {1, 1}}, outs = {{{3, 3, 1, 1}}},
                      bad = {{{has = 4, dilation = {1, 0}}, 'attrs.dilation[2]'}}},
  quantized_linear = {ins = {{{3, 3}, 'uint8'}, {{3, 3}, 'int8'}, {{3}}, {{3}, 'int64'}, {{3}}},
                      ok = {out_dtype = 7, x_scale = 1, out_scale = 1}, outs = {M2},
                      bad = {{{x_scale = 0}, 'attrs.x_scale'}, {{out_dtype = 4}, 'attrs.out_dtype'}}},
  quantized_conv2d = {ins = {{X[1], 'uint8'}, {{5, 3, 3, 3}, 'int8'}, {{5}}, {{5}, 'int64'}, {{5}}},
                      ok = {out_dtype = 7, x_scale = 1, out_scale = 1, groups = 1, stride = {1, 1}, dilation = {1, 1}},
                      outs = {{{2, 5, 2, 2}}},
                      bad = {{{groups = 0}, 'attrs.groups'}, {{out_zp = 9999}, 'attrs.out_zero_point'}}},
  quantize_per_tensor = {ok = {out_dtype = flow.uint8.id, x_scale = 0.5, x_zp = 3}, outs = {{X[1], 'uint8'}},
                         bad = {{{x_scale = -1}, 'attrs.x_scale'}, {{out_dtype = flow.float32.id}, 'attrs.out_dtype'},
                                {{x_zp = 300}, 'attrs.x_zero_point'}}},
  dynamic_quantized_linear = {ins = {{{3, 3}}, {{3, 3}, 'int8'}, {{3}}, {{3}, 'int64'}, {{3}}}, ok = {v = 1},
                              outs = {M2}, bad = {{{v = 2}, 'attrs.reduce_range'}}},
  quantized_add = {ins = {{X[1], 'uint8'}, {X[1], 'int8'}},
                   ok = {out_dtype = flow.uint8.id, a_scale = 0.1, b_scale = 0.2, out_scale = 0.3, out_zp = 4},
                   outs = {{X[1], 'uint8'}},
                   bad = {{{b_scale = 0}, 'attrs.b_scale'}, {{a_zp = 300}, 'attrs.a_zero_point'},
                          {{out_dtype = flow.float32.id}, 'attrs.out_dtype'}, {{relu = 2}, 'attrs.relu'}}},
  quantized_max_pool2d = {ins = {{X[1], 'uint8'}}, ok = {groups = 2 * 65536 + 2, stride = {1, 1}, dilation = {1, 1}},
                          outs = {{{2, 3, 3, 3}, 'uint8'}},
                          bad = {{{groups = 0}, 'attrs.kernel'}, {{padding = {-1, 0}}, 'attrs.padding[1]'}}},
  max_pool = {ok = {nsp = 2, has = 1, kernel = {2, 2}}, outs = {{{2, 3, 2, 2}}, {{2, 3, 2, 2}, 'int64'}},
              bad = {{{ceil_mode = 2}, 'attrs.ceil_mode'}, {{kernel = {0, 2}}, 'attrs.kernel[1]'}}},
  avg_pool = {ok = {nsp = 2, has = 1, kernel = {2, 2}}, outs = {{{2, 3, 2, 2}}},
              bad = {{{cip = 3}, 'attrs.count_include_pad'}, {{divisor = -1}, 'attrs.divisor_override'}}},
  adaptive_avg_pool = {ok = {nsp = 2, has = 1, kernel = {1, 1}}, outs = {{{2, 3, 1, 1}}},
    bad = {{{nsp = 0}, 'attrs.nsp'}}},
  adaptive_max_pool = {ok = {nsp = 2, has = 1, kernel = {1, 1}}, outs = {{{2, 3, 1, 1}}, {{2, 3, 1, 1}, 'int64'}},
                       bad = {{{has = 64}, 'attrs.has'}}},
  batch_norm = {ins = {X, {{3}}, {{3}}, false, false}, ok = {eps = 1e-5},
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
  sgd_update = {ins = {X, X, X, {{2}, 'float64'}}, outs = {},
    bad = {{{momentum = -1}, 'attrs.momentum'}, {{nesterov = 5}, 'attrs.nesterov'}}},
  adam_update = {ins = {X, X, X, X, X, {{2}, 'float64'}}, ok = {beta1 = 0.9, beta2 = 0.999, eps = 1e-8}, outs = {},
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
  relu_max_pool = {ok = {kernel = {2, 2}, ['in'] = {4, 4}}, outs = {{{2, 3, 2, 2}}, {{2, 3, 2, 2}, 'int32'}},
                   bad = {{{kernel = {0, 2}}, 'attrs'}}},
  relu_max_pool_backward = {ins = {{{2, 3, 2, 2}}, {{2, 3, 2, 2}, 'int32'}}, ok = {kernel = {2, 2}, ['in'] = {4, 4}},
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

  local recs = {}
  for _, r in ipairs(rows) do recs[r.name] = r.attrs end
  -- loads a one-node graph of op with these record fields (pcall's results)
  local load_node = B.loader(ROOT, path)
  local refuser = B.refuser

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
    local function load(ins, outs, op) return load_node('binary', {op = op or 0}, ins, outs) end
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
    local function load(ins, outs, fields) return load_node('binary_scalar', fields, ins, outs) end
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
    write(path, B.graph('binary_scalar', B.record(ROOT, recs.binary_scalar, {op = 1, s = 10, reverse = 1}),
                        {{{3}}}, {{{3}}}))
    local g = flow.nn.Graph.load(path)
    assert.are.same({9, 8, 7}, g(flow.tensor({1, 2, 3})):totable())
  end)

  it('re-infers unary results: the dtype each op gives, the dtypes it refuses', function()
    local function load(op, ins, outs) return load_node('unary', {op = op}, ins, outs) end
    local refused = refuser(load)
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
    write(path, B.graph('unary', B.record(ROOT, recs.unary, {op = 4}), {L2}, {F2}))
    local g = flow.nn.Graph.load(path)
    local x = flow.tensor({4, 9}, {dtype = flow.int64})
    assert.are.same(flow.sqrt(x):totable(), g(x):totable())
  end)

  it('re-infers view, reshape and expand results from the record and the input shape', function()
    local function load(op, shape, ins, outs) return load_node(op, {ndim = #shape, shape = shape}, ins, outs) end
    local refused = refuser(load)
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
    local load = load_node
    local refused = refuser(load)
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

  it('re-infers narrow, slice, select, unsqueeze, squeeze, contiguous, clone, detach and to results', function()
    local load = load_node
    local refused = refuser(load)
    local X2 = {{2, 3, 4, 5}}
    -- valid records load: the results their bodies give
    assert.is_true((load('narrow', {dim = 3, a = 1, b = 3}, {X2}, {{{2, 3, 4, 3}}})))
    assert.is_true((load('slice', {dim = 2, a = 0, b = 4, c = 3}, {X2}, {{{2, 3, 2, 5}}})))
    assert.is_true((load('slice', {dim = 1, a = -2, b = 100, c = 1}, {X2}, {{{2, 2, 4, 5}}})))
    assert.is_true((load('select', {dim = 1, a = -1}, {X2}, {{{2, 4, 5}}})))
    assert.is_true((load('unsqueeze', {v = 4}, {X2}, {{{2, 3, 4, 5, 1}}})))
    assert.is_true((load('squeeze', {v = -100}, {{{1, 3, 1, 5}}}, {{{3, 5}}})))   -- all dims
    assert.is_true((load('squeeze', {v = 2}, {{{1, 3, 1, 5}}}, {{{1, 3, 5}}})))
    assert.is_true((load('to', {v = 4}, {X2}, {{{2, 3, 4, 5}, 'int64'}})))
    -- an edited recorded shape or dtype is refused, naming the node
    refused('node 1 (narrow): result %1 is recorded as [2,3,4,5] float32, its inputs give [2,3,4,3] float32',
            'narrow', {dim = 3, a = 1, b = 3}, {X2}, {X2})
    refused('node 1 (narrow): the recorded inputs do not fit: narrow: start 2 (1-based) and length 5 exceed dim 4',
            'narrow', {dim = 3, a = 1, b = 5}, {X2}, {{{2, 3, 4, 5}}})
    refused('node 1 (slice): result %1 is recorded as [2,3,4,5] float32, its inputs give [2,3,2,5] float32',
            'slice', {dim = 2, a = 0, b = 4, c = 3}, {X2}, {X2})
    refused('node 1 (select): result %1 is recorded as [2,3,4,5] float32, its inputs give [2,4,5] float32',
            'select', {dim = 1, a = 0}, {X2}, {X2})
    refused('node 1 (select): the recorded inputs do not fit: select: index 4 out of range for dim 2 of size 3',
            'select', {dim = 1, a = 3}, {X2}, {{{2, 4, 5}}})
    refused('node 1 (unsqueeze): result %1 is recorded as [2,3,4,5,1] float32, its inputs give [1,2,3,4,5] float32',
            'unsqueeze', {v = 0}, {X2}, {{{2, 3, 4, 5, 1}}})
    refused('node 1 (squeeze): result %1 is recorded as [3,1,5] float32, its inputs give [3,5] float32',
            'squeeze', {v = -100}, {{{1, 3, 1, 5}}}, {{{3, 1, 5}}})
    for _, op in ipairs({'contiguous', 'clone', 'detach'}) do
      assert.is_true((load(op, {}, {X2}, {X2})))
      refused(('node 1 (%s): result %%1 is recorded as [2,3,4,6] float32, its inputs give [2,3,4,5] float32')
              :format(op), op, {}, {X2}, {{{2, 3, 4, 6}}})
    end
    refused('node 1 (to): result %1 is recorded as [2,3,4,5] float32, its inputs give [2,3,4,5] int64',
            'to', {v = 4}, {X2}, {X2})
    -- what loads computes the eager result
    write(path, B.graph('slice', B.record(ROOT, recs.slice, {dim = 1, a = 0, b = 3, c = 2}), {{{2, 3}}}, {{{2, 2}}}))
    local x = flow.randn(2, 3)
    assert.are.same(x[{{}, {1, 3, 2}}]:totable(), flow.nn.Graph.load(path)(x):totable())
  end)

  it('re-infers batch, instance, group, layer and rms norm results and checks their parameters', function()
    local function load(op, fields, ins, outs) return load_node(op, merge({eps = 1e-5}, fields), ins, outs) end
    local refused = refuser(load)
    local C3, no = {{3}}, false
    assert.is_true((load('batch_norm', {}, {X, C3, C3, C3, C3}, {X})))
    assert.is_true((load('instance_norm', {flag = 1}, {X, no, no, C3, no}, {X})))
    assert.is_true((load('group_norm', {groups = 3}, {X, no, no, C3, C3}, {X})))
    assert.is_true((load('layer_norm', {groups = 2}, {X, no, no, {{4, 4}}, {{4, 4}}}, {X})))
    assert.is_true((load('rms_norm', {groups = 1}, {X, no, no, {{4}}, no}, {X})))
    for _, op in ipairs({'batch_norm', 'instance_norm', 'group_norm', 'layer_norm', 'rms_norm'}) do
      local ins = op == 'batch_norm' and {X, C3, C3, no, no} or {X, no, no, no, no}
      for _, bad in ipairs({{{2, 3, 4, 5}}, {{2, 3, 4, 4}, 'float64'}}) do
        local ok, err = load(op, {groups = 1}, ins, {bad})
        assert.is_false(ok)
        local want = ('is recorded as [%s] %s, its inputs give [2,3,4,4] float32'):format(
          table.concat(bad[1], ','), bad[2] or 'float32')
        assert.truthy(tostring(err):find(('node 1 (%s): result %%'):format(op), 1, true), tostring(err))
        assert.truthy(tostring(err):find(want, 1, true), tostring(err))
      end
    end
    refused('node 1 (batch_norm): the recorded inputs do not fit: batch_norm: running_var of shape [4] should '
            .. 'have 3 elements', 'batch_norm', {}, {X, C3, {{4}}, no, no}, {X})
    refused('batch_norm: running_mean and running_var are needed when not training',
            'batch_norm', {}, {X, no, no, no, no}, {X})
    refused('node 1 (group_norm): the recorded inputs do not fit: group_norm: expected a floating point input, '
            .. 'got int64', 'group_norm', {groups = 1}, {I64, no, no, no, no}, {I64})
    refused('node 1 (layer_norm): the recorded inputs do not fit: layer_norm: weight of shape [3] (float32) '
            .. 'should be floating point with the normalized shape', 'layer_norm', {groups = 1},
            {X, no, no, C3, no}, {X})
    write(path, B.graph('layer_norm', B.record(ROOT, recs.layer_norm, {eps = 1e-5, groups = 1}),
                        {{{2, 3}}, no, no, no, no}, {{{2, 3}}}))
    local x = flow.randn(2, 3)
    local want, got = flow.nn.functional.layer_norm(x, {3}):totable(), flow.nn.Graph.load(path)(x):totable()
    for i = 1, 2 do for j = 1, 3 do assert.is_true(math.abs(want[i][j] - got[i][j]) < 1e-5) end end
  end)

  it('re-infers clamp, leaky_relu, where and masked_fill results', function()
    local load = load_node
    local refused = refuser(load)
    local L2, M = {{2}, 'int64'}, {{4}, 'bool'}
    assert.is_true((load('clamp', {has_lo = 1, lo = 0}, {L2}, {L2})))
    assert.is_true((load('clamp', {has_hi = 1, hi = 0.5}, {L2}, {{{2}}})))       -- a fractional bound: float32
    assert.is_true((load('leaky_relu', {slope = 0.1}, {X}, {X})))
    assert.is_true((load('where', {}, {M, {{3, 1}}, {{4}, 'float64'}}, {{{3, 4}, 'float64'}})))
    assert.is_true((load('masked_fill', {value = 1}, {{{3, 4}}, M}, {{{3, 4}}})))
    refused('node 1 (clamp): result %1 is recorded as [2] int64, its inputs give [2] float32',
            'clamp', {has_hi = 1, hi = 0.5}, {L2}, {L2})
    refused('node 1 (clamp): result %1 is recorded as [3] int64, its inputs give [2] int64',
            'clamp', {has_lo = 1, lo = 0}, {L2}, {{{3}, 'int64'}})
    refused('node 1 (clamp): the recorded inputs do not fit: clamp: negative bound',
            'clamp', {has_lo = 1, lo = -1}, {{{2}, 'uint8'}}, {{{2}, 'uint8'}})
    refused('node 1 (leaky_relu): the recorded inputs do not fit: leaky_relu: not supported for dtype int64',
            'leaky_relu', {slope = 0.1}, {L2}, {L2})
    refused('node 1 (leaky_relu): result %1 is recorded as [2,3,4,5] float32, its inputs give [2,3,4,4] float32',
            'leaky_relu', {slope = 0.1}, {X}, {{{2, 3, 4, 5}}})
    refused('node 1 (where): result %3 is recorded as [3,4] float32, its inputs give [3,4] float64',
            'where', {}, {M, {{3, 1}}, {{4}, 'float64'}}, {{{3, 4}}})
    refused('node 1 (where): the recorded inputs do not fit: where: shapes [4] and [3,5] cannot be broadcast',
            'where', {}, {M, {{3, 5}}, {{4}}}, {{{3, 5}}})
    refused('node 1 (masked_fill): the recorded inputs do not fit: masked_fill: mask must be bool, got float32',
            'masked_fill', {value = 1}, {{{3, 4}}, {{4}}}, {{{3, 4}}})
    refused('node 1 (masked_fill): the recorded inputs do not fit: masked_fill: mask [2,4] must broadcast to '
            .. 'the input [4]', 'masked_fill', {value = 1}, {{{4}}, {{2, 4}, 'bool'}}, {{{4}}})
    refused('node 1 (masked_fill): result %2 is recorded as [3,5] float32, its inputs give [3,4] float32',
            'masked_fill', {value = 1}, {{{3, 4}}, M}, {{{3, 5}}})
    write(path, B.graph('clamp', B.record(ROOT, recs.clamp, {has_lo = 1, lo = 0}), {{{3}}}, {{{3}}}))
    local x = flow.tensor({-1, 0.5, 2})
    assert.are.same(x:clamp(0):totable(), flow.nn.Graph.load(path)(x):totable())
  end)

  it('re-infers reduce results: the kept dims, sums of integers in int64, mean of integers refused', function()
    local function load(fields, ins, outs) return load_node('reduce', merge({dtype = -1}, fields), ins, outs) end
    local refused = refuser(load)
    local SUM, MEAN = flow._C.C.OF_RED_SUM, flow._C.C.OF_RED_MEAN
    assert.is_true((load({op = SUM, ndims = 1, dims = {1}}, {X}, {{{2, 4, 4}}})))
    assert.is_true((load({op = SUM, ndims = 2, dims = {1, -1}, keepdim = 1}, {X}, {{{2, 1, 4, 1}}})))
    assert.is_true((load({op = SUM}, {I64}, {{{}, 'int64'}})))
    refused('node 1 (reduce): result %1 is recorded as [2,3,4] float32, its inputs give [2,4,4] float32',
            {op = SUM, ndims = 1, dims = {1}}, {X}, {{{2, 3, 4}}})
    refused('node 1 (reduce): result %1 is recorded as [] float32, its inputs give [] int64',
            {op = SUM}, {{{2, 3}, 'int32'}}, {S})
    refused('node 1 (reduce): the recorded inputs do not fit: mean(): could not infer output dtype',
            {op = MEAN}, {I64}, {{{}, 'int64'}})
    refused('node 1 (reduce): the recorded inputs do not fit: sum: dim 2 appears more than once',
            {op = SUM, ndims = 2, dims = {1, -3}}, {X}, {{{2, 4}}})
    write(path, B.graph('reduce', B.record(ROOT, recs.reduce, {op = MEAN, ndims = 1, dims = {0}, dtype = -1}),
                        {{{2, 3}}}, {{{3}}}))
    local x = flow.randn(2, 3)
    local want, got = x:mean(1):totable(), flow.nn.Graph.load(path)(x):totable()
    for i = 1, 3 do assert.is_true(math.abs(want[i] - got[i]) < 1e-6) end
  end)

  it('re-infers tril / triu, flip, roll and repeat results', function()
    local load = load_node
    local refused = refuser(load)
    assert.is_true((load('tri', {k = 1, upper = 1}, {X}, {X})))
    assert.is_true((load('flip', {n = 1, dims = {2}}, {I64}, {I64})))
    assert.is_true((load('roll', {n = 1, shifts = {1}, dims = {0}}, {X}, {X})))
    assert.is_true((load('repeat', {n = 5, shifts = {2, 1, 1, 2, 1}}, {X}, {{{2, 2, 3, 8, 4}}})))
    refused('node 1 (tri): attrs: triu / tril of a 1-d input', 'tri', {k = 0, upper = 1}, {{{4}}}, {{{4}}})
    refused('node 1 (tri): result %1 is recorded as [2,3,4,4] int64, its inputs give [2,3,4,4] float32',
            'tri', {k = 0}, {X}, {I64})
    refused('node 1 (flip): result %1 is recorded as [2,3,4,5] int64, its inputs give [2,3,4,4] int64',
            'flip', {n = 1, dims = {2}}, {I64}, {{{2, 3, 4, 5}, 'int64'}})
    refused('node 1 (roll): result %1 is recorded as [96] float32, its inputs give [2,3,4,4] float32',
            'roll', {n = 0, shifts = {3}}, {X}, {{{96}}})
    refused('node 1 (repeat): result %1 is recorded as [2,3,8,4] float32, its inputs give [2,3,8,8] float32',
            'repeat', {n = 4, shifts = {1, 1, 2, 2}}, {X}, {{{2, 3, 8, 4}}})
    refused('node 1 (repeat): the recorded inputs do not fit: repeat: number of repeats (2) cannot be smaller',
            'repeat', {n = 2, shifts = {1, 1}}, {X}, {X})
    write(path, B.graph('repeat', B.record(ROOT, recs['repeat'], {n = 2, shifts = {2, 1}}), {{{3}}}, {{{2, 3}}}))
    local x = flow.tensor({1, 2, 3})
    assert.are.same(x["repeat"](x, 2, 1):totable(), flow.nn.Graph.load(path)(x):totable())
  end)

  it('checks sgd_update and adam_update operands at load: the parameter, grad, buffers and hyper', function()
    local function load(op, fields, ins) return load_node(op, fields, ins, {}) end
    local refused = refuser(load)
    local H, no, W = {{2}, 'float64'}, false, {{4, 3}}
    local adam = {beta1 = 0.9, beta2 = 0.999, eps = 1e-8}
    assert.is_true((load('sgd_update', {momentum = 0.9}, {W, W, W, H})))
    assert.is_true((load('sgd_update', {}, {W, W, no, H})))
    assert.is_true((load('adam_update', adam, {W, W, W, W, no, H})))
    refused('node 1 (sgd_update): the recorded inputs do not fit: sgd_update: grad [4,4] (float32) must be '
            .. 'contiguous and match the parameter [4,3] (float32)', 'sgd_update', {}, {W, {{4, 4}}, no, H})
    refused('sgd_update: momentum buffer [3,4] (float32) must be contiguous and match the parameter [4,3]',
            'sgd_update', {momentum = 0.9}, {W, W, {{3, 4}}, H})
    refused('node 1 (sgd_update): the recorded inputs do not fit: sgd_update: hyper must be a contiguous float64',
            'sgd_update', {}, {W, W, no, S})
    refused('node 1 (adam_update): the recorded inputs do not fit: adam_update: exp_avg_sq [4,3] (float64) must '
            .. 'be contiguous and match the parameter [4,3] (float32)', 'adam_update', adam,
            {W, W, W, {{4, 3}, 'float64'}, no, H})
    refused('adam_update: the parameter must be a contiguous float32 or float64 tensor, got [4,3] int64',
            'adam_update', adam, {{{4, 3}, 'int64'}, {{4, 3}, 'int64'}, W, W, no, H})
  end)

  it('re-infers softmax and cumsum / cumprod results: floating inputs, integer sums in int64', function()
    local load = load_node
    local refused = refuser(load)
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
    local function load(op, ins, outs, fields) return load_node(op, fields, ins, outs) end
    local refused = refuser(load)
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
    write(path, B.graph('matmul', B.record(ROOT, recs.matmul, {}), {{{3, 4}}, {{4, 5}}}, {{{3, 4}}}))
    assert.are_not.equal(0, C.of_graph_load(path, g))
    msg = ffi.string(C.of_last_error())
    assert.truthy(msg:find('node 1 (matmul): result %2 is recorded as [3,4] float32, its inputs give [3,5] float32',
                           1, true), msg)
  end)
end)
