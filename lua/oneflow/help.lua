-- oneflow.help: the doc comment, signature and a short description of a
-- Lua value, for `help(f)` / `?f` in the REPL and for pretty printing.
--
-- Doc comments are LDoc's: a block of `--` lines starting with `---` right
-- above the definition (`make doc` renders the same comments with LDoc):
--
--   --- One-line summary.
--   -- More text.
--   -- @param name what it is
--   -- @return what comes back
--   function M.name(name) ... end
--
-- A function made by a factory (`def('zeros', shaped(...))`) is found by
-- the name in its definition line or by an `@function name` tag.
local M = {}

local files = {}   -- path -> list of {first, last, lines, names = {name = true}}

-- The names a definition line defines: `function a.b:c(`, `local function c(`,
-- `a.c = function`, `def('c', ...)` (the tensor op registrar) all give `c`.
local function defined_names(line)
  local names = {}
  local f = line:match('^%s*local%s+function%s+([%w_]+)') or
            line:match('^%s*function%s+[%w_.:]-([%w_]+)%s*%(')
  if f then names[f] = true end
  local a = line:match('^%s*[%w_.]-([%w_]+)%s*=')
  if a and not line:match('^%s*local%s') then names[a] = true end
  for q in line:gmatch("def%(%s*'([%w_]+)'") do names[q] = true end
  for q in line:gmatch('def%(%s*"([%w_]+)"') do names[q] = true end
  return names
end

