-- flowvision.datasets: MNIST/FashionMNIST (IDX), CIFAR10/CIFAR100 (binary
-- version), ImageFolder/DatasetFolder (JPEG and PNG decoded in C). No
-- download code: each says where it looked when files are missing.
local mnist = require 'flowvision.datasets.mnist'
local cifar = require 'flowvision.datasets.cifar'
local folder = require 'flowvision.datasets.folder'
return {MNIST = mnist.MNIST, FashionMNIST = mnist.FashionMNIST, read_idx = mnist.read_idx,
        CIFAR10 = cifar.CIFAR10, CIFAR100 = cifar.CIFAR100,
        ImageFolder = folder.ImageFolder, DatasetFolder = folder.DatasetFolder,
        IMG_EXTENSIONS = folder.IMG_EXTENSIONS, default_loader = folder.default_loader,
        find_classes = folder.find_classes, make_dataset = folder.make_dataset}
