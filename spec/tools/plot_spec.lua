-- flow.utils.plot: the SVG writer (ticks, lines, legend, atomic save), with
-- the file checked as XML by python3's xml.etree.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local plot = flow.utils.plot

local function xml_check(path)
  -- counts of polyline / circle / text elements, as python parses them
  local p = io.popen(([[python3 -c "
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
ns = '{http://www.w3.org/2000/svg}'
assert r.tag == ns + 'svg', r.tag
print(len(r.findall('.//' + ns + 'polyline')), len(r.findall('.//' + ns + 'circle')),
      '|'.join(t.text or '' for t in r.iter(ns + 'text')))
" %s 2>&1]]):format(path))
  local out = p:read('*a')
  p:close()
  local np, nc, texts = out:match('^(%d+) (%d+) (.*)\n$')
  assert(np, 'not well-formed SVG: ' .. out)
  return tonumber(np), tonumber(nc), texts
end

describe('flow.utils.plot', function()
  it('picks 1-2-5 ticks covering the range', function()
    assert.are.same({0, 0.2, 0.4, 0.6, 0.8, 1}, plot.ticks(0, 1, 5))
    local t, step = plot.ticks(3, 97, 6)
    assert.are.equal(20, step)
    assert.are.same({20, 40, 60, 80}, t)
    -- integer steps label without decimals (and never format '%.-0f')
    local svg = plot.Figure():line({0, 10}):svg()
    assert.truthy(svg:find('>10</text>', 1, true))
    local t2 = plot.ticks(5, 5)
    assert.is_true(#t2 >= 2 and t2[1] <= 5 and t2[#t2] >= 5)
  end)

  it('writes a well-formed SVG with axes, ticks, lines and a legend', function()
    local path = os.tmpname() .. '.svg'
    local losses = {}
    for i = 1, 50 do losses[i] = 2 * math.exp(-i / 10) end
    local fig = plot.Figure({title = 'MNIST <train>', xlabel = 'step', ylabel = 'loss'})
    fig:line(losses, {label = 'train'})
    fig:line({10, 20, 30, 40, 50}, flow.tensor({1.5, 0.9, 0.6, 0.5, 0.45}), {label = 'val', marker = true, dash = true})
    fig:save(path)
    local np, nc, texts = xml_check(path)
    assert.are.equal(2, np)
    assert.are.equal(5, nc)
    assert.truthy(texts:find('MNIST <train>', 1, true))   -- escaped in the file, text again when parsed
    assert.truthy(texts:find('|train|val', 1, true))
    assert.truthy(texts:find('|step|loss', 1, true))
    assert.truthy(texts:find('|10|20|30|40|50|', 1, true))
    local svg = fig:svg()
    assert.truthy(svg:find('stroke-dasharray', 1, true))
    -- nothing is left beside the file
    local dir, base = path:match('^(.*)/([^/]+)$')
    local ls = io.popen('ls ' .. dir .. ' | grep -F ' .. base):read('*a')
    assert.are.equal(base .. '\n', ls)
    os.remove(path)
  end)

  it('breaks a line at NaN and plots log axes', function()
    local fig = plot.Figure({logy = true, legend = false})
    fig:line({1, 0.1, 0 / 0, 0.01, 0.001}, {label = 'x'})
    local svg = fig:svg()
    local _, n = svg:gsub('<polyline', '')
    assert.are.equal(2, n)
    assert.truthy(svg:find('>1e%-3<'))
    assert.falsy(svg:find('class="legend"', 1, true))
  end)

  it('plots a table of curves in one call', function()
    local path = os.tmpname() .. '.svg'
    plot.curves(path, {train = {3, 2, 1}, val = {3.5, 2.5, 2}}, {xlabel = 'epoch'})
    local np, _, texts = xml_check(path)
    assert.are.equal(2, np)
    assert.truthy(texts:find('train|val', 1, true))
    os.remove(path)
  end)

  it('checks its arguments', function()
    H.raises(function() plot.Figure({titel = 'x'}) end, "plot.Figure: unknown option 'titel'", "'title'")
    H.raises(function() plot.Figure():line({1, 2}, {colour = 'red'}) end, "plot.line: unknown option 'colour'")
    H.raises(function() plot.Figure():line({1, 2}, {1, 2, 3}) end, '2 x values and 3 y values')
    H.raises(function() plot.Figure():line(flow.zeros(2, 2)) end, 'must be 1-d')
    H.raises(function() plot.Figure():save('/nonexistent-dir/x.svg') end, 'plot.save: cannot create')
  end)
end)
