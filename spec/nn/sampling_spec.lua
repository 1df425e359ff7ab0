local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional

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

describe('F.embedding_bag / nn.EmbeddingBag', function()
  -- torch: ids = [2,0,5,3,3,1,4,0,2] (0-based), offsets [0,3,3,7] (bag 2 empty; [0,3,3,7,9] with
  -- include_last_offset), w = sinx(6, 3), psw = sinx(9) + 1.5;
  -- y = F.embedding_bag(ids, w, offsets, mode=, padding_idx=(ours - 1), include_last_offset=, per_sample_weights=);
  -- (y * cosw(y)).sum().backward(); y.flatten(), {w.grad.sum(), (w.grad**2).sum()}, psw.grad
  local cases = {
    {'sum', nil, false, false, {0.37087234195819097, 1.2105542668616203, 0.9372581815695066, 0.0, 0.0, 0.0,
     0.4287840605429455, -1.424677680260027, -1.968297332069675, -0.27941549819892586, 1.4984575835266856,
     1.8986556734490634}, {6.1552042507570635, 11.067250211196605}},
    {'sum', nil, false, true, {1.147613572688183, 2.2621150735478786, 1.296838408065807, 0.0, 0.0, 0.0,
     0.40404534461374875, -1.1937571477674938, -1.6940248237844495, -0.6955652746758768, 3.450516644882999,
     4.424209474009239}, {5.41862444488225, 23.76076786845888}, {-0.33616242853084577, 0.07624746575887677,
     0.8948155392059314, 0.13106379106005706, 0.13106379106005706, -0.29553235433095376, -0.342569899965615,
     -0.7020300701037878, -0.29229623311954467}},
    {'sum', nil, true, false, {0.37087234195819097, 1.2105542668616203, 0.9372581815695066, 0.0, 0.0, 0.0,
     0.4287840605429455, -1.424677680260027, -1.968297332069675, -0.27941549819892586, 1.4984575835266856,
     1.8986556734490634}, {6.1552042507570635, 11.067250211196605}},
    {'sum', nil, true, true, {1.147613572688183, 2.2621150735478786, 1.296838408065807, 0.0, 0.0, 0.0,
     0.40404534461374875, -1.1937571477674938, -1.6940248237844495, -0.6955652746758768, 3.450516644882999,
     4.424209474009239}, {5.41862444488225, 23.76076786845888}, {-0.33616242853084577, 0.07624746575887677,
     0.8948155392059314, 0.13106379106005706, 0.13106379106005706, -0.29553235433095376, -0.342569899965615,
     -0.7020300701037878, -0.29229623311954467}},
    {'sum', 1, false, false, {0.37087234195819097, 0.36908328205372376, 0.027960754743824978, 0.0, 0.0, 0.0,
     0.4287840605429455, -1.424677680260027, -1.968297332069675, -0.27941549819892586, 0.6569865987187891,
     0.9893582466233818}, {6.776824874409145, 10.800575036171026}},
    {'sum', 1, false, true, {1.147613572688183, 0.2918351780624623, -0.8322551334070081, 0.0, 0.0, 0.0,
     0.40404534461374875, -1.1937571477674938, -1.6940248237844495, -0.6955652746758768, 1.6354750074416642,
     2.462867110096765}, {6.552062667960607, 22.391557700108805}, {-0.33616242853084577, 0.0, 0.8948155392059314,
     0.13106379106005706, 0.13106379106005706, -0.29553235433095376, -0.342569899965615, 0.0,
     -0.29229623311954467}},
    {'sum', 1, true, false, {0.37087234195819097, 0.36908328205372376, 0.027960754743824978, 0.0, 0.0, 0.0,
     0.4287840605429455, -1.424677680260027, -1.968297332069675, -0.27941549819892586, 0.6569865987187891,
     0.9893582466233818}, {6.776824874409145, 10.800575036171026}},
    {'sum', 1, true, true, {1.147613572688183, 0.2918351780624623, -0.8322551334070081, 0.0, 0.0, 0.0,
     0.40404534461374875, -1.1937571477674938, -1.6940248237844495, -0.6955652746758768, 1.6354750074416642,
     2.462867110096765}, {6.552062667960607, 22.391557700108805}, {-0.33616242853084577, 0.0, 0.8948155392059314,
     0.13106379106005706, 0.13106379106005706, -0.29553235433095376, -0.342569899965615, 0.0,
     -0.29229623311954467}},
    {'mean', nil, false, false, {0.12362411398606366, 0.4035180889538734, 0.3124193938565022, 0.0, 0.0, 0.0,
     0.10719601513573637, -0.35616942006500674, -0.49207433301741876, -0.13970774909946293, 0.7492287917633428,
     0.9493278367245317}, {0.9469518835329757, 0.9113945800961056}},
    {'mean', nil, true, false, {0.12362411398606366, 0.4035180889538734, 0.3124193938565022, 0.0, 0.0, 0.0,
     0.10719601513573637, -0.35616942006500674, -0.49207433301741876, -0.13970774909946293, 0.7492287917633428,
     0.9493278367245317}, {0.9469518835329757, 0.9113945800961056}},
    {'mean', 1, false, false, {0.18543617097909548, 0.18454164102686188, 0.013980377371912489, 0.0, 0.0, 0.0,
     0.10719601513573637, -0.35616942006500674, -0.49207433301741876, -0.27941549819892586, 0.6569865987187891,
     0.9893582466233818}, {0.9469518835329758, 1.4672467665441749}},
    {'mean', 1, true, false, {0.18543617097909548, 0.18454164102686188, 0.013980377371912489, 0.0, 0.0, 0.0,
     0.10719601513573637, -0.35616942006500674, -0.49207433301741876, -0.27941549819892586, 0.6569865987187891,
     0.9893582466233818}, {0.9469518835329758, 1.4672467665441749}},
    {'max', nil, false, false, {0.6502878401571168, 0.8414709848078965, 0.9893582466233818, 0.0, 0.0, 0.0,
     0.4121184852417566, 0.4201670368266409, 0.9906073556948704, 0.0, 0.8414709848078965, 0.9893582466233818},
     {0.9469518835329757, 3.600401547103404}},
    {'max', nil, true, false, {0.6502878401571168, 0.8414709848078965, 0.9893582466233818, 0.0, 0.0, 0.0,
     0.4121184852417566, 0.4201670368266409, 0.9906073556948704, 0.0, 0.8414709848078965, 0.9893582466233818},
     {0.9469518835329757, 3.600401547103404}},
    {'max', 1, false, false, {0.6502878401571168, 0.6569865987187891, 0.9893582466233818, 0.0, 0.0, 0.0,
     0.4121184852417566, 0.4201670368266409, 0.9906073556948704, -0.27941549819892586, 0.6569865987187891,
     0.9893582466233818}, {0.9469518835329757, 3.600401547103403}},
    {'max', 1, true, false, {0.6502878401571168, 0.6569865987187891, 0.9893582466233818, 0.0, 0.0, 0.0,
     0.4121184852417566, 0.4201670368266409, 0.9906073556948704, -0.27941549819892586, 0.6569865987187891,
     0.9893582466233818}, {0.9469518835329757, 3.600401547103403}},
  }
  for _, c in ipairs(cases) do
    local mode, pad, ilo, use_psw = c[1], c[2], c[3], c[4]
    it(('matches torch: mode=%s, padding_idx=%s, include_last_offset=%s, per_sample_weights=%s'):format(
      mode, pad, ilo, use_psw), function()
      local ids = flow.tensor({3, 1, 6, 4, 4, 2, 5, 1, 3}, {dtype = flow.int64})
      local offsets = flow.tensor(ilo and {1, 4, 4, 8, 10} or {1, 4, 4, 8}, {dtype = flow.int64})
      local w = sinx(6, 3)
      w.requires_grad = true
      local psw
      if use_psw then
        psw = sinx(9) + 1.5
        psw.requires_grad = true
      end
      local y = F.embedding_bag(ids, w, offsets, {mode = mode, padding_idx = pad, include_last_offset = ilo,
                                                  per_sample_weights = psw})
      assert.same({4, 3}, H.shape(y))
      H.close(y:reshape(-1), c[5], 1e-12)
      ;(y * cosw(y)):sum():backward()
      H.close({sum_sq(w.grad)}, c[6], 1e-12)
      if use_psw then H.close(psw.grad, c[7], 1e-12) end
    end)
  end

  -- torch: F.embedding_bag(torch.tensor([[0,2,4],[1,1,5]]), sinx(6, 3), mode=): y.flatten(), w.grad as above
  local cases2 = {
    {'sum', {-0.8159884161993608, 1.9186246203533264, 2.8892630291439336, 0.9325278562768513, -1.8015083072809217,
     -2.8792460412058336}, {-0.7074553880395009, 11.83431112329712}},
    {'mean', {-0.2719961387331203, 0.6395415401177754, 0.9630876763813112, 0.3108426187589504,
     -0.6005027690936405, -0.9597486804019445}, {-0.23581846267983364, 1.3149234581441243}},
    {'max', {0.0, 0.8414709848078965, 0.9906073556948704, 0.6502878401571168, -0.2879033166650653,
     -0.9589242746631385}, {-0.23581846267983364, 2.952904133177273}},
  }
  for _, c in ipairs(cases2) do
    it('takes a 2-D input as fixed-size bags: mode=' .. c[1], function()
      local w = sinx(6, 3)
      w.requires_grad = true
      local y = F.embedding_bag(flow.tensor({{1, 3, 5}, {2, 2, 6}}, {dtype = flow.int64}), w, nil, {mode = c[1]})
      H.close(y:reshape(-1), c[2], 1e-12)
      ;(y * cosw(y)):sum():backward()
      H.close({sum_sq(w.grad)}, c[3], 1e-12)
    end)
  end

  it('nn.EmbeddingBag holds the weight and forwards input, offsets, per_sample_weights', function()
    flow.manual_seed(0)
    local bag = nn.EmbeddingBag(6, 3, {mode = 'sum', padding_idx = 2})
    assert.same({6, 3}, H.shape(bag.weight))
    H.close(bag.weight[2], {0, 0, 0})
    local ids = flow.tensor({3, 1, 6, 4}, {dtype = flow.int64})
    local offsets = flow.tensor({1, 3}, {dtype = flow.int64})
    local psw = flow.tensor({1, 2, 3, 4}, {dtype = bag.weight.dtype})
    local y = bag(ids, offsets, psw)
    H.close(y, F.embedding_bag(ids, bag.weight, offsets, {mode = 'sum', padding_idx = 2, per_sample_weights = psw}))
    local w = sinx(5, 2)
    local fixed = nn.EmbeddingBag.from_pretrained(w, {mode = 'max'})
    assert.is_false(fixed.weight.requires_grad)
    H.close(fixed(flow.tensor({{1, 2}}, {dtype = flow.int64})), {{w[2][1]:item(), w[1][2]:item()}})
  end)

  it('rejects bad offsets and options', function()
    local ids, w = flow.tensor({1, 2, 3}, {dtype = flow.int64}), sinx(4, 2)
    local offs = flow.tensor({1, 2}, {dtype = flow.int64})
    H.raises(function() F.embedding_bag(ids, w) end, 'offsets')
    H.raises(function() F.embedding_bag(ids, w, flow.tensor({2}, {dtype = flow.int64})) end, 'first offset')
    H.raises(function() F.embedding_bag(ids, w, offs, {mode = 'mean', per_sample_weights = sinx(3)}) end,
             'per_sample_weights')
    H.raises(function() F.embedding_bag(ids, w, offs, {mode = 'min'}) end, 'mode')
    H.raises(function() F.embedding_bag(ids:double(), w, offs) end, 'integer')
  end)
end)

