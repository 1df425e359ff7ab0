-- Shared helpers for the specs: closeness checks against Lua tables.
local flow = require 'oneflow'

local H = {}

local function flat(t, res)
  res = res or {}
  if type(t) ~= 'table' then res[#res + 1] = t; return res end
  for i = 1, #t do flat(t[i], res) end
  return res
end
H.flat = flat

--- Asserts that tensor `t` equals the nested table `expected` within tol.
function H.close(t, expected, tol, msg)
  tol = tol or 1e-6
  local got = flat(flow.is_tensor(t) and t:totable() or t)
  local want = flat(flow.is_tensor(expected) and expected:totable() or expected)
  assert(#got == #want, ('%s: %d elements, expected %d'):format(msg or 'close', #got, #want))
  for i = 1, #got do
    local a, b = got[i], want[i]
    if type(a) == 'boolean' or type(b) == 'boolean' then
      assert(a == b, ('%s: element %d is %s, expected %s'):format(msg or 'close', i, tostring(a), tostring(b)))
    elseif not (a == b or (a ~= a and b ~= b) or math.abs(a - b) <= tol * (1 + math.abs(b))) then
      error(('%s: element %d is %.10g, expected %.10g'):format(msg or 'close', i, a, b), 2)
    end
  end
  return true
end

--- Asserts fn raises an error whose message contains every pattern (plain).
function H.raises(fn, ...)
  local ok, err = pcall(fn)
  assert(not ok, 'expected an error')
  err = tostring(err)
  for i = 1, select('#', ...) do
    local p = select(i, ...)
    assert(err:find(p, 1, true), ('error %q does not mention %q'):format(err, p))
  end
  return err
end

function H.shape(t) return t:size():totable() end

-- A fresh temporary directory; H.remove_tmpdirs() (from a spec's teardown)
-- removes every one made.
local tmpdirs = {}
function H.tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute('mkdir -p ' .. d) == 0)
  tmpdirs[#tmpdirs + 1] = d
  return d
end
function H.remove_tmpdirs()
  for _, d in ipairs(tmpdirs) do os.execute('rm -rf ' .. d) end
  tmpdirs = {}
end

--- A reference export run in the background into a fresh folder while the
-- spec goes on: when `enabled`, the shell command make_cmd(dir) starts now.
-- e.wait() waits for it and returns dir (e.log its output, e.ok its
-- status); e.remove() waits and deletes the folder (the specs' teardown:
-- model exports are hundreds of MB). Not enabled: wait returns nil.
function H.background_export(enabled, make_cmd)
  local e = {}
  if enabled then
    e.dir = os.tmpname()
    os.remove(e.dir)
    assert(os.execute('mkdir -p ' .. e.dir) == 0)
    e.pipe = io.popen('(' .. make_cmd(e.dir) .. ') 2>&1')
  end
  function e.wait()
    if e.pipe then
      e.log = e.pipe:read('*a')
      e.ok = e.pipe:close()
      e.pipe = nil
    end
    return e.dir
  end
  function e.remove()
    if e.dir then
      e.wait()
      os.execute('rm -rf ' .. e.dir)
    end
  end
  return e
end

-- A file's bytes (nil when it cannot be opened), and writing them.
function H.read_file(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local s = f:read('*a')
  f:close()
  return s
end
function H.write_file(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

-- What a shell command prints on stdout.
function H.capture(cmd)
  local p = assert(io.popen(cmd))
  local s = p:read('*a')
  p:close()
  return s
end

-- What a Lua script (source src) prints on stdout and stderr, run by a
-- fresh luajit with this process's LUA_PATH and the environment settings
-- env (a string of NAME=value words put before the command, or nil).
function H.run_lua(src, env)
  local script = os.tmpname()
  H.write_file(script, src)
  local out = H.capture(('%s LUA_PATH=%q luajit %s 2>&1'):format(env or '', package.path, script))
  os.remove(script)
  return out
end

-- The names in directory d (hidden ones too), sorted.
function H.listdir(d)
  local p = io.popen('ls -A ' .. d)
  local res = {}
  for line in p:lines() do res[#res + 1] = line end
  p:close()
  table.sort(res)
  return res
end

-- Debian's PyTorch (/usr/bin/python3 with torch): H.torch_ok() says whether
-- it imports; H.torch_rows(script) runs a Python script and returns its
-- output lines as lists of numbers (repr'd floats round-trip exactly).
local torch_ok
function H.torch_ok()
  if torch_ok == nil then
    torch_ok = os.execute('/usr/bin/python3 -c "import torch" >/dev/null 2>&1') == 0
  end
  return torch_ok
end
function H.torch_rows(script)
  local path = os.tmpname()
  local f = assert(io.open(path, 'w'))
  f:write('import torch\ntorch.set_default_dtype(torch.float64)\n', script)
  f:close()
  local p = io.popen('/usr/bin/python3 ' .. path .. ' 2>&1')
  local out = p:read('*a')
  p:close()
  os.remove(path)
  local rows = {}
  for line in out:gmatch('[^\n]+') do
    local row = {}
    for v in line:gmatch('%S+') do
      local n = tonumber(v) or (v == 'nan' and 0 / 0) or (v == 'inf' and math.huge)
        or (v == '-inf' and -math.huge)
      if n == nil then error('torch script failed: ' .. out) end
      row[#row + 1] = n
    end
    rows[#rows + 1] = row
  end
  return rows
end
-- A python that imports onnx and onnxruntime ($ONNX_PYTHON, then the venv
-- of spec/onnx/setup_onnxruntime.sh, then python3), or nil. ONNX_PYTHON=none
-- pretends there is none (to test the fallbacks).
local onnx_python
function H.onnx_python()
  if onnx_python == nil then
    onnx_python = false
    local env = os.getenv('ONNX_PYTHON')
    if env ~= 'none' then
      local cache = os.getenv('XDG_CACHE_HOME') or ((os.getenv('HOME') or '/tmp') .. '/.cache')
      for _, py in ipairs({env or '', cache .. '/oneflow/onnx-venv/bin/python', 'python3'}) do
        if py ~= '' and os.execute("'" .. py .. "' -c 'import onnx, onnxruntime' >/dev/null 2>&1") == 0 then
          onnx_python = py
          break
        end
      end
    end
  end
  return onnx_python or nil
end

-- a Lua list of numbers as a Python list literal
function H.pylist(t)
  local parts = {}
  for i, v in ipairs(t) do parts[i] = ('%.17g'):format(v) end
  return '[' .. table.concat(parts, ', ') .. ']'
end

-- Runs a Python script (text) with python (default Debian's /usr/bin/python3)
-- and returns its output lines.
function H.python_lines(script, python)
  local path = os.tmpname()
  local f = assert(io.open(path, 'w'))
  f:write(script)
  f:close()
  local p = io.popen((python or '/usr/bin/python3') .. ' ' .. path)
  local lines = {}
  for line in p:lines() do lines[#lines + 1] = line end
  p:close()
  os.remove(path)
  return lines
end

--- The numbers of a line of text, in order.
function H.numbers(line)
  local r = {}
  for v in line:gmatch('%S+') do r[#r + 1] = tonumber(v) end
  return r
end

--- fn() with the environment variable `name` set to `value` for the C
-- core's per-call switches (OF_CONV_WINO, ...); the old value (or its
-- absence) is restored, an error from fn raised again.
function H.with_env(name, value, fn)
  local ffi = require 'ffi'
  pcall(ffi.cdef, [[
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
]])
  local prev = os.getenv(name)
  ffi.C.setenv(name, value, 1)
  local ok, a = pcall(fn)
  if prev then ffi.C.setenv(name, prev, 1) else ffi.C.unsetenv(name) end
  if not ok then error(a, 0) end
  return a
end

--- The instruction sets this CPU runs (flow.backends.cpu), best first.
function H.isas()
  local native = flow.backends.cpu.get_cpu_capability()
  local r, seen = {}, false
  for _, n in ipairs({'AVX512', 'AVX2', 'DEFAULT'}) do
    if n == native then seen = true end
    if seen then r[#r + 1] = n end
  end
  return r
end

--- fn(isa) under each of them; the CPU's own is restored, an error names the ISA.
function H.each_isa(fn)
  local cpu = flow.backends.cpu
  local native = cpu.get_cpu_capability()
  for _, isa in ipairs(H.isas()) do
    cpu.set_cpu_capability(isa)
    local ok, err = pcall(fn, isa)
    cpu.set_cpu_capability(native)
    if not ok then error(isa .. ': ' .. tostring(err), 0) end
  end
end

return H
