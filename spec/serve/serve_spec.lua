-- flow-serve (serve/, doc/serving.md): a server started on a free loopback
-- port over a repository of graphs saved here (an MLP in two versions, the
-- same MLP with dynamic batching and without a config.json, a ResNet-18,
-- a model folder without model.ofg and one with a broken config.json),
-- driven with plain HTTP (curl) for the protocol and bad input, and with
-- NVIDIA's tritonclient (spec/serve/setup_tritonclient.sh; pending without
-- it) for JSON and binary inference. Outputs must equal the in-process
-- graph exactly.
local flow = require 'oneflow'
local ffi = require 'ffi'
local json = require 'oneflow.utils.json'
local H = require 'spec.helpers'
local nn = flow.nn

local build = os.getenv('OF_BUILD_DIR') or 'build'
local BIN = os.getenv('FLOW_SERVE') or (build .. '/flow-serve')   -- FLOW_SERVE: another build (ASan)

local sh, write, read = H.capture, H.write_file, H.read_file
local function bytes(t)   -- a float32 tensor's values as raw bytes
  t = t:contiguous()
  return ffi.string(t:data_ptr(), t:numel() * 4)
end
local function flat(t) return t:contiguous():view(-1):totable() end

local G = nn.Graph:subclass('ServeEval')
function G:__init(m) nn.Graph.__init(self); self.m = m end
function G:build(x) return self.m(x) end

-- a compiled eval graph run at each batch in `batches` (the compiled plan,
-- not the traced call), saved to path
local function compiled(m, shape_of, batches, path)
  m:eval()
  local g = G(m)
  for _, b in ipairs(batches) do
    local x = flow.randn(unpack(shape_of(b)))
    g(x)
    g(x)
  end
  if path then g:save(path) end
  return g
end

-- Triton's INT16 and UINT8/16/32/64, with values at their limits (x + x:
-- the wrapped sums, exactly, as uint64's upper half shows)
local INT_DTYPES = {'int16', 'uint8', 'uint16', 'uint32', 'uint64'}
local INT_CASES = {
  int16 = {'INT16', '[[-16384,16383,-1],[0,7,-300]]', '[[-32768,32766,-2],[0,14,-600]]'},
  uint8 = {'UINT8', '[[127,128,255],[0,1,100]]', '[[254,0,254],[0,2,200]]'},
  uint16 = {'UINT16', '[[32767,32768,65535],[0,1,1000]]', '[[65534,0,65534],[0,2,2000]]'},
  uint32 = {'UINT32', '[[2147483647,2147483648,4294967295],[0,1,100000]]',
            '[[4294967294,0,4294967294],[0,2,200000]]'},
  uint64 = {'UINT64', '[[9223372036854775807,9223372036854775808,18446744073709551615],[0,1,3]]',
            '[[18446744073709551614,0,18446744073709551614],[0,2,6]]'},
}

local function mlp(seed)
  flow.manual_seed(seed)
  return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
end

