-- flowvision.models: the model zoo and its registry.
--
--   local models = require('flowvision').models
--   models.list()                                   --> {'alexnet', 'convnext_base', ...}
--   local m = models.create('resnet18', {num_classes = 10})
--   local m = models.resnet50({pretrained = true})  -- $FLOWVISION_HOME/resnet50.safetensors
--   local m = models.mobilenet_v2({pretrained = '/data/mnv2.safetensors'})
--
-- Parameter and buffer names and shapes are torchvision's, so a torchvision
-- state dict saved as safetensors loads with strict checking. Options:
-- num_classes (1000), pretrained (false | true | path), plus the model's own
-- (dropout, aux_logits, width_mult, zero_init_residual, ...). Weights are
-- never downloaded: `pretrained = true` reads <FLOWVISION_HOME>/<name>.safetensors
-- (FLOWVISION_HOME defaults to ~/.cache/flowvision).
local flow = require 'oneflow'

local M = {}
local registry = {}   -- name -> {build = fn(opts), prepare = fn(opts), finish = fn(model, opts)}

local families = {'resnet', 'vgg', 'densenet', 'mobilenet', 'efficientnet', 'regnet', 'convnext',
                  'googlenet', 'inception', 'squeezenet', 'shufflenet', 'alexnet'}
-- transformer / MLP, detection, segmentation and style-transfer families
-- (their classes stay in flowvision.models.<family>.classes); quantization:
-- the quantizable ResNets (models.quantization.resnet18, as torchvision's)
local plain = {'vit', 'deit', 'swin', 'pvt', 'mlp_mixer', 'resmlp', 'gmlp', 'detection', 'segmentation',
               'stylenet', 'quantization'}

-- The families load on first use, in this order, until a name asked for
-- is there (models.resnet50 loads resnet.lua alone; models.list() all):
-- loaded code is heap that every full collection of Lua's GC walks again
-- (oneflow/init.lua). A name the user registered first stays the user's.
local NAMESPACES = {detection = true, segmentation = true, quantization = true}
local pending = {}
for _, f in ipairs(families) do pending[#pending + 1] = {f, true} end
for _, f in ipairs(plain) do pending[#pending + 1] = {f, false} end
local load_next

--- models.register(name, build[, hooks]): adds a constructor build(opts) to
-- the registry; hooks.prepare(opts) -> opts and hooks.finish(model, opts)
-- adjust a pretrained build around the loading of the checkpoint.
function M.register(name, build, hooks)
  if type(name) ~= 'string' or type(build) ~= 'function' then
    error('models.register: expected a name and a constructor function', 2)
  end
  hooks = hooks or {}
  registry[name] = {build = build, prepare = hooks.prepare, finish = hooks.finish}
  M[name] = function(opts) return M.create(name, opts) end
end

--- The registered model names, sorted.
function M.list()
  while load_next() do end
  local names = {}
  for name in pairs(registry) do names[#names + 1] = name end
  table.sort(names)
  return names
end

local function file_exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

--- The directory `pretrained = true` looks in: $FLOWVISION_HOME or ~/.cache/flowvision.
function M.home()
  local home = os.getenv('FLOWVISION_HOME')
  if home and home ~= '' then return home end
  return (os.getenv('HOME') or '.') .. '/.cache/flowvision'
end

--- The checkpoint path for model `name` and option `pretrained` (true or a path).
function M.pretrained_path(name, pretrained)
  if type(pretrained) == 'string' then
    if not file_exists(pretrained) then
      error(("flowvision.models: pretrained weights for '%s' not found: no file %s"):format(name, pretrained), 3)
    end
    return pretrained
  end
  local path = M.home() .. '/' .. name .. '.safetensors'
  if not file_exists(path) then
    error(("flowvision.models: no pretrained weights for '%s': looked for %s (set FLOWVISION_HOME or pass "
           .. "pretrained = '/path/to/%s.safetensors'; weights are never downloaded)"):format(name, path, name), 3)
  end
  return path
end

local function load_checkpoint(path)
  if path:match('%.pth?$') and flow.load_torch then return flow.load_torch(path) end
  return flow.load(path)
end

local function copy(t)
  local r = {}
  for k, v in pairs(t or {}) do r[k] = v end
  return r
end

--- Builds a registered model by name: `models.create('resnet18', {num_classes = 10})`
-- (every name is also a constructor: `models.resnet18(opts)`).
-- @function flowvision.models.create
-- @tparam string name one of `models.list()`
-- @tparam[opt] table opts `{num_classes = 1000, pretrained = false | true | path, ...}`
-- plus the model's own options (dropout, width_mult, ...)
-- @treturn Module
function M.create(name, opts)
  while not registry[name] and load_next() do end
  local entry = registry[name]
  if not entry then
    error(("flowvision.models: unknown model '%s'; known models: %s"):format(tostring(name),
      table.concat(M.list(), ', ')), 2)
  end
  if opts ~= nil and type(opts) ~= 'table' then
    error(('flowvision.models.%s: options must be a table, got %s'):format(name, type(opts)), 2)
  end
  opts = copy(opts)
  local pretrained = opts.pretrained
  opts.pretrained = nil
  if not pretrained then return entry.build(opts) end
  local path = M.pretrained_path(name, pretrained)
  local model = entry.build(entry.prepare and entry.prepare(opts) or opts)
  model:load_state_dict(load_checkpoint(path))
  if entry.finish then entry.finish(model, opts) end
  return model
end

function load_next(i)
  local f = table.remove(pending, i or 1)
  if not f then return false end
  local family, zoo = f[1], f[2]
  local mod = require('flowvision.models.' .. family)
  local hooks = zoo and mod.pretrained or {}
  for name, build in pairs(mod.models) do
    if not registry[name] then M.register(name, build, hooks[name]) end
  end
  for cname, cls in pairs(zoo and mod.classes or {}) do rawset(M, cname, cls) end
  if NAMESPACES[family] then rawset(M, family, mod) end
  return true
end
M.ops = require 'flowvision.models._ops'

-- models.resnet50, models.ResNet, models.detection ...: the families up to
-- the one that has it
-- the REPL's completion lists every name (oneflow/lazy.lua's __lazy)
return setmetatable(M, {
  __lazy = M.list,
  __index = function(t, k)
    -- a namespace (models.detection, models.quantization): its file alone
    for i, f in ipairs(pending) do
      if f[1] == k and NAMESPACES[k] then load_next(i) end
    end
    while rawget(t, k) == nil and load_next() do end
    return rawget(t, k)
  end,
})
