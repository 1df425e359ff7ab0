-- oneflow.optim: optimizers with PyTorch's update rules and state-dict
-- layout, and learning-rate schedulers (flow.optim.lr_scheduler).
return setmetatable({
  Optimizer = require 'oneflow.optim.optimizer',
  SGD = require 'oneflow.optim.sgd',
  Adam = require 'oneflow.optim.adam',
  AdamW = require 'oneflow.optim.adamw',
  RMSprop = require 'oneflow.optim.rmsprop',
  Adagrad = require 'oneflow.optim.adagrad',
  LAMB = require 'oneflow.optim.lamb',
  Adadelta = require 'oneflow.optim.adadelta',
  Adamax = require 'oneflow.optim.adamax',
  NAdam = require 'oneflow.optim.nadam',
  RAdam = require 'oneflow.optim.radam',
  Rprop = require 'oneflow.optim.rprop',
  ASGD = require 'oneflow.optim.asgd',
  SparseAdam = require 'oneflow.optim.sparse_adam',
  LBFGS = require 'oneflow.optim.lbfgs',
  REQUIRED = require('oneflow.optim._util').REQUIRED,
}, {__index = function(t, k)
  -- the schedulers load on first use (heap the GC walks, oneflow/init.lua)
  if k ~= 'lr_scheduler' then return nil end
  local m = require 'oneflow.optim.lr_scheduler'
  rawset(t, k, m)
  return m
end})
