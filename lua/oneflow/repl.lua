-- oneflow.repl: an interactive prompt where expressions print their values
-- (tensors pretty-printed) and `flow` is already loaded.
local M = {}

local function print_results(n, ...)
  if n == 0 then return end
  local parts = {}
  for i = 1, n do parts[i] = tostring((select(i, ...))) end
  print(table.concat(parts, '\t'))
end

local function incomplete(err)
  return err and err:find("<eof>", 1, true) ~= nil
end

--- Compiles `src` as an expression first (to print it), else as a chunk.
local function compile(src, env)
  local fn, err_expr = loadstring('return ' .. src, '=stdin')
  local err
  if not fn then fn, err = loadstring(src, '=stdin') end
  if fn then setfenv(fn, env) end
  return fn, err, err_expr
end

local function pack(...) return select('#', ...), {...} end

function M.run(opts)
  opts = opts or {}
  local input = opts.input or io.stdin
  local env = setmetatable({flow = require('oneflow')}, {__index = _G})
  env.F = env.flow.nn and env.flow.nn.functional
  io.write('OneFlow-Lua ', env.flow.__version__, ' on ', jit and jit.version or _VERSION,
           ' -- `flow` is loaded; Ctrl-D exits\n')
  local buffer = ''
  while true do
    io.write(buffer == '' and '> ' or '>> ')
    io.flush()
    local line = input:read('*l')
    if not line then io.write('\n') break end
    buffer = buffer == '' and line or (buffer .. '\n' .. line)
    local fn, err, err_expr = compile(buffer, env)
    if fn then
      buffer = ''
      local n, res = pack(xpcall(fn, debug.traceback))
      if res[1] then print_results(n - 1, unpack(res, 2, n))
      else print(res[2]) end
    elseif not (incomplete(err) or incomplete(err_expr)) then
      buffer = ''
      print(err)
    end
  end
end

return M
