-- oneflow.repl: the interactive prompt of `bin/flow`. `flow` (and `F`, `nn`,
-- `optim`) are loaded, expressions print their values, `help(f)` / `?f` show
-- doc comments. On a terminal it reads lines through GNU readline (LuaJIT
-- FFI): line editing, history in ~/.flow_history, Tab completion. Without a
-- terminal or without libreadline it reads plain lines.
local ffi = require 'ffi'
local help = require 'oneflow.help'

local M = {}

------------------------------------------------------------------ printing
local function is_ident(k) return type(k) == 'string' and k:match('^[%a_][%w_]*$') ~= nil end

local function short_value(v, flow)
  local t = type(v)
  if t == 'string' then return ('%q'):format(v):gsub('\\\n', '\\n') end
  if t == 'function' then
    local name = help.find_name(v)
    return 'function' .. (name and (' ' .. name) or '') .. (help.params(v) or '(...)')
  end
  if flow and flow.is_tensor and flow.is_tensor(v) then
    return ('tensor(shape=%s, dtype=%s)'):format(tostring(v.shape), tostring(v.dtype))
  end
  return tostring(v)
end

-- A table as `{1, 2, a = {...}}`: nested to `depth`, at most `limit` entries
-- per level, keys in a stable order.
local function pretty_table(t, depth, limit, seen, flow, indent)
  if seen[t] then return '<cycle>' end
  local mt = getmetatable(t)
  if mt and mt.__tostring then return tostring(t) end
  if depth == 0 then return '{...}' end
  seen[t] = true
  local parts, n = {}, #t
  for i = 1, math.min(n, limit) do
    local v = t[i]
    parts[#parts + 1] = type(v) == 'table' and pretty_table(v, depth - 1, limit, seen, flow, indent .. '  ')
                        or short_value(v, flow)
  end
  if n > limit then parts[#parts + 1] = ('...(%d more)'):format(n - limit) end
  local keys = {}
  for k in pairs(t) do
    if not (type(k) == 'number' and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == 'string' or type(a) == 'number') then return a < b end
    return type(a) < type(b)
  end)
  for i = 1, math.min(#keys, limit) do
    local k = keys[i]
    local v = t[k]
    local ks = is_ident(k) and k or ('[' .. short_value(k, flow) .. ']')
    parts[#parts + 1] = ks .. ' = ' .. (type(v) == 'table'
      and pretty_table(v, depth - 1, limit, seen, flow, indent .. '  ') or short_value(v, flow))
  end
  if #keys > limit then parts[#parts + 1] = ('...(%d more keys)'):format(#keys - limit) end
  seen[t] = nil
  local one = '{' .. table.concat(parts, ', ') .. '}'
  if #one <= 78 - #indent then return one end
  return '{\n' .. indent .. '  ' .. table.concat(parts, ',\n' .. indent .. '  ') .. '\n' .. indent .. '}'
end

--- The REPL's text for a value: tensors and nn modules as their repr,
-- functions with name, parameters and source line, tables nested (3 levels,
-- 20 entries per level).
-- @param v any value
-- @return a string
function M.pretty(v)
  local flow = package.loaded.oneflow
  if type(v) == 'table' then return pretty_table(v, 3, 20, {}, flow, '') end
  if type(v) == 'function' then return help.describe_function(v) end
  return tostring(v)
end

------------------------------------------------------------------ readline
-- one declaration at a time, each guarded: a module loaded twice, or
-- another module that declared one of them, must not make the rest fail
local function declare(text)
  for d in text:gmatch('[^;]+;') do pcall(ffi.cdef, d) end
end
declare [[
typedef char *of_rl_compentry_t(const char *, int);
typedef char **of_rl_completion_t(const char *, int, int);
typedef int of_rl_hook_t(void);
void free(void *);
char *strdup(const char *);
int isatty(int fd);
]]
-- readline's functions and variables, reached through ffi.load's namespace
local rl_funcs = [[
char *readline(const char *prompt);
void add_history(const char *line);
void using_history(void);
int read_history(const char *filename);
int append_history(int n, const char *filename);
int history_truncate_file(const char *filename, int lines);
char **rl_completion_matches(const char *, of_rl_compentry_t *);
void rl_replace_line(const char *, int);
]]
declare(rl_funcs)

local rl_vars = [[
extern const char *rl_readline_name;
extern int rl_done;
extern int rl_catch_signals;
extern int rl_catch_sigwinch;
extern int rl_attempted_completion_over;
extern int rl_completion_append_character;
extern const char *rl_completer_word_break_characters;
extern of_rl_completion_t *rl_attempted_completion_function;
extern of_rl_hook_t *rl_event_hook;
]]
declare(rl_vars)

local function load_readline()
  if os.getenv('FLOW_NO_READLINE') then return nil, 'FLOW_NO_READLINE is set' end
  local errs = {}
  for _, name in ipairs({'readline', 'libreadline.so.8', 'libreadline.so.7'}) do
    local ok, lib = pcall(ffi.load, name)
    if ok then
      local has = pcall(function() return lib.readline, lib.rl_done, lib.rl_event_hook end)
      if has then return lib end
    end
    errs[#errs + 1] = tostring(lib)
  end
  return nil, table.concat(errs, '; ')
end

------------------------------------------------------------------ SIGINT
-- SIGINT stays blocked while the REPL runs, so it never kills the session
-- (and threads started later, OpenMP's, inherit the block). A pending SIGINT
-- is consumed by a count hook during evaluation (raising "interrupted") and by
-- readline's event hook at the prompt (clearing the line). No C signal
-- handler runs, so nothing happens asynchronously.
pcall(ffi.cdef, 'typedef struct { unsigned long val[16]; } of_sigset_t;')   -- glibc: 1024 bits
pcall(ffi.cdef, 'struct of_timespec { long tv_sec; long tv_nsec; };')
declare([[
int sigemptyset(of_sigset_t *set);
int sigaddset(of_sigset_t *set, int sig);
int sigismember(const of_sigset_t *set, int sig);
int sigpending(of_sigset_t *set);
int sigprocmask(int how, const of_sigset_t *set, of_sigset_t *old);
int sigtimedwait(const of_sigset_t *set, void *info, const struct of_timespec *timeout);
]])
local SIGINT, SIG_BLOCK, SIG_SETMASK = 2, 0, 2
local intset, pending_set = ffi.new('of_sigset_t'), ffi.new('of_sigset_t')
local zero_time = ffi.new('struct of_timespec')
ffi.C.sigemptyset(intset)
ffi.C.sigaddset(intset, SIGINT)

--- Blocks SIGINT for the process; returns the old mask for unblock().
function M.block_sigint()
  local old = ffi.new('of_sigset_t')
  ffi.C.sigprocmask(SIG_BLOCK, intset, old)
  return old
end
function M.restore_sigmask(old) ffi.C.sigprocmask(SIG_SETMASK, old, nil) end

--- True (once per Ctrl-C) when a SIGINT is pending; consumes it.
function M.take_sigint()
  ffi.C.sigpending(pending_set)
  if ffi.C.sigismember(pending_set, SIGINT) ~= 1 then return false end
  while ffi.C.sigtimedwait(intset, nil, zero_time) == SIGINT do end
  return true
end

local INTERRUPT = setmetatable({}, {__tostring = function() return 'interrupted (Ctrl-C)' end})
M.INTERRUPT = INTERRUPT

local function interrupt_hook()
  if M.take_sigint() then
    debug.sethook()
    local at = debug.getinfo(2, 'Sl')
    INTERRUPT.where = at and at.currentline and (at.short_src .. ':' .. at.currentline) or nil
    error(INTERRUPT, 0)
  end
end

------------------------------------------------------------------ completion
local KEYWORDS = {'and', 'break', 'do', 'else', 'elseif', 'end', 'false', 'for', 'function',
                  'if', 'in', 'local', 'nil', 'not', 'or', 'repeat', 'return', 'then', 'true',
                  'until', 'while'}

-- The string keys of t and of the tables its metatables' __index lead to
-- (class tables and their bases).
local function keys_of(t, out, depth)
  if depth > 6 or type(t) ~= 'table' then return end
  for k in pairs(t) do if is_ident(k) then out[k] = true end end
  -- fields that load their module on first use (oneflow/lazy.lua)
  for _, k in ipairs(require('oneflow.lazy').names(t)) do
    if type(k) == 'string' and is_ident(k) then out[k] = true end
  end
  local mt = getmetatable(t)
  if type(mt) == 'table' then
    if type(rawget(mt, '__index')) == 'table' and rawget(mt, '__index') ~= t then
      keys_of(rawget(mt, '__index'), out, depth + 1)
    elseif rawget(mt, '__name') then
      keys_of(mt, out, depth + 1)
    end
  end
end

--- The completions of `word` (a dotted path, maybe ending in `:` and a
-- partial method name) in env: full words, sorted.
-- @param word the text before the cursor, e.g. `flow.ze`, `x:su`, `pri`
-- @param env the REPL's environment
-- @return a list of strings
function M.complete(word, env)
  local path, sep, part = word:match('^(.-)([.:])([%w_]*)$')
  local names = {}
  if not path then
    part = word
    keys_of(env, names, 0)
    keys_of(_G, names, 0)
    for _, k in ipairs(KEYWORDS) do names[k] = true end
    path, sep = '', ''
  else
    local v = env
    for seg in path:gmatch('[^.]+') do
      if not is_ident(seg) then return {} end
      local ok, x = pcall(function() return v[seg] end)
      if not ok or x == nil then return {} end
      v = x
    end
    if path == '' then return {} end
    local flow = package.loaded.oneflow
    if flow and flow.is_tensor and flow.is_tensor(v) then
      local T = require 'oneflow.tensor'
      for k in pairs(T.methods) do if is_ident(k) then names[k] = true end end
      if sep == '.' then
        for k in pairs(T.getters) do if is_ident(k) then names[k] = true end end
      end
    elseif type(v) == 'table' then
      keys_of(v, names, 0)
      if sep == ':' then
        for k in pairs(names) do
          local ok, x = pcall(function() return v[k] end)
          if not ok or type(x) ~= 'function' then names[k] = nil end
        end
      end
    elseif type(v) == 'string' and sep == ':' then
      for k in pairs(string) do names[k] = true end
    else
      return {}
    end
  end
  local out = {}
  for k in pairs(names) do
    if k:sub(1, #part) == part and (k:sub(1, 1) ~= '_' or part:sub(1, 1) == '_') then
      out[#out + 1] = path .. sep .. k
    end
  end
  table.sort(out)
  return out
end

------------------------------------------------------------------ evaluation
local function incomplete(err)
  return err and err:find("<eof>", 1, true) ~= nil
end

-- `src` as an expression first (to print its value), else as a chunk. Text
-- only: a line starting with ESC (an arrow key without readline) is a syntax
-- error, not bytecode.
local function compile(src, env)
  local fn, err_expr = loadstring('return ' .. src, '=stdin', 't')
  local err
  if not fn then fn, err = loadstring(src, '=stdin', 't') end
  if err and src:find('\27', 1, true) then
    err = 'stdin: the line holds terminal escape codes (arrow keys?); line editing needs libreadline'
  end
  if fn then setfenv(fn, env) end
  return fn, err, err_expr
end

local function pack(...) return select('#', ...), {...} end

local function traceback(e)
  if e == INTERRUPT then
    return 'interrupted (Ctrl-C)' .. (e.where and (' at ' .. e.where) or '')
  end
  local tb = debug.traceback(tostring(e), 2)
  -- the REPL's own frames are noise under the user's
  return (tb:gsub('\n%s*%[C%]: in function .xpcall.*$', ''))
end

-- Runs fn with Ctrl-C turning into an error. Chunks typed at the prompt run
-- interpreted (jit.off) so that the count hook also fires in a loop that
-- would otherwise become machine code that never returns to the interpreter.
local function evaluate(fn, interruptible)
  if interruptible then
    if jit then jit.off(fn, true) end
    M.take_sigint()   -- a Ctrl-C typed before this line was read
    debug.sethook(interrupt_hook, '', 10000)
  end
  local n, res = pack(xpcall(fn, traceback))
  if interruptible then debug.sethook() end
  return n, res
end

------------------------------------------------------------------ input
local function plain_reader(input, output)
  return function(prompt)
    output:write(prompt)
    output:flush()
    return input:read('*l')
  end
end

local function history_path()
  local p = os.getenv('FLOW_HISTORY')
  if p then return p ~= '' and p or nil end
  local home = os.getenv('HOME')
  return home and (home .. '/.flow_history') or nil
end

-- anchors for the callbacks and strings readline keeps pointers to
local anchors = {}

local function readline_reader(rl, env)
  local interrupted = false
  rl.rl_readline_name = 'flow'
  anchors.breaks = ffi.new('char[?]', 40, ' \t\n"\'`@$><=;|&{(,+-*/%^~#[]}')
  rl.rl_completer_word_break_characters = anchors.breaks
  rl.rl_catch_signals = 0
  local matches
  -- an error must not escape a callback into readline: complete() runs in pcall
  anchors.gen = ffi.cast('of_rl_compentry_t *', function(_, state)
    if state == 0 then matches.i = 0 end
    matches.i = matches.i + 1
    local m = matches[matches.i]
    return m and ffi.C.strdup(m) or nil
  end)
  anchors.complete = ffi.cast('of_rl_completion_t *', function(text)
    rl.rl_attempted_completion_over = 1
    rl.rl_completion_append_character = 0
    local ok, list = pcall(M.complete, ffi.string(text), env)
    matches = ok and list or {}
    if #matches == 0 then return nil end
    return rl.rl_completion_matches(text, anchors.gen)
  end)
  rl.rl_attempted_completion_function = anchors.complete
  anchors.event = ffi.cast('of_rl_hook_t *', function()
    if M.take_sigint() then
      interrupted = true
      rl.rl_replace_line('', 0)
      rl.rl_done = 1
    end
    return 0
  end)
  rl.rl_event_hook = anchors.event

  local hist = history_path()
  rl.using_history()
  if hist then
    local f = io.open(hist, 'a')   -- append_history needs the file to exist
    if f then f:close() end
    rl.read_history(hist)
  end
  local last
  -- readline calls back into Lua (completion, event hook): the FFI call that
  -- leads there must not be compiled
  local function read(prompt)
    interrupted = false
    local p = rl.readline(prompt)
    if p == nil then return nil end
    local line = ffi.string(p)
    ffi.C.free(p)
    if interrupted then
      io.write('^C\n')
      return false
    end
    if line:match('%S') and line ~= last then
      rl.add_history(line)
      last = line
      if hist then rl.append_history(1, hist); rl.history_truncate_file(hist, 2000) end
    end
    return line
  end
  if jit then jit.off(read) end
  return read
end

------------------------------------------------------------------ the loop
local function make_env(flow)
  local env = setmetatable({flow = flow}, {__index = _G})
  env.F = flow.nn and flow.nn.functional
  env.nn, env.optim = flow.nn, flow.optim
  env.help = function(...)
    if select('#', ...) == 0 then print(help.usage) return end
    print(help.text((...)))
  end
  return env
end

--- Runs the REPL until end of input (Ctrl-D).
-- @param opts `{input = file, output = file, readline = false}`: plain line
--   reading from `input` instead of readline on the terminal
function M.run(opts)
  opts = opts or {}
  local oldmask = M.block_sigint()
  local flow = require 'oneflow'
  local env = make_env(flow)
  local input, output = opts.input or io.stdin, opts.output or io.stdout
  local read, why
  local tty = ffi.C.isatty(0) == 1 and ffi.C.isatty(1) == 1
  if opts.readline ~= false and not opts.input and tty then
    local rl
    rl, why = load_readline()
    if rl then read = readline_reader(rl, env) end
  end
  read = read or plain_reader(input, output)
  output:write('OneFlow-Lua ', flow.__version__, ' on ', jit and jit.version or _VERSION,
               ' -- `flow` is loaded; help() for help; Ctrl-D exits\n')
  if why and tty then output:write('(no line editing: ', why, ')\n') end
  local buffer = ''
  local function show(q)   -- ?expr
    if q == '' then print(help.usage) return end
    q = q:gsub(':([%a_][%w_]*)$', '.%1')   -- ?x:sum asks about the method x.sum
    local fn, err = loadstring('return ' .. q, '=stdin', 't')
    if not fn then print(err) return end
    setfenv(fn, env)
    local ok, v = pcall(fn)
    if ok then v = select(2, pcall(help.text, v, q)) end
    print(v)
  end
  -- a value whose __tostring fails must not end the session
  local function safe_pretty(v)
    local ok, s = pcall(M.pretty, v)
    return ok and s or ('<' .. type(v) .. ': printing it failed: ' .. tostring(s) .. '>')
  end
  while true do
    local line = read(buffer == '' and '> ' or '>> ')
    if line == nil then output:write('\n') break end
    local q = buffer == '' and line and line:match('^%s*%?%s*(.-)%s*$')
    if line == false then
      buffer = ''   -- Ctrl-C at the prompt drops the unfinished chunk
    elseif q then
      show(q)
    else
      if buffer == '' then line = line:gsub('^%s*=', '', 1) end
      buffer = buffer == '' and line or (buffer .. '\n' .. line)
      local fn, err, err_expr = compile(buffer, env)
      if fn then
        buffer = ''
        local n, res = evaluate(fn, true)
        if res[1] then
          local parts = {}
          for i = 2, n do parts[#parts + 1] = safe_pretty(res[i]) end
          if n > 1 then print(table.concat(parts, '\t')) end
        else
          print(tostring(res[2]))
        end
      elseif not (incomplete(err) or incomplete(err_expr)) then
        buffer = ''
        print(err)
      end
    end
  end
  M.restore_sigmask(oldmask)
end

return M
