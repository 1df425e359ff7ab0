-- flowvision: `local vision = require 'flowvision'`.
local vision = {}
vision.datasets = require 'flowvision.datasets'
vision.io = require 'flowvision.io'
vision.utils = require 'flowvision.utils'
vision.transforms = require 'flowvision.transforms'
vision.data = require 'flowvision.data'
vision.layers = require 'flowvision.layers'
vision.models = require 'flowvision.models'
return vision
