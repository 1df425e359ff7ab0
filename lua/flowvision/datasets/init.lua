-- flowvision.datasets
local mnist = require 'flowvision.datasets.mnist'
return {MNIST = mnist.MNIST, FashionMNIST = mnist.FashionMNIST, read_idx = mnist.read_idx}