describe('flow-serve', function()
  local f = io.open(BIN)
  if not f then
    it('is built', function() pending(BIN .. ' is not built (libmicrohttpd-dev missing?)') end)
    return
  end
  f:close()
  local dir = H.tmpdir()
  local repo = dir .. '/repo'
  local url, pid, port
  local g1, g2, gr, gh, gb, gq, gd, gt
  local function mkdirs(...) for _, d in ipairs({...}) do os.execute('mkdir -p ' .. repo .. '/' .. d) end end

  local function http(method, path, body, headers)
    local cmd = {"curl -s -o " .. dir .. "/resp -w '%{http_code}' -X " .. method}
    for _, h in ipairs(headers or {}) do cmd[#cmd + 1] = "-H '" .. h .. "'" end
    if body then
      write(dir .. '/req', body)
      cmd[#cmd + 1] = '--data-binary @' .. dir .. '/req'
    end
    cmd[#cmd + 1] = "'" .. url .. path .. "'"
    os.remove(dir .. '/resp')
    local code = tonumber(sh(table.concat(cmd, ' ')))
    return code, read(dir .. '/resp') or ''
  end
  local function infer_body(name, shape, data, dtype)
    return json.encode({inputs = {{name = name, shape = shape, datatype = dtype or 'FP32', data = data}}})
  end
  local function req(...) return {http(...)} end
  -- the tritonclient venv's python when it imports module (made by
  -- spec/serve/setup_tritonclient.sh, which .ci/run calls; not here: without
  -- PyPI, pip would retry for minutes); nil, the test pending, without it
  local function tritonclient_python(module)
    local py = os.getenv('TRITONCLIENT_PYTHON') or ((os.getenv('XDG_CACHE_HOME') or
               (os.getenv('HOME') .. '/.cache')) .. '/oneflow/tritonclient-venv/bin/python')
    if os.execute(py .. (" -c 'import %s' 2>/dev/null"):format(module)) ~= 0 then
      pending('tritonclient[http] cannot be installed (no PyPI?): run spec/serve/setup_tritonclient.sh')
      return nil
    end
    return py
  end
  -- flow-serve over root (log: its output; extra: more arguments): its pid and port
  local function start(root, log, extra)
    local p = tonumber(sh(('env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY %s --model-repository %s --http-port 0 '
                           .. '--http-address 127.0.0.1 --max-body-bytes 1000000 --timeout 2 %s > %s 2>&1 & echo $!')
                          :format(BIN, root, extra or '', log)))
    local listening
    for _ = 1, 300 do
      listening = (read(log) or ''):match('listening on 127%.0%.0%.1:(%d+)')
      if listening then break end
      os.execute('sleep 0.1')
    end
    assert(listening, 'flow-serve did not start: ' .. (read(log) or ''))
    return p, listening
  end
  local function check_error(r, want_code, ...)
    local code, body = r[1], r[2]
    assert.are.equal(want_code, code, body)
    local doc = json.decode(body)
    assert.is_string(doc.error, body)
    for _, s in ipairs({...}) do assert.is_truthy(doc.error:find(s, 1, true), doc.error .. ' lacks ' .. s) end
  end

  setup(function()
    mkdirs('mlp/1', 'mlp/2', 'mlp_batched/1', 'mlp_auto/1', 'resnet/1', 'resnet_int8/1', 'no_graph/1', 'bad_config/1',
           'mlp_half/1', 'mlp_bf16/1', 'pair/1', 'same/1', 'mlp_dyn/1', 'bert_int8/1')
    -- two inputs, uint8 then float32 (binary data: the second is not aligned
    -- when the first has an odd length), and a graph whose output is its input
    local Pair = nn.Graph:subclass('ServePair')
    function Pair.build(_, a, b) return a:to(flow.float32) * 2 + b end
    local gp = Pair()
    gp(flow.ones(1, 3, {dtype = flow.uint8}), flow.ones(1, 3))
    gp:save(repo .. '/pair/1/model.ofg')
    local Same = nn.Graph:subclass('ServeSame')
    function Same.build(_, x) return x end
    local gs = Same()
    gs(flow.ones(1, 5))
    gs:save(repo .. '/same/1/model.ofg')
    -- x + x in the integer dtypes Triton has beyond the float ones (t_uint16
    -- with a config.json naming TYPE_UINT16, the others auto-completed)
    local Twice = nn.Graph:subclass('ServeTwice')
    function Twice.build(_, x) return x + x end
    for _, dt in ipairs(INT_DTYPES) do
      mkdirs('t_' .. dt .. '/1')
      local g = Twice()
      local x = flow.tensor({{1, 2, 3}, {4, 5, 6}}, {dtype = flow[dt]})
      g(x)
      g(x)
      g:save(('%s/t_%s/1/model.ofg'):format(repo, dt))
    end
    write(repo .. '/t_uint16/config.json', json.encode({
      name = 't_uint16', max_batch_size = 2,
      input = {{name = 'INPUT__0', data_type = 'TYPE_UINT16', dims = {3}}},
      output = {{name = 'OUTPUT__0', data_type = 'TYPE_UINT16', dims = {3}}}}))
    -- the MLP, version 1 and 2 (other weights), compiled for batch 1, 2 and 4
    local shape = function(b) return {b, 16} end
    g1 = compiled(mlp(1), shape, {1, 2, 4}, repo .. '/mlp/1/model.ofg')
    g2 = compiled(mlp(2), shape, {1, 2, 4}, repo .. '/mlp/2/model.ofg')
    os.execute(('cp %s/mlp/2/model.ofg %s/mlp_batched/1/ && cp %s/mlp/2/model.ofg %s/mlp_auto/1/')
               :format(repo, repo, repo, repo))
    local cfg = {name = 'mlp', max_batch_size = 4, version_policy = {all = {}},
                 input = {{name = 'x', data_type = 'TYPE_FP32', dims = {16}}},
                 output = {{name = 'y', data_type = 'TYPE_FP32', dims = {4}}},
                 instance_group = {{count = 2, kind = 'KIND_CPU'}}}
    write(repo .. '/mlp/config.json', json.encode(cfg))
    cfg.name = 'mlp_batched'
    cfg.version_policy = nil
    -- 1 s: the 4 requests arrive within it even on a loaded machine
    cfg.dynamic_batching = {max_queue_delay_microseconds = 1000000}
    cfg.instance_group = {{count = 1, kind = 'KIND_CPU'}}
    write(repo .. '/mlp_batched/config.json', json.encode(cfg))
    -- the same for 3 concurrent rows: no graph compiled for 3, run as 2 + 1
    cfg.name = 'mlp_split'
    mkdirs('mlp_split/1')
    os.execute(('cp %s/mlp/2/model.ofg %s/mlp_split/1/'):format(repo, repo))
    write(repo .. '/mlp_split/config.json', json.encode(cfg))
    -- the MLP's classes (the classification extension): 3 labels for its 4
    -- outputs (CRLF and LF lines); a folder whose label file is missing
    cfg.name, cfg.dynamic_batching = 'mlp_cls', nil
    cfg.output[1].label_filename = 'labels.txt'
    mkdirs('mlp_cls/1', 'cls_nolabels/1')
    os.execute(('cp %s/mlp/2/model.ofg %s/mlp_cls/1/ && cp %s/mlp/2/model.ofg %s/cls_nolabels/1/')
               :format(repo, repo, repo, repo))
    write(repo .. '/mlp_cls/config.json', json.encode(cfg))
    write(repo .. '/mlp_cls/labels.txt', 'zero\r\none\ntwo\n')
    cfg.name = 'cls_nolabels'
    write(repo .. '/cls_nolabels/config.json', json.encode(cfg))
    cfg.output[1].label_filename = nil
    -- ResNet-18 (flowvision, random init) on 64x64 images, batch 1 and 2
    flow.manual_seed(5)
    gr = compiled(require('flowvision.models').resnet18(), function(b) return {b, 3, 64, 64} end,
                  {1, 2}, repo .. '/resnet/1/model.ofg')
    -- its int8 form (flowvision.models.quantization, post-training quantized)
    flow.manual_seed(6)
    local Qz = flow.quantization
    local qm = require('flowvision.models').quantization.resnet18({num_classes = 10})
    qm:eval()
    qm:fuse_model()
    qm.qconfig = Qz.get_default_qconfig('x86')
    local qp = Qz.prepare(qm)
    Qz.calibrate(qp, {flow.rand(4, 3, 64, 64)})
    gq = compiled(Qz.convert(qp), function(b) return {b, 3, 64, 64} end, {1, 2}, repo .. '/resnet_int8/1/model.ofg')
    -- the MLP dynamically quantized (int8 weights; each run picks its input's
    -- range: one dynamic_quantized_linear node a layer)
    gd = compiled(flow.quantization.quantize_dynamic(mlp(3)), function(b) return {b, 16} end, {1, 2},
                  repo .. '/mlp_dyn/1/model.ofg')
    -- a small BERT's mean-pooled embeddings, int8 linear layers and quint8
    -- tables: token ids and mask in (int64), float embeddings out
    flow.manual_seed(9)
    local bert = require('flowtext').BertModel({vocab_size = 60, hidden_size = 16, num_hidden_layers = 2,
                                                 num_attention_heads = 4, intermediate_size = 32,
                                                 max_position_embeddings = 16})
    local qb = Qz.quantize_dynamic(bert, {[nn.Linear] = Qz.default_dynamic_qconfig,
                                          [nn.Embedding] = Qz.float_qparams_weight_only_qconfig})
    qb:eval()
    local Emb = nn.Graph:subclass('ServeEmbed')
    function Emb:__init(m) nn.Graph.__init(self); self.m = m end
    function Emb:build(ids, mask)
      local h = self.m(ids, {attention_mask = mask}).last_hidden_state
      local w = mask:to(h.dtype):unsqueeze(3)
      return (h * w):sum(2) / w:sum(2):clamp({min = 1e-9})
    end
    gt = Emb(qb)
    for _, b in ipairs({1, 2}) do
      gt(flow.randint(1, 61, {b, 8}), flow.ones(b, 8, {dtype = flow.int64}))
    end
    gt:save(repo .. '/bert_int8/1/model.ofg')
    -- an identity Linear in float16 and bfloat16 (configs completed from the
    -- graphs): its outputs are the server's conversions of the JSON inputs
    local function typed(dt)
      local m = nn.Linear(16, 16)
      flow.no_grad(function()
        m.weight:copy_(flow.eye(16))
        m.bias:zero_()
      end)
      m = m:to(dt)
      m:eval()
      local g = G(m)
      local x = flow.randn(2, 16):to(dt)
      g(x)
      g(x)
      return g
    end
    gh = typed(flow.float16)
    gh:save(repo .. '/mlp_half/1/model.ofg')
    gb = typed(flow.bfloat16)
    gb:save(repo .. '/mlp_bf16/1/model.ofg')
    write(repo .. '/no_graph/1/model.onnx', 'not served')
    write(repo .. '/bad_config/config.json', '{"max_batch_size": ')
    os.execute(('cp %s/mlp/1/model.ofg %s/bad_config/1/'):format(repo, repo))
    pid, port = start(repo, dir .. '/log')
    url = 'http://127.0.0.1:' .. port
  end)

  teardown(function()
    if pid then os.execute('kill -9 ' .. pid .. ' 2>/dev/null') end
    H.remove_tmpdirs()
  end)

  it('answers health, server and model metadata, config and the repository index', function()
    assert.are.equal(200, (http('GET', '/v2/health/live')))
    -- OpenMP's spinning as `require 'oneflow'` sets it (serve/main.c re-executes itself with it)
    -- (started without it: the spec's own process has it from `require 'oneflow'`)
    local environ = read('/proc/' .. pid .. '/environ') or ''
    assert.is_truthy(environ:find('GOMP_SPINCOUNT=10000', 1, true), environ)
    -- strict readiness: two models fail to load, the server stays up
    assert.are.equal(400, (http('GET', '/v2/health/ready')))
    local code, body = http('GET', '/v2')
    assert.are.equal(200, code)
    assert.are.equal('flow-serve', json.decode(body).name)
    code, body = http('GET', '/v2/models/mlp')
    assert.are.equal(200, code, body)
    local md = json.decode(body)
    assert.are.same({'2', '1'}, md.versions)
    assert.are.same({{name = 'x', datatype = 'FP32', shape = {-1, 16}}}, md.inputs)
    -- auto-completed config: the first dimension is the batch, up to the largest compiled
    code, body = http('GET', '/v2/models/mlp_auto/config')
    assert.are.equal(200, code, body)
    local cfg = json.decode(body)
    assert.are.equal(4, cfg.max_batch_size)
    assert.are.same({{name = 'INPUT__0', data_type = 'TYPE_FP32', dims = {16}}}, cfg.input)
    assert.are.same({{name = 'OUTPUT__0', data_type = 'TYPE_FP32', dims = {4}}}, cfg.output)
    code, body = http('GET', '/v2/models/resnet/config')
    assert.are.equal(200, code, body)
    assert.are.equal(2, json.decode(body).max_batch_size)
    assert.are.same({3, 64, 64}, json.decode(body).input[1].dims)
    assert.are.equal(200, (http('GET', '/v2/models/mlp/ready')))
    assert.are.equal(200, (http('GET', '/v2/models/mlp/versions/1/ready')))
    check_error(req('GET', '/v2/models/no_graph/ready'), 400, 'no model.ofg', 'found model.onnx')
    check_error(req('GET', '/v2/models/bad_config/ready'), 400, 'config.json', 'malformed JSON')
    check_error(req('GET', '/v2/models/nope'), 404, "unknown model 'nope'")
    code, body = http('POST', '/v2/repository/index')
    assert.are.equal(200, code, body)
    local states = {}
    for _, e in ipairs(json.decode(body)) do states[e.name .. '/' .. (e.version or '')] = e.state end
    assert.are.same({['mlp/1'] = 'READY', ['mlp/2'] = 'READY', ['mlp_batched/1'] = 'READY',
                     ['mlp_split/1'] = 'READY', ['mlp_auto/1'] = 'READY', ['resnet/1'] = 'READY',
                     ['resnet_int8/1'] = 'READY', ['mlp_dyn/1'] = 'READY', ['bert_int8/1'] = 'READY',
                     ['pair/1'] = 'READY', ['same/1'] = 'READY', ['mlp_cls/1'] = 'READY',
                     ['cls_nolabels/'] = 'UNAVAILABLE',
                     ['no_graph/1'] = 'UNAVAILABLE',
                     ['bad_config/'] = 'UNAVAILABLE', ['mlp_half/1'] = 'READY',
                     ['mlp_bf16/1'] = 'READY', ['t_int16/1'] = 'READY', ['t_uint8/1'] = 'READY',
                     ['t_uint16/1'] = 'READY', ['t_uint32/1'] = 'READY', ['t_uint64/1'] = 'READY'}, states)
    -- {"ready": true}: the ready versions only
    code, body = http('POST', '/v2/repository/index', '{"ready": true}')
    assert.are.equal(200, code, body)
    local ready = {}
    for _, e in ipairs(json.decode(body)) do
      assert.are.equal('READY', e.state)
      ready[#ready + 1] = e.name
    end
    local n_ready = 0
    for _, st in pairs(states) do n_ready = n_ready + (st == 'READY' and 1 or 0) end
    assert.are.equal(n_ready, #ready)
    check_error(req('POST', '/v2/repository/index', '{"ready": 1}'), 400, '{"ready": true|false}')
    check_error(req('POST', '/v2/repository/index', '{"state": "READY"}'), 400, 'the body must be')
  end)

  it('answers an output\'s top classes with their labels (the classification extension)', function()
    local x = flow.randn(2, 16)
    local y = g2(x)
    -- Triton's strings: value (%f), index (0-based) and the label of that index
    local labels = {'zero', 'one', 'two'}
    local function top(k)
      local want = {}
      for r = 1, 2 do
        local row = y[r]:totable()
        local idx = {}
        for i = 1, #row do idx[i] = i end
        table.sort(idx, function(a, b) if row[a] ~= row[b] then return row[a] > row[b] end return a < b end)
        for q = 1, math.min(k, #row) do
          local s = ('%f:%d'):format(row[idx[q]], idx[q] - 1)
          want[#want + 1] = labels[idx[q]] and (s .. ':' .. labels[idx[q]]) or s
        end
      end
      return want
    end
    local function ask(k, extra)
      local body = {inputs = {{name = 'x', shape = {2, 16}, datatype = 'FP32', data = flat(x)}},
                    outputs = {{name = 'y', parameters = {classification = k}}}}
      for key, v in pairs(extra or {}) do body.outputs[1].parameters[key] = v end
      return req('POST', '/v2/models/mlp_cls/infer', json.encode(body))
    end
    for _, k in ipairs({1, 3, 10}) do   -- 10: all 4
      local r = ask(k)
      assert.are.equal(200, r[1], r[2])
      local out = json.decode(r[2]).outputs[1]
      assert.are.equal('BYTES', out.datatype)
      assert.are.same({2, math.min(k, 4)}, out.shape)
      assert.are.same(top(k), out.data)
    end
    -- the configuration names the file; bad requests and configurations
    assert.are.equal('labels.txt', json.decode(select(2, http('GET', '/v2/models/mlp_cls/config'))).output[1]
                     .label_filename)
    check_error(ask(0), 400, 'classification must be an integer in 1..')
    check_error(ask(2, {shared_memory_region = 'r', shared_memory_byte_size = 64}), 400,
                'cannot go to shared memory')
    check_error(req('GET', '/v2/models/cls_nolabels/ready'), 400, 'cannot read its label_filename')
    check_error(req('POST', '/v2/repository/models/mlp_cls/load', json.encode({parameters = {config = json.encode({
      name = 'mlp_cls', max_batch_size = 4, input = {{name = 'x', data_type = 'TYPE_FP32', dims = {16}}},
      output = {{name = 'y', data_type = 'TYPE_FP32', dims = {4}, label_filename = '../mlp/config.json'}}})}})),
      400, 'label_filename must name a file in the model')
    -- the folder's own config again
    assert.are.equal(200, http('POST', '/v2/repository/models/mlp_cls/load'))
    assert.is_truthy(select(2, http('GET', '/v2')):find('"classification"', 1, true))
  end)

  it('serves a saved int8 graph (a quantized ResNet-18): outputs equal the in-process graph exactly', function()
    local x = flow.rand(2, 3, 64, 64)
    local code, body = http('POST', '/v2/models/resnet_int8/infer', infer_body('INPUT__0', {2, 3, 64, 64}, flat(x)))
    assert.are.equal(200, code, body)
    local r = json.decode(body)
    assert.are.same({2, 10}, r.outputs[1].shape)
    assert.are.equal(bytes(gq(x)), bytes(flow.tensor(r.outputs[1].data, {dtype = flow.float32})))
  end)

  it('serves a saved dynamically quantized graph: each request quantized with its own range', function()
    for _, x in ipairs({flow.randn(2, 16), flow.randn(2, 16) * 50}) do
      local code, body = http('POST', '/v2/models/mlp_dyn/infer', infer_body('INPUT__0', {2, 16}, flat(x)))
      assert.are.equal(200, code, body)
      local r = json.decode(body)
      assert.are.equal(bytes(gd(x)), bytes(flow.tensor(r.outputs[1].data, {dtype = flow.float32})))
    end
  end)

  it('serves a quantized BERT\'s embeddings: int64 ids and mask in, equal to the in-process graph', function()
    local ids = flow.randint(1, 61, {2, 8})
    local mask = flow.tensor({{1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 0, 0, 0, 0}}, {dtype = flow.int64})
    local body = json.encode({inputs = {
      {name = 'INPUT__0', shape = {2, 8}, datatype = 'INT64', data = flat(ids)},
      {name = 'INPUT__1', shape = {2, 8}, datatype = 'INT64', data = flat(mask)}}})
    local code, out = http('POST', '/v2/models/bert_int8/infer', body)
    assert.are.equal(200, code, out)
    local r = json.decode(out)
    assert.are.same({2, 16}, r.outputs[1].shape)
    assert.are.equal(bytes(gt(ids, mask)), bytes(flow.tensor(r.outputs[1].data, {dtype = flow.float32})))
  end)

  it('infers with JSON tensors: outputs equal the in-process graph exactly, per version', function()
    local x = flow.randn(2, 16)
    local code, body = http('POST', '/v2/models/mlp/infer', infer_body('x', {2, 16}, flat(x)))
    assert.are.equal(200, code, body)
    local r = json.decode(body)
    assert.are.equal('2', r.model_version)
    assert.are.same({2, 4}, r.outputs[1].shape)
    -- %.9g round-trips float32: compare as float32, exactly
    assert.are.equal(bytes(g2(x)), bytes(flow.tensor(r.outputs[1].data, {dtype = flow.float32})))
    code, body = http('POST', '/v2/models/mlp/versions/1/infer', infer_body('x', {2, 16}, flat(x)))
    assert.are.equal(200, code, body)
    r = json.decode(body)
    assert.are.equal('1', r.model_version)
    assert.are.equal(bytes(g1(x)), bytes(flow.tensor(r.outputs[1].data, {dtype = flow.float32})))
    -- batch 3 was never compiled: padded to 4, the rows are batch 4's
    local x3 = flow.randn(3, 16)
    local x4 = flow.cat({x3, flow.zeros(1, 16)}, 1)
    code, body = http('POST', '/v2/models/mlp_auto/infer', infer_body('INPUT__0', {3, 16}, flat(x3)))
    assert.are.equal(200, code, body)
    r = json.decode(body)
    assert.are.same({3, 4}, r.outputs[1].shape)
    assert.are.equal(bytes(g2(x4):narrow(1, 1, 3)), bytes(flow.tensor(r.outputs[1].data, {dtype = flow.float32})))
  end)

  it('reads binary inputs in place: any header length, unaligned inputs, chunked bodies', function()
    -- the body's binary data sits after a JSON header of any length: ids of
    -- 1 to 9 characters move it through every alignment
    local x = flow.randn(2, 16)
    for k = 1, 9 do
      local hdr = json.encode({id = ('i'):rep(k), inputs = {{name = 'x', shape = {2, 16}, datatype = 'FP32',
                                                             parameters = {binary_data_size = 128}}}})
      local code, body = http('POST', '/v2/models/mlp/infer', hdr .. bytes(x),
                              {'Inference-Header-Content-Length: ' .. #hdr})
      assert.are.equal(200, code, body)
      local r = json.decode(body)
      assert.are.equal(('i'):rep(k), r.id)
      assert.are.equal(bytes(g2(x)), bytes(flow.tensor(r.outputs[1].data, {dtype = flow.float32})))
    end
    -- uint8 [1,3] then float32 [1,3]: the float data 3 bytes after an
    -- aligned start is copied out, the uint8 data read in place
    local hdr = json.encode({inputs = {
      {name = 'INPUT__0', shape = {1, 3}, datatype = 'UINT8', parameters = {binary_data_size = 3}},
      {name = 'INPUT__1', shape = {1, 3}, datatype = 'FP32', parameters = {binary_data_size = 12}}}})
    local b = flow.tensor({{0.5, -1, 3}})
    local code, body = http('POST', '/v2/models/pair/infer', hdr .. '\1\2\250' .. bytes(b),
                            {'Inference-Header-Content-Length: ' .. #hdr})
    assert.are.equal(200, code, body)
    assert.are.same({{2.5, 3, 503}}, flow.tensor(json.decode(body).outputs[1].data):view(1, 3):totable())
    -- no Content-Length (chunked): the body grows as it arrives
    hdr = json.encode({inputs = {{name = 'x', shape = {2, 16}, datatype = 'FP32',
                                  parameters = {binary_data_size = 128}}}})
    code, body = http('POST', '/v2/models/mlp/infer', hdr .. bytes(x),
                      {'Inference-Header-Content-Length: ' .. #hdr, 'Transfer-Encoding: chunked'})
    assert.are.equal(200, code, body)
    assert.are.equal(bytes(g2(x)), bytes(flow.tensor(json.decode(body).outputs[1].data, {dtype = flow.float32})))
    -- an output that is the input itself: the request's buffer outlives the
    -- request as that tensor's storage, and the answer is the input's bytes
    local v = flow.randn(1, 5)
    hdr = json.encode({inputs = {{name = 'INPUT__0', shape = {1, 5}, datatype = 'FP32',
                                  parameters = {binary_data_size = 20}}},
                       outputs = {{name = 'OUTPUT__0', parameters = {binary_data = true}}}})
    for _ = 1, 3 do
      code, body = http('POST', '/v2/models/same/infer', hdr .. bytes(v), {'Inference-Header-Content-Length: ' .. #hdr})
      assert.are.equal(200, code, body)
      assert.are.equal(bytes(v), body:sub(-20))
    end
  end)

  it('takes FP16 and BF16 tensors as JSON numbers, rounded to nearest even as a cast does', function()
    -- rounding up and down, ties to even, the largest finite half, subnormals
    local x = flow.randn(2, 16)
    local special = {1 + 3 * 2^-12, 1 + 2^-11, 1 + 3 * 2^-11, 65519, 3e-6, -1e-8, 2^-25, 1 + 2^-8 + 2^-9}
    for i, v in ipairs(special) do x[1][i] = v end
    for _, c in ipairs({{'mlp_half', 'FP16', flow.float16}, {'mlp_bf16', 'BF16', flow.bfloat16}}) do
      local name, dt, fdt = c[1], c[2], c[3]
      local code, body = http('POST', '/v2/models/' .. name .. '/infer', infer_body('INPUT__0', {2, 16}, flat(x), dt))
      assert.are.equal(200, code, body)
      local r = json.decode(body)
      assert.are.equal(dt, r.outputs[1].datatype)
      assert.are.same({2, 16}, r.outputs[1].shape)
      local got = flow.tensor(r.outputs[1].data, {dtype = flow.float32}):view(2, 16)
      -- (+ 0: the Linear's sum turns -0 into +0)
      assert.are.equal(bytes(x:to(fdt):float() + 0), bytes(got))
    end
    local code, body = http('POST', '/v2/models/mlp_half/infer', infer_body('INPUT__0', {1, 16}, {true}, 'FP16'))
    assert.are.equal(400, code, body)
  end)

  it('serves INT16, UINT8, UINT16, UINT32 and UINT64 tensors (JSON), configured or auto-completed', function()
    for _, dt in ipairs(INT_DTYPES) do
      local name, c = 't_' .. dt, INT_CASES[dt]
      local code, body = http('GET', '/v2/models/' .. name .. '/config')
      assert.are.equal(200, code, body)
      assert.are.equal('TYPE_' .. c[1], json.decode(body).input[1].data_type)
      code, body = http('POST', '/v2/models/' .. name .. '/infer',
                        ('{"inputs":[{"name":"INPUT__0","shape":[2,3],"datatype":"%s","data":%s}]}'):format(c[1], c[2]))
      assert.are.equal(200, code, body)
      -- the numbers as written (a Lua number would round uint64's)
      local want = '[' .. c[3]:gsub('[%[%]]', '') .. ']'
      assert.is_truthy(body:find('"datatype":"' .. c[1] .. '","shape":[2,3],"data":' .. want, 1, true), body)
    end
    -- out of the dtype's range: the protocol's error, naming the input
    local function body(dt, data)
      return ('{"inputs":[{"name":"INPUT__0","shape":[1,3],"datatype":"%s","data":%s}]}'):format(dt, data)
    end
    check_error(req('POST', '/v2/models/t_uint8/infer', body('UINT8', '[1,256,3]')), 400, "input 'INPUT__0'")
    check_error(req('POST', '/v2/models/t_uint64/infer', body('UINT64', '[1,-1,3]')), 400, "input 'INPUT__0'")
    check_error(req('POST', '/v2/models/t_int16/infer', body('INT16', '[1,32768,3]')), 400, "input 'INPUT__0'")
    check_error(req('POST', '/v2/models/t_uint16/infer',
                    '{"inputs":[{"name":"INPUT__0","shape":[1,3],"datatype":"INT16","data":[1,2,3]}]}'), 400,
                'datatype INT16', 'expects UINT16')
  end)

  it('answers bad requests with the protocol error, and stays up', function()
    local good = infer_body('x', {1, 16}, flat(flow.randn(1, 16)))
    check_error(req('POST', '/v2/models/mlp/infer', '{"inputs": [{"name": "x",'), 400, 'malformed JSON')
    check_error(req('POST', '/v2/models/mlp/infer', '[1, 2]'), 400, 'JSON object')
    check_error(req('POST', '/v2/models/mlp/infer', infer_body('x', {1, 15}, flat(flow.randn(1, 15)))),
                400, "input 'x': shape [1,15]", 'expects [batch,16]')
    check_error(req('POST', '/v2/models/mlp/infer', infer_body('x', {5, 16}, flat(flow.randn(5, 16)))),
                400, 'batch above max_batch_size')
    check_error(req('POST', '/v2/models/mlp/infer', infer_body('x', {1, 16}, flat(flow.randn(1, 16)), 'FP64')),
                400, 'datatype FP64', 'expects FP32')
    check_error(req('POST', '/v2/models/mlp/infer', infer_body('y', {1, 16}, flat(flow.randn(1, 16)))),
                400, "unexpected inference input 'y'")
    check_error(req('POST', '/v2/models/mlp/infer', infer_body('x', {2, 16}, flat(flow.randn(1, 16)))),
                400, "input 'x'", '"data"')
    check_error(req('POST', '/v2/models/mlp/infer', infer_body('x', {1, 16}, {true})), 400, "input 'x'")
    check_error(req('POST', '/v2/models/nope/infer', good), 404, "unknown model 'nope'")
    check_error(req('POST', '/v2/models/mlp/versions/7/infer', good), 404, 'unknown version 7')
    check_error(req('POST', '/v2/models/no_graph/infer', good), 400, 'not ready')
    check_error(req('POST', '/v2/models/mlp/infer', good:sub(1, -2) .. ',"outputs":[{"name":"z"}]}'),
                400, "unexpected inference output 'z'")
    -- oversized bodies: 413 (the limit here is --max-body-bytes 1000000)
    check_error(req('POST', '/v2/models/mlp/infer', ('x'):rep(1200000)), 413, 'larger than the limit')
    -- binary data: truncated, or a header length past the body
    local hdr = json.encode({inputs = {{name = 'x', shape = {1, 16}, datatype = 'FP32',
                                        parameters = {binary_data_size = 64}}}})
    local bin = bytes(flow.randn(1, 16))
    check_error(req('POST', '/v2/models/mlp/infer', hdr .. bin:sub(1, 40),
                     {'Inference-Header-Content-Length: ' .. #hdr}), 400, 'truncated')
    check_error(req('POST', '/v2/models/mlp/infer', hdr .. bin,
                     {'Inference-Header-Content-Length: ' .. (#hdr + 100)}), 400, 'larger than the body')
    check_error(req('POST', '/v2/models/mlp/infer', hdr .. bin), 400, 'malformed JSON')
    local code, body = http('POST', '/v2/models/mlp/infer', hdr .. bin,
                            {'Inference-Header-Content-Length: ' .. #hdr})
    assert.are.equal(200, code, body)
    -- abrupt disconnects mid-body and a slow client holding a connection
    -- open: the server keeps answering (the slow one is closed after --timeout)
    for _ = 1, 3 do
      os.execute(("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%s; printf \"POST /v2/models/mlp/infer HTTP/1.1\\r\\n"
                  .. "Host: x\\r\\nContent-Length: 100000\\r\\n\\r\\n{\\\"inputs\\\"\" >&3; exec 3>&-'"):format(port))
    end
    os.execute(("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%s; printf \"GET /v2/he\" >&3; sleep 4' &"):format(port))
    assert.are.equal(200, (http('POST', '/v2/models/mlp/infer', good)))
    assert.are.equal(200, (http('GET', '/v2/health/live')))
    local metrics = select(2, http('GET', '/metrics'))
    assert.is_truthy(metrics:find('nv_inference_request_failure{model="mlp",version="2"} %d+'))
  end)

  -- n single-row requests to model at once (curl in the background);
  -- returns their inputs and decoded answers, in order
  local function concurrent_rows(model, n, tag)
    local xs, cmds, answers = {}, {}, {}
    for i = 1, n do
      xs[i] = flow.randn(1, 16)
      write(('%s/%s%d.json'):format(dir, tag, i), infer_body('x', {1, 16}, flat(xs[i])))
      cmds[i] = ("curl -s -o %s/%so%d.json -X POST --data-binary @%s/%s%d.json %s/v2/models/%s/infer &")
                :format(dir, tag, i, dir, tag, i, url, model)
    end
    os.execute(table.concat(cmds, ' ') .. ' wait')
    for i = 1, n do answers[i] = json.decode(read(('%s/%so%d.json'):format(dir, tag, i))) end
    return xs, answers
  end

  it('merges concurrent requests into batches (dynamic batching)', function()
    local xs, answers = concurrent_rows('mlp_batched', 4, 'b')
    for i = 1, 4 do
      local r = answers[i]
      H.close(flow.tensor(r.outputs[1].data, {dtype = flow.float32}), g2(xs[i]), 1e-6)
    end
    local metrics = select(2, http('GET', '/metrics'))
    local execs = tonumber(metrics:match('nv_inference_exec_count{model="mlp_batched",version="1"} (%d+)'))
    local count = tonumber(metrics:match('nv_inference_count{model="mlp_batched",version="1"} (%d+)'))
    assert.are.equal(4, count)
    assert.is_true(execs < 4, 'executions: ' .. execs)   -- 4 requests of 1 row, fewer batches
    -- the statistics extension says the same, per version and per batch size
    local code, body = http('GET', '/v2/models/mlp_batched/stats')
    assert.are.equal(200, code, body)
    local st = json.decode(body).model_stats
    assert.are.equal(1, #st)
    st = st[1]
    assert.are.same({'mlp_batched', '1', 4, execs}, {st.name, st.version, st.inference_count, st.execution_count})
    local is = st.inference_stats
    assert.are.same({4, 0, 4, 4}, {is.success.count, is.fail.count, is.queue.count, is.compute_infer.count})
    -- requests waited up to the 1 s queue delay; each request's time holds its queue and compute time
    assert.is_true(is.queue.ns > 0 and is.compute_infer.ns > 0 and is.success.ns >= is.queue.ns, body)
    local batched_execs, batched_rows = 0, 0
    for _, b in ipairs(st.batch_stats) do
      batched_execs = batched_execs + b.compute_infer.count
      batched_rows = batched_rows + b.batch_size * b.compute_infer.count
    end
    assert.are.same({execs, 4}, {batched_execs, batched_rows})
    assert.is_true(st.last_inference > os.time() * 1000 - 600000, body)   -- ms since the epoch
    -- all models: every version listed; one version; unknown ones are 404
    local all = json.decode(select(2, http('GET', '/v2/models/stats'))).model_stats
    local names = {}
    for _, e in ipairs(all) do names[#names + 1] = e.name .. '/' .. e.version end
    table.sort(names)
    local listed = table.concat(names, ' ')
    assert.is_truthy(listed:find('mlp/1 mlp/2 mlp_auto/1 mlp_batched/1', 1, true), listed)
    local one = json.decode(select(2, http('GET', '/v2/models/mlp/versions/1/stats'))).model_stats
    assert.are.same({'mlp', '1'}, {one[1].name, one[1].version})
    assert.are.equal(1, #one)
    check_error(req('GET', '/v2/models/nope/stats'), 404, "unknown model 'nope'")
    check_error(req('GET', '/v2/models/mlp/versions/9/stats'), 404, 'unknown version 9')
  end)

  it('runs a merged batch of no compiled size as exact parts (3 rows: 2 + 1), not padded', function()
    local xs, answers = concurrent_rows('mlp_split', 3, 's')
    for i = 1, 3 do
      local r = answers[i]
      -- exactly the batch-1 or batch-2 graph's rows
      local got = flow.tensor(r.outputs[1].data, {dtype = flow.float32})
      H.close(got, g2(xs[i]), 1e-6)
    end
    local st = json.decode(select(2, http('GET', '/v2/models/mlp_split/stats'))).model_stats[1]
    local sizes, rows = {}, 0
    for _, b in ipairs(st.batch_stats) do
      sizes[#sizes + 1] = b.batch_size
      rows = rows + b.batch_size * b.compute_infer.count
    end
    table.sort(sizes)
    assert.are.equal(3, rows)
    -- (requests that missed the 1 s window run in smaller batches; never 3 padded to 4)
    assert.is_falsy(table.concat(sizes, ','):find('3', 1, true), table.concat(sizes, ','))
  end)

  it('unloads and loads a model', function()
    assert.are.equal(200, (http('POST', '/v2/repository/models/mlp_auto/unload')))
    check_error(req('GET', '/v2/models/mlp_auto/ready'), 404, 'unknown model')
    assert.are.equal(200, (http('POST', '/v2/repository/models/mlp_auto/load')))
    assert.are.equal(200, (http('GET', '/v2/models/mlp_auto/ready')))
    -- Triton's configuration override in the load request, then back to the folder's
    local cfg = {name = 'mlp_auto', max_batch_size = 2,
                 input = {{name = 'INPUT__0', data_type = 'TYPE_FP32', dims = {16}}},
                 output = {{name = 'OUTPUT__0', data_type = 'TYPE_FP32', dims = {4}}}}
    local code, body = http('POST', '/v2/repository/models/mlp_auto/load',
                            json.encode({parameters = {config = json.encode(cfg)}}))
    assert.are.equal(200, code, body)
    assert.are.equal(2, json.decode(select(2, http('GET', '/v2/models/mlp_auto/config'))).max_batch_size)
    check_error(req('POST', '/v2/models/mlp_auto/infer', infer_body('INPUT__0', {4, 16}, flat(flow.randn(4, 16)))),
                400, 'batch above max_batch_size')
    assert.are.equal(200, (http('POST', '/v2/repository/models/mlp_auto/load')))
    assert.are.equal(4, json.decode(select(2, http('GET', '/v2/models/mlp_auto/config'))).max_batch_size)
    check_error(req('POST', '/v2/repository/models/mlp_auto/load', '{"parameters": {"file:1/model.ofg": "AA=="}}'),
                400, "parameter 'file:1/model.ofg' is not supported")
    check_error(req('POST', '/v2/repository/models/mlp_auto/load', '{"parameters": '), 400, 'load:')
    check_error(req('POST', '/v2/repository/models/mlp_auto/load', '{"params": {}}'), 400, "unknown member 'params'")
    cfg.name = 'other'
    check_error(req('POST', '/v2/repository/models/mlp_auto/load',
                    json.encode({parameters = {config = json.encode(cfg)}})),
                400, "the load request's config names the model 'other'")
    assert.are.equal(200, (http('POST', '/v2/repository/models/mlp_auto/load')))
    assert.are.equal(200, (http('GET', '/v2/models/mlp_auto/ready')))
    check_error(req('POST', '/v2/repository/models/no_graph/load'), 400, 'no model.ofg')
    check_error(req('POST', '/v2/repository/models/..%2Fx/load'), 404, 'unknown path')
    check_error(req('POST', '/v2/repository/models/.hidden/load'), 400, 'no model folder')
  end)

  it('serves tritonclient: JSON and binary inference on the MLP and ResNet-18', function()
    local py = tritonclient_python('tritonclient.http')
    if not py then return end
    local x, xr = flow.randn(2, 16), flow.randn(1, 3, 64, 64)
    write(dir .. '/x.bin', bytes(x))
    write(dir .. '/xr.bin', bytes(xr))
    local lines = {}
    for _, bin in ipairs({0, 1}) do
      lines[#lines + 1] = ('mlp x y 2,16 %s/x.bin %s/y%d.bin %d'):format(dir, dir, bin, bin)
      lines[#lines + 1] = ('resnet INPUT__0 OUTPUT__0 1,3,64,64 %s/xr.bin %s/yr%d.bin %d'):format(dir, dir, bin, bin)
    end
    write(dir .. '/cases', table.concat(lines, '\n') .. '\n')
    local out = sh(('%s spec/serve/client_check.py 127.0.0.1:%s %s/cases 2>&1'):format(py, port, dir))
    assert.is_truthy(out:find('server flow-serve True', 1, true), out)
    assert.is_truthy(out:find('log verbose 1 default', 1, true), out)
    -- the classes the client read from binary BYTES: g2 of its input, top 2 a row
    local yc = g2((flow.arange(0, 32):view(2, 16) - 10) / 7)
    local classes = {}
    for r = 1, 2 do
      local row = yc[r]:totable()
      local idx = {1, 2, 3, 4}
      table.sort(idx, function(a, b) if row[a] ~= row[b] then return row[a] > row[b] end return a < b end)
      for q = 1, 2 do
        local lab = ({'zero', 'one', 'two'})[idx[q]]
        classes[#classes + 1] = ('%f:%d'):format(row[idx[q]], idx[q] - 1) .. (lab and (':' .. lab) or '')
      end
    end
    assert.is_truthy(out:find('classes [2, 2] ' .. table.concat(classes, ' '), 1, true), out)
    assert.is_truthy(out:find('"name": "resnet"', 1, true), out)
    -- get_inference_statistics: the client's two inferences of the ResNet counted
    assert.is_truthy(out:find('stats resnet 1 2 2', 1, true), out)
    assert.is_truthy(out:find('override max_batch_size 2\nreloaded max_batch_size 4', 1, true), out)
    -- INT16 and UINT8..UINT64 from numpy, JSON and binary: x + x exactly (wrapping)
    for _, dt in ipairs(INT_DTYPES) do
      assert.is_truthy(out:find(('dtype %s json True binary True'):format(INT_CASES[dt][1]), 1, true), out)
    end
    assert.is_truthy(out:find("unknown model: [404] unknown model 'no_such_model'", 1, true)
                     or out:find("unknown model 'no_such_model'", 1, true), out)
    local want, wantr = bytes(g2(x)), bytes(gr(xr))
    for _, bin in ipairs({0, 1}) do
      assert.are.equal(want, read(('%s/y%d.bin'):format(dir, bin)), out)
      assert.are.equal(wantr, read(('%s/yr%d.bin'):format(dir, bin)), out)
    end
  end)

  it('reads inputs from and writes outputs into system shared memory (--allow-client-shm=true)', function()
    -- off unless the server was started with it: a region names any shared
    -- memory object the server's user may open
    check_error(req('POST', '/v2/systemsharedmemory/region/r/register', '{"key": "/x", "byte_size": 4}'), 400,
                '--allow-client-shm=true')
    local code, body = http('GET', '/v2/systemsharedmemory/status')
    assert.are.equal(200, code, body)
    assert.are.equal('[]', body)
    local repo2 = dir .. '/repo_shm'
    os.execute(('mkdir -p %s && cp -r %s/mlp %s/'):format(repo2, repo, repo2))
    local shm_log = dir .. '/shm_server.log'
    local pid2, port2 = start(repo2, dir .. '/log_shm',
                              '--allow-client-shm=true --log-verbose 1 --log-file ' .. shm_log)
    local main_url = url
    url = 'http://127.0.0.1:' .. port2
    -- shm_open's objects are the files of /dev/shm
    local key = ('of_spec_%d'):format(pid2)
    local fin, fout = '/dev/shm/' .. key .. '_in', '/dev/shm/' .. key .. '_out'
    finally(function()
      url = main_url
      os.execute('kill -9 ' .. pid2 .. ' 2>/dev/null')
      os.remove(fin); os.remove(fout); os.remove('/dev/shm/' .. key .. '_link')
    end)
    local x = flow.randn(2, 16)
    write(fin, ('\0'):rep(64) .. bytes(x))
    write(fout, ('\0'):rep(256))
    local function register(name, k, off, size)
      return req('POST', '/v2/systemsharedmemory/region/' .. name .. '/register',
                 json.encode({key = k, offset = off, byte_size = size}))
    end
    assert.are.equal(200, register('in', '/' .. key .. '_in', 0, 192)[1])
    assert.are.equal(200, register('out', '/' .. key .. '_out', 16, 240)[1])
    code, body = http('GET', '/v2/systemsharedmemory/region/out/status')
    assert.are.equal(200, code, body)
    assert.are.same({{name = 'out', key = '/' .. key .. '_out', offset = 16, byte_size = 240}}, json.decode(body))
    assert.are.equal(2, #json.decode(select(2, http('GET', '/v2/systemsharedmemory/status'))))
    local function infer(inp, outp)
      return req('POST', '/v2/models/mlp/infer', json.encode({inputs = {inp}, outputs = outp and {outp}}))
    end
    local function shm_in(params)
      return {name = 'x', shape = {2, 16}, datatype = 'FP32', parameters = params}
    end
    local good_in = shm_in({shared_memory_region = 'in', shared_memory_offset = 64, shared_memory_byte_size = 128})
    local r = infer(good_in, {name = 'y', parameters = {shared_memory_region = 'out', shared_memory_offset = 8,
                                                        shared_memory_byte_size = 32}})
    assert.are.equal(200, r[1], r[2])
    local out = json.decode(r[2]).outputs[1]
    assert.are.same({2, 4}, out.shape)
    assert.is_nil(out.data)
    assert.are.equal('out', out.parameters.shared_memory_region)
    assert.are.equal(32, out.parameters.shared_memory_byte_size)
    -- the region starts 16 bytes into the object, the output 8 into the region
    local want = bytes(g2(x))
    assert.are.equal(want, read(fout):sub(25, 24 + 32))
    -- a shared memory input with a JSON output
    r = infer(good_in)
    assert.are.equal(200, r[1], r[2])
    H.close(flow.tensor(json.decode(r[2]).outputs[1].data, {dtype = flow.float32}):view(2, 4), g2(x), 1e-6)
    -- bad requests: the protocol's error, and the server stays up
    check_error(infer(shm_in({shared_memory_region = 'nope', shared_memory_byte_size = 128})), 400,
                "unable to find system shared memory region 'nope'")
    check_error(infer(shm_in({shared_memory_region = 'in', shared_memory_byte_size = 64})), 400,
                'shared_memory_byte_size 64', '128 bytes')
    check_error(infer(shm_in({shared_memory_region = 'in', shared_memory_offset = 65, shared_memory_byte_size = 128})),
                400, 'outside shared memory region')
    check_error(infer(shm_in({shared_memory_region = 'in'})), 400, 'must be given together')
    check_error(infer(shm_in({shared_memory_region = 'in', shared_memory_byte_size = -1})), 400, 'non-negative')
    local both = shm_in({shared_memory_region = 'in', shared_memory_offset = 64, shared_memory_byte_size = 128})
    both.data = flat(x)
    check_error(infer(both), 400, 'shared memory and "data" together')
    check_error(infer(good_in, {name = 'y', parameters = {shared_memory_region = 'out', shared_memory_byte_size = 16}}),
                400, "output 'y'", '32 bytes, more than its shared_memory_byte_size 16')
    check_error(infer(good_in, {name = 'y', parameters = {shared_memory_region = 'out', shared_memory_offset = 230,
                                                          shared_memory_byte_size = 32}}), 400, 'outside')
    check_error(register('in', '/' .. key .. '_in', 0, 8), 400, "'in' is already registered")
    check_error(register('gone', '/' .. key .. '_none', 0, 8), 400, 'unable to open shared memory object')
    check_error(register('long', '/' .. key .. '_in', 100, 100), 400, 'past the end')
    check_error(register('up', '/../etc/passwd', 0, 8), 400, 'is not a shared memory key')
    -- a link under /dev/shm is not followed
    os.execute(('ln -sf %s /dev/shm/%s_link'):format(fin, key))
    check_error(register('link', '/' .. key .. '_link', 0, 8), 400, 'unable to open shared memory object')
    check_error(req('POST', '/v2/systemsharedmemory/region/k/register', '{"key": "/a", "byte_size": 1, "size": 2}'),
                400, "unknown member 'size'")
    check_error(req('POST', '/v2/systemsharedmemory/region/k/register', '{"offset": 0}'), 400, 'needs "key"')
    check_error(req('POST', '/v2/cudasharedmemory/region/k/register', '{}'), 400, 'CUDA shared memory is not supported')
    -- the client shrinks its object after registering it: an error for
    -- that request (the server reads with pread, never through a mapping)
    write(fin, ('\0'):rep(100))
    check_error(infer(good_in), 400, 'smaller than the region now')
    write(fin, ('\0'):rep(64) .. bytes(x))
    assert.are.equal(200, infer(good_in)[1])
    -- unregister one, then all
    assert.are.equal(200, http('POST', '/v2/systemsharedmemory/region/in/unregister'))
    check_error(req('GET', '/v2/systemsharedmemory/region/in/status'), 400, "region 'in'")
    check_error(infer(good_in), 400, "unable to find system shared memory region 'in'")
    assert.are.equal(200, http('POST', '/v2/systemsharedmemory/unregister'))
    assert.are.equal('[]', select(2, http('GET', '/v2/systemsharedmemory/status')))
    assert.are.equal('[]', select(2, http('GET', '/v2/cudasharedmemory/status')))
    assert.are.equal(200, http('GET', '/v2/health/live'))
    -- this server logs into --log-file, a line a request (--log-verbose 1)
    local slog = read(shm_log)
    assert.is_truthy(slog:find("I%d+ [%d:.]+ %d+ flow%-serve%] model 'mlp' version 2 loaded"), slog)
    assert.is_truthy(slog:find('POST /v2/systemsharedmemory/region/in/register 200, %d+ bytes in, 0 out'), slog)
    assert.is_truthy(slog:find('POST /v2/models/mlp/infer 400, ', 1, true), slog)
    assert.are.equal(shm_log, json.decode(select(2, http('GET', '/v2/logging'))).log_file)
    -- the file may be named again, not changed
    assert.are.equal(200, http('POST', '/v2/logging', json.encode({log_file = shm_log})))
    -- NVIDIA's client: tritonclient.utils.shared_memory makes the regions
    local py = tritonclient_python('tritonclient.utils.shared_memory')
    if not py then return end
    write(dir .. '/xs.bin', bytes(x))
    local pout = sh(('%s spec/serve/shm_check.py 127.0.0.1:%s mlp x y 2,16 32 %s/xs.bin %s/ys.bin 2>&1')
                    :format(py, port2, dir, dir))
    assert.is_truthy(pout:find('extension True', 1, true), pout)
    assert.is_truthy(pout:find("status [('tc_in', True, 128), ('tc_out', True, 32)]", 1, true), pout)
    assert.is_truthy(pout:find('output FP32 [2, 4] False', 1, true), pout)
    assert.is_truthy(pout:find('after []', 1, true), pout)
    assert.are.equal(want, read(dir .. '/ys.bin'), pout)
  end)

  it('logs loads, failures and requests; GET / POST /v2/logging change the settings', function()
    local log = read(dir .. '/log')
    assert.is_truthy(log:find("E%d%d%d%d [%d:.]+ %d+ flow%-serve%] model 'bad_config' failed to load: "), log)
    assert.is_truthy(log:find("I%d+ [%d:.]+ %d+ flow%-serve%] model 'resnet' version 1 loaded: 1 instance, "
                              .. "2 compiled input signatures"), log)
    local code, body = http('GET', '/v2/logging')
    assert.are.equal(200, code, body)
    assert.are.same({log_file = '', log_info = true, log_warnings = true, log_errors = true, log_verbose_level = 0,
                     log_format = 'default'}, json.decode(body))
    -- quiet at verbose 0: no line for a request
    local n = #read(dir .. '/log')
    http('GET', '/v2/health/live')
    assert.are.equal(n, #read(dir .. '/log'))
    code, body = http('POST', '/v2/logging', '{"log_verbose_level": 2, "log_format": "ISO8601"}')
    assert.are.equal(200, code, body)
    assert.are.equal(2, json.decode(body).log_verbose_level)
    http('GET', '/v2/models/no_such_model')
    http('GET', '/v2/health/live')
    log = read(dir .. '/log'):sub(n + 1)
    -- the line is written before the answer is sent
    assert.is_truthy(log:find("%d%d%d%d%-%d%d%-%d%dT[%d:]+Z I %d+ flow%-serve%] GET /v2/models/no_such_model 404, "
                              .. '0 bytes in, %d+ out, [%d.]+ ms: {"error":"unknown model \'no_such_model\'"}'), log)
    assert.is_truthy(log:find('GET /v2/health/live 200, 0 bytes in, 0 out', 1, true), log)
    -- bad settings are refused and change nothing
    for _, bad in ipairs({{'{"log_verbose_level": 0, "log_format": "xml"}', 'log_format must be'},
                          {'{"log_file": "/tmp/x"}', 'command line only'},
                          {'{"verbose": 1}', "unknown setting 'verbose'"},
                          {'{"log_info": "yes"}', 'log_info must be true or false'},
                          {'{"log_verbose_level": -1}', 'non-negative integer'},
                          {'[1]', 'an object of settings'}}) do
      check_error(req('POST', '/v2/logging', bad[1]), 400, bad[2])
    end
    check_error(req('PUT', '/v2/logging'), 405, 'GET or POST')
    assert.are.equal(2, json.decode(select(2, http('GET', '/v2/logging'))).log_verbose_level)
    -- log_info false silences verbose lines too (they are INFO lines)
    assert.are.equal(200, http('POST', '/v2/logging', '{"log_info": false}'))
    n = #read(dir .. '/log')
    http('GET', '/v2/health/live')
    assert.are.equal(n, #read(dir .. '/log'))
    code, body = http('POST', '/v2/logging', '{"log_info": true, "log_verbose_level": 0, "log_format": "default"}')
    assert.are.equal(200, code, body)
    assert.is_truthy(body:find('"logging"', 1, true) == nil)
    assert.is_truthy(select(2, http('GET', '/v2')):find('"logging"', 1, true))
  end)

  it('traces requests to a file (the trace extension): rate, count, log frequency, refused settings', function()
    local code, body = http('GET', '/v2/trace/setting')
    assert.are.equal(200, code, body)
    assert.are.same({trace_file = '', trace_level = {'OFF'}, trace_rate = '1000', trace_count = '-1',
                     log_frequency = '0'}, json.decode(body))
    for _, bad in ipairs({{'{"trace_level": ["TIMESTAMPS"]}', 'needs a trace file'},
                          {'{"trace_file": "/tmp/t.json"}', 'command line only'},
                          {'{"trace_level": ["TENSORS"]}', 'TENSORS is not supported'},
                          {'{"trace_rate": "0"}', 'positive integer'},
                          {'{"rate": 1}', "unknown setting 'rate'"}}) do
      check_error(req('POST', '/v2/trace/setting', bad[1]), 400, bad[2])
    end
    -- a model's own settings: made from the server's, removed by {}
    code, body = http('POST', '/v2/models/mlp/trace/setting', '{"trace_rate": "5", "trace_count": 7}')
    assert.are.equal(200, code, body)
    assert.are.same({trace_file = '', trace_level = {'OFF'}, trace_rate = '5', trace_count = '7',
                     log_frequency = '0'}, json.decode(body))
    assert.are.equal('5', json.decode(select(2, http('GET', '/v2/models/mlp/trace/setting'))).trace_rate)
    assert.are.equal('1000', json.decode(select(2, http('GET', '/v2/trace/setting'))).trace_rate)
    assert.are.equal('1000', json.decode(select(2, http('GET', '/v2/models/resnet/trace/setting'))).trace_rate)
    assert.are.equal('1000', json.decode(select(2, http('POST', '/v2/models/mlp/trace/setting', '{}'))).trace_rate)
    check_error(req('POST', '/v2/models/mlp/trace/setting', '{"trace_level": ["TIMESTAMPS"]}'), 400,
                'needs a trace file')
    check_error(req('GET', '/v2/models/no_such_model/trace/setting'), 404, "unknown model 'no_such_model'")
    assert.is_truthy(select(2, http('GET', '/v2')):find('"trace"', 1, true))
    -- a server that traces every second request, at most 3, two a file
    local repo3 = dir .. '/repo_trace'
    os.execute(('mkdir -p %s && cp -r %s/mlp %s/'):format(repo3, repo, repo3))
    local tf = dir .. '/trace.json'
    local opts = ('--trace-file %s --trace-level TIMESTAMPS --trace-rate 2 --trace-count 3 '
                  .. '--trace-log-frequency 2'):format(tf)
    local pid3, port3 = start(repo3, dir .. '/log_trace', opts)
    finally(function() os.execute('kill -9 ' .. pid3 .. ' 2>/dev/null') end)
    local x = flow.randn(1, 16)
    local function send(k)
      write(dir .. '/treq', json.encode({id = 'r' .. k, inputs = {{name = 'x', shape = {1, 16}, datatype = 'FP32',
                                                                   data = flat(x)}}}))
      assert.are.equal('200', sh(("curl -s -o /dev/null -w '%%{http_code}' --data-binary @%s/treq "
                                  .. "http://127.0.0.1:%s/v2/models/mlp/infer"):format(dir, port3)))
    end
    for k = 0, 7 do send(k) end
    local first = json.decode(read(tf .. '.0'))
    assert.are.same({'r0', 'r2'}, {first[1].request_id, first[2].request_id})
    assert.is_nil(read(tf .. '.1'))   -- the third waits for a second one, or the exit
    -- the model's own settings (from the server's: tracing, 1 file a 2):
    -- every request, at most 2
    local set = sh(("curl -s -d '{\"trace_rate\": \"1\", \"trace_count\": \"2\"}' "
                    .. 'http://127.0.0.1:%s/v2/models/mlp/trace/setting'):format(port3))
    assert.are.equal('TIMESTAMPS', json.decode(set).trace_level[1], set)
    for k = 10, 12 do send(k) end
    local second = json.decode(read(tf .. '.1'))
    assert.are.same({'r4', 'r10'}, {second[1].request_id, second[2].request_id})
    os.execute('kill -TERM ' .. pid3)
    for _ = 1, 100 do
      if (read(dir .. '/log_trace') or ''):find('stopped', 1, true) then break end
      os.execute('sleep 0.1')
    end
    local third = json.decode(read(tf .. '.2'))
    assert.are.equal(1, #third)
    assert.are.equal('r11', third[1].request_id)
    assert.is_nil(read(tf .. '.3'))
    -- Triton's timestamps, in order of time
    local t = first[1]
    assert.are.equal('mlp', t.model_name)
    assert.are.equal(2, t.model_version)
    local names, last = {}, 0
    for i, ts in ipairs(t.timestamps) do
      names[i] = ts.name
      assert.is_true(ts.ns >= last, ts.name)
      last = ts.ns
    end
    assert.are.same({'HTTP_RECV_START', 'REQUEST_START', 'QUEUE_START', 'COMPUTE_START', 'COMPUTE_INPUT_END',
                     'COMPUTE_OUTPUT_START', 'COMPUTE_END', 'REQUEST_END'}, names)
  end)

  it('drains and exits cleanly on SIGTERM', function()
    local x = flow.randn(1, 16)
    write(dir .. '/slow.json', infer_body('x', {1, 16}, flat(x)))
    -- a request waiting in the batching queue (1 s) when SIGTERM comes
    os.execute(('(curl -s -o %s/slow_out.json -X POST --data-binary @%s/slow.json '
                .. '%s/v2/models/mlp_batched/infer &) ; sleep 0.1; kill -TERM %d'):format(dir, dir, url, pid))
    for _ = 1, 100 do
      if (read(dir .. '/log') or ''):find('stopped', 1, true) then break end
      os.execute('sleep 0.1')
    end
    assert.is_truthy(read(dir .. '/log'):find('SIGTERM: stopped (0 requests unfinished)', 1, true), read(dir .. '/log'))
    local r = json.decode(read(dir .. '/slow_out.json'))
    H.close(flow.tensor(r.outputs[1].data, {dtype = flow.float32}), g2(x), 1e-6)
    pid = nil
  end)
end)
