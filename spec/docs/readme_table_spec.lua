-- README.md's "Coming from PyTorch" table, row by row: each claim run as
-- written (1-based dims and values, options tables, `:` methods, several
-- return values, a:eq(b) / identity ==, subclassing, no_grad, 1-based
-- containers with 0-based state-dict keys, safetensors and PyTorch files).
local flow = require 'oneflow'
local nn, F = flow.nn, flow.nn.functional
local read = require('spec.helpers').read_file

describe('README: coming from PyTorch', function()
  it('lists the rows checked here', function()
    local readme = assert(read('README.md'))
    local table_text = readme:match('## Coming from PyTorch(.-)\n## ')
    assert(table_text, 'README.md has no "Coming from PyTorch" section')
    for _, s in ipairs({'x:size(1)', 'x:argmax(2)', "{padding = 1}", 'local v, i = x:max(2)', 'a:lt(b)',
                        "nn.Module:subclass('Net')", 'flow.no_grad(function() ... end)', '0.weight',
                        'flow.load_torch'}) do
      assert(table_text:find(s, 1, true), 'the table no longer says ' .. s)
    end
  end)

  it('holds for every row', function()
    local x = flow.tensor({{1, 5, 2}, {7, 0, 3}})
    assert(x:size(1) == 2 and x:size(2) == 3)
    assert(flow.equal(x:sum(2), flow.tensor({8, 10})))
    assert(flow.cat({x, x}, 2):size(2) == 6)
    assert(flow.equal(x:argmax(2), flow.tensor({2, 1}, {dtype = flow.int64})))
    assert(flow.equal(x:gather(2, flow.tensor({{1}, {3}}, {dtype = flow.int64})), flow.tensor({{1}, {3}})))
    assert(flow.equal(x:index_select(2, flow.tensor({3}, {dtype = flow.int64})), flow.tensor({{2}, {3}})))
    local emb = nn.Embedding(3, 2); assert(emb(flow.tensor({3}, {dtype = flow.int64})):size(1) == 1)
    local l = F.cross_entropy(flow.tensor({{0., 0., 10.}}), flow.tensor({3}, {dtype = flow.int64}))
    assert(l:item() < 1e-3)
    assert(x:sum(2, {keepdim = true}):dim() == 2)
    local c = nn.Conv2d(1, 8, 3, {padding = 1}); assert(c(flow.ones(1, 1, 4, 4)):size(3) == 4)
    assert(x:t():size(1) == 3)
    local net = nn.Sequential(nn.Linear(2, 2)); net:eval(); assert(not net.training)
    assert(type(l:item()) == 'number')
    local v, i = x:max(2); assert(v[1]:item() == 5 and i[1]:item() == 2)
    local a, b = flow.ones(2), flow.ones(2)
    assert(a:eq(b):all():item() == true and a:lt(b):any():item() == false)
    assert((a == b) == false)
    local Net = nn.Module:subclass('Net')
    function Net:__init() nn.Module.__init(self); self.fc = nn.Linear(2, 1) end
    function Net:forward(z) return self.fc(z) end
    local n = Net(); assert(n(flow.ones(1, 2)):size(2) == 1)
    local y = flow.no_grad(function() return n(flow.ones(1, 2)) end); assert(not y.requires_grad)
    assert(net[1] ~= nil)
    local opt = flow.optim.SGD(net:parameters(), {lr = 0.1}); assert(opt.param_groups[1].lr == 0.1)
    local sd = net:state_dict(); assert(sd['0.weight'] ~= nil)
    local p = os.tmpname()
    flow.save(sd, p); local back = flow.load(p); assert(flow.equal(back['0.weight'], sd['0.weight']))
    flow.save_torch(sd, p .. '.pt')
    local back2 = flow.load_torch(p .. '.pt')
    assert(flow.equal(back2['0.weight'], sd['0.weight']))
    os.remove(p); os.remove(p .. '.pt')
    -- flow.save writes safetensors: an 8-byte little-endian header length, then JSON
    flow.save({w = flow.ones(2)}, p)
    local s = assert(io.open(p, 'rb')):read('*a')
    os.remove(p)
    local b1, b2 = s:byte(1, 2)
    assert.are.equal('{', s:sub(9, 9))
    assert.are.equal(#s, 8 + b1 + b2 * 256 + 8)
  end)
end)

-- Issue 20: the README is the front door: what it is, a training example of
-- about ten lines (run as written by spec/docs/snippets_spec.lua), the two
-- commands, links into doc/ (snippets_spec checks that they stay inside the
-- repository) and the table above.
describe('README: the front door', function()
  it('opens with what it is, a short training example and the two commands', function()
    local readme = assert(read('README.md'))
    local intro, code = readme:match('^# [^\n]+\n\n(.-)\n```lua\n(.-)```')
    assert.truthy(intro and #intro > 80, 'no paragraph saying what it is before the first example')
    local n = select(2, code:gsub('\n', ''))
    assert.is_true(n <= 12, ('the first example has %d lines'):format(n))
    for _, s in ipairs({'require \'oneflow\'', 'backward()', 'step()'}) do
      assert.truthy(code:find(s, 1, true), 'the first example does not train: no ' .. s)
    end
    local start = readme:match('\n## Start\n(.-)\n## ')
    assert.truthy(start, 'no Start section')
    assert.truthy(start:find('\nmake example', 1, true) and start:find('\nmake test', 1, true), start)
    local links = 0
    for target in readme:gmatch('%]%((doc/[^)#]+)') do
      links = links + 1
      assert.truthy(io.open(target), 'README links to a missing ' .. target)
    end
    assert.is_true(links >= 5, links .. ' links into doc/')
  end)
end)
