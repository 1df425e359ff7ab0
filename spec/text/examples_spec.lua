-- Runs examples/text/similarity.lua in a child process: its --help always;
-- the ranking where the all-MiniLM-L6-v2 folder is there (tools/minilm.sh,
-- $FLOWTEXT_MINILM), pending otherwise.
local H = require 'spec.helpers'

local here = debug.getinfo(1, 'S').source:match('^@(.*)/spec/text/[^/]*$')
local root = here or '.'
local HOME = (os.getenv('XDG_CACHE_HOME') or (os.getenv('HOME') or '') .. '/.cache') .. '/oneflow'
local DIR = os.getenv('FLOWTEXT_MINILM') or HOME .. '/all-MiniLM-L6-v2'
local f = io.open(DIR .. '/model.safetensors', 'rb')
local HAVE_MODEL = f ~= nil
if f then f:close() end

local function run(args)
  local cmd = ('cd %q && ./bin/flow examples/text/similarity.lua %s 2>&1; echo "__exit=$?"'):format(root, args)
  local p = assert(io.popen(cmd))
  local out = p:read('*a')
  p:close()
  return tonumber(out:match('__exit=(%d+)%s*$')), out
end

describe('examples/text/similarity.lua', function()
  teardown(H.remove_tmpdirs)

  it('--help describes its options', function()
    local status, out = run('--help')
    assert.equal(0, status, out)
    for _, o in ipairs({'--query', '--file', '--model', '--top'}) do assert.truthy(out:find(o, 1, true), out) end
  end)

  it('says where it looked when the model is missing', function()
    local status, out = run('--model /nonexistent/minilm')
    assert.is_not.equal(0, status)
    assert.truthy(out:find('no model in /nonexistent/minilm', 1, true), out)
    assert.truthy(out:find('tools/minilm.sh', 1, true), out)
  end)

  local check = HAVE_MODEL and it or pending
  local why = HAVE_MODEL and '' or ' (no model: sh tools/minilm.sh)'
  check('ranks a file\'s sentences by similarity to the query' .. why, function()
    local path = H.tmpdir() .. '/s.txt'
      local w = assert(io.open(path, 'wb'))
      w:write('The stock market fell sharply today.\nMy cat sleeps on the sofa.\n\n'
        .. 'Dogs and cats are popular pets.\nThe recipe needs two eggs.\n')
      w:close()
      local status, out = run(('--model %q --file %q --query %q --top 2'):format(DIR, path, 'kittens and puppies'))
      assert.equal(0, status, out)
      local first, second = out:match('\n 1%. [%d.]+  ([^\n]+)\n 2%. [%d.]+  ([^\n]+)\n')
      assert.equal('Dogs and cats are popular pets.', first, out)
      assert.equal('My cat sleeps on the sofa.', second, out)
      assert.falsy(out:find(' 3%. '), out)
      assert.truthy(out:find('embedded 5 sentences', 1, true), out)
  end)
end)
