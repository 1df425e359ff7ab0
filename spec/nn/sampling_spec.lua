local flow = require 'oneflow'
local H = require 'spec.helpers'
local F = flow.nn.functional

local f64 = {dtype = flow.float64}

-- sin(0), sin(1), ... in the given shape (float64): torch.arange(n).reshape(shape).sin()
local function sinx(...)
  local shape = {...}
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return flow.arange(0, n, 1, f64):reshape(shape):sin()
end

local function sum_sq(t) return t:sum():item(), (t * t):sum():item() end

-- cos(0), cos(1), ... shaped like t: a fixed weighting to backpropagate through
local function cosw(t) return flow.arange(0, t:numel(), 1, f64):reshape(t:size()):cos() end

describe('F.affine_grid', function()
  it('matches torch in 2-D and 3-D', function()
    local th = sinx(2, 2, 3)
    -- torch: g = F.affine_grid(th, (2, 1, 3, 4), align_corners=ac); g.sum(), (g*g).sum(), g[1, 2, 3]
    local g = F.affine_grid(th, {2, 1, 3, 4})
    assert.same({2, 3, 4, 2}, H.shape(g))
    local s, ss = sum_sq(g)
    H.close({s, ss}, {-0.7231056931773416, 52.847400279159395}, 1e-12)
    H.close(g[2][3][4], {1.2177876887867134, -1.0535820832122993}, 1e-12)
    g = F.affine_grid(th, {2, 1, 3, 4}, {align_corners = true})
    s, ss = sum_sq(g)
    H.close({s, ss}, {-0.7231056931773416, 62.554853255863506}, 1e-12)
    H.close(g[2][3][4], {1.366929347143245, -1.1318928321983166}, 1e-12)
    -- torch: g = F.affine_grid(sinx(1, 3, 4), (1, 1, 2, 3, 4), align_corners=False)
    g = F.affine_grid(sinx(1, 3, 4), {1, 1, 2, 3, 4})
    assert.same({1, 2, 3, 4, 3}, H.shape(g))
    s, ss = sum_sq(g)
    H.close({s, ss}, {-4.845206394529133, 66.46048339695702}, 1e-12)
    H.close(g[1][2][3][4], {1.1567493780113056, -0.6896058716370455, -0.25523642020001436}, 1e-12)
  end)

  it('is differentiable in theta', function()
    local th = sinx(2, 2, 3)
    th.requires_grad = true
    assert.is_true(flow.autograd.gradcheck(function(t) return F.affine_grid(t, {2, 1, 3, 4}) end, {th}))
  end)

  it('rejects mismatched shapes', function()
    H.raises(function() F.affine_grid(sinx(2, 2, 3), {3, 1, 4, 4}) end, 'affine_grid')
    H.raises(function() F.affine_grid(sinx(2, 3, 4), {2, 1, 4, 4}) end, 'affine_grid')
  end)
end)

