-- make_corpus.lua -- writes the fuzzers' seed corpora with the project's own
-- savers: small valid files, one folder per harness under
-- tools/fuzz/corpus/ (committed; rerun after a format change).
--   LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;;" luajit tools/fuzz/make_corpus.lua [DIR]
-- graph:       nn.Graph:save (eval and train graphs: matmul, full, softmax,
--              conv, batch norm, relu, max pool, cross entropy, backward, sgd)
-- safetensors: flow.save (flat and nested tables, every dtype, empty tensors)
-- torch:       flow.save_torch (zip format) and the legacy-format fixture the
--              specs use (spec/fixtures/torch/legacy.pt: no legacy writer here)
-- pickle:      the data.pkl records of the torch seeds (oneflow.io.pickle's writer)
-- t7:          Torch7 binary and ascii files (written by the little encoder below,
--              as spec/io/t7_spec.lua does: the project reads t7, never writes it)
-- image:       flowvision.io's PNG and JPEG writers (of_image_encode), grey / RGB / RGBA
-- onnx:        flow.onnx.export (an MLP, a small CNN) and a hand-built model with
--              If / Loop subgraphs (oneflow.onnx.protobuf)
local flow = require 'oneflow'
local ffi = require 'ffi'
local zip = require 'oneflow.io.zip'
local bytes = require 'oneflow.io.bytes'
local nn, F = flow.nn, flow.nn.functional

local root = arg[1] or 'tools/fuzz/corpus'
local function dir(name)
  local d = root .. '/' .. name
  os.execute("rm -rf '" .. d .. "' && mkdir -p '" .. d .. "'")
  return d
end
local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end
local function read(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end

------------------------------------------------------------------ graphs
do
  local d = dir('graph')
  flow.manual_seed(1)
  local Eval = nn.Graph:subclass('CorpusEval')
  function Eval:__init(w) nn.Graph.__init(self); self.w = w end
  function Eval:build(x)
    local z = flow.matmul(x, self.w) + flow.full({2, 3}, 0.5)
    return F.softmax(z, 2), z:sum()
  end
  local g = Eval(flow.randn(4, 3))
  g(flow.randn(2, 4))
  g:save(d .. '/eval.ofg')

  local Train = nn.Graph:subclass('CorpusTrain')
  function Train:__init(m, opt) nn.Graph.__init(self); self.m = m; self:add_optimizer(opt) end
  function Train:build(x, y)
    local loss = F.cross_entropy(self.m(x), y)
    loss:backward()
    return loss
  end
  local m = nn.Sequential(nn.Conv2d(1, 2, 3, {padding = 1}), nn.BatchNorm2d(2), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8, 3))
  local t = Train(m, flow.optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9}))
  t(flow.randn(2, 1, 4, 4), flow.randint(1, 4, {2}))
  t:save(d .. '/train.ofg')

  local Small = nn.Graph:subclass('CorpusSmall')
  function Small:__init(mod) nn.Graph.__init(self); self.m = mod end
  function Small:build(x) return flow.relu(self.m(x)):mean() end
  local lin = nn.Linear(3, 2)
  local s = Small(lin)
  s(flow.randn(1, 3))
  s:save(d .. '/small.ofg')
  s(flow.randn(3, 3))   -- a second input signature: "__graph__.1" and its external map
  s:save(d .. '/variants.ofg')
end

