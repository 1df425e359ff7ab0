-- tools/name_coverage.lua counts PyTorch's extended-ring names that exist here.
describe('tools/name_coverage.lua', function()
  it('counts every ring of torch_names.txt; special, linalg and distributions complete', function()
    local p = io.popen('luajit tools/name_coverage.lua --missing 2>&1')
    local out = p:read('*a')
    p:close()
    local rings, have, all = {}, 0, 0
    for ring, h, n in out:gmatch('(%w+) (%d+)/(%d+) [%d.]+%%') do
      if ring ~= 'total' then
        rings[ring] = {tonumber(h), tonumber(n)}
        have, all = have + tonumber(h), all + tonumber(n)
      end
    end
    for _, r in ipairs({'fft', 'special', 'linalg', 'distributions'}) do
      assert(rings[r], 'no line for ' .. r .. ' in:\n' .. out)
    end
    local th, ta = out:match('total (%d+)/(%d+)')
    assert.are.equal(all, tonumber(ta))
    assert.are.equal(have, tonumber(th))
    assert.are.same({56, 56}, rings.special)
    assert.are.same({67, 67}, rings.distributions)
    assert.are.same({43, 43}, rings.linalg)   -- eig / eigvals were the last two
    assert.is_true(rings.fft[1] >= 4, out)
    assert.is_nil(out:match('linalg %d+/%d+ [%d.]+%%\n  missing'))
    assert.is_nil(out:match('special %d+/%d+ [%d.]+%%\n  missing'))
  end)
end)
