-- optim.LBFGS: trajectories against torch.optim.LBFGS (float64, 1e-6) when
-- /usr/bin/python3 imports torch; convergence on Rosenbrock always.
local flow = require 'oneflow'
local H = require 'spec.helpers'

-- f(w) = sum_i 100 (w[i+1] - w[i]^2)^2 + (1 - w[i])^2 over a 4-vector, and
-- a second parameter z with a quartic term (two parameters, one flat vector)
local w0, z0 = {-1.2, 1.0, -0.5, 0.8}, {0.3, -0.7}

local function our_run(opts, steps)
  local w = flow.tensor(w0, {dtype = flow.float64, requires_grad = true})
  local z = flow.tensor(z0, {dtype = flow.float64, requires_grad = true})
  local opt = flow.optim.LBFGS({w, z}, opts)
  local rows = {}
  for i = 1, steps do
    opt:step(function()
      opt:zero_grad()
      local a, b = w:narrow(1, 2, 3), w:narrow(1, 1, 3)
      local loss = ((a - b * b) ^ 2 * 100 + (1 - b) ^ 2):sum() + (z ^ 4):sum() + (z * w:narrow(1, 1, 2)):sum() * 0.1
      loss:backward()
      return loss
    end)
    local r = w:detach():totable()
    for _, v in ipairs(z:detach():totable()) do r[#r + 1] = v end
    rows[i] = r
  end
  return rows
end

local function torch_run(args, steps)
  return H.torch_rows(([[
w = torch.tensor(%s, requires_grad=True)
z = torch.tensor(%s, requires_grad=True)
opt = torch.optim.LBFGS([w, z], %s)
def closure():
    opt.zero_grad()
    a, b = w[1:4], w[0:3]
    loss = ((a - b * b) ** 2 * 100 + (1 - b) ** 2).sum() + (z ** 4).sum() + (z * w[0:2]).sum() * 0.1
    loss.backward()
    return loss
for _ in range(%d):
    opt.step(closure)
    print(' '.join(repr(v) for v in w.tolist() + z.tolist()))
]]):format(H.pylist(w0), H.pylist(z0), args, steps))
end

local cases = {
  {'lr=1, max_iter=20, history_size=10, line_search_fn="strong_wolfe"',
   {lr = 1, max_iter = 20, history_size = 10, line_search_fn = 'strong_wolfe'}},
  {'lr=0.05, max_iter=10, history_size=5', {lr = 0.05, max_iter = 10, history_size = 5}},
  {'lr=0.5, max_iter=7, history_size=3, line_search_fn="strong_wolfe", tolerance_change=1e-12',
   {lr = 0.5, max_iter = 7, history_size = 3, line_search_fn = 'strong_wolfe', tolerance_change = 1e-12}},
}

describe('optim.LBFGS', function()
  local check = H.torch_ok() and it or pending
  for _, c in ipairs(cases) do
    check('matches torch.optim.LBFGS(' .. c[1] .. ') over 4 steps to 1e-6', function()
      local ref, ours = torch_run(c[1], 4), our_run(c[2], 4)
      assert.are.equal(4, #ref)
      for i = 1, 4 do
        for j = 1, 6 do
          assert(math.abs(ours[i][j] - ref[i][j]) <= 1e-6 * math.max(1, math.abs(ref[i][j])),
                 ('step %d, element %d: %.17g vs torch %.17g'):format(i, j, ours[i][j], ref[i][j]))
        end
      end
    end)
  end

  it('minimises Rosenbrock with strong Wolfe', function()
    local x = flow.tensor({-1.5, 2.0}, {dtype = flow.float64, requires_grad = true})
    local opt = flow.optim.LBFGS({x}, {line_search_fn = 'strong_wolfe', max_iter = 100})
    local function closure()
      opt:zero_grad()
      local a, b = x[1], x[2]
      local loss = (1 - a) ^ 2 + 100 * (b - a * a) ^ 2
      loss:backward()
      return loss
    end
    for _ = 1, 3 do opt:step(closure) end
    H.close(x:detach(), {1, 1}, 1e-4)
    assert.is_true(opt.state[x].func_evals > 1)
  end)

  it('rejects an unknown line search, a missing closure and unknown options', function()
    local x = flow.zeros(2, {requires_grad = true})
    H.raises(function() flow.optim.LBFGS({x}, {line_search_fn = 'armijo'}) end, "only 'strong_wolfe'")
    H.raises(function() flow.optim.LBFGS({x}):step() end, 'needs a closure')
    H.raises(function() flow.optim.LBFGS({x}, {history = 3}) end, 'history')
  end)
end)
