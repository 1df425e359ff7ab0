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

-- The names in directory d (hidden ones too), sorted.
function H.listdir(d)
  local p = io.popen('ls -A ' .. d)
  local res = {}
  for line in p:lines() do res[#res + 1] = line end
  p:close()
  table.sort(res)
  return res
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

return H
