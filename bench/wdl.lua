-- bench/wdl.lua: the update time of an embedding table (the WDL case) with
-- 1e5 and 1e7 rows. A sparse table (nn.Embedding {sparse = true}) with
-- optim.SparseAdam touches only the rows of the batch, so its step should
-- cost the same for both sizes; a dense table with optim.Adam updates every
-- row and its step grows with the table (shown for contrast).
--
--   luajit bench/wdl.lua [--rows 100000,10000000] [--dim 16] [--batch 256] [--fields 26]
--       [--reps 20] [--dense-reps 3] [--threads 2]
--
-- Prints one line per (table, optimizer): the median forward+backward and
-- optimizer-step times in ms, and the load average.
local here = debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or './'
package.path = ('%s../lua/?.lua;%s../lua/?/init.lua;'):format(here, here) .. package.path
local B = dofile(here .. 'common.lua')
local argparse = require 'argparse'
local flow = require 'oneflow'

local p = argparse('wdl.lua', 'Embedding-table update time: SparseAdam (sparse grads) vs Adam (dense), '
  .. 'at two table sizes.')
p:option('--rows', 'Comma-separated table sizes.', '100000,10000000')
p:option('--dim', 'Embedding width.', '16', tonumber)
p:option('--batch', 'Examples per step.', '256', tonumber)
p:option('--fields', 'Ids per example.', '26', tonumber)
p:option('--reps', 'Timed sparse steps (after 3 warm-up steps).', '20', tonumber)
p:option('--dense-reps', 'Timed dense steps (0: skip the dense contrast).', '3', tonumber)
p:option('--threads', 'CPU threads.', '2', tonumber)
local opts = p:parse(arg or {})
flow.set_num_threads(opts.threads)

local function run(rows, sparse, reps)
  flow.manual_seed(0)
  local emb = flow.nn.Embedding(rows, opts.dim, {sparse = sparse})
  local opt = sparse and flow.optim.SparseAdam(emb:parameters(), {lr = 1e-3})
    or flow.optim.Adam(emb:parameters(), {lr = 1e-3})
  local fb, st = {}, {}
  for i = 1, reps + 3 do
    local ids = flow.randint(1, rows + 1, {opts.batch, opts.fields})
    local t0 = B.now()
    opt:zero_grad()
    emb(ids):sum():backward()
    local t1 = B.now()
    opt:step()
    local t2 = B.now()
    if i > 3 then fb[#fb + 1], st[#st + 1] = (t1 - t0) * 1e3, (t2 - t1) * 1e3 end
  end
  return B.median(fb), B.median(st)
end

print(('embedding update, dim %d, batch %d x %d ids, %d threads, load %s'):format(
  opts.dim, opts.batch, opts.fields, flow.get_num_threads(), B.loadavg()))
local sizes = {}
for s in opts.rows:gmatch('[^,]+') do sizes[#sizes + 1] = tonumber(s) end
-- alternate the sizes twice so that a change of load shows as a difference
-- between the rounds rather than between the sizes
for round = 1, 2 do
  for _, rows in ipairs(sizes) do
    local fb, st = run(rows, true, opts.reps)
    print(('round %d  %9d rows  sparse + SparseAdam: fwd+bwd %7.2f ms, step %7.2f ms'):format(round, rows, fb, st))
  end
end
if opts.dense_reps > 0 then
  for _, rows in ipairs(sizes) do
    local fb, st = run(rows, false, opts.dense_reps)
    print(('         %9d rows  dense  + Adam:       fwd+bwd %7.2f ms, step %7.2f ms'):format(rows, fb, st))
  end
end
print('load after: ' .. B.loadavg())
