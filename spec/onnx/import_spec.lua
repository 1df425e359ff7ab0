-- flow.onnx.load / flow.onnx.run (lua/oneflow/onnx/import.lua) and the model
-- reader (lua/oneflow/onnx/reader.lua): round trips through our exporter,
-- fine-tuning and nn.Graph on an imported model, subgraphs, bad input (corrupt
-- and truncated bytes, cycles, unknown ops, wrong inputs, huge dims, external
-- data leaving the folder), a bounded subset of ONNX's conformance suite when
-- the onnx 1.17 node cases are in the cache (tools/onnx_conformance.sh fetches
-- them), and torchvision's ResNet-50 (exported by Debian's python3-torch)
-- against onnxruntime when both are there.
local flow = require 'oneflow'
local ffi = require 'ffi'
local H = require 'spec.helpers'
local pb = require 'oneflow.onnx.protobuf'
local reader = require 'oneflow.onnx.reader'
local I = require 'oneflow.onnx.import'

local nn = flow.nn

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end
local function f32(...) return ffi.string(ffi.new('float[?]', select('#', ...), ...), 4 * select('#', ...)) end
local function vi(name, elem, dims) return {name = name, elem_type = elem, dims = dims} end

-- a one-node model: op(x, w) with x [2, 3] float input and w an initializer
local function model(nodes, extra)
  local m = {ir_version = 8, opsets = {{domain = '', version = 17}}, producer_name = 'spec',
             graph = {name = 'g', nodes = nodes, inputs = {vi('x', 1, {2, 3})}, outputs = {vi('y', 1, {2, 3})},
                      initializers = {{name = 'w', data_type = 1, dims = {3}, raw = f32(1, 2, 3)}}}}
  for k, v in pairs(extra or {}) do m.graph[k] = v end
  return pb.tostring(pb.model(m))
end

