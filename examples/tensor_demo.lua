-- A tour of the tensor API: run with `make example` or `./bin/flow examples/tensor_demo.lua`.
-- Runs from any directory: this checkout's lua/ and examples come first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../lua/?.lua;%s/../lua/?/init.lua;%s/../?.lua;'):format(here, here, here) .. package.path
require('argparse')('tensor_demo.lua', 'A tour of the tensor API: prints tensors made and '
  .. 'transformed in a few ways.'):parse(arg or {})
local flow = require 'oneflow'

local x = flow.tensor({{1, 2, 3}, {4, 5, 6}})
print('x =', x)
print('x:size() =', x:size(), ' x.dtype =', x.dtype)
print('x[2] =', x[2], ' x[{1, {2, 3}}] =', x[{1, {2, 3}}])
print('x:t() =', x:t())
print('x * 2 + 1 =', x * 2 + 1)
print('exp of x / 6 =', (x / 6):exp())
print('broadcast x + {10, 20, 30} =', x + flow.tensor({10, 20, 30}))
print('x > 3 =', x:gt(3))
print('arange(0, 10, 2) =', flow.arange(0, 10, 2))
print('linspace(0, 1, 5) =', flow.linspace(0, 1, 5))
if x.sum then print('x:sum(2) =', x:sum(2)) end
if x.matmul then print('x @ x:t() =', x:matmul(x:t())) end
