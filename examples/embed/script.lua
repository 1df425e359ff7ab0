-- Run inside examples/embed/main.c: takes the host's tensor, computes with
-- it in Lua, and hands a tensor back to C.
local ffi = require 'ffi'
local flow = require 'oneflow'

-- luacheck: globals host_tensor host_result
if host_tensor == nil then
  io.stderr:write('examples/embed/script.lua runs inside its C host: build and run examples/embed/main.c\n')
  os.exit(2)
end
local x = flow.from_handle(ffi.cast('of_tensor*', host_tensor))
print('Lua got from C: ' .. tostring(x))
local y = x * 2 + 1.5
-- hand back a retained of_tensor*; the host releases it
ffi.cast('of_tensor**', host_result)[0] = flow.to_handle(y)
