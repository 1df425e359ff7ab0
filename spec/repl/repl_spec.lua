-- The REPL of bin/flow: value printing, help, completion (in process), and
-- line editing, history, Tab and Ctrl-C on a real terminal (tmux).
local repl = require 'oneflow.repl'
local help = require 'oneflow.help'
local flow = require 'oneflow'

local src = debug.getinfo(1, 'S').source:sub(2)
if src:sub(1, 1) ~= '/' then src = os.getenv('PWD') .. '/' .. src end
local root = src:match('^(.*)/spec/repl/[^/]*$')

local function sh(cmd)
  local p = io.popen(cmd .. ' 2>&1')
  local out = p:read('*a')
  local ok = p:close()
  return out, ok
end

-- runs bin/flow with `input` on a pipe (no terminal: plain lines)
local function pipe(input)
  local f = os.tmpname()
  local h = io.open(f, 'w'); h:write(input); h:close()
  local out = sh(('cd /tmp && %s/bin/flow < %s'):format(root, f))
  os.remove(f)
  return out
end

describe('repl printing', function()
  it('prints tables nested and bounded, functions with name and signature', function()
    assert.equal('{1, 2, a = {b = 3}}', repl.pretty({1, 2, a = {b = 3}}))
    assert.equal('{{{{...}}}}', repl.pretty({{{{{1}}}}}))
    local big = {}
    for i = 1, 30 do big[i] = i end
    assert.truthy(repl.pretty(big):find('...(10 more)', 1, true))
    local cyc = {}; cyc.self = cyc
    assert.equal('{self = <cycle>}', repl.pretty(cyc))
    -- earlier specs may have wrapped flow.matmul (autocast, global tensors):
    -- the name and a source line, wherever the wrapper lives
    assert.truthy(repl.pretty(flow.matmul):find('^function flow%.matmul%(.-%)  %[lua/oneflow/[%w_/]+%.lua:%d+%]'),
                  repl.pretty(flow.matmul))
    assert.equal(tostring(flow.nn.Linear(2, 3)), repl.pretty(flow.nn.Linear(2, 3)))
    local x = flow.ones(2)
    assert.equal(tostring(x), repl.pretty(x))
  end)

  it('runs expressions, =expr, statements and multi-line chunks from a pipe', function()
    local out = pipe('x = flow.ones(2) * 3\n=x:sum():item()\n1 + 1\nfor i = 1, 2 do\nprint("i" .. i)\nend\n' ..
                     'error("boom")\n{1, {2}}\n')
    assert.truthy(out:find('> 6\n', 1, true), out)
    assert.truthy(out:find('> 2\n', 1, true), out)
    assert.truthy(out:find('>> >> i1\ni2\n', 1, true), out)
    assert.truthy(out:find('boom', 1, true), out)
    assert.truthy(out:find('{1, {2}}', 1, true), out)
  end)

  it('survives a value that cannot be printed and a non-string error', function()
    local out = pipe('setmetatable({}, {__tostring = function() error("bad") end})\nerror({})\n=7\n')
    assert.truthy(out:find('printing it failed', 1, true), out)
    assert.truthy(out:find('> 7\n', 1, true), out)
  end)

  it('takes an arrow key without readline as an error, not as bytecode', function()
    local out = pipe('\27[A\n=40 + 2\n')
    assert.truthy(out:find('terminal escape codes', 1, true), out)
    assert.falsy(out:find('bytecode', 1, true), out)
    assert.truthy(out:find('> 42\n', 1, true), out)
  end)
end)

