-- flowvision: `local vision = require 'flowvision'`.
local vision = {}
vision.datasets = require 'flowvision.datasets'
vision.models = require 'flowvision.models'
return vision
