rockspec_format = "3.0"
package = "oneflow"
version = "scm-1"
source = {
  url = "git+file://.",
}
description = {
  summary = "OneFlow-Lua: a deep-learning framework for LuaJIT with a small C core",
  detailed = [[
Tensors, CPU kernels, autograd, nn, optim, static graphs and SBP distribution,
driven from LuaJIT through the FFI. API modelled on OneFlow/PyTorch, 1-based.]],
  license = "Apache-2.0",
}
dependencies = {
  "lua >= 5.1",
}
external_dependencies = {
  OPENBLAS = { library = "openblas" },
}
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    CMAKE_INSTALL_LIBDIR = "$(LIBDIR)",
    CMAKE_INSTALL_BINDIR = "$(BINDIR)",
    OF_LUA_DIR = "$(LUADIR)",
  },
}
