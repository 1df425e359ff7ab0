-- nn.Graph save/load: round trips in this process and in a fresh one (no
-- model code), train graphs keep stepping after a reload, and damaged
-- files are errors, never crashes.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional

local Eval = nn.Graph:subclass('Eval')
function Eval:__init(m) nn.Graph.__init(self); self.m = m end
function Eval:build(x) return F.softmax(self.m(x), 2) end

local Train = nn.Graph:subclass('TrainS')
function Train:__init(m, opt) nn.Graph.__init(self); self.m = m; self:add_optimizer(opt) end
function Train:build(x, y)
  local loss = F.cross_entropy(self.m(x), y)
  loss:backward()
  return loss
end

local function convnet()
  flow.manual_seed(21)
  return nn.Sequential(nn.Conv2d(1, 4, 3, {padding = 1}), nn.BatchNorm2d(4), nn.ReLU(),
                       nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 8), nn.Tanh(),
                       nn.Linear(8, 3))
end

local function C_num_externals(loaded)
  return tonumber(require('oneflow._C').C.of_graph_num_externals(loaded.g))
end

local function read(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end
local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

describe('nn.Graph save/load', function()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute('mkdir -p ' .. dir)
  local path = dir .. '/eval.ofg'

  it('loads a graph saved in format 2 (addmm record without its b_t field)', function()
    local h = nn.Graph.load('spec/fixtures/graph/addmm_v2.ofg')
    local x = flow.tensor({{1, 0}, {-1, 3}}, {dtype = flow.float64})
    H.close(h(x), {{1.5, -1}, {12.5, 5.5}}, 0)
    local c = flow.tensor({{1, 2}, {3, 4}}, {dtype = flow.float64})
    local w = flow.tensor({{0.5, -1}, {2, 0.25}}, {dtype = flow.float64})
    local x2 = flow.tensor({{2, 1}, {0.5, -4}}, {dtype = flow.float64})
    H.close(h(x2), flow.addmm(c, x2, w, {beta = 0.5, alpha = 2}), 0)
  end)

  it('round-trips an eval graph', function()
    local m = convnet()
    m:eval()
    local g = Eval(m)
    local x = flow.randn(2, 1, 8, 8)
    g(x)
    local y = g(x)
    g:save(path)
    local h = nn.Graph.load(path)
    assert.are.equal(0, (h(x) - y):abs():max():item())
    local x2 = flow.randn(2, 1, 8, 8)
    assert.are.equal(0, (h(x2) - g(x2)):abs():max():item())
    H.close(h(x2), F.softmax(m(x2), 2), 1e-6)
    assert.is_truthy(tostring(h):find('LoadedGraph', 1, true))
    assert.is_truthy(h:ir(2):find('"m.0.weight"', 1, true))
    H.raises(function() h(flow.randn(3, 1, 8, 8)) end, 'input 1 is [3,1,8,8]', 'compiled for [2,1,8,8]')
    H.raises(function() h() end, 'takes 1 inputs')
  end)

  it('keeps every compiled input signature: batch 4 then 2, both run after loading', function()
    local m = convnet()
    m:eval()
    local g = Eval(m)
    local x4, x2 = flow.randn(4, 1, 8, 8), flow.randn(2, 1, 8, 8)
    g(x4)
    g(x2)                          -- traced calls; the last compiled is batch 2
    local y4, y2 = g(x4), g(x2)    -- the compiled plans
    g:save(path)
    local h = nn.Graph.load(path)
    assert.are.same({{{2, 1, 8, 8}}, {{4, 1, 8, 8}}}, h:signatures())
    assert.are.equal(0, (h(x4) - y4):abs():max():item())
    assert.are.equal(0, (h(x2) - y2):abs():max():item())
    H.raises(function() h(flow.randn(3, 1, 8, 8)) end, 'input 1 is [3,1,8,8]',
             'compiled for [2,1,8,8]', 'variants whose first input is [4,1,8,8]')
    -- a loaded graph saves its variants again; the weights are stored once
    h:save(dir .. '/again.ofg')
    local h2 = nn.Graph.load(dir .. '/again.ofg')
    assert.are.equal(0, (h2(x4) - y4):abs():max():item())
    local entries = flow.load(dir .. '/again.ofg')
    local n = 0
    for k in pairs(entries) do if k:match('^ext%.') then n = n + 1 end end
    assert.are.equal(C_num_externals(h), n)
    -- a variant's external map that points outside the file, or is cut short: an error
    local st = require('oneflow.serialization').safetensors
    local meta = {format = 'oneflow-graph', version = '1'}
    local bad = flow.load(dir .. '/again.ofg')
    bad['__graph__.1.ext'] = flow.full({bad['__graph__.1.ext']:numel()}, 99, {dtype = flow.int32})
    st.save_file(bad, dir .. '/bad_map.ofg', meta)
    H.raises(function() nn.Graph.load(dir .. '/bad_map.ofg') end, "external map is out of range")
    bad['__graph__.1.ext'] = flow.zeros(1, {dtype = flow.int32})
    st.save_file(bad, dir .. '/short_map.ofg', meta)
    H.raises(function() nn.Graph.load(dir .. '/short_map.ofg') end, 'external map has the wrong length')
    -- a train-mode call is another mode: not saved with the eval signatures
    m:train()
    g(flow.randn(3, 1, 8, 8))
    g:save(dir .. '/train_mode.ofg')
    assert.are.same({{{3, 1, 8, 8}}}, nn.Graph.load(dir .. '/train_mode.ofg'):signatures())
  end)

  it('runs a saved graph in a fresh process without the model code', function()
    local x = flow.randn(2, 1, 8, 8)
    local m = convnet()
    m:eval()
    local g = Eval(m)
    H.close(g(x), F.softmax(m(x), 2), 1e-6)   -- traced (eager) call
    local want = g(x)                          -- the compiled plan (BatchNorm folded)
    g:save(path)
    flow.save({x = x}, dir .. '/x.safetensors')
    local script = dir .. '/fresh.lua'
    write(script, ([[
      local flow = require 'oneflow'
      local g = flow.nn.Graph.load(%q)
      local x = flow.load(%q).x
      flow.save({y = g(x)}, %q)
    ]]):format(path, dir .. '/x.safetensors', dir .. '/y.safetensors'))
    local ok = os.execute('luajit ' .. script)
    assert.is_true(ok == 0 or ok == true)
    local got = flow.load(dir .. '/y.safetensors').y
    assert.are.equal(0, (got - want):abs():max():item())
  end)

  it('reloads a train graph that keeps stepping from the saved state', function()
    local m = convnet()
    local g = Train(m, flow.optim.Adam(m:parameters(), {lr = 1e-2}))
    flow.manual_seed(3)
    local x, y = flow.randn(4, 1, 8, 8), flow.randint(1, 4, {4})
    g(x, y)
    g(x, y)
    g:save(dir .. '/train.ofg')
    local h = nn.Graph.load(dir .. '/train.ofg')
    local w = m[1].weight:clone()
    for _ = 1, 3 do
      local a, b = g(x, y), h(x, y)
      assert.are.equal(a:item(), b:item())
    end
    assert.is_true((m[1].weight - w):abs():max():item() > 0)   -- the original moved on its own
  end)

  it('rejects truncated, newer, tampered and foreign files with an error', function()
    local m = convnet()
    m:eval()
    Eval(m)(flow.randn(2, 1, 8, 8))
    local g = Eval(m)
    g(flow.randn(2, 1, 8, 8))
    g:save(path)
    local s = read(path)
    local bad = dir .. '/bad.ofg'
    for _, n in ipairs({0, 7, 20, math.floor(#s / 3), #s - 1}) do
      write(bad, s:sub(1, n))
      H.raises(function() nn.Graph.load(bad) end, 'nn.Graph.load', bad)
    end
    local at = s:find('OFGRAPH\0', 1, true)
    assert.is_truthy(at)
    -- a newer format version
    write(bad, s:sub(1, at + 7) .. '\99\0\0\0' .. s:sub(at + 12))
    H.raises(function() nn.Graph.load(bad) end, 'newer version')
    -- an edited byte in the IR
    local p = at + 40
    write(bad, s:sub(1, p - 1) .. string.char((s:byte(p) + 1) % 256) .. s:sub(p + 1))
    H.raises(function() nn.Graph.load(bad) end, 'checksum')
    -- not a graph at all
    flow.save({w = flow.ones(2)}, bad)
    H.raises(function() nn.Graph.load(bad) end, 'not a saved graph')
    H.raises(function() nn.Graph.load(dir .. '/missing.ofg') end, 'missing.ofg')
    -- random damage anywhere: an error or a graph that runs, never a crash
    math.randomseed(5)
    local x = flow.randn(2, 1, 8, 8)
    assert.is_truthy(g:ir():find('fused_elementwise', 1, true))
    for _ = 1, 300 do
      local q = math.random(1, #s)
      write(bad, s:sub(1, q - 1) .. string.char((s:byte(q) + math.random(1, 255)) % 256) .. s:sub(q + 1))
      local ok, h = pcall(nn.Graph.load, bad)
      if ok then pcall(h, x) end
    end
  end)

  it('rejects edited graph records that carry a valid checksum', function()
    local ffi = require 'ffi'
    local m = convnet()
    local g = Train(m, flow.optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9}))
    local x, y = flow.randn(4, 1, 8, 8), flow.randint(1, 4, {4})
    g(x, y)
    g:save(path)
    local s = read(path)
    local at = s:find('OFGRAPH\0', 1, true)
    local plen = tonumber(ffi.cast('uint64_t *', ffi.cast('const char *', s:sub(at + 16, at + 23)))[0])
    local p0 = at + 32
    local function fnv(str)
      local h = 1469598103934665603ULL
      for i = 1, #str do h = bit.bxor(h, str:byte(i)) * 1099511628211ULL end
      return h
    end
    local function le64(v)
      local b = ffi.new('uint64_t[1]', v)
      return ffi.string(b, 8)
    end
    local bad = dir .. '/edited.ofg'
    math.randomseed(11)
    local loaded = 0
    for _ = 1, 300 do
      local payload = s:sub(p0, p0 + plen - 1)
      local q = math.random(1, #payload)
      local v = math.random(0, 3) == 0 and 255 or (payload:byte(q) + math.random(1, 3)) % 256
      payload = payload:sub(1, q - 1) .. string.char(v) .. payload:sub(q + 1)
      write(bad, s:sub(1, at + 23) .. le64(fnv(payload)) .. payload .. s:sub(p0 + plen))
      local ok, h = pcall(nn.Graph.load, bad)
      if ok then
        loaded = loaded + 1
        pcall(h, x, y)
      else
        assert.is_truthy(tostring(h):find('nn.Graph', 1, true), tostring(h))
      end
    end
    assert.is_true(loaded < 300)
  end)
end)
