-- Run inside examples/embed/main.c: takes the host's tensor, computes with
-- it in Lua, and hands a tensor back to C.
local ffi = require 'ffi'
local flow = require 'oneflow'

-- luacheck: globals host_tensor host_result
local x = flow.from_handle(ffi.cast('of_tensor*', host_tensor))
print('Lua got from C: ' .. tostring(x))
local y = x * 2 + 1.5
-- hand back a retained of_tensor*; the host releases it
ffi.cast('of_tensor**', host_result)[0] = flow.to_handle(y)
