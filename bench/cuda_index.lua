-- bench/cuda_index.lua -- the indexing family on the GPU: embedding forward
-- (index_select) and backward (index_add) and gather in GB/s against the
-- device's HBM bandwidth; sort and topk in millions of keys per second;
-- cumsum and masked_select in GB/s. Each row also times the same op on the
-- CPU in the same run, for the ratio.
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit bench/cuda_index.lua [--hbm GBps]
--
-- Without a usable GPU it prints why and exits with 0.
local flow = require 'oneflow'

local hbm = 4800
local args = arg or {}
for i = 1, #args do
  if args[i] == '--hbm' then hbm = tonumber(args[i + 1]) end
end

if not flow.cuda.is_available() then
  print('bench/cuda_index.lua: no usable GPU, nothing to measure: ' .. flow.cuda.why_unavailable())
  os.exit(0)
end

local gpu_ms = require 'bench.cuda_time'

local function cpu_ms(fn, reps)
  reps = reps or 3
  fn()
  local best = math.huge
  for _ = 1, reps do
    local t0 = os.clock()
    fn()
    best = math.min(best, (os.clock() - t0) * 1e3)
  end
  return best
end

-- name, gpu fn, cpu fn, bytes moved (or nil), keys sorted (or nil)
local function row(name, g, c, bytes, keys)
  local ms, cms = gpu_ms(g), cpu_ms(c)
  local rate = bytes and ('%.0f GB/s (%.0f%% HBM)'):format(bytes / (ms * 1e-3) / 1e9,
                                                          100 * bytes / (ms * 1e-3) / 1e9 / hbm)
               or ('%.0f Mkeys/s'):format(keys / (ms * 1e-3) / 1e6)
  print(('| %-40s | %9.3f | %-24s | %9.1f | %7.1fx |'):format(name, ms, rate, cms, cms / ms))
end

print(('HBM reference %d GB/s'):format(hbm))
print('| op                                       | GPU ms    | GPU rate                 | CPU ms    | speedup  |')
print('|------------------------------------------|-----------|--------------------------|-----------|----------|')

flow.manual_seed(0)
local V, D, N = 50000, 512, 65536
local W, Wc = flow.randn(V, D, {device = 'cuda'}), flow.randn(V, D)
local ids = flow.randint(1, V + 1, {N})
local idg = ids:cuda()
row('embedding fwd (index_select) 64k x 512', function() return W:index_select(1, idg) end,
    function() return Wc:index_select(1, ids) end, 2 * N * D * 4 + N * 8)
local G, Gc = flow.randn(N, D, {device = 'cuda'}), flow.randn(N, D)
row('embedding bwd (index_add) 64k x 512', function() return W:index_add(1, idg, G) end,
    function() return Wc:index_add(1, ids, Gc) end, 3 * N * D * 4)
local X, Xc = flow.randn(4096, 4096, {device = 'cuda'}), flow.randn(4096, 4096)
local gi = flow.randint(1, 4097, {4096, 1024})
local gig = gi:cuda()
row('gather 4096 x 1024 of 4096 x 4096', function() return X:gather(2, gig) end,
    function() return Xc:gather(2, gi) end, 4096 * 1024 * (4 + 8 + 4))
row('sort 4096 rows of 4096', function() return X:sort(2) end, function() return Xc:sort(2) end,
    nil, 4096 * 4096)
local L, Lc = flow.randn(16777216, {device = 'cuda'}), flow.randn(16777216)
row('sort one row of 16M', function() return L:sort() end, function() return Lc:sort() end, nil,
    16777216)
row('topk 8 of 4096, 4096 rows', function() return X:topk(8, 2) end,
    function() return Xc:topk(8, 2) end, nil, 4096 * 4096)
row('cumsum 4096 x 4096 along rows', function() return X:cumsum(2) end,
    function() return Xc:cumsum(2) end, 2 * 4096 * 4096 * 4)
local M, Mc = X:gt(0), Xc:gt(0)
row('masked_select half of 16M', function() return X:masked_select(M) end,
    function() return Xc:masked_select(Mc) end, 4096 * 4096 * (4 + 1 + 8 + 2))
