-- flowvision.models: the registry, pretrained loading, every model's
-- parameter count (torchvision's, hard-coded), forward/backward at small
-- sizes, torchvision's initialisation, and -- when /usr/bin/python3 has torch
-- and torchvision -- names/shapes of every model and eval outputs of a
-- subset against torchvision (tools/export_torchvision.py writes them into a
-- temporary directory; pending otherwise).
local ffi = require 'ffi'
local flow = require 'oneflow'
local models = require 'flowvision.models'
local H = require 'spec.helpers'

local nn = flow.nn

-- torchvision 0.14's parameter counts (googlenet and inception_v3 with their
-- auxiliary classifiers, as their builders make them by default)
local PARAMS = {
  alexnet = 61100840, convnext_base = 88591464, convnext_large = 197767336, convnext_small = 50223688,
  convnext_tiny = 28589128, densenet121 = 7978856, densenet161 = 28681000, densenet169 = 14149480,
  densenet201 = 20013928, efficientnet_b0 = 5288548, efficientnet_b1 = 7794184, efficientnet_b2 = 9109994,
  efficientnet_b3 = 12233232, efficientnet_b4 = 19341616, efficientnet_b5 = 30389784, efficientnet_b6 = 43040704,
  efficientnet_b7 = 66347960, efficientnet_v2_l = 118515272, efficientnet_v2_m = 54139356,
  efficientnet_v2_s = 21458488, googlenet = 13004888, inception_v3 = 27161264, mobilenet_v2 = 3504872,
  mobilenet_v3_large = 5483032, mobilenet_v3_small = 2542856, regnet_x_16gf = 54278536, regnet_x_1_6gf = 9190136,
  regnet_x_32gf = 107811560, regnet_x_3_2gf = 15296552, regnet_x_400mf = 5495976, regnet_x_800mf = 7259656,
  regnet_x_8gf = 39572648, regnet_y_128gf = 644812894, regnet_y_16gf = 83590140, regnet_y_1_6gf = 11202430,
  regnet_y_32gf = 145046770, regnet_y_3_2gf = 19436338, regnet_y_400mf = 4344144, regnet_y_800mf = 6432512,
  regnet_y_8gf = 39381472, resnet101 = 44549160, resnet152 = 60192808, resnet18 = 11689512, resnet34 = 21797672,
  resnet50 = 25557032, resnext101_32x8d = 88791336, resnext101_64x4d = 83455272, resnext50_32x4d = 25028904,
  shufflenet_v2_x0_5 = 1366792, shufflenet_v2_x1_0 = 2278604, shufflenet_v2_x1_5 = 3503624,
  shufflenet_v2_x2_0 = 7393996, squeezenet1_0 = 1248424, squeezenet1_1 = 1235496, vgg11 = 132863336,
  vgg11_bn = 132868840, vgg13 = 133047848, vgg13_bn = 133053736, vgg16 = 138357544, vgg16_bn = 138365992,
  vgg19 = 143667240, vgg19_bn = 143678248, wide_resnet101_2 = 126886696, wide_resnet50_2 = 68883240,
}

