-- flow.utils.tensorboard: CRC-32C and TFRecord framing checked in Lua, then
-- the files read back by tensorboard's EventAccumulator (python venv made by
-- spec/tools/setup_tensorboard.sh, run here when missing; pending when pip
-- cannot install it).
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn
local TB = flow.utils.tensorboard

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute('mkdir -p ' .. d) == 0)
  return d
end

local function u32(s, i)
  local a, b, c, d = s:byte(i, i + 3)
  return a + b * 256 + c * 65536 + d * 16777216
end

-- the records of an event file, checking each CRC
local function records(path)
  local s = assert(io.open(path, 'rb')):read('*a')
  local out, i = {}, 1
  while i <= #s do
    local len = u32(s, i)
    assert.are.equal(0, u32(s, i + 4))
    assert.are.equal(TB.masked_crc(s:sub(i, i + 7)), u32(s, i + 8))
    local data = s:sub(i + 12, i + 11 + len)
    assert.are.equal(len, #data)
    assert.are.equal(TB.masked_crc(data), u32(s, i + 12 + len))
    out[#out + 1] = data
    i = i + 16 + len
  end
  return out
end

local function event_file(dir)
  local f = io.popen('ls ' .. dir .. '/events.out.tfevents.*')
  local p = f:read('*l')
  f:close()
  return p
end

local venv_python
local function tb_python()
  if venv_python ~= nil then return venv_python end
  local cache = os.getenv('XDG_CACHE_HOME') or ((os.getenv('HOME') or '/tmp') .. '/.cache')
  local candidates = {cache .. '/oneflow/tb-venv/bin/python'}
  if os.getenv('TB_PYTHON') then table.insert(candidates, 1, os.getenv('TB_PYTHON')) end
  for _ = 1, 2 do
    for _, py in ipairs(candidates) do
      if os.execute(py .. ' -c "import tensorboard" >/dev/null 2>&1') == 0 then
        venv_python = py
        return py
      end
    end
    if os.getenv('TB_NO_SETUP') then break end
    os.execute('timeout 600 sh spec/tools/setup_tensorboard.sh >/dev/null 2>&1')
  end
  venv_python = false
  return false
end

-- runs a Python script with the arguments; its stdout and stderr
local function run_python(py, script, args)
  local sf = os.tmpname()
  assert(io.open(sf, 'w')):write(script)
  local p = io.popen(py .. ' ' .. sf .. ' ' .. table.concat(args, ' ') .. ' 2>&1')
  local out = p:read('*a')
  p:close()
  os.remove(sf)
  return out
end

-- the tensorboard python, a fresh directory and a writer on dir/run; pending
-- (nil) when tensorboard cannot be installed
local function readback_writer()
  local py = tb_python()
  if not py then
    pending('tensorboard could not be installed in a venv (spec/tools/setup_tensorboard.sh needs PyPI)')
    return nil
  end
  local dir = tmpdir()
  return py, dir, TB.SummaryWriter(dir .. '/run')
end

describe('flow.utils.tensorboard', function()
  it('computes CRC-32C and TFRecord masks', function()
    assert.are.equal(0xE3069283, TB.crc32c('123456789'))
    assert.are.equal(0, TB.crc32c(''))
    assert.are.equal(0x8A9136AA, TB.crc32c(string.rep('\0', 32)))
    -- mask(crc) = rotr15(crc) + 0xa282ead8 mod 2^32
    local c = TB.crc32c('abc')
    local rot = (math.floor(c / 2 ^ 15) + (c % 2 ^ 15) * 2 ^ 17) % 2 ^ 32
    assert.are.equal((rot + 0xa282ead8) % 2 ^ 32, TB.masked_crc('abc'))
    local r = TB.record('hello')
    assert.are.equal(8 + 4 + 5 + 4, #r)
    assert.are.equal(5, u32(r, 1))
  end)

  it('appends whole records, flushed after each call', function()
    local dir = tmpdir()
    local w = TB.SummaryWriter(dir)
    local path = event_file(dir)
    assert.are.equal(1, #records(path))                 -- the file_version event
    assert.truthy(records(path)[1]:find('brain.Event:2', 1, true))
    w:add_scalar('a', 1.5, 1)
    assert.are.equal(2, #records(path))                 -- readable before close
    w:add_text('t', 'x', 1)
    w:close()
    assert.are.equal(3, #records(path))
    H.raises(function() w:add_scalar('a', 1, 2) end, 'the writer is closed')
    os.execute('rm -rf ' .. dir)
  end)

  it('computes histograms like TensorFlow and in equal bins', function()
    -- [-1, -0.25) [-0.25, 0.5) [0.5, 1.25) [1.25, 2]
    local h = TB.histogram({-1, 0, 0.5, 2, 2}, 4)
    assert.are.same({1, 1, 1, 2}, h.bucket)
    H.close(h.bucket_limit, {-0.25, 0.5, 1.25, 2})
    assert.are.equal(5, h.num)
    assert.are.equal(3.5, h.sum)
    assert.are.equal(9.25, h.sum_squares)
    local t = TB.histogram({1, 1, 1})
    local total = 0
    for _, c in ipairs(t.bucket) do total = total + c end
    assert.are.equal(3, total)
    assert.are.equal(1, t.bucket_limit[#t.bucket_limit] >= 1 and 1 or 0)
    H.raises(function() TB.histogram({1, 0 / 0}) end, 'NaN')
  end)

  it('checks its arguments', function()
    local dir = tmpdir()
    local w = TB.SummaryWriter(dir)
    H.raises(function() w:add_scalar('', 1, 1) end, 'add_scalar: tag must be a non-empty string')
    H.raises(function() w:add_scalar('a', flow.ones(2), 1) end, 'one-element tensor', '[2]')
    H.raises(function() w:add_scalar('a', 1, 1.5) end, 'global_step must be an integer')
    H.raises(function() w:add_image('i', flow.rand(5, 4, 4), 1) end, '1, 3 or 4 channels')
    H.raises(function() w:add_image('i', flow.rand(4, 4), 1) end, 'dataformats CHW needs a 3-d tensor')
    H.raises(function() w:add_histogram('h', {1}, 1, {bin = 3}) end, "unknown option 'bin'", "'bins'")
    H.raises(function() TB.SummaryWriter(dir, {coment = 'x'}) end, "SummaryWriter: unknown option 'coment'")
    H.raises(function() w:add_graph(nn.Linear(2, 2)) end, 'give example inputs')
    w:close()
    os.execute('rm -rf ' .. dir)
  end)

  it('is read back by tensorboard: scalars, histograms, images, text, graph', function()
    local py, dir, w = readback_writer()
    if not py then return end
    for s = 1, 5 do w:add_scalar('loss/train', 1 / s, s) end
    w:add_scalar('lr', flow.tensor({0.25}), 7)
    w:add_scalars('acc', {train = 0.9, val = 0.75}, 3)
    flow.manual_seed(1)
    local vals = flow.randn(1000)
    w:add_histogram('weights', vals, 2)
    w:add_histogram('w10', vals, 2, {bins = 10})
    w:add_image('rgb', flow.rand(3, 20, 30), 4)
    w:add_image('gray', (flow.rand(12, 16) * 255):to(flow.uint8), 4, {dataformats = 'HW'})
    w:add_text('notes', 'lr = 0.1 <b>', 5)
    local nodes = w:add_graph(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), flow.randn(3, 4))
    w:close()
    local script = [[
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
z = {'scalars': 0, 'histograms': 0, 'images': 0, 'tensors': 0}
a = EventAccumulator(sys.argv[1] + '/run', size_guidance=z); a.Reload()
print('scalars', ' '.join('%d:%.6g' % (e.step, e.value) for e in a.Scalars('loss/train')))
print('lr', a.Scalars('lr')[0].step, a.Scalars('lr')[0].value)
h = a.Histograms('weights')[0].histogram_value
print('hist', a.Histograms('weights')[0].step, int(h.num), int(sum(h.bucket)), '%.6f %.6f' % (h.min, h.max))
print('hist10', len(a.Histograms('w10')[0].histogram_value.bucket))
for t in ('rgb', 'gray'):
    im = a.Images(t)[0]
    print('image', t, im.step, im.width, im.height, im.encoded_image_string[:8] == b'\x89PNG\r\n\x1a\n')
t = a.Tensors('notes/text_summary')[0]
print('text', t.step, t.tensor_proto.string_val[0].decode())
g = a.Graph()
print('graph', len(g.node), sum(1 for n in g.node if n.op == 'addmm'), sum(1 for n in g.node if n.op == 'Parameter'))
for k in ('train', 'val'):
    b = EventAccumulator(sys.argv[1] + '/run/acc_' + k); b.Reload()
    print('acc', k, b.Scalars('acc')[0].step, '%.6g' % b.Scalars('acc')[0].value)
]]
    local out = run_python(py, script, {dir})
    local mn, mx = vals:min():item(), vals:max():item()
    local want = table.concat({
      'scalars 1:1 2:0.5 3:0.333333 4:0.25 5:0.2',
      'lr 7 0.25',
      ('hist 2 1000 1000 %.6f %.6f'):format(mn, mx),
      'hist10 10',
      'image rgb 4 30 20 True',
      'image gray 4 16 12 True',
      'text 5 lr = 0.1 <b>',
      ('graph %d 2 4'):format(nodes),
      'acc train 3 0.9',
      'acc val 3 0.75', ''}, '\n')
    assert.are.equal(want, out)
    -- input, 4 parameters, 5 ops (2 x transpose, 2 x addmm: an eval graph's
    -- nn.Linear, the relu), output
    assert.are.equal(1 + 4 + 5 + 1, nodes)
    os.execute('rm -rf ' .. dir)
  end)

  it('checks the arguments of add_images, add_pr_curve and add_hparams', function()
    local dir = tmpdir()
    local w = TB.SummaryWriter(dir)
    H.raises(function() w:add_images('b', flow.rand(3, 4, 4), 1) end, 'dataformats NCHW needs a 4-d tensor', '[3,4,4]')
    H.raises(function() w:add_images('b', flow.rand(2, 3, 4, 4), 1, {dataformat = 'NHWC'}) end,
             "unknown option 'dataformat'", "'dataformats'")
    H.raises(function() w:add_pr_curve('p', {1, 0}, {0.5}, 1) end, 'labels (2), predictions (1)')
    H.raises(function() w:add_pr_curve('p', {1}, {1.5}, 1) end, 'predictions must be in [0, 1]', '1.5')
    H.raises(function() w:add_pr_curve('p', {1}, {0.5}, 1, {num_thresholds = 1}) end,
             'num_thresholds must be an integer >= 2')
    H.raises(function() w:add_hparams({lr = {}}, {}) end, 'hyperparameter lr must be a number, string or boolean')
    w:close()
    os.execute('rm -rf ' .. dir)
  end)

  it('is read back by tensorboard: image grids, PR curves, hparams', function()
    local py, dir, w = readback_writer()
    if not py then return end
    -- 10 images of 2x3 whose pixel values name the image: a grid of 8 + 2
    local imgs = flow.zeros(10, 3, 2, 3, {dtype = flow.uint8})
    for i = 1, 10 do imgs[i]:fill_(i * 20) end
    w:add_images('batch', imgs, 3)
    w:add_images('gray', flow.ones(3, 2, 2, 1), 4, {dataformats = 'NHWC'})
    flow.manual_seed(3)
    local probs = flow.rand(200)
    local labels = flow.rand(200):lt(probs):to(flow.float32)
    local weights = flow.rand(200)
    w:add_pr_curve('pr', labels, probs, 5)
    w:add_pr_curve('pr_w', labels, probs, 6, {num_thresholds = 11, weights = weights})
    w:add_hparams({lr = 0.125, optimizer = 'sgd', bn = true}, {['hparam/accuracy'] = 0.75}, {run_name = 'h1'})
    w:close()
    local function list(t)
      local out = {}
      for i, v in ipairs(t:totable()) do out[i] = ('%.9g'):format(v) end
      return table.concat(out, ',')
    end
    local script = [[
import sys, io
import numpy as np
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.plugins.pr_curve import plugin_data_pb2 as pr_data
import glob
d = sys.argv[1]
z = {'images': 0, 'tensors': 0}
a = EventAccumulator(d + '/run', size_guidance=z); a.Reload()
im = a.Images('batch')[0]
px = np.asarray(Image.open(io.BytesIO(im.encoded_image_string)))
print('batch', im.step, im.width, im.height, px.shape)
# each 2x3 cell holds its image's value; cells 11..16 are zeros
print('cells', ' '.join(str(int(px[r * 2, c * 3, 0])) for r in range(2) for c in range(8)))
g = a.Images('gray')[0]
gp = np.asarray(Image.open(io.BytesIO(g.encoded_image_string)))
print('gray', g.width, g.height, gp.shape, int(gp.min()), int(gp.max()))
# PyTorch's compute_curve (torch/utils/tensorboard/summary.py), in numpy
def curve(labels, predictions, n, weights=None):
    if weights is None: weights = 1.0
    b = np.int32(np.floor(predictions * (n - 1)))
    fl = labels.astype(np.float64)
    tpb, _ = np.histogram(b, bins=n, range=(0, n - 1), weights=fl * weights)
    fpb, _ = np.histogram(b, bins=n, range=(0, n - 1), weights=(1.0 - fl) * weights)
    tp = np.cumsum(tpb[::-1])[::-1]; fp = np.cumsum(fpb[::-1])[::-1]
    tn = fp[0] - fp; fn = tp[0] - tp
    return np.stack((tp, fp, tn, fn, tp / np.maximum(1e-7, tp + fp), tp / np.maximum(1e-7, tp + fn)))
lab = np.array([float(v) for v in sys.argv[2].split(',')])
pro = np.array([float(v) for v in sys.argv[3].split(',')], dtype=np.float32).astype(np.float64)
wts = np.array([float(v) for v in sys.argv[4].split(',')], dtype=np.float32).astype(np.float64)
for tag, n, wt in (('pr', 127, None), ('pr_w', 11, wts)):
    t = a.Tensors(tag)[0]
    got = tensor_util.make_ndarray(t.tensor_proto)
    md = a.SummaryMetadata(tag)
    pd = pr_data.PrCurvePluginData.FromString(md.plugin_data.content)
    want = curve(lab, pro, n, wt).astype(np.float32)
    print(tag, t.step, md.plugin_data.plugin_name, pd.num_thresholds, got.shape,
          bool(np.allclose(got, want, rtol=1e-5, atol=1e-5)), '%.4g' % got[0, 0])
f = glob.glob(d + '/run/h1/events.out.tfevents.*')[0]
for e in EventFileLoader(f).Load():
    for v in e.summary.value:
        if v.metadata.plugin_data.plugin_name == 'hparams':
            p = plugin_data_pb2.HParamsPluginData.FromString(v.metadata.plugin_data.content)
            k = p.WhichOneof('data')
            if k == 'experiment':
                print('experiment', sorted((h.name, h.type) for h in p.experiment.hparam_infos),
                      [m.name.tag for m in p.experiment.metric_infos])
            elif k == 'session_start_info':
                h = p.session_start_info.hparams
                print('start', h['lr'].number_value, h['optimizer'].string_value, h['bn'].bool_value)
            else:
                print('end', p.session_end_info.status)
        elif v.tag != '':
            # the loader may hand scalars over as tensors (data_compat)
            x = v.simple_value if v.HasField('simple_value') else float(tensor_util.make_ndarray(v.tensor))
            print('metric', v.tag, e.step, x)
]]
    local out = run_python(py, script, {dir, list(labels), list(probs), list(weights)})
    local want = table.concat({
      'batch 3 24 4 (4, 24, 3)',
      'cells 20 40 60 80 100 120 140 160 180 200 0 0 0 0 0 0',
      'gray 6 2 (2, 6, 3) 255 255',
      ('pr 5 pr_curves 127 (6, 127) True %.4g'):format(labels:sum():item()),
      ('pr_w 6 pr_curves 11 (6, 11) True %.4g'):format((labels * weights):sum():item()),
      "experiment [('bn', 2), ('lr', 3), ('optimizer', 1)] ['hparam/accuracy']",
      'start 0.125 sgd True',
      'end 1',
      'metric hparam/accuracy 0 0.75', ''}, '\n')
    assert.are.equal(want, out)
    os.execute('rm -rf ' .. dir)
  end)
end)