describe('F.multi_margin_loss / nn.MultiMarginLoss', function()
  -- torch: x = sinx(4, 5) * 2, t = [1, 0, 4, 2] (0-based), weight = sinx(5) + 1.2;
  -- l = F.multi_margin_loss(x, t, p=, margin=, weight=, reduction=); (l * cosw(l)).sum().backward();
  -- l.flatten(), {(x.grad * cosw(x.grad)).sum(), (x.grad**2).sum()}
  local cases = {
    {1, 1, false, 'mean', {1.3789435826956895}, {-0.020066417675643794, 0.10500000000000004}},
    {1, 1, false, 'sum', {5.515774330782758}, {-0.08026567070257518, 1.6800000000000006}},
    {1, 1, false, 'none', {0.22713057680711407, 3.0458979724150224, 0.0, 2.242745781560622},
     {-0.44725623590283126, 1.0976093800412894}},
    {1, 1, true, 'mean', {2.2123439888206007}, {-0.017386284084809855, 0.3152948006497347}},
    {1, 1, true, 'sum', {8.849375955282403}, {-0.06954513633923942, 5.044716810395755}},
    {1, 1, true, 'none', {0.4636804823144048, 3.6550775668980267, 0.0, 4.730617906069972}, {-0.8835320385363346,
     4.1581331137492965}},
    {1, 0.5, false, 'mean', {1.1539435826956896}, {-0.020066417675643794, 0.10500000000000004}},
    {1, 0.5, false, 'sum', {4.615774330782759}, {-0.08026567070257518, 1.6800000000000006}},
    {1, 0.5, false, 'none', {0.1271305768071141, 2.6458979724150224, 0.0, 1.842745781560622},
     {-0.44725623590283126, 1.0976093800412894}},
    {1, 0.5, true, 'mean', {1.8303774715178354}, {-0.017386284084809855, 0.3152948006497347}},
    {1, 0.5, true, 'sum', {7.3215098860713415}, {-0.06954513633923942, 5.044716810395755}},
    {1, 0.5, true, 'none', {0.25953338383361513, 3.1750775668980267, 0.0, 3.8868989353397}, {-0.8835320385363346,
     4.1581331137492965}},
    {2, 1, false, 'mean', {4.924565472104496}, {-0.23188750532795754, 4.574660943918561}},
    {2, 1, false, 'sum', {19.698261888417985}, {-0.9275500213118302, 73.19457510269697}},
    {2, 1, false, 'none', {0.2579414946036617, 12.290566473025267, 0.0, 7.149753920789055}, {-1.7744725588595691,
     39.44129881570963}},
    {2, 1, true, 'mean', {7.589054348049715}, {-0.21018444393078084, 11.51751627667173}},
    {2, 1, true, 'sum', {30.35621739219886}, {-0.8407377757231234, 184.28026042674767}},
    {2, 1, true, 'none', {0.526580077011358, 14.748679767630321, 0.0, 15.080957547557182}, {-3.126506048412832,
     134.1270753840307}},
    {2, 0.5, false, 'mean', {3.6581218894088066}, {-0.2118210876523136, 3.334786947743937}},
    {2, 0.5, false, 'sum', {14.632487557635226}, {-0.8472843506092544, 53.35659116390299}},
    {2, 0.5, false, 'none', {0.08081091779654767, 9.444668500610245, 0.0, 5.107008139228433},
     {-1.3272163229567375, 27.82645765631006}},
    {2, 0.5, true, 'mean', {5.567693617880497}, {-0.19279815984597104, 8.147058738023173}},
    {2, 0.5, true, 'sum', {22.27077447152199}, {-0.7711926393838842, 130.35293980837076}},
    {2, 0.5, true, 'none', {0.16497314393734813, 11.333602200732292, 0.0, 10.772199126852346},
     {-2.2429740098764968, 92.53073882819047}},
  }
  for _, c in ipairs(cases) do
    local p, margin, use_w, red = c[1], c[2], c[3], c[4]
    it(('matches torch: p=%d, margin=%s, weight=%s, reduction=%s'):format(p, margin, use_w, red), function()
      local x = sinx(4, 5) * 2
      x.requires_grad = true
      local t = flow.tensor({2, 1, 5, 3}, {dtype = flow.int64})
      local l = F.multi_margin_loss(x, t, {p = p, margin = margin, weight = use_w and (sinx(5) + 1.2) or nil,
                                           reduction = red})
      H.close(l:reshape(-1), c[5], 1e-12)
      ;(l * cosw(l)):sum():backward()
      H.close({(x.grad * cosw(x.grad)):sum():item(), (x.grad * x.grad):sum():item()}, c[6], 1e-12)
    end)
  end

  it('takes a single sample and works as a module', function()
    local x = sinx(5) * 2
    x.requires_grad = true
    -- torch: F.multi_margin_loss(sinx(5) * 2, torch.tensor([3])) and its grad
    local l = nn.MultiMarginLoss()(x, flow.tensor({4}, {dtype = flow.int64}))
    H.close(l, 1.1309633549815907, 1e-12)
    l:backward()
    H.close(x.grad, {0.2, 0.2, 0.2, -0.6, 0}, 1e-12)
    local m = nn.MultiMarginLoss({p = 2, margin = 0.5, weight = sinx(5) + 1.2, reduction = 'sum'})
    local xx, t = sinx(4, 5) * 2, flow.tensor({2, 1, 5, 3}, {dtype = flow.int64})
    H.close(m(xx, t), 22.27077447152199, 1e-12)
    H.raises(function() F.multi_margin_loss(xx, flow.tensor({2, 1, 6, 3}, {dtype = flow.int64})) end, 'out of bounds')
    H.raises(function() F.multi_margin_loss(xx, t, {p = 3}) end, 'p must be 1 or 2')
  end)
end)

