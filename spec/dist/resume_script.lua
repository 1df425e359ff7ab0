-- Run by spec/dist/reshard_spec.lua: trains the specs' small MLP with global
-- tensors (parameters broadcast, batch split over this launch's ranks) from
-- step FROM+1 to TO, resuming from the sharded checkpoint in DIR when FROM
-- > 0 and saving one there after step SAVE_AT; then prints every parameter
-- (rank 0). A world of one (no mpirun) is the reference.
--   luajit spec/dist/resume_script.lua DIR FROM TO [SAVE_AT]
local flow = require 'oneflow'
local D = require 'spec.dist.helpers'
local F = flow.nn.functional
local dir, from, to, save_at = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4] or -1)
local n = flow.env.get_world_size()
local ranks = {}
for i = 0, n - 1 do ranks[i + 1] = i end
local P, S, Bc = flow.placement('cpu', ranks), flow.sbp.split, flow.sbp.broadcast

flow.manual_seed(1)
local net = D.mlp()
net:to_global(P, Bc)
if from > 0 then flow.distributed.load(dir, net) end
local opt = flow.optim.SGD(net:parameters(), {lr = 0.2})   -- no state: the weights say it all
local N = 13                                                -- splits unevenly on 2, 3, 4 ranks
for step = from + 1, to do
  flow.manual_seed(100 + step)                              -- the batch of step `step`
  local X = flow.randn(N, 6)
  local OH = F.one_hot(flow.randint(1, 5, {N}), 4):to('float32')
  opt:zero_grad()
  local l = D.loss_of(net(X:to_global(P, Bc):to_global(P, S(1))),
                      OH:to_global(P, Bc):to_global(P, S(1)), N)
  l:backward()
  opt:step()
  if step == save_at then flow.distributed.save(net, dir, {gather = false}) end
end
local names = {}
for k in pairs(net:state_dict()) do names[#names + 1] = k end
table.sort(names)
for _, k in ipairs(names) do
  local v = net:state_dict()[k]:to_global(P, Bc):to_local():contiguous():view(-1)
  if flow.env.get_rank() == 0 then
    local t = {}
    for i = 1, v:numel() do t[i] = ('%.9g'):format(v[i]:item()) end
    print(k .. ' ' .. table.concat(t, ' '))
  end
end