describe('repl help', function()
  it('shows the LDoc comment and signature of a function', function()
    local t = help.text(flow.zeros, 'flow.zeros')
    assert.truthy(t:find('function flow.zeros(...)', 1, true), t)
    assert.truthy(t:find('A tensor of zeros', 1, true), t)
    assert.truthy(t:find('returns      Tensor', 1, true), t)
    assert.truthy(t:find('opts         (table)', 1, true), t)
    local out = pipe('?flow.zeros\nhelp(flow.ones)\nhelp()\n?nn.Linear\n')
    assert.truthy(out:find('A tensor of zeros', 1, true), out)
    assert.truthy(out:find('A tensor of ones', 1, true), out)
    assert.truthy(out:find('help(f) or ?f shows', 1, true), out)
    assert.truthy(out:find('constructor nn.Linear', 1, true), out)
    out = pipe('x = flow.ones(2, 3)\n?x\n?x:sum\n')
    assert.truthy(out:find('x: a Tensor of shape', 1, true), out)
    assert.truthy(out:find('function x.sum(', 1, true), out)
  end)

  it('says when a function has no doc comment', function()
    local function undocumented(a) return a end
    assert.truthy(help.text(undocumented, 'undocumented'):find('(no doc comment)', 1, true))
  end)
end)

