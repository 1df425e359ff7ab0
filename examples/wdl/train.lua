-- Wide & Deep (Cheng et al. 2016; OneFlow's WDL benchmark model) on
-- synthetic click data: 13 dense features and 26 categorical fields hashed
-- into one embedding table. The wide part is a linear model over the ids
-- (nn.EmbeddingBag of width 1, mode 'sum'), the deep part an MLP over the
-- fields' embeddings and the dense features. Both tables have sparse
-- gradients and are trained with optim.SparseAdam (only the rows a batch
-- uses are touched, so a step costs the same for 1e5 or 1e7 rows); the MLP
-- with Adam.
--
--   ./bin/flow examples/wdl/train.lua                      # ~30 s on 2 cores
--   ./bin/flow examples/wdl/train.lua --rows 10000000 --steps 2000
--   ./bin/flow examples/wdl/train.lua --help
--
-- The clicks come from a hidden logistic model (a random weight per id and
-- per dense feature, plus one pairwise field interaction that only the deep
-- part can express), so the best log-loss is known: the example prints it.
-- Runs from any directory: this checkout's lua/ comes first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;'):format(here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'

local nn, F = flow.nn, flow.nn.functional

local FIELDS, DENSE = 26, 13

local function parse_args(argv)
  local p = argparse('train.lua', 'Wide & Deep on synthetic click data with sparse embeddings and SparseAdam.')
  p:option('--rows', 'Embedding table rows (ids are hashed into them).', '100000', tonumber)
  p:option('--vocab', 'Distinct values per categorical field in the synthetic data.', '1000', tonumber)
  p:option('--dim', 'Deep embedding width.', '16', tonumber)
  p:option('--steps', 'Training steps.', '300', tonumber)
  p:option('--batch-size', 'Examples per step.', '256', tonumber)
  p:option('--lr', 'Learning rate (SparseAdam and Adam).', '1e-2', tonumber)
  p:option('--test', 'Held-out examples.', '8192', tonumber)
  p:option('--threads', 'CPU threads.', '2', tonumber)
  p:option('--seed', 'Random seed.', '0', tonumber)
  p:option('--log-every', 'Print the loss every N steps.', '50', tonumber)
  return p:parse(argv)
end

-- The hidden click model and a sampler of examples from it.
local function make_world(opts)
  local g = {
    field_w = flow.randn(FIELDS, opts.vocab) * 0.5,      -- a weight per (field, value)
    dense_w = flow.randn(DENSE) * 0.5,
    a = flow.randn(opts.vocab),                          -- pairwise: fields 1 and 2
    b = flow.randn(opts.vocab),
  }
  -- field f's value v (1-based) -> a table row: a fixed multiplicative hash
  local hash_mul = flow.tensor({2654435761}, {dtype = flow.int64})
  function g.sample(n)
    local vals = flow.randint(1, opts.vocab + 1, {n, FIELDS})
    local dense = flow.randn(n, DENSE)
    local logit = dense:matmul(g.dense_w)
    for f = 1, FIELDS do
      logit = logit + g.field_w[f]:index_select(1, vals:select(2, f))
    end
    logit = logit + g.a:index_select(1, vals:select(2, 1)) * g.b:index_select(1, vals:select(2, 2)) - 1
    local p = flow.sigmoid(logit)
    local y = flow.rand(n):lt(p):to(flow.float32)
    local field = flow.arange(0, FIELDS, {dtype = flow.int64}):unsqueeze(1)
    local key = (vals + field * opts.vocab) * hash_mul     -- field: [1, FIELDS]
    local ids = key:remainder(opts.rows) + 1                -- [n, FIELDS], 1-based rows
    return ids, dense, y, p
  end
  return g
end

local WDL = nn.Module:subclass('WDL')
function WDL:__init(rows, dim)
  nn.Module.__init(self)
  self.wide = nn.EmbeddingBag(rows, 1, {mode = 'sum', sparse = true})
  self.deep_emb = nn.Embedding(rows, dim, {sparse = true})
  self.mlp = nn.Sequential(nn.Linear(FIELDS * dim + DENSE, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                           nn.Linear(64, 1))
  self.dense_wide = nn.Linear(DENSE, 1)
  flow.no_grad(function()
    self.wide.weight:zero_()
    self.deep_emb.weight:normal_(0, 0.01)
  end)
end

-- ids [B, FIELDS] (each row one bag for the wide part), dense [B, DENSE] -> logits [B]
function WDL:forward(ids, dense)
  local b = ids:size(1)
  local wide = self.wide(ids) + self.dense_wide(dense)                       -- [B, 1]
  local deep = flow.cat({self.deep_emb(ids):reshape(b, -1), dense}, 2)
  return (wide + self.mlp(deep)):reshape(b)
end

local function main(argv)
  local opts = parse_args(argv)
  flow.set_num_threads(opts.threads)
  flow.manual_seed(opts.seed)
  local world = make_world(opts)
  local test_ids, test_dense, test_y, test_p = world.sample(opts.test)
  -- the log-loss of the true click probabilities: the floor any model can reach
  local floor = F.binary_cross_entropy(test_p, test_y):item()
  local base = test_y:mean():item()
  local prior = F.binary_cross_entropy(flow.full({opts.test}, base), test_y):item()

  local model = WDL(opts.rows, opts.dim)
  local sparse_params = {model.wide.weight, model.deep_emb.weight}
  local dense_params = {}
  for _, p in ipairs(model:parameters()) do
    if p ~= sparse_params[1] and p ~= sparse_params[2] then dense_params[#dense_params + 1] = p end
  end
  local sopt = flow.optim.SparseAdam(sparse_params, {lr = opts.lr})
  local dopt = flow.optim.Adam(dense_params, {lr = opts.lr})
  print(('WDL: %d table rows x (1 + %d), %d fields, %d dense features; %d threads'):format(
    opts.rows, opts.dim, FIELDS, DENSE, flow.get_num_threads()))

  local function test_loss()
    return flow.no_grad(function()
      local logits = model(test_ids, test_dense)
      local loss = F.binary_cross_entropy_with_logits(logits, test_y):item()
      local acc = logits:gt(0):to(flow.float32):eq(test_y):to(flow.float32):mean():item()
      return loss, acc
    end)
  end

  local c0, sum, n = os.clock(), 0, 0
  for step = 1, opts.steps do
    local ids, dense, y = world.sample(opts.batch_size)
    local loss = F.binary_cross_entropy_with_logits(model(ids, dense), y)
    sopt:zero_grad()
    dopt:zero_grad()
    loss:backward()
    sopt:step()
    dopt:step()
    sum, n = sum + loss:item(), n + 1
    if step % opts.log_every == 0 or step == opts.steps then
      local tl, acc = test_loss()
      print(('step %d: train log-loss %.4f, test log-loss %.4f, accuracy %.2f%% (%.1f ms/step cpu)'):format(
        step, sum / n, tl, 100 * acc, (os.clock() - c0) * 1000 / step))
      sum, n = 0, 0
    end
  end
  local tl = test_loss()
  print(('test log-loss %.4f; the click rate alone gives %.4f, the true probabilities %.4f'):format(tl, prior, floor))
  return tl, prior, floor
end

return main(arg or {})