describe('F.multilabel_margin_loss / nn.MultiLabelMarginLoss', function()
  -- torch: x = sinx(3, 5) * 0.5, tg = [[3,0,-1,1,1],[1,2,4,-1,0],[2,2,0,-1,3]] (-1 ends each list; ours = tg + 1);
  -- l = F.multilabel_margin_loss(x, tg, reduction=); (l * cosw(l)).sum().backward(); l.flatten(), x.grad.flatten()
  local cases = {
    {'mean', {1.6053449317137443}, {-0.2, 0.13333333333333333, 0.13333333333333333, -0.2, 0.13333333333333333,
     0.2, -0.13333333333333333, -0.13333333333333333, 0.2, -0.13333333333333333, -0.2, 0.2, -0.39999999999999997,
     0.2, 0.2}},
    {'sum', {4.816034795141233}, {-0.6000000000000001, 0.4, 0.4, -0.6000000000000001, 0.4, 0.6000000000000001,
     -0.4, -0.4, 0.6000000000000001, -0.4, -0.6000000000000001, 0.6000000000000001, -1.2, 0.6000000000000001,
     0.6000000000000001}},
    {'none', {1.35645718084717, 1.0511922744357491, 2.408385339858314}, {-0.6000000000000001, 0.4, 0.4,
     -0.6000000000000001, 0.4, 0.3241813835208839, -0.2161209223472559, -0.2161209223472559, 0.3241813835208839,
     -0.2161209223472559, 0.24968810192828547, -0.24968810192828547, 0.4993762038565709, -0.24968810192828547,
     -0.24968810192828547}},
  }
  for _, c in ipairs(cases) do
    it('matches torch: reduction=' .. c[1], function()
      local x = sinx(3, 5) * 0.5
      x.requires_grad = true
      local t = flow.tensor({{4, 1, 0, 2, 2}, {2, 3, 5, 0, 1}, {3, 3, 1, 0, 4}}, {dtype = flow.int64})
      local l = F.multilabel_margin_loss(x, t, {reduction = c[1]})
      H.close(l:reshape(-1), c[2], 1e-12)
      ;(l * cosw(l)):sum():backward()
      H.close(x.grad:reshape(-1), c[3], 1e-12)
    end)
  end

  it('takes a single sample and works as a module', function()
    local x = sinx(4)
    x.requires_grad = true
    -- torch: F.multilabel_margin_loss(sinx(4), torch.tensor([3, 0, -1, 1])) and its grad
    local l = nn.MultiLabelMarginLoss()(x, flow.tensor({4, 1, 0, 2}, {dtype = flow.int64}))
    H.close(l, 1.8048242017868557, 1e-12)
    l:backward()
    H.close(x.grad, {-0.5, 0.5, 0.5, -0.5}, 1e-12)
    H.raises(function() F.multilabel_margin_loss(x, flow.tensor({5, 0, 0, 0}, {dtype = flow.int64})) end,
             'out of bounds')
  end)
end)