describe('repl completion', function()
  local env = setmetatable({flow = flow, nn = flow.nn, x = flow.ones(2), s = 'str'}, {__index = _G})
  it('completes globals, flow.*, module fields and tensor methods', function()
    assert.same({'flow.zeros', 'flow.zeros_like'}, repl.complete('flow.zeros', env))
    assert.truthy(#repl.complete('flow.ze', env) >= 2)
    assert.same({'nn.Conv2d'}, repl.complete('nn.Conv2', env))
    assert.truthy(table.concat(repl.complete('nn.Con', env), ' '):find('nn.Conv2d nn.Conv3d', 1, true))
    local m = repl.complete('x:su', env)
    assert.truthy(#m > 0)
    for _, w in ipairs(m) do assert.truthy(w:find('^x:su')) end
    assert.truthy(table.concat(m, ' '):find('x:sum', 1, true))
    assert.same({'while'}, repl.complete('whil', env))
    assert.same({}, repl.complete('nope.x', env))
    assert.truthy(table.concat(repl.complete('s:up', env), ' '):find('s:upper', 1, true))
  end)

  it('completes fields that load their module on first use, without loading them', function()
    -- a table of its own, so that nothing the other specs loaded is in it
    local t = require('oneflow.lazy').fields({here = 1}, {later = 'oneflow.spec_never_loaded'})
    local e = setmetatable({t = t}, {__index = _G})
    assert.same({'t.here', 't.later'}, repl.complete('t.', e))
    assert.is_nil(rawget(t, 'later'))
    assert.same({'flow.optim.lr_scheduler'}, repl.complete('flow.optim.lr_s', env))
    assert.truthy(table.concat(repl.complete('flow.utils.', env), ' '):find('flow.utils.data', 1, true))
  end)
end)

-- A real terminal: tmux runs bin/flow; keys go in with send-keys, the screen
-- comes back with capture-pane.
local tmux = sh('command -v tmux'):match('%S') ~= nil
local describe_tty = tmux and describe or function(name)
  describe(name, function()
    pending('tmux is not installed: the terminal tests are skipped')
  end)
end

describe_tty('repl on a terminal (tmux)', function()
  local session = 'flowrepl' .. tostring(os.time()) .. tostring(math.random(1e6))
  local hist = os.tmpname()

  local function screen() return (sh('tmux capture-pane -p -J -S -200 -t ' .. session)) end
  local function keys(...)
    local args = {}
    for i, k in ipairs({...}) do args[i] = ("'%s'"):format(k:gsub("'", "'\\''")) end
    sh('tmux send-keys -t ' .. session .. ' ' .. table.concat(args, ' '))
  end
  -- waits (up to 20 s) until the screen matches `pat` (a plain string)
  local function wait_for(pat, count)
    count = count or 1
    local s
    for _ = 1, 200 do
      s = screen()
      local n = 0
      for _ in s:gmatch(pat:gsub('%p', '%%%0')) do n = n + 1 end
      if n >= count then return s end
      sh('sleep 0.1')
    end
    error('timed out waiting for ' .. pat .. ' on the screen:\n' .. s)
  end

  setup(function()
    os.remove(hist)
    sh(('tmux new-session -d -s %s -x 150 -y 50 "cd /tmp && FLOW_HISTORY=%s %s/bin/flow"'):format(
      session, hist, root))
    wait_for('Ctrl-D exits')
  end)
  teardown(function()
    sh('tmux kill-session -t ' .. session)
    os.remove(hist)
  end)

  it('edits lines, recalls history, completes with Tab, survives Ctrl-C', function()
    keys('y = 41', 'Enter')
    keys('=y + 1', 'Enter')
    wait_for('42')
    -- up-arrow recalls the last line; left-arrow moves into it
    keys('Up', 'Enter')
    wait_for('\n42\n', 2)
    keys('Up', 'Left', 'Left', 'BSpace', '*', 'Enter')   -- "=y + 1" becomes "=y * 1"
    wait_for('\n41\n')
    keys('=1', 'Left', '2', 'Enter')               -- the cursor moved left: "=21"
    wait_for('\n21\n')
    -- Tab completes flow.ze... to flow.zeros (a common prefix of zeros, zeros_like)
    keys('x = flow.ze', 'Tab')
    wait_for('x = flow.zeros')
    keys('(2, 3)', 'Enter')
    keys('=x:nu', 'Tab')
    wait_for('=x:numel')
    keys('()', 'Enter')
    wait_for('\n6\n')
    keys('x:su', 'Tab', 'Tab')
    wait_for('x:sum')
    keys('C-u')
    keys('help(flow.zeros)', 'Enter')
    wait_for('A tensor of zeros')
    -- Ctrl-C interrupts, twice, and the state is kept
    -- (Ctrl-C goes in once the loop runs: the terminal flushes unread input on ^C)
    keys("print('loop' .. 'ing') while true do end", 'Enter')
    wait_for('\nlooping')
    keys('C-c')
    wait_for('interrupted (Ctrl-C)')
    keys("print('loop' .. 'ing') while true do end", 'Enter')
    wait_for('\nlooping', 2)
    keys('C-c')
    wait_for('interrupted (Ctrl-C)', 2)
    keys('=y + x:numel()', 'Enter')
    wait_for('\n47\n')
    -- Ctrl-C at the prompt drops the line
    keys('half a line', 'C-c')
    wait_for('^C')
    keys('=y', 'Enter')
    wait_for('\n41\n', 2)
    -- the history file holds the lines
    local h = io.open(hist):read('*a')
    assert.truthy(h:find('y = 41', 1, true), h)
    assert.truthy(h:find('help(flow.zeros)', 1, true), h)
    assert.falsy(h:find('half a line', 1, true), h)
    -- Ctrl-D exits
    keys('C-d')
    local function alive()
      return sh('tmux has-session -t ' .. session .. ' >/dev/null 2>&1; echo rc=$?'):find('rc=0', 1, true) ~= nil
    end
    for _ = 1, 50 do
      if not alive() then break end
      sh('sleep 0.1')
    end
    assert.falsy(alive())
  end)

  it('falls back to plain lines on a terminal without readline', function()
    local s2 = session .. 'plain'
    sh(('tmux new-session -d -s %s -x 150 -y 20 "cd /tmp && FLOW_NO_READLINE=1 %s/bin/flow"'):format(s2, root))
    local out
    for _ = 1, 200 do
      out = sh('tmux capture-pane -p -t ' .. s2)
      if out:find('no line editing', 1, true) then break end
      sh('sleep 0.1')
    end
    sh('tmux send-keys -t ' .. s2 .. " '=6 * 7' Enter")
    for _ = 1, 100 do
      out = sh('tmux capture-pane -p -t ' .. s2)
      if out:find('\n42\n', 1, true) then break end
      sh('sleep 0.1')
    end
    sh('tmux kill-session -t ' .. s2)
    assert.truthy(out:find('(no line editing: FLOW_NO_READLINE is set)', 1, true), out)
    assert.truthy(out:find('\n42\n', 1, true), out)
  end)
end)
