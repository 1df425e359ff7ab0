-- flowvision: `local vision = require 'flowvision'`.
local vision = {}
vision.datasets = require 'flowvision.datasets'
return vision
