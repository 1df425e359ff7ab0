-- flow.utils.summary: rows, parameter counts (by hand and against
-- torchvision's resnet18 when /usr/bin/python3 has torch), memory figures.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn

local PY = os.getenv('FLOWVISION_PYTHON') or '/usr/bin/python3'
local function torchvision_available()
  return os.execute(PY .. ' -c "import importlib.util as u, sys; '
    .. 'sys.exit(0 if u.find_spec(\'torch\') and u.find_spec(\'torchvision\') else 1)" >/dev/null 2>&1') == 0
end

describe('flow.utils.summary', function()
  it('counts parameters per row and in total, split by requires_grad', function()
    local net = nn.Sequential(nn.Conv2d(3, 8, 3, {padding = 1}), nn.BatchNorm2d(8), nn.ReLU(),
                              nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    net[5].bias:requires_grad_(false)
    local text, rows = flow.utils.summary(net, {2, 3, 4, 4})
    -- conv 8*3*3*3 + 8 = 224, bn 8 + 8 = 16, linear 128*10 + 10 = 1290
    assert.are.equal(224 + 16 + 1290, rows.total_params)
    assert.are.equal(224 + 16 + 1280, rows.trainable_params)
    assert.are.equal(10, rows.non_trainable_params)
    assert.are.equal(6, #rows)
    assert.are.equal('Sequential', rows[1].class)
    assert.are.equal(0, rows[1].depth)
    assert.are.same({2, 10}, rows[1].output_shapes[1])
    local want = {{'Conv2d', 224, {2, 8, 4, 4}}, {'BatchNorm2d', 16, {2, 8, 4, 4}}, {'ReLU', 0, {2, 8, 4, 4}},
                  {'Flatten', 0, {2, 128}}, {'Linear', 1290, {2, 10}}}
    for i, w in ipairs(want) do
      local r = rows[i + 1]
      assert.are.equal(w[1], r.class)
      assert.are.equal(w[2], r.params)
      assert.are.same(w[3], r.output_shapes[1])
      assert.are.equal(1, r.depth)
      assert.is_true(r.leaf)
    end
    assert.are.equal(10, rows[6].non_trainable)
    assert.truthy(text:find('Total params: 1,530', 1, true))
    assert.truthy(text:find('Trainable params: 1,520', 1, true))
    assert.truthy(text:find('Non-trainable params: 10', 1, true))
    assert.truthy(text:find('[2, 8, 4, 4]', 1, true))
    -- memory: inputs 2*3*4*4 floats; leaf outputs twice; params 1530 floats
    assert.are.equal(96 * 4, rows.input_bytes)
    assert.are.equal(2 * 4 * (256 * 3 + 256 + 20), rows.forward_backward_bytes)
    assert.are.equal(1530 * 4, rows.params_bytes)
    assert.are.equal(rows.input_bytes + rows.forward_backward_bytes + rows.params_bytes, rows.total_bytes)
    assert.truthy(text:find(('Params size (MB): %.2f'):format(1530 * 4 / 1e6), 1, true))
  end)

  it('indents nested modules and hides rows deeper than depth', function()
    local inner = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    local net = nn.Sequential(nn.Linear(3, 4), inner, nn.Linear(4, 1))
    local text, rows = flow.utils.summary(net, {5, 3}, {depth = 1})
    assert.are.equal(6, #rows)                      -- every call is a row
    assert.are.equal(2, rows[4].depth)              -- inner's Linear
    assert.are.equal(20, rows[3].params)            -- a container shows its total
    assert.truthy(text:find('\n  1 (Sequential)', 1, true))
    assert.falsy(text:find('Tanh', 1, true))       -- depth 2: left out of the text
    local full = flow.utils.summary(net, {5, 3})
    assert.truthy(full:find('\n    1 (Tanh)', 1, true))
    assert.are.equal(16 + 20 + 5, rows.total_params)
  end)

  it('counts a shared parameter once and takes several inputs or real tensors', function()
    local Two = nn.Module:subclass('Two')
    function Two:__init() nn.Module.__init(self); self.a = nn.Linear(2, 2); self.b = self.a end
    function Two:forward(x, y) return self.a(x) + self.b(y) end
    local _, rows = flow.utils.summary(Two(), {{1, 2}, {1, 2}})
    assert.are.equal(6, rows.total_params)
    local _, rows2 = flow.utils.summary(Two(), {input_data = {flow.ones(3, 2), flow.ones(3, 2)}})
    assert.are.same({3, 2}, rows2[1].output_shapes[1])
    local _, rows3 = flow.utils.summary(nn.Linear(2, 2):double(), {1, 2}, {dtype = flow.float64})
    assert.are.equal(2 * 8, rows3.input_bytes)
  end)

  it('removes its hooks, also when forward fails', function()
    local net = nn.Linear(3, 2)
    H.raises(function() flow.utils.summary(net, {1, 4}) end, 'summary: the forward pass failed')
    assert.is_nil(rawget(net, '_forward_hooks'))
    assert.is_nil(rawget(net, '_forward_pre_hooks'))
    flow.utils.summary(net, {1, 3})
    assert.is_nil(rawget(net, '_forward_hooks'))
  end)

  it('checks its arguments', function()
    H.raises(function() flow.utils.summary(nn.Linear(2, 2), {1, 2}, {deph = 2}) end,
      "summary: unknown option 'deph'", "did you mean 'depth'")
    H.raises(function() flow.utils.summary(42, {1, 2}) end, 'summary: expected an nn.Module')
    H.raises(function() flow.utils.summary(nn.Linear(2, 2), 'x') end, 'summary: input_shape')
    H.raises(function() flow.utils.summary(nn.Linear(2, 2)) end, 'summary: give input_shape')
  end)

  -- the three models of the mult-adds checks, built alike in torch below
  local function cnn()
    return nn.Sequential(nn.Conv2d(3, 8, 3, {padding = 1}), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, {stride = 2, padding = 1, bias = false}), nn.Flatten(),
                         nn.Linear(64, 10))
  end

  it('counts mult-adds per leaf and in total, by the hand formula for Conv and Linear', function()
    local text, rows = flow.utils.summary(cnn(), {2, 3, 8, 8})
    -- conv1: (8*3*3*3 + 8) params x N=2 x 8*8 outputs; bn: 16 x N; conv2
    -- (no bias): 16*8*3*3 x 2 x 2*2; linear: (64*10 + 10) x 2
    local want = {224 * 2 * 64, 16 * 2, 0, 0, 1152 * 2 * 4, 0, 650 * 2}
    for i, w in ipairs(want) do assert.are.equal(w, rows[i + 1].mult_adds, rows[i + 1].class) end
    assert.are.equal(28672 + 32 + 9216 + 1300, rows.total_mult_adds)
    assert.are.equal(rows.total_mult_adds, rows[1].mult_adds)     -- the container: its leaves
    assert.truthy(text:find('Mult-Adds', 1, true))
    assert.truthy(text:find('28,672', 1, true))
    assert.truthy(text:find(('Total mult-adds (M): %.2f'):format(39220 / 1e6), 1, true))
  end)

  it("matches torchinfo's Mult-Adds (CNN, LSTM, Linear on 3-d input)", function()
    local tpy = os.getenv('TORCHINFO_PYTHON')
    if not tpy then
      local p = io.popen('timeout 300 sh spec/tools/setup_torchinfo.sh 2>/dev/null | tail -1')
      tpy = p:read('*l')
      p:close()
    end
    if not tpy or tpy == '' or os.execute(tpy .. ' -c "import torchinfo" >/dev/null 2>&1') ~= 0 then
      pending('torchinfo could not be installed (spec/tools/setup_torchinfo.sh needs python3-torch and PyPI)')
      return
    end
    local models = {
      {cnn(), {2, 3, 8, 8}},
      {nn.LSTM(4, 6), {5, 2, 4}},
      {nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)), {2, 5, 4}},
    }
    local ours = {}
    for i, m in ipairs(models) do
      local _, rows = flow.utils.summary(m[1], m[2])
      local parts = {}
      for _, r in ipairs(rows) do if r.leaf then parts[#parts + 1] = r.class .. ':' .. r.mult_adds end end
      ours[i] = table.concat(parts, ' ') .. ' total:' .. rows.total_mult_adds
    end
    local p = io.popen(tpy .. [[ -c "
import torch, torchinfo
from torch import nn
models = [
  (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                 nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.Flatten(), nn.Linear(64, 10)), (2, 3, 8, 8)),
  (nn.LSTM(4, 6), (5, 2, 4)),
  (nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)), (2, 5, 4)),
]
for m, size in models:
    s = torchinfo.summary(m, input_size=size, verbose=0)
    leaves = [l for l in s.summary_list if l.is_leaf_layer]
    print(' '.join('%s:%d' % (l.class_name, l.macs) for l in leaves) + ' total:%d' % s.total_mult_adds)
" 2>&1]])
    local out = p:read('*a')
    p:close()
    assert.are.equal(table.concat(ours, '\n') .. '\n', out)
  end)

  it('matches torchvision resnet18 parameter counts', function()
    if not torchvision_available() then
      pending('torch/torchvision not found for ' .. PY)
      return
    end
    local vision = require 'flowvision'
    local _, rows = flow.utils.summary(vision.models.resnet18(), {1, 3, 64, 64}, {depth = 1})
    local p = io.popen(PY .. [[ -c "
import torchvision
m = torchvision.models.resnet18()
print(sum(p.numel() for p in m.parameters()), sum(p.numel() for p in m.parameters() if p.requires_grad))
import torch
shapes = {}
for n, c in m.named_children():
    c.register_forward_hook(lambda mod, i, o, n=n: shapes.__setitem__(n, list(o.shape)))
m.eval()(torch.randn(1, 3, 64, 64))
for n, c in m.named_children(): print(n, sum(p.numel() for p in c.parameters()), *shapes[n])
"]])
    local out = p:read('*a')
    p:close()
    local total, trainable = out:match('^(%d+) (%d+)')
    assert.are.equal(tonumber(total), rows.total_params)
    assert.are.equal(tonumber(trainable), rows.trainable_params)
    local by_name = {}
    for _, r in ipairs(rows) do if r.depth == 1 then by_name[r.name] = r end end
    local n = 0
    for name, count, shape in out:gmatch('\n(%w+) (%d+) ([%d ]+)') do
      assert.are.equal(tonumber(count), by_name[name].params, name)
      assert.are.equal(shape, table.concat(by_name[name].output_shapes[1], ' '), name)
      n = n + 1
    end
    assert.are.equal(10, n)
  end)
end)