describe('F.ctc_loss / nn.CTCLoss', function()
  -- torch: x = sinx(6, 4, 5) * 2, lp = x.log_softmax(2), targets [[1,2,2],[3,0,0],[4,4,1],[0,0,0]] (padded),
  -- input_lengths [6,4,5,3], target_lengths [3,1,3,0], blank=0; l = F.ctc_loss(lp, tg, il, tl, reduction=);
  -- (l * cosw(l)).sum().backward(); l, {(x.grad * cosw(x.grad)).sum(), (x.grad**2).sum()}
  local cases = {
    {'none', {8.38529915886463, 3.5662210944582227, 9.315770601304632, 8.21262156606882},
     {-1.904921677693915, 7.117311644869446}},
    {'sum', {29.4799124206963}, {3.1054308061345486, 10.514884270448373}},
    {'mean', {4.419799811812533}, {0.5609584879276177, 0.33600738160732696}},
  }
  local function lp_of(x) return x:log_softmax(3) end
  local targets = flow.tensor({{2, 3, 3}, {4, 1, 1}, {5, 5, 2}, {1, 1, 1}}, {dtype = flow.int64})
  for _, c in ipairs(cases) do
    it('matches torch values and grads: reduction=' .. c[1], function()
      local x = sinx(6, 4, 5) * 2
      x.requires_grad = true
      local l = F.ctc_loss(lp_of(x), targets, {6, 4, 5, 3}, flow.tensor({3, 1, 3, 0}, {dtype = flow.int64}),
                           {reduction = c[1]})
      H.close(l:reshape(-1), c[2], 1e-10)
      ;(l * cosw(l)):sum():backward()
      H.close({(x.grad * cosw(x.grad)):sum():item(), (x.grad * x.grad):sum():item()}, c[3], 1e-10)
    end)
  end

  it('takes concatenated 1-D targets and another blank', function()
    local x = sinx(6, 4, 5) * 2
    x.requires_grad = true
    -- torch: F.ctc_loss(lp, [0,1,1, 3, 4,4,0], [6,4,5,2], [3,1,3,0], blank=2, reduction='none')
    local t = flow.tensor({1, 2, 2, 4, 5, 5, 1}, {dtype = flow.int64})
    local l = F.ctc_loss(lp_of(x), t, {6, 4, 5, 2}, {3, 1, 3, 0}, {blank = 3, reduction = 'none'})
    H.close(l, {8.986517774787046, 6.6618869410883725, 6.016588503836108, 7.247029619289334}, 1e-10)
    ;(l * cosw(l)):sum():backward()
    H.close({(x.grad * cosw(x.grad)):sum():item(), (x.grad * x.grad):sum():item()},
            {-0.16272020546455457, 7.387235721610153}, 1e-10)
  end)

  it('gives inf for an impossible alignment, 0 with zero_infinity, and works as a module', function()
    local x = sinx(6, 4, 5) * 2
    x.requires_grad = true
    -- torch: input_lengths [6,4,3,3]: sample 3 (target 4,4,1 needs 4 frames) is impossible
    local l = F.ctc_loss(lp_of(x):detach(), targets, {6, 4, 3, 3}, {3, 1, 3, 0}, {reduction = 'none'})
    H.close(l, {8.38529915886463, 3.5662210944582227, math.huge, 8.21262156606882}, 1e-10)
    local ctc = nn.CTCLoss({reduction = 'none', zero_infinity = true})
    l = ctc(lp_of(x), targets, {6, 4, 3, 3}, {3, 1, 3, 0})
    H.close(l, {8.38529915886463, 3.5662210944582227, 0, 8.21262156606882}, 1e-10)
    l:sum():backward()
    H.close((x.grad * cosw(x.grad)):sum(), 2.0143307907136743, 1e-10)
    H.raises(function() F.ctc_loss(lp_of(x), targets, {6, 4, 3}, {3, 1, 3, 0}) end, 'ctc_loss')
    H.raises(function() F.ctc_loss(lp_of(x), targets, {6, 4, 3, 3}, {3, 1, 3, 0}, {blank = 2}) end, 'blank')
  end)

  it('takes unbatched [T, C] log_probs and float32', function()
    local lp = lp_of(sinx(6, 4, 5) * 2)
    local one = F.ctc_loss(lp:select(2, 1), flow.tensor({2, 3, 3}, {dtype = flow.int64}), 6, 3, {reduction = 'none'})
    assert.same({}, H.shape(one))
    H.close(one, 8.38529915886463, 1e-10)
    local l32 = F.ctc_loss(lp:float(), targets, {6, 4, 5, 3}, {3, 1, 3, 0}, {reduction = 'none'})
    assert.equal(flow.float32, l32.dtype)
    H.close(l32, {8.38529915886463, 3.5662210944582227, 9.315770601304632, 8.21262156606882}, 1e-4)
  end)

  it('passes gradcheck', function()
    local x = sinx(4, 2, 3)
    x.requires_grad = true
    local t = flow.tensor({{2, 3}, {3, 3}}, {dtype = flow.int64})
    assert.is_true(flow.autograd.gradcheck(function(v)
      return F.ctc_loss(v:log_softmax(3), t, {4, 4}, {2, 1}, {reduction = 'sum'})
    end, {x}))
  end)
end)