------------------------------------------------------------------ safetensors
do
  local d = dir('safetensors')
  flow.save({a = flow.tensor({1, 2, 3}), b = flow.zeros(2, 2, {dtype = flow.int64})}, d .. '/flat.safetensors')
  flow.save({w = {flow.ones(2), flow.tensor({{true, false}})}, n = {x = flow.arange(4, {dtype = flow.int8})},
             s = 'text', k = 3}, d .. '/nested.safetensors')
  local all = {}
  for _, dt in ipairs({'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'int8', 'uint8', 'bool'}) do
    all[dt] = flow.ones(2, {dtype = flow[dt]})
  end
  all.empty = flow.zeros(0, 3)
  all.scalar = flow.tensor(7.5)
  flow.save(all, d .. '/dtypes.safetensors')
  -- NaNs with sign and payload bits, which LuaJIT once read as bogus objects
  local function raw(ctype, dt, bits)
    return flow.from_blob(ffi.new(ctype .. '[?]', #bits, bits), {#bits}, {dtype = flow[dt]}):clone()
  end
  flow.save({f = raw('uint32_t', 'float32', {0xffa03039, 0x3f800000}),
             d = raw('uint64_t', 'float64', {0xfffc060720000000ULL, 0}),
             h = raw('uint16_t', 'float16', {0xfd01, 0x3c00}),
             b = raw('uint16_t', 'bfloat16', {0xffa0, 0x3f80})}, d .. '/nan.safetensors')
end

------------------------------------------------------------------ torch and pickle
do
  local d = dir('torch')
  local p = dir('pickle')
  flow.save_torch({weight = flow.randn(2, 2), bias = flow.zeros(2), step = 3, name = 'x',
                   nested = {flow.arange(3), {a = 1.5, b = true}}}, d .. '/state.pt')
  local base = flow.arange(6):float()
  flow.save_torch({v = base, view = base:narrow(1, 2, 3), h = flow.ones(2, {dtype = flow.float16}),
                   i = flow.tensor({1, 2}, {dtype = flow.int32})}, d .. '/views.pt')
  flow.save_torch({}, d .. '/empty.pt')
  write(d .. '/legacy.pt', read('spec/fixtures/torch/legacy.pt'))
  -- the pickles inside the zip files
  for _, name in ipairs({'state', 'views', 'empty'}) do
    local s = read(d .. '/' .. name .. '.pt')
    local function fail(fmt, ...) error(string.format(fmt, ...), 0) end
    bytes.with_source(name, s, fail, function(src)
      local dirr = zip.read_directory(src, fail)
      for _, e in ipairs(dirr.list) do
        if e.name:match('data%.pkl$') then write(p .. '/' .. name .. '.pkl', zip.read_entry_string(src, e, fail)) end
      end
    end)
  end
end

------------------------------------------------------------------ t7
do
  local d = dir('t7')
  local function le(n, width)
    local b = {}
    if n < 0 then n = n + 2 ^ (8 * width) end
    for i = 1, width do
      b[i] = string.char(n % 256)
      n = math.floor(n / 256)
    end
    return table.concat(b)
  end
  local function packed(ctype, list)
    local buf = ffi.new(ctype .. '[?]', math.max(#list, 1), list)
    return ffi.string(buf, ffi.sizeof(ctype) * #list)
  end
  local function binary(ls)
    local E = {}
    function E.int(n) return le(n, 4) end
    function E.long(n) return le(n, ls) end
    E.none = le(0, 4)
    function E.number(x) return E.int(1) .. packed('double', {x}) end
    function E.string(s) return E.int(2) .. E.int(#s) .. s end
    function E.bool(b) return E.int(5) .. E.int(b and 1 or 0) end
    function E.table(idx, kvs)
      local s = E.int(3) .. E.int(idx) .. E.int(#kvs)
      for _, kv in ipairs(kvs) do s = s .. kv[1] .. kv[2] end
      return s
    end
    function E.ref(typ, idx) return E.int(typ) .. E.int(idx) end
    function E.class(idx, cls) return E.int(4) .. E.int(idx) .. E.int(3) .. 'V 1' .. E.int(#cls) .. cls end
    function E.storage(idx, cls, n, data) return E.class(idx, cls) .. E.long(n) .. data end
    function E.tensor(idx, cls, sizes, strides, offset1, storage)
      local s = E.class(idx, cls) .. E.int(#sizes)
      for _, v in ipairs(sizes) do s = s .. E.long(v) end
      for _, v in ipairs(strides) do s = s .. E.long(v) end
      return s .. E.long(offset1) .. storage
    end
    return E
  end
  for _, ls in ipairs({8, 4}) do
    local B = binary(ls)
    local st = B.storage(3, 'torch.FloatStorage', 6, packed('float', {1, 2, 3, 4, 5, 6}))
    local s = B.table(1, {
      {B.string('weight'), B.tensor(2, 'torch.FloatTensor', {2, 3}, {3, 1}, 1, st)},
      {B.string('view'), B.tensor(4, 'torch.FloatTensor', {3}, {1}, 4, B.ref(4, 3))},
      {B.string('n'), B.number(42)}, {B.string('flag'), B.bool(true)},
      {B.number(1), B.string('one')},
      {B.string('long'), B.tensor(5, 'torch.LongTensor', {2}, {1}, 1,
        B.storage(6, 'torch.LongStorage', 2, packed('int64_t', {7, 8})))},
    })
    write(('%s/b%d.t7'):format(d, ls * 8), s)
  end
  local A = {}
  function A.int(n) return string.format('%d\n', n) end
  function A.chars(s) return s .. (#s > 0 and '\n' or '') end
  local ascii = A.int(3) .. A.int(1) .. A.int(2) ..
    A.int(2) .. A.int(1) .. A.chars('a') .. A.int(1) .. string.format('%.17g\n', 1.5) ..
    A.int(2) .. A.int(1) .. A.chars('t') ..
    A.int(4) .. A.int(2) .. A.int(3) .. A.chars('V 1') .. A.int(17) .. A.chars('torch.DoubleTensor') ..
    A.int(1) .. '2\n' .. '1\n' .. A.int(1) ..
    A.int(4) .. A.int(3) .. A.int(3) .. A.chars('V 1') .. A.int(18) .. A.chars('torch.DoubleStorage') ..
    A.int(2) .. '0.5 -2\n'
  write(d .. '/ascii.t7', ascii)
end

------------------------------------------------------------------ images
do
  local vio = require 'flowvision.io'
  local d = dir('image')
  flow.manual_seed(2)
  local function img(c, h, w) return (flow.rand(c, h, w) * 255):to(flow.uint8) end
  vio.write_png(img(1, 5, 7), d .. '/grey.png')
  vio.write_png(img(3, 6, 4), d .. '/rgb.png')
  vio.write_png(img(4, 3, 3), d .. '/rgba.png')
  vio.write_png(img(2, 4, 4), d .. '/grey_alpha.png')
  vio.write_jpeg(img(1, 9, 7), d .. '/grey.jpg')
  vio.write_jpeg(img(3, 16, 17), d .. '/rgb.jpg', {quality = 50})
end
print('corpora written under ' .. root)

------------------------------------------------------------------ onnx
do
  local d = dir('onnx')
  local pb = require 'oneflow.onnx.protobuf'
  flow.manual_seed(0)
  flow.onnx.export(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), flow.randn(3, 4), d .. '/mlp.onnx')
  local cnn = nn.Sequential(nn.Conv2d(1, 2, 3, {padding = 1}), nn.BatchNorm2d(2), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Flatten(), nn.Linear(2 * 2 * 2, 3))
  cnn:eval()
  flow.onnx.export(cnn, flow.randn(1, 1, 4, 4), d .. '/cnn.onnx')
  local function vi(name, elem, dims) return {name = name, elem_type = elem, dims = dims} end
  local function const(name, value)
    return {op_type = 'Constant', inputs = {}, outputs = {name},
            attributes = {{name = 'value', type = 't', value = {data_type = 1, dims = {1},
                                                                  raw = ffi.string(ffi.new('float[1]', value), 4)}}}}
  end
  local then_g = {name = 'then', nodes = {const('t_out', 1)}, inputs = {}, outputs = {vi('t_out', 1, {1})}}
  local else_g = {name = 'else', nodes = {{op_type = 'Neg', inputs = {'x'}, outputs = {'e_out'}}}, inputs = {},
                  outputs = {vi('e_out', 1, {1})}}
  local body = {name = 'body', nodes = {{op_type = 'Add', inputs = {'acc_in', 'x'}, outputs = {'acc_out'}},
                                        {op_type = 'Identity', inputs = {'cond_in'}, outputs = {'cond_out'}}},
                inputs = {vi('i', 7, {}), vi('cond_in', 9, {}), vi('acc_in', 1, {1})},
                outputs = {vi('cond_out', 9, {}), vi('acc_out', 1, {1})}}
  local i64 = function(v) return ffi.string(ffi.new('int64_t[1]', v), 8) end
  local m = {
    ir_version = 8, opsets = {{domain = '', version = 17}}, producer_name = 'make_corpus',
    graph = {
      name = 'control', inputs = {vi('x', 1, {1}), vi('c', 9, {})}, outputs = {vi('y', 1, {1}), vi('z', 1, {1})},
      initializers = {{name = 'n', data_type = 7, dims = {}, raw = i64(3)},
                      {name = 'zero', data_type = 1, dims = {1}, raw = ffi.string(ffi.new('float[1]', 0), 4)}},
      nodes = {
        {op_type = 'If', inputs = {'c'}, outputs = {'y'},
         attributes = {{name = 'then_branch', type = 'g', value = then_g},
                       {name = 'else_branch', type = 'g', value = else_g}}},
        {op_type = 'Loop', inputs = {'n', '', 'zero'}, outputs = {'z'},
         attributes = {{name = 'body', type = 'g', value = body}}},
      },
    },
  }
  write(d .. '/control.onnx', pb.tostring(pb.model(m)))
end
