-- Every public function has a doc comment that help() shows: the walk goes
-- over flow.*, flow.nn.*, F.*, flow.optim(.lr_scheduler).*, flow.utils.data.*,
-- flow.utils.{summary,tensorboard,plot}, flow.profiler, the Tensor methods,
-- flow.{linalg,special,onnx,amp,autograd,quantization,distributions,cuda,
-- distributed} and flow.nn.{init,utils};
-- each Lua function (for a class, its constructor) must have a `---` block
-- (its own, an alias's, or for an in-place `abs_` the one of `abs`) whose
-- first line is a sentence, and help.text must show it under the signature.
local flow = require 'oneflow'
local help = require 'oneflow.help'
local T = require 'oneflow.tensor'

local ROOTS = {
  {'flow', flow}, {'flow.nn', flow.nn}, {'F', flow.nn.functional},
  {'flow.optim', flow.optim}, {'flow.optim.lr_scheduler', flow.optim.lr_scheduler},
  {'flow.utils.data', flow.utils.data}, {'flow.utils.tensorboard', flow.utils.tensorboard},
  {'flow.utils.tensorboard.SummaryWriter', flow.utils.tensorboard.SummaryWriter},
  {'flow.profiler', flow.profiler}, {'Tensor', T.methods},
  {'flow.utils.plot', flow.utils.plot}, {'flow.utils.summary', flow.utils.summary},
  {'flow.linalg', flow.linalg}, {'flow.special', flow.special}, {'flow.onnx', flow.onnx},
  {'flow.amp', flow.amp}, {'flow.autograd', flow.autograd}, {'flow.quantization', flow.quantization},
  {'flow.distributions', flow.distributions}, {'flow.cuda', flow.cuda},
  {'flow.distributed', flow.distributed}, {'flow.nn.init', flow.nn.init}, {'flow.nn.utils', flow.nn.utils},
}

-- the public Lua functions of the roots: {name, function or constructor, class}
local function public()
  local out = {}
  for _, r in ipairs(ROOTS) do
    local keys = {}
    for k in pairs(r[2]) do
      if type(k) == 'string' and not k:match('^_') then keys[#keys + 1] = k end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local v = r[2][k]
      if type(v) == 'table' and type(v.__init) == 'function' then
        out[#out + 1] = {r[1] .. '.' .. k, v.__init, v}
      elseif type(v) == 'function' and debug.getinfo(v, 'S').what ~= 'C' then
        out[#out + 1] = {r[1] .. '.' .. k, v}
      end
    end
  end
  return out
end

describe('help() and the doc comments of the public API', function()
  local list = public()

  it('walks several hundred public functions', function()
    assert.is_true(#list > 700, 'only ' .. #list .. ' public functions found')
  end)

  it('finds a doc comment with a one-line summary for every one', function()
    local missing = {}
    for _, e in ipairs(list) do
      local b = e[3] and help.class_doc(e[3], e[1]) or help.doc_for(e[2], e[1])
      local first = b and b.lines[1]
      if not (first and first:match('%w') and not first:match('^@')) then
        local info = debug.getinfo(e[2], 'S')
        missing[#missing + 1] = e[1] .. '  (' .. info.short_src:gsub('^.*/lua/', '') .. ':' .. info.linedefined .. ')'
      end
    end
    assert(#missing == 0, #missing .. ' public functions have no doc comment:\n' .. table.concat(missing, '\n'))
  end)

  it('shows the signature and that summary in help.text', function()
    for _, name in ipairs({'flow.abs', 'Tensor.sum', 'flow.nn.ReLU', 'F.conv2d', 'flow.multiply', 'Tensor.add_'}) do
      local path = {}
      for part in name:gmatch('[^.]+') do path[#path + 1] = part end
      local v = (path[1] == 'Tensor' and T.methods) or flow
      for i = 2, #path do
        if path[i] == 'nn' and v == flow then v = flow.nn
        elseif path[i] == 'F' then v = flow.nn.functional
        else v = v[path[i]] end
      end
      if path[1] == 'F' then v = flow.nn.functional[path[2]] end
      local t = help.text(v, name)
      assert.is_nil(t:find('(no doc comment)', 1, true), t)
      -- a function: `function name(params)  [file:line]` first; a class: its
      -- constructor line; then the summary, indented, and no raw @function tag
      local sig = type(v) == 'table' and t:match('\n  constructor [^\n]*') or t:match('^[^\n]*')
      assert.truthy(sig and sig:find('(', 1, true), t)
      assert.truthy(t:match('\n\n?  %w[^\n]*%w'), t)
      assert.is_nil(t:find('@function', 1, true), t)
    end
    -- an in-place variant says whose doc it borrows
    assert.truthy(help.text(T.methods.abs_, 'x:abs_'):find('In-place version of abs', 1, true))
  end)

  it('finds the same docs once a global tensor exists (distributed.global wraps the ops)', function()
    -- in a fresh process: making a global tensor rewires flow.* for the rest of it
    local root = debug.getinfo(1, 'S').source:sub(2):match('^(.*)/spec/docs/[^/]*$') or '.'
    local script = [[
      local flow = require 'oneflow'
      local help = require 'oneflow.help'
      local _ = flow.ones(4, 3):to_global(flow.placement('cpu', {0}), flow.sbp.split(1))
      for _, n in ipairs({'mul', 'multiply', 'abs', 'absolute', 'greater', 'less_equal', 'negative', 'fix'}) do
        local t = help.text(flow[n], 'flow.' .. n)
        if t:find('(no doc comment)', 1, true) then print('MISSING ' .. n) end
      end
      print('DONE')
    ]]
    local path = os.tmpname()
    local f = assert(io.open(path, 'w'))
    f:write(script)
    f:close()
    local p = io.popen(('cd %q && LUA_PATH=%q luajit %q 2>&1'):format(root, root .. '/lua/?.lua;' .. root
      .. '/lua/?/init.lua;;', path))
    local out = p:read('*a')
    p:close()
    os.remove(path)
    assert.truthy(out:find('DONE', 1, true), out)
    assert.is_nil(out:find('MISSING', 1, true), out)
  end)
end)
