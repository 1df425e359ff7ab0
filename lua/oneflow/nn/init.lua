-- oneflow.nn: modules, containers, nn.functional, nn.init and nn.utils.
--   local nn, F = flow.nn, flow.nn.functional
-- Required before oneflow itself: load oneflow, which loads this module.
if package.loaded.oneflow == nil then
  package.loaded['oneflow.nn'] = nil
  return require('oneflow').nn
end
local module = require 'oneflow.nn.module'

local nn = {
  Module = module.Module,
  Parameter = module.Parameter,
  is_parameter = module.is_parameter,
  is_module = module.is_module,
}

local class_files = {
  'container', 'linear', 'activation', 'dropout', 'sparse', 'loss', 'conv', 'pooling',
  'normalization', 'padding', 'upsampling', 'shuffle', 'fold', 'distance', 'rnn', 'transformer',
  'transformer_decoder', 'sampling',
}
for _, f in ipairs(class_files) do
  for name, cls in pairs(require('oneflow.nn.' .. f)) do nn[name] = cls end
end

nn.functional = require 'oneflow.nn.functional'
nn.init = require 'oneflow.nn.initialization'
nn.utils = require 'oneflow.nn.utils'
nn.Graph = require 'oneflow.nn.graph'
nn.parallel = require 'oneflow.nn.parallel'

return nn