describe('onnx reader', function()
  local mlp
  setup(function()
    flow.manual_seed(1)
    local d = H.tmpdir()
    flow.onnx.export(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), flow.randn(3, 4), d .. '/m.onnx')
    local f = io.open(d .. '/m.onnx', 'rb')
    mlp = f:read('*a')
    f:close()
  end)
  teardown(H.remove_tmpdirs)

  it('decodes what the encoder writes, subgraphs included', function()
    local m = reader.model(mlp)
    assert.same({'Gemm', 'Relu', 'Gemm'}, reader.op_types(m.graph))
    assert.same({8, 4}, reader.inits(m.graph)['0.weight'].dims)
    local g = {name = 'sub', nodes = {{op_type = 'Neg', inputs = {'x'}, outputs = {'n'}}}, inputs = {},
               outputs = {vi('n', 1, {2, 3})}}
    local s = model({{op_type = 'If', inputs = {'c'}, outputs = {'y'},
                      attributes = {{name = 'then_branch', type = 'g', value = g},
                                    {name = 'else_branch', type = 'g', value = g}}}})
    local d = reader.model(s)
    assert.equal(5, d.graph.nodes[1].attrs.then_branch.type)
    assert.same({'Neg'}, reader.op_types(d.graph.nodes[1].attrs.then_branch.g))
  end)

  it('gives a clear error for every truncation and many corruptions, never a crash', function()
    for n = 0, #mlp - 1 do
      -- a cut at a field boundary can leave a valid (smaller) model
      local ok, err = pcall(I.load_bytes, mlp:sub(1, n))
      assert(ok or tostring(err):match('^onnx: '), ('truncated at %d: %s'):format(n, tostring(err)))
    end
    local rng = 12345
    local function rand(k) rng = (rng * 1103515245 + 12345) % 2147483648 return rng % k end
    for _ = 1, 400 do
      local b = {mlp:byte(1, -1)}
      for _ = 1, 1 + rand(4) do b[1 + rand(#b)] = rand(256) end
      local ok, err = pcall(I.load_bytes, string.char(unpack(b)))
      assert(ok or tostring(err):match('^onnx: '), tostring(err))
    end
    H.raises(function() reader.model('\8\255\255\255\255\255\255\255\255\255\255\1') end,
             'varint longer than 10 bytes')
    H.raises(function() reader.model('\58\200\1\1') end, 'declares 200 bytes, 1 left')
    H.raises(function() reader.model('') end, 'model has no graph')
  end)

  it('reads NaNs with any payload as NaN (LuaJIT would take some for tagged objects)', function()
    local nan_bits = ffi.string(ffi.new('uint32_t[2]', 0xffa03039, 0x7fc00001), 8)
    local m = {ir_version = 8, opsets = {{domain = '', version = 17}},
               graph = {name = 'g', inputs = {}, outputs = {vi('y', 1, {2})},
                        initializers = {{name = 'w', data_type = 1, dims = {2}, raw = nan_bits}},
                        nodes = {{op_type = 'Identity', inputs = {'w'}, outputs = {'y'},
                                  attributes = {{name = 'alpha', type = 'f', value = 1234.5}}}}}}
    local bytes = pb.tostring(pb.model(m))
    -- the attribute's float too: patch its 4 bytes (1234.5f) to a NaN with a payload
    local from, to = ffi.string(ffi.new('float[1]', 1234.5), 4), ffi.string(ffi.new('uint32_t[1]', 0xffa03039), 4)
    local at = bytes:find(from, 1, true)
    bytes = bytes:sub(1, at - 1) .. to .. bytes:sub(at + 4)
    local d = reader.model(bytes)
    local a = d.graph.nodes[1].attrs.alpha.f
    assert.is_true(type(a) == 'number' and a ~= a)
    for _ = 1, 3 do
      local y = I.load_bytes(bytes)()
      collectgarbage()
      assert.same({true, true}, y:isnan():totable())
    end
  end)

  it('refuses huge declared dims, and data that does not match the dims', function()
    local m = {ir_version = 8, opsets = {{domain = '', version = 17}},
               graph = {name = 'g', nodes = {}, inputs = {}, outputs = {},
                        initializers = {{name = 'big', data_type = 1, dims = {2 ^ 30, 2 ^ 30, 4}, raw = f32(1)}}}}
    H.raises(function() I.load_bytes(pb.tostring(pb.model(m))) end, "tensor 'big'", 'more than a tensor can hold')
    m.graph.initializers[1].dims = {2, 2}
    H.raises(function() I.load_bytes(pb.tostring(pb.model(m))) end, 'raw_data has 4 bytes', 'need 16')
  end)
end)

describe('flow.onnx.load', function()
  local dir
  setup(function() dir = H.tmpdir() end)
  teardown(H.remove_tmpdirs)

  it('round-trips our export, fine-tunes, runs in nn.Graph and exports again', function()
    flow.manual_seed(0)
    local net = nn.Sequential(nn.Conv2d(1, 4, 3, {padding = 1}), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(4 * 4 * 4, 3), nn.LogSoftmax(2))
    net:eval()
    local x = flow.randn(5, 1, 8, 8)
    flow.onnx.export(net, x, dir .. '/net.onnx', {dynamic_axes = {input = {1}, output = {1}}})
    local imp = flow.onnx.load(dir .. '/net.onnx')
    H.close(imp(x), net(x), 1e-5)
    H.close(flow.onnx.run(dir .. '/net.onnx', {x:narrow(1, 1, 2)}), net(x:narrow(1, 1, 2)), 1e-5)
    -- named parameters keep the exporter's names
    local names = {}
    for name, p in imp:named_parameters() do names[name] = p end
    assert.truthy(names['5.weight'])
    assert.is_true(names['5.weight'].requires_grad)
    -- fine-tune a few steps
    imp:train()
    local target = flow.tensor({1, 2, 3, 1, 2}, {dtype = flow.int64})
    local opt = flow.optim.SGD(imp:parameters(), {lr = 0.1})
    local first, last
    for _ = 1, 5 do
      opt:zero_grad()
      local loss = flow.nn.functional.nll_loss(imp(x), target)
      loss:backward()
      opt:step()
      first = first or loss:item()
      last = loss:item()
    end
    assert.is_true(last < first, ('loss %g -> %g'):format(first, last))
    imp:eval()
    local tuned = imp(x)
    assert.is_true((tuned - net(x)):abs():max():item() > 1e-4)
    -- nn.Graph wraps the imported module
    local G = flow.nn.Graph:subclass('ImportedGraph')
    function G:__init(m) flow.nn.Graph.__init(self); self.m = m end
    function G:build(t) return self.m(t) end
    local g = G(imp)
    H.close(g(x), tuned, 1e-5)
    H.close(g(x), tuned, 1e-5)
    -- and exports again: the re-imported model computes the fine-tuned function
    flow.onnx.export(imp, x, dir .. '/tuned.onnx')
    H.close(flow.onnx.load(dir .. '/tuned.onnx')(x), tuned, 1e-5)
    -- state dicts carry over between the import and the original module
    -- (the import has the exporter's shape constant, the original BatchNorm's step count)
    local r = net:load_state_dict(imp:state_dict(), {strict = false})
    assert.same({'1.num_batches_tracked'}, r.missing_keys)
    assert.same({'ints'}, r.unexpected_keys)
    H.close(net(x), tuned, 1e-5)
  end)

  it('traces shape arithmetic (Shape, Gather, Unsqueeze, Concat, Reshape, Expand) in nn.Graph', function()
    local i64 = function(...) return ffi.string(ffi.new('int64_t[?]', select('#', ...), ...), 8 * select('#', ...)) end
    local m = {ir_version = 8, opsets = {{domain = '', version = 17}},
               graph = {name = 'g', inputs = {vi('x', 1, {'n', 6})}, outputs = {vi('y', 1, {'n', 2, 3})},
                        initializers = {{name = 'zero', data_type = 7, dims = {}, raw = i64(0)},
                                        {name = 'tail', data_type = 7, dims = {2}, raw = i64(2, 3)},
                                        {name = 'axes', data_type = 7, dims = {1}, raw = i64(0)}},
                        nodes = {{op_type = 'Shape', inputs = {'x'}, outputs = {'s'}},
                                 {op_type = 'Gather', inputs = {'s', 'zero'}, outputs = {'n0'}},
                                 {op_type = 'Unsqueeze', inputs = {'n0', 'axes'}, outputs = {'n1'}},
                                 {op_type = 'Concat', inputs = {'n1', 'tail'}, outputs = {'shape'},
                                  attributes = {{name = 'axis', type = 'i', value = 0}}},
                                 {op_type = 'Reshape', inputs = {'x', 'shape'}, outputs = {'r'}},
                                 {op_type = 'Expand', inputs = {'r', 'shape'}, outputs = {'y'}}}}}
    local net = I.load_bytes(pb.tostring(pb.model(m)))
    local G = flow.nn.Graph:subclass('ShapeGraph')
    function G:__init(mod) flow.nn.Graph.__init(self); self.mod = mod end
    function G:build(t) return self.mod(t) end
    local g = G(net)
    for _, n in ipairs({3, 5, 3}) do
      local x = flow.randn(n, 6)
      H.close(g(x), x:reshape(n, 2, 3))
    end
  end)

  it('traces Slice bounds computed by Mod and Reshape of constants (PyTorch 2.x ViT exports) in nn.Graph', function()
    local i64 = function(...) return ffi.string(ffi.new('int64_t[?]', select('#', ...), ...), 8 * select('#', ...)) end
    for _, c in ipairs({{fmod = 0, a = -7, b = 5, want = 3}, {fmod = 1, a = 7, b = -5, want = 2}}) do
      local m = {ir_version = 8, opsets = {{domain = '', version = 17}},
                 graph = {name = 'g', inputs = {vi('x', 1, {'n', 6})}, outputs = {vi('y', 1, {'n', c.want})},
                          initializers = {{name = 'a', data_type = 7, dims = {}, raw = i64(c.a)},
                                          {name = 'b', data_type = 7, dims = {}, raw = i64(c.b)},
                                          {name = 'one', data_type = 7, dims = {1}, raw = i64(1)},
                                          {name = 'st', data_type = 7, dims = {1}, raw = i64(0)}},
                          nodes = {{op_type = 'Mod', inputs = {'a', 'b'}, outputs = {'m'},
                                    attributes = {{name = 'fmod', type = 'i', value = c.fmod}}},
                                   {op_type = 'Reshape', inputs = {'m', 'one'}, outputs = {'en'}},
                                   {op_type = 'Slice', inputs = {'x', 'st', 'en', 'one'}, outputs = {'y'}}}}}
      local net = I.load_bytes(pb.tostring(pb.model(m)))
      local G = flow.nn.Graph:subclass('ModSliceGraph')
      function G:__init(mod) flow.nn.Graph.__init(self); self.mod = mod end
      function G:build(t) return self.mod(t) end
      local g = G(net)
      local x = flow.randn(3, 6)
      H.close(g(x), x:narrow(2, 1, c.want), 0, 'fmod ' .. c.fmod)
    end
  end)

  it('runs If and Loop subgraphs reading the enclosing scope', function()
    local net = flow.onnx.load('tools/fuzz/corpus/onnx/control.onnx')
    local y, z = net(flow.tensor({2}), flow.tensor(true))
    H.close(y, {1})
    H.close(z, {6})
    y = net(flow.tensor({2}), flow.tensor(false))
    H.close(y, {-2})
  end)

  it('refuses cycles, unknown ops, missing values and wrong inputs with clear errors', function()
    local cyc = model({{op_type = 'Add', inputs = {'x', 'b'}, outputs = {'a'}},
                       {op_type = 'Add', inputs = {'a', 'w'}, outputs = {'b'}},
                       {op_type = 'Identity', inputs = {'a'}, outputs = {'y'}}})
    H.raises(function() I.load_bytes(cyc) end, 'the graph has a cycle', "Add ''")
    local unknown = model({{op_type = 'FancyOp', inputs = {'x'}, outputs = {'y'}}})
    H.raises(function() I.load_bytes(unknown)(flow.randn(2, 3)) end, 'unsupported: op FancyOp')
    local other = model({{op_type = 'Relu', domain = 'com.example', inputs = {'x'}, outputs = {'y'}}})
    H.raises(function() I.load_bytes(other)(flow.randn(2, 3)) end, "domain 'com.example'")
    local missing = model({{op_type = 'Add', inputs = {'x', 'nope'}, outputs = {'y'}}})
    H.raises(function() I.load_bytes(missing) end, "reads 'nope'")
    local ok = I.load_bytes(model({{op_type = 'Mul', inputs = {'x', 'w'}, outputs = {'y'}}}))
    H.close(ok(flow.ones(2, 3)), {{1, 2, 3}, {1, 2, 3}})
    H.raises(function() ok(flow.ones(2, 4)) end, "input 'x' expects shape [2,3], got [2,4]")
    H.raises(function() ok(flow.ones(2, 3, {dtype = flow.int64})) end, "input 'x' expects float32, got int64")
    H.raises(function() ok() end, "missing input 1 ('x')")
    H.close(ok({x = flow.ones(2, 3)}), {{1, 2, 3}, {1, 2, 3}})
    H.raises(function() ok({z = flow.ones(2, 3)}) end, "missing input 1 ('x')")
  end)

  it('imports int16, uint16, uint32 and uint64 tensors, raw and typed, and exports them', function()
    local function xor_model(elem, init)
      local m = {ir_version = 8, opsets = {{domain = '', version = 18}},
                 graph = {name = 'g', nodes = {{op_type = 'BitwiseXor', inputs = {'x', 'w'}, outputs = {'y'}}},
                          inputs = {vi('x', elem, {3})}, outputs = {vi('y', elem, {3})},
                          initializers = {init}}}
      return reader.model(pb.tostring(pb.model(m)))
    end
    -- raw int16 data
    local dm = xor_model(5, {name = 'w', data_type = 5, dims = {3},
                             raw = ffi.string(ffi.new('int16_t[3]', {-1, 2, 300}), 6)})
    local y = I.OnnxModule(dm)(flow.ones(3, {dtype = flow.int16}))
    assert.equal(flow.int16, y.dtype)
    assert.same({-2, 3, 301}, y:totable())
    -- typed fields: uint16 in int32_data, uint32 and uint64 in uint64_data
    local function typed(elem, field, values)
      local m = xor_model(elem, {name = 'w', data_type = elem, dims = {3}})
      local t = m.graph.initializers[1]
      t.raw, t[field] = nil, values
      return I.OnnxModule(m)
    end
    local ones = function(name) return flow.ones(3, {dtype = name}) end
    assert.same({65534, 6, 1}, typed(4, 'int32_data', {65535, 7, 0})(ones('uint16')):totable())
    assert.same({4294967294, 9, 0}, typed(12, 'uint64_data', {4294967295, 8, 1})(ones('uint32')):totable())
    local u = typed(13, 'uint64_data', {ffi.new('int64_t', -1), 2, 2 ^ 40})(ones('uint64'))
    assert.equal(flow.uint64, u.dtype)
    assert.matches('18446744073709551614,%s+3,%s+1099511627777%]', tostring(u))
    H.raises(function() typed(12, 'uint64_data', {1, 2, 3})(ones('int32')) end,
             "input 'x' expects uint32, got int32")
    -- our exporter writes them, and the import reads them back
    local d = H.tmpdir()
    local Net = nn.Module:subclass('IntNet')
    function Net.forward(_, x) return x * x + x end
    for _, name in ipairs({'int16', 'uint16', 'uint32', 'uint64'}) do
      local x = flow.tensor({1, 2, 200}, {dtype = name})
      flow.onnx.export(Net(), x, d .. '/' .. name .. '.onnx')
      local back = flow.onnx.load(d .. '/' .. name .. '.onnx')(x)
      assert.equal(name, back.dtype.name)
      assert.same((x * x + x):totable(), back:totable())
    end
  end)

  it('runs TfIdfVectorizer in TF, IDF and TFIDF modes, with skips and batches', function()
    -- pool: unigrams 1, 2, 3 and the bigram (1, 2), at outputs 0..3; the values
    -- below are what onnxruntime 1.32 and onnx's reference evaluator give
    local function tfidf(mode, skip, weights, xdims)
      local attrs = {{name = 'min_gram_length', type = 'i', value = 1},
                     {name = 'max_gram_length', type = 'i', value = 2},
                     {name = 'max_skip_count', type = 'i', value = skip},
                     {name = 'mode', type = 's', value = mode},
                     {name = 'ngram_counts', type = 'ints', value = {0, 3}},
                     {name = 'ngram_indexes', type = 'ints', value = {0, 1, 2, 3}},
                     {name = 'pool_int64s', type = 'ints', value = {1, 2, 3, 1, 2}}}
      if weights then attrs[#attrs + 1] = {name = 'weights', type = 'floats', value = weights} end
      local m = {ir_version = 8, opsets = {{domain = '', version = 17}},
                 graph = {name = 'g', nodes = {{op_type = 'TfIdfVectorizer', inputs = {'x'}, outputs = {'y'},
                                                attributes = attrs}},
                          inputs = {vi('x', 7, xdims)}, outputs = {vi('y', 1, false)}, initializers = {}}}
      return I.load_bytes(pb.tostring(pb.model(m)))
    end
    local x = flow.tensor({1, 2, 1, 2}, {dtype = flow.int64})
    assert.same({2, 2, 0, 2}, tfidf('TF', 0, nil, {4})(x):totable())
    assert.same({0.5, 1, 0, 4}, tfidf('IDF', 0, {0.5, 1, 2, 4}, {4})(x):totable())
    assert.same({1, 1, 0, 1}, tfidf('IDF', 0, nil, {4})(x):totable())
    assert.same({1, 2, 0, 8}, tfidf('TFIDF', 0, {0.5, 1, 2, 4}, {4})(x):totable())
    -- (1, _, 2) is the bigram (1, 2) at skip 1; unigrams still count once
    local y = flow.tensor({1, 3, 2}, {dtype = flow.int64})
    assert.same({1, 1, 1, 0}, tfidf('TF', 0, nil, {3})(y):totable())
    assert.same({1, 1, 1, 1}, tfidf('TF', 1, nil, {3})(y):totable())
    local b = flow.tensor({{1, 2, 1, 2}, {3, 3, 0, 0}}, {dtype = flow.int64})
    local yb = tfidf('TF', 0, nil, {2, 4})(b)
    assert.equal(flow.float32, yb.dtype)
    assert.same({{2, 2, 0, 2}, {0, 0, 2, 0}}, yb:totable())
  end)

  it('builds MelWeightMatrix as onnxruntime and the reference evaluator do', function()
    local function scalar_vi(name, elem) return vi(name, elem, {}) end
    local m = {ir_version = 8, opsets = {{domain = '', version = 17}},
               graph = {name = 'g', nodes = {{op_type = 'MelWeightMatrix', inputs = {'a', 'b', 'c', 'd', 'e'},
                                              outputs = {'y'}}},
                        inputs = {scalar_vi('a', 7), scalar_vi('b', 7), scalar_vi('c', 7), scalar_vi('d', 1),
                                  scalar_vi('e', 1)},
                        outputs = {vi('y', 1, false)}, initializers = {}}}
    local net = I.load_bytes(pb.tostring(pb.model(m)))
    local i64 = function(v) return flow.tensor(v, {dtype = flow.int64}) end
    local y = net(i64(3), i64(32), i64(8000), flow.tensor(0), flow.tensor(4000))
    -- onnxruntime 1.32 and onnx's ReferenceEvaluator give these 17 x 3 weights
    local want = {{0, 0, 0}, {1, 0, 0}, {0.5, 0.5, 0}, {0, 1, 0}, {0, 2 / 3, 1 / 3}, {0, 1 / 3, 2 / 3},
                  {0, 0, 1}, {0, 0, 0.75}, {0, 0, 0.5}, {0, 0, 0.25}}
    for _ = 11, 17 do want[#want + 1] = {0, 0, 0} end
    assert.equal(flow.float32, y.dtype)
    H.close(y, want, 1e-7)
    H.raises(function() net(i64(3), i64(32), i64(8000), flow.tensor(0), flow.tensor(9000)) end,
             'MelWeightMatrix', 'outside the 17 spectrogram bins')
  end)

  it('decodes PNG, JPEG, PPM and BMP streams in ImageDecoder, and refuses corrupt ones', function()
    local function decoder(fmt)
      local m = {ir_version = 8, opsets = {{domain = '', version = 20}},
                 graph = {name = 'g', nodes = {{op_type = 'ImageDecoder', inputs = {'x'}, outputs = {'y'},
                                                attributes = {{name = 'pixel_format', type = 's', value = fmt}}}},
                          inputs = {vi('x', 2, {false})}, outputs = {vi('y', 2, false)}, initializers = {}}}
      return I.load_bytes(pb.tostring(pb.model(m)))
    end
    local function u8(str)
      -- (this was from_blob over ffi.new('uint8_t[?]', #str, str): a string
      -- initializer also copies the terminating zero, one byte past the
      -- array onto LuaJIT's heap, and the process crashed at exit)
      return flow.tensor({str:byte(1, -1)}, {dtype = flow.uint8})
    end
    -- a 2x2 image: red, green / blue, white
    local rgb = {{{255, 0, 0}, {0, 255, 0}}, {{0, 0, 255}, {255, 255, 255}}}
    local ppm = u8('P6\n# two by two\n2 2\n255\n' .. string.char(255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255))
    local function le32(v) return string.char(v % 256, math.floor(v / 256) % 256, 0, 0) end
    -- bottom-up rows of BGR pixels, each padded to 8 bytes
    local pixels = string.char(255, 0, 0, 255, 255, 255, 0, 0) .. string.char(0, 0, 255, 0, 255, 0, 0, 0)
    local bmp_str = 'BM' .. le32(54 + #pixels) .. le32(0) .. le32(54) .. le32(40) .. le32(2) .. le32(2)
                    .. string.char(1, 0, 24, 0) .. le32(0) .. le32(#pixels) .. le32(0) .. le32(0) .. le32(0)
                    .. le32(0) .. pixels
    local bmp = u8(bmp_str)
    local vio = require 'flowvision.io'
    local png = vio.encode_png(flow.tensor(rgb, {dtype = flow.uint8}):permute(3, 1, 2))
    for _, stream in ipairs({ppm, bmp, png}) do
      assert.same(rgb, decoder('RGB')(stream):totable())
      local bgr = decoder('BGR')(stream):totable()
      assert.same({0, 0, 255}, bgr[1][1])
      -- Pillow's convert('L'): (19595 R + 38470 G + 7471 B + 32768) >> 16
      assert.same({{{76}, {150}}, {{29}, {255}}}, decoder('Grayscale')(stream):totable())
    end
    if vio.supported('jpeg') then
      local jpg = vio.encode_jpeg(flow.full({3, 8, 8}, 128, {dtype = flow.uint8}), {quality = 95})
      local y = decoder('RGB')(jpg)
      assert.same({8, 8, 3}, y:size():totable())
      assert.is_true((y:to(flow.int64) - 128):abs():max():item() <= 2)
    end
    H.raises(function() decoder('RGB')(u8(bmp_str:sub(1, 60))) end, 'ImageDecoder', 'does not fit')
    H.raises(function() decoder('RGB')(u8('P6\n2 2\n255\n' .. 'abc')) end, 'ImageDecoder', 'does not fit')
    H.raises(function() decoder('RGB')(u8('P6\nxx')) end, 'ImageDecoder', 'corrupt PNM header')
    H.raises(function() decoder('RGB')(u8('GIF89a')) end, 'unsupported', 'ImageDecoder')
    H.raises(function() decoder('RGB')(png:narrow(1, 1, 20)) end, 'ImageDecoder')
    H.raises(function() decoder('HSV')(ppm) end, "pixel_format 'HSV'")
    -- random damage to the PPM and BMP headers and data: an error or an image, never a crash
    math.randomseed(7)
    local dec = decoder('RGB')
    local ppm_str = 'P6\n2 2\n255\n' .. string.char(255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255)
    for _ = 1, 400 do
      for _, str in ipairs({ppm_str, bmp_str}) do
        local q = math.random(1, #str)
        local bad = str:sub(1, q - 1) .. string.char(math.random(0, 255)) .. str:sub(q + 1)
        if math.random(1, 4) == 1 then bad = bad:sub(1, math.random(2, #bad)) end
        local ok, err = pcall(dec, u8(bad))
        if not ok then assert.matches('ImageDecoder', tostring(err)) end
      end
    end
  end)

  it('runs Col2Im for 3-d images and asymmetric pads as fold does', function()
    local function col2im(img, block, attrs)
      local consts = {{name = 'img', data_type = 7, dims = {#img},
                       raw = ffi.string(ffi.new('int64_t[?]', #img, img), 8 * #img)},
                      {name = 'blk', data_type = 7, dims = {#block},
                       raw = ffi.string(ffi.new('int64_t[?]', #block, block), 8 * #block)}}
      local m = {ir_version = 8, opsets = {{domain = '', version = 18}},
                 graph = {name = 'g', nodes = {{op_type = 'Col2Im', inputs = {'x', 'img', 'blk'}, outputs = {'y'},
                                                attributes = attrs}},
                          inputs = {vi('x', 1, false)}, outputs = {vi('y', 1, false)}, initializers = consts}}
      return I.load_bytes(pb.tostring(pb.model(m)))
    end
    local F = flow.nn.functional
    flow.manual_seed(3)
    -- pads (top 0, left 1, bottom 1, right 0) on a 4x5 image, 2x2 blocks, stride 1
    local x = flow.randn(2, 3 * 4, 4 * 5)
    local y = col2im({4, 5}, {2, 2}, {{name = 'pads', type = 'ints', value = {0, 1, 1, 0}}})(x)
    local want = F.fold(x, {5, 6}, {2, 2}):narrow(3, 1, 4):narrow(4, 2, 5)
    H.close(y, want, 1e-5)
    -- a 3-d image [1, 5, 6] with blocks [1, 2, 3], strides (1, 2, 1) and dilation 2 on the last dim
    local x3 = flow.randn(1, 2 * 6, 2 * 2)
    local y3 = col2im({1, 5, 6}, {1, 2, 3}, {{name = 'strides', type = 'ints', value = {1, 2, 1}},
                                              {name = 'dilations', type = 'ints', value = {1, 1, 2}}})(x3)
    local want3 = F.fold(x3, {5, 6}, {2, 3}, {stride = {2, 1}, dilation = {1, 2}})
    assert.same({1, 2, 1, 5, 6}, y3:size():totable())
    H.close(y3:squeeze(3), want3, 1e-5)
    H.raises(function() col2im({4, 5}, {2, 2}, {})(flow.randn(1, 4, 7)) end, 'Col2Im', 'sliding blocks')
    H.raises(function() col2im({1, 4, 5}, {1, 2, 2}, {})(flow.randn(1, 4, 7)) end, 'Col2Im', 'expected')
  end)

  it('reads external data inside the model folder and refuses paths that leave it', function()
    local d = H.tmpdir()
    os.execute('mkdir -p ' .. sh_quote(d .. '/sub'))
    write(d .. '/sub/w.bin', 'junk' .. f32(4, 5, 6))
    local function with(location, offset)
      local m = {ir_version = 8, opsets = {{domain = '', version = 17}},
                 graph = {name = 'g', nodes = {{op_type = 'Mul', inputs = {'x', 'w'}, outputs = {'y'}}},
                          inputs = {vi('x', 1, {3})}, outputs = {vi('y', 1, {3})},
                          initializers = {{name = 'w', data_type = 1, dims = {3}}}}}
      local bytes = pb.tostring(pb.model(m))
      -- the encoder has no external_data: decode, patch, run through the import
      local dm = reader.model(bytes)
      local t = dm.graph.initializers[1]
      t.raw = nil
      t.external_data = {location = location, offset = tostring(offset or 4), length = '12'}
      return I.OnnxModule(dm, {dir = d})
    end
    H.close(with('sub/w.bin')(flow.ones(3)), {4, 5, 6})
    H.raises(function() with('../w.bin') end, "leaves the model's folder")
    H.raises(function() with('sub/../../etc/passwd') end, "leaves the model's folder")
    H.raises(function() with('/etc/passwd') end, 'is an absolute path')
    H.raises(function() with('sub/w.bin', 8) end, 'has 16 bytes, 12 wanted at offset 8')
    H.raises(function() with('sub/none.bin') end, 'cannot open external data')
  end)
end)

------------------------------------------------------------------ conformance subset
local cache = (os.getenv('XDG_CACHE_HOME') or ((os.getenv('HOME') or '/tmp') .. '/.cache')) .. '/oneflow'
local NODE = cache .. '/onnx-1.17/onnx/backend/test/data/node'
-- a bounded subset of ONNX's node cases (the full run: tools/onnx_conformance.sh)
local SUBSET = {
  'test_abs', 'test_add_bcast', 'test_argmax_negative_axis_keepdims_random_select_last_index',
  'test_averagepool_2d_pads_count_include_pad', 'test_batchnorm_epsilon', 'test_cast_FLOAT_to_DOUBLE',
  'test_concat_3d_axis_negative_2', 'test_conv_with_autopad_same', 'test_convtranspose_pads',
  'test_cumsum_1d_reverse_exclusive', 'test_depthtospace_crd_mode_example', 'test_einsum_batch_matmul',
  'test_gather_negative_indices', 'test_gathernd_example_int32_batch_dim1', 'test_gemm_all_attributes',
  'test_gru_seq_length', 'test_if', 'test_layer_normalization_4d_axis_negative_2', 'test_loop11',
  'test_lstm_with_peepholes', 'test_maxpool_2d_ceil', 'test_nllloss_NCd1d2_with_weight_reduction_mean',
  'test_nonmaxsuppression_two_batches', 'test_onehot_negative_indices', 'test_reflect_pad',
  'test_reduce_sum_empty_axes_input_noop',
  'test_reshape_allowzero_reordered', 'test_resize_upsample_sizes_cubic', 'test_scan9_sum',
  'test_scatter_elements_with_negative_indices', 'test_sequence_map_add_2_sequences', 'test_slice_neg_steps',
  'test_sce_mean_weight_ii_3d_log_prob', 'test_split_variable_parts_1d_opset18',
  'test_squeeze_negative_axes', 'test_tile', 'test_top_k_smallest', 'test_transpose_all_permutations_3',
  'test_tril_neg', 'test_unique_sorted_with_axis', 'test_where_long_example', 'test_dft_inverse',
  -- int16 / uint16 / uint32 / uint64, and bfloat16 data stored as UINT16
  'test_bitshift_right_uint64', 'test_bitwise_and_i16_3d', 'test_mod_uint32', 'test_max_uint64',
  'test_quantizelinear_uint16', 'test_cast_BFLOAT16_to_FLOAT', 'test_tfidfvectorizer_tf_uniandbigrams_skip5',
  'test_melweightmatrix', 'test_image_decoder_decode_jpeg_grayscale', 'test_image_decoder_decode_bmp_rgb',
  'test_col2im_5d',
}

describe('ONNX conformance subset', function()
  it('passes a bounded set of onnx 1.17 node cases', function()
    local f = io.open(NODE .. '/test_abs/model.onnx', 'rb')
    if not f then
      pending('onnx 1.17 node cases not in ' .. NODE .. ' (run sh tools/onnx_conformance.sh once)')
      return
    end
    f:close()
    local p = io.popen('sh tools/onnx_conformance.sh ' .. table.concat(SUBSET, ' ') .. ' 2>&1')
    local out = p:read('*a')
    p:close()
    local last = out:match('conformance: [^\n]*')
    assert.equal(('conformance: %d passed, 0 failed, 0 unsupported of %d'):format(#SUBSET, #SUBSET), last, out)
  end)
end)

------------------------------------------------------------------ real models
describe('torchvision models exported by torch.onnx', function()
  local ort_py, torch_ok, dir
  setup(function()
    ort_py = H.onnx_python()
    torch_ok = os.execute("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0
    dir = H.tmpdir()
  end)
  teardown(H.remove_tmpdirs)

  for _, name in ipairs({'resnet50', 'mobilenet_v3_large'}) do
    it(name .. ' agrees with onnxruntime to 1e-4', function()
      if not torch_ok then
        pending("Debian's python3-torch / python3-torchvision not installed")
        return
      end
      if not ort_py then
        pending('no onnxruntime (run sh spec/onnx/setup_onnxruntime.sh)')
        return
      end
      assert.equal(0, os.execute(('/usr/bin/python3 spec/onnx/torch_models.py export %s %s >/dev/null 2>&1'):format(
        sh_quote(dir), name)))
      assert.equal(0, os.execute(('%s spec/onnx/torch_models.py ort %s %s >/dev/null'):format(
        sh_quote(ort_py), sh_quote(dir), name)))
      -- imported and run in a child process (spec/onnx/real_model_child.lua)
      local base = sh_quote(dir .. '/' .. name)
      local p = io.popen(('luajit spec/onnx/real_model_child.lua %s.onnx %s.in.safetensors %s.ort.safetensors 2>&1')
        :format(base, base, base))
      local out = p:read('*a')
      p:close()
      local r = {}
      for k, v in out:gmatch('(%a+) ([^\n]+)') do r[k] = v end
      assert.equal('2 1000', r.shape, out)
      -- allclose(rtol = 1e-4, atol = 1e-4), and well inside it relative to the output's scale
      assert.equal('0', r.outside, out)
      assert.is_true(tonumber(r.maxdiff) <= 1e-5 * tonumber(r.maxabs), out)
    end)
  end
end)
