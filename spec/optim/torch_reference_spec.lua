-- Optimizer trajectories against PyTorch itself (float64, 1e-6), when
-- /usr/bin/python3 can import torch; pending otherwise.
local flow = require 'oneflow'
local H = require 'spec.helpers'


-- The objective: f(w) = sum(A w - b)^2 + 0.1 sum(w^4), with fixed A, b.
local A = {{1.0, -0.5, 0.3}, {0.2, 0.8, -1.1}, {-0.7, 0.4, 0.9}, {0.5, 0.5, 0.5}}
local b = {0.3, -0.2, 1.0, 0.4}
local w0 = {0.5, -1.2, 0.8}

local cases = {
  {'SGD', 'lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01',
   {lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 0.01}},
  {'SGD', 'lr=0.05, momentum=0.8, dampening=0.3', {lr = 0.05, momentum = 0.8, dampening = 0.3}},
  {'Adam', 'lr=0.05, amsgrad=True, weight_decay=0.01', {lr = 0.05, amsgrad = true, weight_decay = 0.01}},
  {'AdamW', 'lr=0.05, betas=(0.8, 0.99), weight_decay=0.1', {lr = 0.05, betas = {0.8, 0.99}, weight_decay = 0.1}},
  {'RMSprop', 'lr=0.01, alpha=0.9, momentum=0.5, centered=True',
   {lr = 0.01, alpha = 0.9, momentum = 0.5, centered = true}},
  {'Adagrad', 'lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1',
   {lr = 0.1, lr_decay = 0.01, initial_accumulator_value = 0.1}},
}

local STEPS = 25

local function lua_list(t) return '[' .. table.concat(t, ', ') .. ']' end

local function torch_trajectory(name, args)
  local rows = {}
  for _, r in ipairs(A) do rows[#rows + 1] = lua_list(r) end
  local script = ([[
import torch
torch.set_default_dtype(torch.float64)
A = torch.tensor([%s]); b = torch.tensor(%s)
w = torch.tensor(%s, requires_grad=True)
opt = torch.optim.%s([w], %s)
for _ in range(%d):
    opt.zero_grad()
    loss = ((A @ w - b) ** 2).sum() + 0.1 * (w ** 4).sum()
    loss.backward(); opt.step()
    print(' '.join(repr(v) for v in w.tolist()))
]]):format(table.concat(rows, ', '), lua_list(b), lua_list(w0), name, args, STEPS)
  return H.torch_rows(script)
end

local function our_trajectory(name, opts)
  local Am = flow.tensor(A, {dtype = flow.float64})
  local bv = flow.tensor(b, {dtype = flow.float64})
  local w = flow.tensor(w0, {dtype = flow.float64, requires_grad = true})
  local opt = flow.optim[name]({w}, opts)
  local traj = {}
  for i = 1, STEPS do
    opt:zero_grad()
    local loss = ((Am:matmul(w) - bv) ^ 2):sum() + (w ^ 4):sum() * 0.1
    loss:backward()
    opt:step()
    traj[i] = w:detach():totable()
  end
  return traj
end

describe('optimizers against PyTorch', function()
  local check = H.torch_ok() and it or pending
  for _, c in ipairs(cases) do
    check(('%s(%s) follows torch.optim step for step'):format(c[1], c[2]), function()
      local want = torch_trajectory(c[1], c[2])
      local got = our_trajectory(c[1], c[3])
      assert.are.equal(STEPS, #want)
      for i = 1, STEPS do H.close(got[i], want[i], 1e-6, ('%s step %d'):format(c[1], i)) end
    end)
  end
end)