-- The doc blocks of a source file: each `---` block and the line after it.
local function blocks_of(path)
  if files[path] ~= nil then return files[path] end
  local list = {}
  local f = io.open(path)
  if not f then files[path] = false; return false end
  local lines = {}
  for l in f:lines() do lines[#lines + 1] = l end
  f:close()
  local i = 1
  while i <= #lines do
    if lines[i]:match('^%s*%-%-%-') and not lines[i]:match('^%s*%-%-%-%-') then
      local first, doc = i, {}
      while i <= #lines and lines[i]:match('^%s*%-%-') do
        doc[#doc + 1] = lines[i]:gsub('^%s*%-%-%-?%s?', '')
        i = i + 1
      end
      local code = lines[i] or ''
      local names = defined_names(code)
      for _, d in ipairs(doc) do
        local n = d:match('^@function%s+([%w_.:]+)')
        if n then names[n:match('([%w_]+)$')] = true end
      end
      list[#list + 1] = {first = first, last = i - 1, lines = doc, code = code, names = names}
    else
      i = i + 1
    end
  end
  files[path] = list
  return list
end

local function source_path(fn)
  local info = debug.getinfo(fn, 'S')
  if not info or info.source:sub(1, 1) ~= '@' then return nil, info end
  return info.source:sub(2), info
end

-- The functions fn wraps (its function upvalues), breadth first, fn first.
local function wrapped(fn)
  -- the input check of a flow.<name> function (oneflow.tensor's guarded)
  -- adds nothing: its inner function takes its place in the queue
  local T = package.loaded['oneflow.tensor']
  local unguard = type(T) == 'table' and T.unguard or function(f) return f end
  fn = unguard(fn)
  local out, seen, queue = {}, {[fn] = true}, {fn}
  local qi = 1
  while qi <= #queue and #out < 40 do
    local f = queue[qi]; qi = qi + 1
    out[#out + 1] = f
    for u = 1, 60 do
      local name, v = debug.getupvalue(f, u)
      if not name then break end
      if type(v) == 'function' then v = unguard(v) end
      if type(v) == 'function' and not seen[v] then seen[v] = true; queue[#queue + 1] = v end
    end
  end
  return out
end

-- The first doc block defining `name` in the source file of one of the
-- functions that iter(list) yields (ipairs over a list, pairs over a class).
local function block_named(name, iter, list)
  for _, f in iter(list) do
    local p = type(f) == 'function' and source_path(f)
    local blocks = p and blocks_of(p)
    if blocks then
      for _, b in ipairs(blocks) do
        if b.names[name] then b.path, b.line = p, b.last + 1; return b end
      end
    end
  end
  return nil
end

--- The doc block of function `fn`: the block right above its definition,
-- else a block whose definition names `name` in the file of fn or of a
-- function it wraps.
-- @param fn a Lua function
-- @param name its short name (the last part of `flow.nn.Conv2d`), or nil
-- @return the block (`lines`, `code`, `path`, `line`) or nil
function M.doc_block(fn, name)
  local cands = wrapped(fn)
  local path, info = source_path(fn)
  local list = path and blocks_of(path)
  if list then
    for _, b in ipairs(list) do
      if b.last == info.linedefined - 1 then
        b.path, b.line = path, info.linedefined
        return b
      end
    end
  end
  if not name then return nil end
  return block_named(name, ipairs, cands)
end

--- The parameter list of a Lua function from its debug info, as `(a, b, ...)`.
-- @param fn a function
-- @return a string, or nil for a C function
function M.params(fn)
  -- through the input check of a flow.<name> function (oneflow.tensor's guarded)
  local T = package.loaded['oneflow.tensor']
  if type(T) == 'table' and T.unguard then fn = T.unguard(fn) end
  local info = debug.getinfo(fn, 'Su')
  if not info or info.what == 'C' then return nil end
  local names = {}
  for i = 1, info.nparams or 0 do names[i] = debug.getlocal(fn, i) or ('arg' .. i) end
  if info.isvararg then names[#names + 1] = '...' end
  return '(' .. table.concat(names, ', ') .. ')'
end

-- Where a value is reachable from the usual roots, as `flow.nn.Conv2d`.
local find_name
local roots
function find_name(v, env)
  -- the roots, once oneflow is loaded (help never loads it itself)
  local flow = package.loaded.oneflow
  if not roots or (flow and not roots.flow) then
    roots = {flow = flow}
    if flow then
      roots[#roots + 1] = {'flow', flow}
      roots[#roots + 1] = {'flow.nn', flow.nn}
      roots[#roots + 1] = {'F', flow.nn and flow.nn.functional}
      roots[#roots + 1] = {'flow.optim', flow.optim}
      roots[#roots + 1] = {'flow.utils.data', flow.utils and flow.utils.data}
      roots[#roots + 1] = {'Tensor', require('oneflow.tensor').methods}
    end
    for _, lib in ipairs({'string', 'table', 'math', 'io', 'os', 'debug', 'coroutine'}) do
      roots[#roots + 1] = {lib, _G[lib]}
    end
  end
  for _, r in ipairs(roots) do
    if type(r[2]) == 'table' then
      for k, x in pairs(r[2]) do
        if x == v and type(k) == 'string' then
          return r[1] == 'Tensor' and ('Tensor:' .. k) or (r[1] .. '.' .. k)
        end
      end
    end
  end
  for k, x in pairs(env or _G) do
    if x == v and type(k) == 'string' then return k end
  end
  return nil
end
M.find_name = find_name

-- Every string key under which v sits in the roots (its aliases: flow.multiply
-- is flow.mul, flow.clip is flow.clamp).
-- Whether function x wraps v (v is an upvalue of x or of one of x's
-- function upvalues): flow.mul once distributed.global has wrapped it, and
-- flow.multiply, still the function inside.
local function wraps(x, v)
  for u = 1, 60 do
    local name, w = debug.getupvalue(x, u)
    if not name then return false end
    if w == v then return true end
    if type(w) == 'function' then
      for u2 = 1, 60 do
        local n2, w2 = debug.getupvalue(w, u2)
        if not n2 then break end
        if w2 == v then return true end
      end
    end
  end
  return false
end

local function aliases(v)
  local out = {}
  find_name(v)   -- builds the roots
  for pass = 1, 2 do
    for _, r in ipairs(roots or {}) do
      if type(r[2]) == 'table' then
        for k, x in pairs(r[2]) do
          if type(k) == 'string' and (x == v or (pass == 2 and type(x) == 'function' and wraps(x, v))) then
            out[#out + 1] = k
          end
        end
      end
    end
    -- a second pass only when the function has no other name
    local distinct = false
    for i = 2, #out do if out[i] ~= out[1] then distinct = true end end
    if distinct then break end
  end
  table.sort(out)
  return out
end

--- The doc block of a class (a table with `__init`, maybe inherited): its
-- constructor's, else a block naming the class in the file of one of its
-- own functions (`--- Transform: ...` above `M.Transform = Transform`).
-- @param cls the class table
-- @param name its name (`flow.distributions.Transform`), or nil
-- @return the block or nil
function M.class_doc(cls, name)
  local init = cls.__init
  local b = type(init) == 'function' and M.doc_for(init, name)
  if b then return b end
  local short = name and name:match('([%w_]+)$')
  if not short then return nil end
  return block_named(short, pairs, cls)
end

--- The doc block of a public function: its own block, else the block of one
-- of its aliases, else (for an in-place `abs_`) the block of `abs`.
-- @param fn a function (for a class, its `__init`)
-- @param name its name as the user wrote it (`flow.abs_`), or nil
-- @return the block and, when it was borrowed, the name it belongs to
function M.doc_for(fn, name)
  local short = name and name:match('([%w_]+)$')
  local b = M.doc_block(fn, short)
  if b then return b end
  -- the input check around a flow.<name> function (oneflow.tensor's guarded)
  local T0 = package.loaded['oneflow.tensor']
  local inner = type(T0) == 'table' and T0.unguard and T0.unguard(fn)
  if inner and inner ~= fn then
    local b2, of = M.doc_for(inner, name)
    if b2 then return b2, of end
  end
  if b then return b end
  for _, a in ipairs(aliases(fn)) do
    if a ~= short then
      b = M.doc_block(fn, a)
      if b then return b, a end
    end
  end
  -- flow.flatten is wrapped (quantization) around a T.flow lookup at call time
  local T = package.loaded['oneflow.tensor']
  local orig = short and T and T.flow and T.flow[short]
  if type(orig) == 'function' and orig ~= fn then
    b = M.doc_block(orig, short)
    if b then return b end
  end
  local base = short and short:match('^(.-[^_])_$')
  if base then
    local flow = package.loaded.oneflow
    local f = (T and T.methods and T.methods[base]) or (flow and flow[base])
    if type(f) == 'function' then
      b = M.doc_for(f, base)
      if b then return b, base end
    end
  end
  return nil
end

--- A one-line description of a function: name, parameters and where it is.
-- @param fn a function
-- @param name the name to show, or nil to look it up
-- @param path the file to name (default: where fn is defined)
-- @param line the line in path
-- @return a string like `function flow.zeros(...)  [lua/oneflow/tensor.lua:214]`
function M.describe_function(fn, name, path, line)
  name = name or find_name(fn)
  local info
  if not path then path, info = source_path(fn); line = info and info.linedefined end
  local params = M.params(fn) or '(...)'
  local where = path and (path:gsub('^.*/lua/', 'lua/') .. ':' .. line) or 'builtin'
  return ('function %s%s  [%s]'):format(name or '', params, where)
end

--- The help text of a value: for a function its signature and doc comment,
-- for a table (a module or class) its doc and its public functions.
-- @param v the value
-- @param name what the user called it (`flow.zeros`), or nil
-- @return a string
function M.text(v, name)
  name = name or find_name(v)
  if type(v) == 'function' then
    local b, of = M.doc_for(v, name)
    local head = M.describe_function(v, name, b and b.path, b and b.line)
    if not b then return head .. '\n  (no doc comment)' end
    local out, tags, cur = {head, ''}, {}, nil
    if of and name and name:match('_$') and of == name:match('([%w_]+)_$') then
      out[#out + 1] = '  In-place version of ' .. of .. ' (writes into x and returns it):'
    elseif of then
      out[#out + 1] = '  The same function as ' .. of .. ':'
    end
    for _, l in ipairs(b.lines) do
      -- LDoc modifiers (`@tparam[opt] table opts`) are dropped
      local tag, rest = l:match('^@(%w+)%s*(.*)$')
      if rest then rest = rest:gsub('^%[[^%]]*%]%s*', '') end
      if tag then
        cur = {tag = tag, text = rest}
        tags[#tags + 1] = cur
      elseif cur then
        cur.text = cur.text .. ' ' .. l:gsub('^%s+', '')
      else
        out[#out + 1] = '  ' .. l
      end
    end
    while out[#out] == '  ' do out[#out] = nil end
    local first = true
    for _, t in ipairs(tags) do
      local line
      if t.tag == 'param' then
        local p, d = t.text:match('^([%w_.]+)%s*(.*)$')
        line = ('  %-12s %s'):format(p or t.text, d or '')
      elseif t.tag == 'tparam' then
        local ty, p, d = t.text:match('^(%S+)%s+([%w_.]+)%s*(.*)$')
        line = ('  %-12s (%s) %s'):format(p or t.text, ty or '', d or '')
      elseif t.tag == 'return' or t.tag == 'treturn' then line = '  returns      ' .. t.text
      elseif t.tag ~= 'function' and t.tag ~= 'local' then line = '  @' .. t.tag .. ' ' .. t.text end
      if line then
        if first then out[#out + 1] = ''; first = false end
        out[#out + 1] = line
      end
    end
    return table.concat(out, '\n')
  elseif type(v) == 'table' then
    local out = {(name or tostring(v)) .. ': table'}
    local keys = {}
    for k, x in pairs(v) do
      if type(k) == 'string' and k:sub(1, 1) ~= '_' then
        keys[#keys + 1] = k .. (type(x) == 'function' and '()' or '')
      end
    end
    table.sort(keys)
    if #keys > 0 then
      out[#out + 1] = '  fields: ' .. table.concat(keys, ' ', 1, math.min(#keys, 60)) ..
        (#keys > 60 and (' ... (%d in all)'):format(#keys) or '')
    end
    if type(v.__init) == 'function' then
      out[#out + 1] = '  constructor ' .. (name or '') .. (M.params(v.__init) or ''):gsub('^%(self,? ?', '(')
      local b = M.class_doc(v, name)
      if b then
        for _, l in ipairs(b.lines) do
          if not l:match('^@function') then out[#out + 1] = '  ' .. l end
        end
      end
    end
    return table.concat(out, '\n')
  end
  local flow = package.loaded.oneflow
  if flow and flow.is_tensor and flow.is_tensor(v) then
    return ('%s: a Tensor of shape %s, dtype %s, on %s; ?%s:method (e.g. ?%s:sum) for a method')
      :format(name or 'x', tostring(v.shape), tostring(v.dtype), tostring(v.device), name or 'x', name or 'x')
  end
  return ('%s: a %s (%s)'):format(name or '?', type(v), tostring(v))
end

M.usage = [[
help(f) or ?f shows the signature and the doc comment of a function, or the
fields of a table (a module, a class):  ?flow.zeros   help(flow.nn.Conv2d)
Tab completes globals, flow.*, module fields (nn.Con<Tab>) and tensor
methods (x:<Tab>). =expr or a bare expression prints its value; an
unfinished chunk continues on the next line (>>). Up/Down recall history
(~/.flow_history). Ctrl-C interrupts the running code or clears the line;
Ctrl-D exits.]]

return M