-- the CNN zoo (other families may register more names)
local CNN = {}
for name in pairs(PARAMS) do CNN[#CNN + 1] = name end
table.sort(CNN)

-- compared with torchvision's eval outputs on the same weights and input
local PARITY = {'resnet18', 'resnet50', 'vgg11_bn', 'mobilenet_v2', 'mobilenet_v3_small', 'efficientnet_b0',
                'densenet121', 'squeezenet1_1', 'shufflenet_v2_x0_5', 'regnet_x_400mf', 'regnet_y_400mf',
                'convnext_tiny', 'googlenet', 'alexnet', 'inception_v3'}

------------------------------------------------------------------ helpers
-- Builds with every initialiser a no-op: the structure (and, for weights
-- loaded afterwards, the outputs) without the cost of filling big tensors.
local INIT_FNS = {'uniform_', 'normal_', 'constant_', 'ones_', 'zeros_', 'kaiming_normal_', 'kaiming_uniform_',
                  'xavier_uniform_', 'xavier_normal_', 'trunc_normal_'}
local function without_init(fn)
  local init, saved, classes, saved_reset = nn.init, {}, {nn.Conv2d, nn.Linear}, {}
  for _, n in ipairs(INIT_FNS) do
    saved[n] = init[n]
    init[n] = function(t) return t end
  end
  for i, c in ipairs(classes) do
    saved_reset[i] = rawget(c, 'reset_parameters')
    rawset(c, 'reset_parameters', function() end)
  end
  local ok, res = pcall(fn)
  for _, n in ipairs(INIT_FNS) do init[n] = saved[n] end
  for i, c in ipairs(classes) do rawset(c, 'reset_parameters', saved_reset[i]) end
  if not ok then error(res, 0) end
  return res
end

local function count(m)
  local n = 0
  for _, p in m:named_parameters() do n = n + p:numel() end
  return n
end

local function keys(m)
  local r = {}
  for k in pairs(m:state_dict()) do r[#r + 1] = k end
  table.sort(r)
  return r
end

local function rel_err(y, ref)
  return (y - ref):abs():max():item() / ref:abs():max():item()
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute('mkdir -p ' .. d) == 0)
  return d
end

pcall(ffi.cdef, 'int setenv(const char *name, const char *value, int overwrite);')
pcall(ffi.cdef, 'int unsetenv(const char *name);')

local function with_env(name, value, fn)
  local old = os.getenv(name)
  ffi.C.setenv(name, value, 1)
  local ok, err = pcall(fn)
  if old then ffi.C.setenv(name, old, 1) else ffi.C.unsetenv(name) end
  if not ok then error(err, 0) end
end

------------------------------------------------------------------ torchvision export
-- Started when the file loads (it runs while the Lua-only tests do) and
-- waited for by the tests that need it.
local PY = os.getenv('FLOWVISION_PYTHON') or '/usr/bin/python3'
local function torchvision_available()
  return os.execute(PY .. ' -c "import importlib.util as u, sys; '
    .. 'sys.exit(0 if u.find_spec(\'torch\') and u.find_spec(\'torchvision\') else 1)" >/dev/null 2>&1') == 0
end
local TV = torchvision_available()
local export = H.background_export(TV, function(dir)
  local tool = 'tools/export_torchvision.py'
  return ('%s %s --shapes %s %s && %s %s %s %s'):format(PY, tool, dir, table.concat(CNN, ' '), PY, tool, dir,
                                                        table.concat(PARITY, ' '))
end)
local exported = export.wait

local function export_file(name)
  local path = exported() .. '/' .. name
  local f = io.open(path, 'rb')
  if not f then error('export_torchvision.py wrote no ' .. name .. ':\n' .. tostring(export.log), 2) end
  f:close()
  return path
end

local function read_shapes(name)
  local f = assert(io.open(export_file(name .. '.shapes.json')))
  local text = f:read('*a')
  f:close()
  local list = {}
  -- [["name", [d1, d2]], ...] per section; parameters first, then buffers
  for section, body in text:gmatch('"(%a+)": (%b[])') do
    for entry in body:sub(2, -2):gmatch('%b[]') do
      local n, dims = entry:match('^%["([^"]+)", (%b[])')
      list[#list + 1] = ('%s %s [%s]'):format(section, n, dims:sub(2, -2):gsub(' ', ''))
    end
  end
  return list
end

local function our_shapes(m)
  local list = {}
  for n, p in m:named_parameters() do
    list[#list + 1] = ('parameters %s [%s]'):format(n, table.concat(p:size():totable(), ','))
  end
  for n, b in m:named_buffers() do
    list[#list + 1] = ('buffers %s [%s]'):format(n, table.concat(b:size():totable(), ','))
  end
  return list
end

------------------------------------------------------------------ registry
describe('flowvision.models registry', function()
  it('lists every model, sorted, each with a constructor', function()
    local names, listed = models.list(), {}
    for i, name in ipairs(names) do
      listed[name] = true
      if i > 1 then assert.is_true(names[i - 1] < name) end
      assert.is_function(models[name])
    end
    for _, name in ipairs(CNN) do assert.is_true(listed[name], name) end
    assert.is_table(require('flowvision').models)
  end)

  it('loads a family on first use: a ResNet needs resnet.lua alone; a user\'s name stays the user\'s', function()
    local out
    local script = os.tmpname()
    local f = assert(io.open(script, 'w'))
    f:write([[
local vision = require 'flowvision'
local m = vision.models
m.register('vgg11', function() return 'mine' end)     -- before the vgg family loads
local r = m.resnet18({num_classes = 3})
local loaded = {}
for _, fam in ipairs({'resnet', 'vgg', 'mobilenet', 'vit', 'detection'}) do
  loaded[#loaded + 1] = package.loaded['flowvision.models.' .. fam] and fam or '-'
end
print(table.concat(loaded, ','), r.fc.weight:size(1), m.ResNet ~= nil, #m.list(), m.vgg11(),
      m.MobileNetV2 ~= nil, m.detection ~= nil, m.no_such_model == nil)
]])
    f:close()
    local p = io.popen('luajit ' .. script .. ' 2>&1')
    out = p:read('*a')
    p:close()
    os.remove(script)
    local fams, nc, cls, n, vgg, mb, det, none = out:match(
      '^(%S+)%s+(%d+)%s+(%S+)%s+(%d+)%s+(%S+)%s+(%S+)%s+(%S+)%s+(%S+)')
    assert.equal('resnet,-,-,-,-', fams, out)
    assert.equal('3', nc)
    assert.equal('true', cls)
    assert.equal(#models.list(), tonumber(n))
    assert.equal('mine', vgg)
    assert.equal('true', mb)
    assert.equal('true', det)
    assert.equal('true', none)
  end)

  it('names the known models for an unknown name, and checks the options', function()
    H.raises(function() models.create('resnet17') end, "unknown model 'resnet17'", 'resnet18, resnet34')
    H.raises(function() models.resnet18(10) end, 'options must be a table')
  end)

  it('passes num_classes and the model options through', function()
    local m = models.create('squeezenet1_1', {num_classes = 7})
    m:eval()
    assert.same({2, 7}, H.shape(m(flow.randn(2, 3, 48, 48))))
    local r = models.resnet18({num_classes = 3, zero_init_residual = true})
    assert.same({3, 512}, H.shape(r.fc.weight))
    H.close(r.layer1[1].bn2.weight, flow.zeros(64))
  end)
end)

describe('flowvision.models pretrained', function()
  it('says where it looked when the weights are missing', function()
    local home = tmpdir()
    with_env('FLOWVISION_HOME', home, function()
      assert.equal(home, models.home())
      H.raises(function() models.resnet18({pretrained = true}) end,
        "no pretrained weights for 'resnet18'", home .. '/resnet18.safetensors', 'never downloaded')
    end)
    H.raises(function() models.alexnet({pretrained = home .. '/nope.safetensors'}) end,
      home .. '/nope.safetensors')
    os.execute('rm -rf ' .. home)
  end)

  it('loads $FLOWVISION_HOME/<name>.safetensors or a path, strictly', function()
    local home = tmpdir()
    local src = models.shufflenet_v2_x0_5({num_classes = 5})
    local sd = src:state_dict()
    sd['conv1.1.running_mean']:uniform_(-1, 1)
    flow.save(sd, home .. '/shufflenet_v2_x0_5.safetensors')
    local x = flow.randn(1, 3, 32, 32)
    src:eval()
    with_env('FLOWVISION_HOME', home, function()
      local m = models.shufflenet_v2_x0_5({num_classes = 5, pretrained = true})
      m:eval()
      H.close(m(x), src(x), 1e-5)
    end)
    local path = home .. '/shufflenet_v2_x0_5.safetensors'
    local m = models.create('shufflenet_v2_x0_5', {num_classes = 5, pretrained = path})
    m:eval()
    H.close(m(x), src(x), 1e-5)
    -- a checkpoint for another head does not load
    H.raises(function()
      models.shufflenet_v2_x0_5({pretrained = path})
    end, 'fc.weight')
    os.execute('rm -rf ' .. home)
  end)

  it('drops the auxiliary heads of a GoogLeNet checkpoint unless asked (as torchvision)', function()
    local home = tmpdir()
    local path = home .. '/googlenet.safetensors'
    without_init(function() flow.save(models.googlenet():state_dict(), path) end)
    local m = without_init(function() return models.googlenet({pretrained = path}) end)
    assert.is_nil(m.aux1)
    assert.is_true(m.transform_input)
    local keep = without_init(function() return models.googlenet({pretrained = path, aux_logits = true}) end)
    assert.is_not_nil(keep.aux2)
    assert.equal(#keys(m) + #keys(keep.aux1) * 2, #keys(keep))
    os.execute('rm -rf ' .. home)
  end)
end)

------------------------------------------------------------------ every model
describe('flowvision.models architectures', function()
  it("have torchvision's parameter count (all " .. #CNN .. ' CNN models)', function()
    for _, name in ipairs(CNN) do
      local m = without_init(function() return models.create(name) end)
      assert.equal(PARAMS[name], count(m), name)
    end
    collectgarbage()
  end)

  it('run forward and backward at small sizes', function()
    local cases = {resnet18 = 32, mobilenet_v3_small = 32, efficientnet_b0 = 32, shufflenet_v2_x0_5 = 32,
                   squeezenet1_0 = 48, regnet_y_400mf = 32, densenet121 = 32}
    for name, side in pairs(cases) do
      local m = models.create(name, {num_classes = 4})
      local y = m(flow.randn(2, 3, side, side))
      assert.same({2, 4}, H.shape(y), name)
      y:pow(2):mean():backward()
      for pname, p in m:named_parameters() do
        assert.is_not_nil(p.grad, name .. ': no grad for ' .. pname)
      end
    end
  end)

  it('give auxiliary outputs in training mode (googlenet, inception_v3 at 299)', function()
    local g = without_init(function() return models.googlenet({num_classes = 3}) end)
    local y, aux2, aux1 = g(flow.randn(2, 3, 64, 64))
    assert.same({2, 3}, H.shape(y))
    assert.same({2, 3}, H.shape(aux2))
    assert.same({2, 3}, H.shape(aux1))
    g:eval()
    assert.equal(1, select('#', g(flow.randn(1, 3, 64, 64))))
    local inc = without_init(function() return models.inception_v3({num_classes = 3}) end)
    local out, aux = inc(flow.randn(2, 3, 299, 299))
    assert.same({2, 3}, H.shape(out))
    assert.same({2, 3}, H.shape(aux))
    local no_aux = without_init(function() return models.inception_v3({aux_logits = false}) end)
    assert.is_nil(no_aux.AuxLogits)
  end)
end)

------------------------------------------------------------------ initialisation
local function std(t) return t:std():item() end

describe('flowvision.models initialisation', function()
  it('ResNet: kaiming normal (fan_out) convs, BatchNorm 1 and 0', function()
    local m = models.resnet18()
    local w = m.layer3[1].conv1.weight          -- 256 x 128 x 3 x 3
    assert.near(math.sqrt(2 / (256 * 9)), std(w), 0.05 * math.sqrt(2 / (256 * 9)))
    H.close(m.bn1.weight, flow.ones(64))
    H.close(m.layer4[2].bn2.bias, flow.zeros(512))
  end)

  it('MobileNetV2 / EfficientNet / RegNet linear heads and SqueezeNet final conv', function()
    assert.near(0.01, std(models.mobilenet_v2().classifier[2].weight), 0.001)
    local e = models.efficientnet_b0().classifier[2].weight   -- uniform(+-1/sqrt(1000))
    assert.is_true(e:abs():max():item() <= 1 / math.sqrt(1000))
    assert.near(1 / math.sqrt(3000), std(e), 0.002)
    local r = models.regnet_x_400mf()
    assert.near(0.01, std(r.fc.weight), 0.001)
    assert.near(math.sqrt(2 / (9 * 32)), std(r.stem[1].weight), 0.02)
    assert.near(0.01, std(models.squeezenet1_1().classifier[2].weight), 0.001)
  end)

  it('ConvNeXt: trunc_normal_(std = 0.02), zero biases, layer scale 1e-6', function()
    local c = models.ConvNeXt({require('flowvision.models.convnext').block_conf(16, 32, 1),
                               require('flowvision.models.convnext').block_conf(32, nil, 1)}, {num_classes = 10})
    local w = c.features[2][1].block[4].weight  -- 64 x 16
    assert.near(0.02, std(w), 0.004)    -- truncated at +-2 (absolute), as torchvision
    H.close(c.features[2][1].layer_scale, flow.full({16, 1, 1}, 1e-6))
    H.close(c.classifier[3].bias, flow.zeros(10))
    assert.same({1, 10}, H.shape(c:eval()(flow.randn(1, 3, 32, 32))))
  end)
end)

------------------------------------------------------------------ torchvision
local check = TV and it or pending

describe('flowvision.models against torchvision', function()
  check('every CNN model has the same parameter and buffer names, shapes and order', function()
    for _, name in ipairs(CNN) do
      local want = read_shapes(name)
      local got = our_shapes(without_init(function() return models.create(name) end))
      assert.same(want, got, name)
    end
    collectgarbage()
  end)

  for _, name in ipairs(PARITY) do
    check(name .. ': torchvision weights load strictly and eval outputs match (1e-4)', function()
      local m = without_init(function()
        local o = {pretrained = export_file(name .. '.safetensors')}
        -- only the Inception family has torchvision's input transform
        if name == 'googlenet' or name == 'inception_v3' then o.transform_input = false end
        return models.create(name, o)
      end)
      m:eval()
      local io = flow.load(export_file(name .. '.io.safetensors'))
      local y = flow.no_grad(function() return m(io.input) end)
      assert.same(H.shape(io.output), H.shape(y))
      local err = rel_err(y, io.output)
      assert(err < 1e-4, ('%s: relative error %.3g'):format(name, err))
    end)
  end

  teardown(export.remove)
end)
