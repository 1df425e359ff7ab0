-- oneflow.optim: optimizers with PyTorch's update rules and state-dict
-- layout, and learning-rate schedulers (flow.optim.lr_scheduler).
-- flow.optim.lr_scheduler loads on first use (oneflow/lazy.lua)
return require('oneflow.lazy').fields({
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
}, {lr_scheduler = 'oneflow.optim.lr_scheduler'})
