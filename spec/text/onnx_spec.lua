-- BERT exported with flow.onnx.export (inputs input_ids and attention_mask,
-- dynamic batch and sequence axes) agrees with onnxruntime: a small random
-- BERT always, all-MiniLM-L6-v2 where tools/minilm.sh has unpacked it. The
-- checks run spec/onnx/check_onnx.py in the onnxruntime venv
-- (spec/onnx/setup_onnxruntime.sh, or $ONNX_PYTHON); pending without it.
local flow = require 'oneflow'
local text = require 'flowtext'
local H = require 'spec.helpers'

local HOME = (os.getenv('XDG_CACHE_HOME') or (os.getenv('HOME') or '') .. '/.cache') .. '/oneflow'
local DIR = os.getenv('FLOWTEXT_MINILM') or HOME .. '/all-MiniLM-L6-v2'

local PY = H.onnx_python()
local f = io.open(DIR .. '/model.safetensors', 'rb')
local HAVE_MODEL = f ~= nil
if f then f:close() end

local AXES = {input_ids = {[1] = 'batch', [2] = 'seq'}, attention_mask = {[1] = 'batch', [2] = 'seq'},
              last_hidden_state = {[1] = 'batch', [2] = 'seq'}, pooler_output = {[1] = 'batch'}}

-- Exports bert, writes the feeds and Lua's outputs for each batch, runs the
-- checker; returns its lines.
local function check_export(bert, batches, tol)
  local d = H.tmpdir()
  local function fwd(ids, mask)
    local o = bert(ids, {attention_mask = mask})
    return o.last_hidden_state, o.pooler_output
  end
  bert:eval()
  flow.onnx.export(fwd, {batches[1].input_ids, batches[1].attention_mask}, d .. '/bert.onnx', {
    input_names = {'input_ids', 'attention_mask'}, output_names = {'last_hidden_state', 'pooler_output'},
    dynamic_axes = AXES})
  local manifest = assert(io.open(d .. '/manifest.txt', 'w'))
  for i, b in ipairs(batches) do
    local h, p = flow.no_grad(function() return fwd(b.input_ids, b.attention_mask) end)
    flow.save({input_ids = b.input_ids, attention_mask = b.attention_mask}, ('%s/in%d.safetensors'):format(d, i))
    flow.save({last_hidden_state = h, pooler_output = p}, ('%s/out%d.safetensors'):format(d, i))
    manifest:write(('batch%d\t%s/bert.onnx\t%s/in%d.safetensors\t%s/out%d.safetensors\t%g\n'):format(
      i, d, d, i, d, i, tol))
  end
  manifest:close()
  local p = io.popen(('%s spec/onnx/check_onnx.py %s/manifest.txt 2>&1'):format(PY, d))
  local out = p:read('*a')
  p:close()
  return out
end

local function assert_ok(out, n)
  local ok = 0
  for line in out:gmatch('[^\n]+') do
    assert.truthy(line:match('^batch%d+\tok\t'), out)
    ok = ok + 1
  end
  assert.equal(n, ok, out)
end

describe('BERT exported to ONNX', function()
  teardown(H.remove_tmpdirs)
  local check = PY and it or pending
  local why = PY and '' or ' (no onnxruntime: sh spec/onnx/setup_onnxruntime.sh)'

  check('a small random BERT agrees with onnxruntime, with padding and other batch/sequence sizes' .. why,
    function()
      flow.manual_seed(4)
      local bert = text.BertModel({vocab_size = 50, hidden_size = 16, num_hidden_layers = 2,
                                   num_attention_heads = 4, intermediate_size = 32, max_position_embeddings = 16})
      local b1 = {input_ids = flow.randint(1, 51, {2, 7}),
                  attention_mask = flow.tensor({{1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0, 0}}, {dtype = flow.int64})}
      local b2 = {input_ids = flow.randint(1, 51, {3, 11}), attention_mask = flow.ones(3, 11, {dtype = flow.int64})}
      assert_ok(check_export(bert, {b1, b2}, 1e-5), 2)
    end)

  check('the same BERT quantized (int8 linear layers, quint8 embedding tables) agrees with onnxruntime' .. why,
    function()
      -- the file computes each dynamic layer's input parameters as the
      -- module does at every run, so other batches quantize with their own
      flow.manual_seed(4)
      local bert = text.BertModel({vocab_size = 50, hidden_size = 16, num_hidden_layers = 2,
                                   num_attention_heads = 4, intermediate_size = 32, max_position_embeddings = 16})
      local Qz, nn = flow.quantization, flow.nn
      local q = Qz.quantize_dynamic(bert, {[nn.Linear] = Qz.default_dynamic_qconfig,
                                           [nn.Embedding] = Qz.float_qparams_weight_only_qconfig})
      local b1 = {input_ids = flow.randint(1, 51, {2, 7}),
                  attention_mask = flow.tensor({{1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0, 0}}, {dtype = flow.int64})}
      local b2 = {input_ids = flow.randint(1, 51, {3, 11}), attention_mask = flow.ones(3, 11, {dtype = flow.int64})}
      assert_ok(check_export(q, {b1, b2}, 1e-4), 2)
    end)

  local check_model = (PY and HAVE_MODEL) and it or pending
  check_model('all-MiniLM-L6-v2 agrees with onnxruntime' .. (HAVE_MODEL and why or ' (no model: sh tools/minilm.sh)'),
    function()
      local bert = text.BertModel.from_pretrained(DIR)
      local tok = text.BertTokenizer(DIR)
      local b1 = tok({'A man is eating food.', 'Café crème ☕ 日本語', ''})
      local b2 = tok({'The quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps again.'})
      assert_ok(check_export(bert, {b1, b2}, 1e-4), 2)
    end)
end)
