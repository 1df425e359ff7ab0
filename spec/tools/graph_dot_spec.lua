-- graph:to_dot() / graph:render(): nodes, edges, fused and global marks, and
-- an SVG from Graphviz (parsed by python3's xml.etree).
local ffi = require 'ffi'
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn
local GV = require 'oneflow.nn.graph_view'

pcall(ffi.cdef, 'int setenv(const char *name, const char *value, int overwrite);')

local function small_graph()
  local G = nn.Graph:subclass('DotG')
  function G:__init(m) nn.Graph.__init(self); self.m = m end
  function G:build(x) return (self.m(x) * 2):tanh() end
  local g = G(nn.Linear(4, 3))
  g(flow.randn(2, 4))
  return g
end

local function count(s, pat)
  local _, n = s:gsub(pat, '')
  return n
end

describe('nn.Graph to_dot / render', function()
  it('has a node per op, input, parameter and output, and an edge per use', function()
    local g = small_graph()
    local dot = g:to_dot()
    local ir = GV.ir(g)
    -- transpose, addmm (an eval graph's nn.Linear) and one fused *2 tanh
    -- chain (the fuse pass)
    local ops = {}
    for _, n in ipairs(ir.nodes) do ops[#ops + 1] = n.op end
    assert.are.same({'transpose', 'addmm', 'fused_elementwise'}, ops)
    assert.truthy(dot:match('^digraph "DotG" {'))
    assert.are.equal(1, count(dot, '\n  in1 %['))
    assert.are.equal(1, count(dot, '\n  out1 %['))
    assert.are.equal(2, count(dot, 'shape=note'))                  -- m.weight, m.bias
    assert.truthy(dot:find('label="m.weight\\nfloat32[3, 4]"', 1, true))
    assert.are.equal(3, count(dot, '\n  n%d+ %[shape=box'))
    -- edges: weight->transpose, input->addmm, transpose->addmm,
    -- bias->addmm, addmm->fused, fused->output
    assert.are.equal(6, count(dot, ' %-> '))
    assert.truthy(dot:find('  p1 -> n0;', 1, true))
    assert.truthy(dot:find('  in1 -> n1 [label="in2"];', 1, true))   -- addmm(bias, x, w^T)
    assert.truthy(dot:find('  n2 -> out1;', 1, true))
    -- the fused node is marked, with its chain and type
    assert.truthy(dot:find('#2 fused_elementwise (fused)\\n{mul,tanh into=0}\\nfloat32[2, 3]', 1, true), dot)
    assert.truthy(dot:find('peripheries=2', 1, true))
    -- without parameters
    local bare = g:to_dot({params = false})
    assert.are.equal(0, count(bare, 'shape=note'))
    assert.are.equal(4, count(bare, ' %-> '))
  end)

  it('shows placement and SBP of global values', function()
    local G = nn.Graph:subclass('GlobalDot')
    function G.build(_, x)
      return (x:to_global(flow.placement('cpu', {0}), flow.sbp.split(1)) * 2):to_local()
    end
    local g = G()
    g(flow.randn(4, 3))
    local dot = g:to_dot()
    assert.truthy(dot:find('float32[4, 3] <sbp=(S(1)) placement=cpu:0>', 1, true), dot)
  end)

  it('renders an SVG with dot, atomically', function()
    local g = small_graph()
    local path = os.tmpname() .. '.svg'
    assert.are.equal(path, g:render(path))
    local p = io.popen(([[python3 -c "
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
ns = '{http://www.w3.org/2000/svg}'
print(r.tag == ns + 'svg', len([e for e in r.iter(ns + 'g') if e.get('class') == 'node']),
      len([e for e in r.iter(ns + 'g') if e.get('class') == 'edge']))
" %s 2>&1]]):format(path))
    local out = p:read('*a')
    p:close()
    assert.are.equal('True 7 6\n', out)      -- 3 ops, input, 2 parameters, output
    local dir, base = path:match('^(.*)/([^/]+)$')
    assert.are.equal(base .. '\n', io.popen('ls ' .. dir .. ' | grep -F ' .. base):read('*a'))
    os.remove(path)
    local dpath = os.tmpname() .. '.dot'
    g:render(dpath)
    assert.are.equal(g:to_dot(), io.open(dpath):read('*a'))
    os.remove(dpath)
  end)

  it('says clearly when dot is missing or the graph is not compiled', function()
    local g = small_graph()
    local old = os.getenv('PATH')
    ffi.C.setenv('PATH', '/nonexistent', 1)
    local ok, err = pcall(g.render, g, os.tmpname() .. '.svg')
    ffi.C.setenv('PATH', old, 1)
    assert.is_false(ok)
    assert.truthy(tostring(err):find('Graphviz `dot` was not found', 1, true), err)
    H.raises(function() g:render(os.tmpname() .. '.gif') end, 'unknown format gif')
    H.raises(function() g:to_dot({param = false}) end, "nn.Graph.to_dot: unknown option 'param'")
    local G2 = nn.Graph:subclass('NotYet')
    function G2.build(_, x) return x end
    H.raises(function() G2():to_dot() end, 'has not been compiled yet')
  end)
end)