describe('F.grid_sample', function()
  -- torch: x = sinx(2, 3, 4, 5); gr = sinx(2, 3, 4, 2) * 1.7 + 0.1 (points outside [-1, 1] included);
  -- y = F.grid_sample(x, gr, mode=, padding_mode=, align_corners=); (y * cosw(y)).sum().backward();
  -- {y.sum(), (y*y).sum(), y[1, 2, 1, 3]}, {x.grad.sum(), (x.grad**2).sum()}, {gr.grad.sum(), (gr.grad**2).sum()}
  local cases = {
    {'bilinear', 'zeros', false, {0.5341146140375157, 1.6199544841296791, 0.0},
     {1.1915250677827527, 1.2451506215810828}, {5.739545900026577, 29.3190352424367}},
    {'bilinear', 'zeros', true, {0.206027028639586, 4.4184991544423395, 0.0},
     {-0.021518363948687114, 2.9472507864802466}, {1.1374029997565467, 34.63576310161706}},
    {'bilinear', 'border', false, {-0.15081189393154304, 30.623894275981485, -0.6708373518704417},
     {1.2159355686467772, 12.761051624879133}, {-5.932815573404433, 58.975667195606334}},
    {'bilinear', 'border', true, {-0.2285704720862003, 29.74328705666484, -0.8551699288263687},
     {1.2159355686467777, 8.763245431965824}, {-5.098340366869518, 55.395670176368775}},
    {'bilinear', 'reflection', false, {-5.125218437705401, 26.110089533632525, 0.3287074644735435},
     {1.2159355686467779, 7.242444467301458}, {-20.37087374959279, 161.83399200640363}},
    {'bilinear', 'reflection', true, {-3.806389073630381, 23.506841255034384, 0.17407827116592225},
     {1.2159355686467777, 6.587701984608836}, {-1.6481274129449197, 114.16775819073553}},
    {'nearest', 'zeros', false, {0.5539439524098979, 3.093182006795683, 0.0},
     {-0.6933374701920876, 3.5161751035123814}, {0.0, 0.0}},
    {'nearest', 'zeros', true, {-1.0525747720679832, 7.05907608162599, 0.0},
     {-1.6137461228542005, 8.58601002339326}, {0.0, 0.0}},
    {'nearest', 'border', false, {-0.7932092241341158, 34.530974131190476, -0.3714041014380902},
     {1.215935568646778, 24.800806717703882}, {0.0, 0.0}},
    {'nearest', 'border', true, {1.695874730848279, 35.00651663855876, -0.9819521690440836},
     {1.2159355686467777, 17.73180661392503}, {0.0, 0.0}},
    {'nearest', 'reflection', false, {-2.7060924577643757, 36.27227975155181, 0.7849803886813105},
     {1.2159355686467777, 20.54617427405567}, {0.0, 0.0}},
    {'nearest', 'reflection', true, {-8.721244322778986, 35.215537402066474, -0.09718190589320902},
     {1.2159355686467788, 17.326277799331574}, {0.0, 0.0}},
  }
  for _, c in ipairs(cases) do
    local mode, pm, ac = c[1], c[2], c[3]
    it(('matches torch values and grads: mode=%s, padding_mode=%s, align_corners=%s'):format(mode, pm, ac), function()
      local x = sinx(2, 3, 4, 5)
      local gr = sinx(2, 3, 4, 2) * 1.7 + 0.1
      x.requires_grad, gr.requires_grad = true, true
      local y = F.grid_sample(x, gr, {mode = mode, padding_mode = pm, align_corners = ac})
      assert.same({2, 3, 3, 4}, H.shape(y))
      local s, ss = sum_sq(y)
      H.close({s, ss, y[2][3][2][4]:item()}, c[4], 1e-10)
      ;(y * cosw(y)):sum():backward()
      H.close({sum_sq(x.grad)}, c[5], 1e-10)
      -- nearest has no path to the grid: no grad (torch: zeros)
      if mode == 'nearest' then assert.is_nil(gr.grad) else H.close({sum_sq(gr.grad)}, c[6], 1e-10) end
    end)
  end

  it('passes gradcheck in input and grid (bilinear)', function()
    local x = sinx(1, 2, 3, 4)
    local gr = sinx(1, 2, 3, 2) * 1.3 + 0.05
    x.requires_grad, gr.requires_grad = true, true
    for _, pm in ipairs({'zeros', 'border', 'reflection'}) do
      assert.is_true(flow.autograd.gradcheck(function(a, b)
        return F.grid_sample(a, b, {padding_mode = pm})
      end, {x, gr}))
    end
  end)

  it('with affine_grid of the identity returns the input', function()
    local x = sinx(2, 3, 4, 5)
    local th = flow.tensor({{{1, 0, 0}, {0, 1, 0}}, {{1, 0, 0}, {0, 1, 0}}}, f64)
    for _, ac in ipairs({false, true}) do
      local g = F.affine_grid(th, {2, 3, 4, 5}, {align_corners = ac})
      H.close(F.grid_sample(x, g, {align_corners = ac}), x, 1e-12)
    end
  end)

  it('rejects bad shapes and options', function()
    local x, g = sinx(1, 1, 2, 2), sinx(1, 2, 2, 2)
    H.raises(function() F.grid_sample(x, sinx(1, 2, 2, 3)) end, 'grid_sample')
    H.raises(function() F.grid_sample(x, g, {mode = 'bicubic'}) end, 'mode')
    H.raises(function() F.grid_sample(x, g, {padding_mode = 'wrap'}) end, 'padding_mode')
  end)
end)
