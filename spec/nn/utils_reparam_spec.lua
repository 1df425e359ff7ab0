-- nn.utils.weight_norm / spectral_norm and nn.utils.rnn (packed sequences).
-- Reference values from torch 1.13 (float64), weights made by
--   W(*s) = torch.arange(n).reshape(*s) * 0.37 % 1.3 - 0.6
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn
local utils = nn.utils

local f64 = {dtype = flow.float64}
local function W(...)
  local s = {...}
  local n = 1
  for _, d in ipairs(s) do n = n * d end
  return (flow.arange(0, n, 1, f64):reshape(s) * 0.37):fmod(1.3) - 0.6
end

local function set(p, t) flow.no_grad(function() p:copy_(t) end) end

local function keys(m)
  local ks = {}
  for k in pairs(m:state_dict()) do ks[#ks + 1] = k end
  table.sort(ks)
  return table.concat(ks, ',')
end

describe('nn.utils.weight_norm', function()
  it('matches torch on a Linear (default dim = 1): g, values and grads', function()
    local lin = nn.Linear(3, 2, f64)
    set(lin.weight, W(2, 3)); set(lin.bias, flow.tensor({0.1, -0.2}):double())   -- torch's float32 bias
    utils.weight_norm(lin)
    assert.are.equal('bias,weight_g,weight_v', keys(lin))
    H.close(lin.weight_g, {{0.6576473218982952}, {0.6625707509390978}}, 1e-10)
    local y = lin(W(4, 3) * 1.5 + 0.2)
    H.close(y:sum(), -1.5734000059604643, 1e-10)
    ;(y * y):sum():backward()
    H.close(lin.weight_g.grad, {{3.4517283821953475}, {1.8108590188076503}}, 1e-9)
    H.close(lin.weight_v.grad, {{0.4285785956297288, -0.969614768407942, 0.2438268617429332},
                                {-0.5616769240860517, -0.7153853139853835, 0.2801320117994903}}, 1e-9)
  end)

  it('matches torch on a Conv2d with dim = false (whole norm) and dim = 2', function()
    local x = W(1, 2, 3, 3) + 0.1
    local conv = nn.Conv2d(2, 3, 2, f64)
    set(conv.weight, W(3, 2, 2, 2)); set(conv.bias, flow.zeros(3, f64))
    utils.weight_norm(conv, {dim = false})
    H.close(conv.weight_g, 1.9119623427253993, 1e-10)
    local y = conv(x)
    H.close((y * y):sum(), 1.941974159999996, 1e-10)
    ;(y * y):sum():backward()
    H.close(conv.weight_g.grad, 2.0313937326106712, 1e-9)
    H.close(conv.weight_v.grad:reshape(-1):narrow(1, 1, 4),
            {0.0791912077907867, 0.24249502965313458, 1.0511348515154821, -0.5312013266221679}, 1e-9)

    local c1 = nn.Conv2d(2, 3, 2, f64)
    set(c1.weight, W(3, 2, 2, 2)); set(c1.bias, flow.zeros(3, f64))
    utils.weight_norm(c1, {dim = 2})
    assert.are.same({1, 2, 1, 1}, H.shape(c1.weight_g))
    H.close(c1.weight_g:reshape(-1), {1.2864680330268607, 1.4144256784999338}, 1e-10)
    local y1 = c1(x)
    ;(y1 * y1):sum():backward()
    H.close(c1.weight_g.grad:reshape(-1), {1.5898450233448558, 1.299936467464295}, 1e-9)
    H.close(c1.weight_v.grad:reshape(-1):narrow(1, 21, 4),
            {0.24913118704388676, -0.07767154893531958, 0.5201465712286301, 0.6545838352494244}, 1e-9)
  end)

  it('recomputes the weight before each forward and can be removed', function()
    local lin = nn.Linear(3, 2, f64)
    set(lin.weight, W(2, 3))
    utils.weight_norm(lin)
    H.close(lin.weight, W(2, 3), 1e-12)
    set(lin.weight_g, lin.weight_g * 2)
    lin(flow.ones(1, 3, f64))
    H.close(lin.weight, W(2, 3) * 2, 1e-12)
    H.raises(function() utils.weight_norm(lin) end, 'two weight_norm')
    utils.remove_weight_norm(lin)
    assert.are.equal('bias,weight', keys(lin))
    assert.is_true(nn.is_parameter(lin.weight))
    H.close(lin.weight, W(2, 3) * 2, 1e-12)
    H.raises(function() utils.remove_weight_norm(lin) end, 'not found')
    H.raises(function() utils.weight_norm(lin, {name = 'nope'}) end, 'no parameter')
  end)
end)

describe('nn.utils.spectral_norm', function()
  it('matches torch on a Conv2d in train and eval mode with fixed u, v', function()
    local conv = nn.Conv2d(2, 3, 2, f64)
    set(conv.weight, W(3, 2, 2, 2)); set(conv.bias, flow.zeros(3, f64))
    utils.spectral_norm(conv)
    assert.are.equal('bias,weight_orig,weight_u,weight_v', keys(conv))
    set(conv.weight_u, flow.tensor({0.6, 0, -0.8}, f64))
    set(conv.weight_v, flow.ones(8, f64) / math.sqrt(8))
    local x = W(1, 2, 3, 3) + 0.1
    local y = conv(x)
    H.close((y * y):sum(), 1.1359467733039028, 1e-10)
    H.close(conv.weight_u, {0.7343063244890973, 0.08808999258174903, -0.6730782829821951}, 1e-10)
    y = conv(x)
    H.close((y * y):sum(), 1.1054338401279664, 1e-10)
    H.close(conv.weight_u, {0.782223046671934, 0.13057007443600835, -0.6091621794867543}, 1e-10)
    H.close(conv.weight_v:narrow(1, 1, 3), {-0.41098067689531853, -0.3691264020952521, 0.3356076414134122}, 1e-10)
    y = conv(x)
    ;(y * y):sum():backward()
    H.close((y * y):sum(), 1.099958610170729, 1e-10)
    H.close(conv.weight_orig.grad:reshape(-1):narrow(1, 1, 5), {0.2556859556941409, 0.45886826794069985,
      0.23823719670885884, -0.3781429457756708, 1.1608849381786706}, 1e-9)
    conv:eval()
    for _ = 1, 2 do
      y = conv(x)
      H.close((y * y):sum(), 1.099958610170729, 1e-10)
      H.close(conv.weight_u, {0.7993318796358303, 0.15118082623743817, -0.5815607483109706}, 1e-10)
    end
    utils.remove_spectral_norm(conv)
    assert.are.equal('bias,weight', keys(conv))
    H.close(conv.weight:reshape(-1):narrow(1, 1, 4), {-0.4515623232176298, -0.1730988905667581,
      0.10536454208411364, 0.38382797473498526}, 1e-10)
  end)

  it('matches torch on a Linear with dim = 2 and 3 power iterations', function()
    local lin = nn.Linear(3, 4, f64)
    set(lin.weight, W(4, 3)); set(lin.bias, flow.zeros(4, f64))
    utils.spectral_norm(lin, {n_power_iterations = 3, dim = 2})
    assert.are.same({3}, H.shape(lin.weight_u))
    set(lin.weight_u, flow.tensor({1, 0, 0}, f64))
    set(lin.weight_v, flow.tensor({0.5, 0.5, 0.5, 0.5}, f64))
    local y = lin(W(2, 3) + 0.3)
    H.close(y, {{0.20235914433934327, -0.1834244306118038, -0.13756832295885288, -0.17337377687965014},
                {-0.37995060626730787, 0.4047182886786865, 0.10445500843059641, -0.05581702340535327}}, 1e-10)
    H.close(lin.weight_u, {0.6274317955901315, 0.6662017566038909, -0.40311854507133926}, 1e-10)
    H.close(lin.weight_v, {-0.5765463761333139, 0.16949858498650955, 0.6383917859079162, 0.4809578292744753}, 1e-10)
    local ct = utils.spectral_norm(nn.ConvTranspose2d(3, 8, 3))    -- weight [3, 8, 3, 3], dim 2
    assert.are.same({8}, H.shape(ct.weight_u))
    assert.are.same({27}, H.shape(ct.weight_v))
    H.raises(function() utils.spectral_norm(nn.Linear(2, 2), {n_power_iterations = 0}) end, 'positive')
    H.raises(function() utils.remove_spectral_norm(nn.Linear(2, 2)) end, 'not found')
  end)

  it('gives sigma(w) ~ 1 after enough iterations (gradient check on w_orig)', function()
    local lin = nn.Linear(4, 3, f64)
    utils.spectral_norm(lin, {n_power_iterations = 50})
    lin(flow.ones(1, 4, f64))
    local s = flow.linalg.svdvals and flow.linalg.svdvals(lin.weight:detach()) or nil
    if s then H.close(s[1], 1, 1e-6) end
    lin:eval()
    local x = W(2, 4)
    local f = function(w)
      set(lin.weight_orig, w)
      return lin(x):pow(2):sum()
    end
    local w0 = lin.weight_orig:detach():clone()
    lin.weight_orig.grad = nil
    f(w0):backward()
    local g = lin.weight_orig.grad:clone()
    local h = 1e-6
    for _, ij in ipairs({{1, 1}, {2, 3}, {3, 4}}) do
      local wp, wm = w0:clone(), w0:clone()
      wp[ij[1]][ij[2]]:add_(h); wm[ij[1]][ij[2]]:add_(-h)
      local fd = flow.no_grad(function() return (f(wp):item() - f(wm):item()) / (2 * h) end)
      H.close(g[ij[1]][ij[2]], fd, 1e-5)
    end
  end)
end)

-- torch 1.13: weights p = W(*p.shape) * 0.8 (named_parameters), x = W(3, 4, 2) * 1.7 + 0.1,
-- lengths {2, 4, 1}, pack_padded_sequence(batch_first=True, enforce_sorted=False);
-- loss = sum(y * W(y.shape)) + sum(h_n^2) (+ sum(c_n^3) for LSTM)
local REF = {
  lstm = {
    y = {0.044734923432, 0.246781256035, -0.0254937760498, 0.0791054617313, 0.331453651137, -0.0466354774239,
      0.0868090917071, 0.316871423603, -0.0386813360573, 0.055097017864, 0.238642165969, -0.00958164045879, 0, 0, 0,
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0478953677405, 0.246765172314, -0.0147701456627, 0.113020698707, 0.37427691966,
      -0.05575847198, 0.081376736717, 0.322739982148, -0.0319491602284, 0.101754565526, 0.354060425647,
      -0.0377660218883, 0.100007949703, 0.354363381265, -0.0350611551605, 0.0821737781701, 0.325296789374,
      -0.0180428975472, 0.116568953877, 0.35543768278, -0.0458669941617, 0.0529403756817, 0.236814262495,
      -0.00789859560514, 0.0603909705995, 0.233714442123, -0.0207337576383, 0.0603909705995, 0.233714442123,
      -0.0207337576383, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    hn = {0.135943653948, 0.369585482999, -0.0396544526055, 0.117231039962, 0.358462086489, -0.10362402591,
      0.069050827906, 0.307500035407, 0.00192727954903, 0.156981329649, 0.213220009028, -0.144455934092,
      0.160947284464, 0.319371673563, -0.132156959842, 0.069050827906, 0.307500035407, 0.00192727954903,
      0.0868090917071, 0.316871423603, -0.0386813360573, 0.116568953877, 0.35543768278, -0.0458669941617,
      0.0603909705995, 0.233714442123, -0.0207337576383, 0.0791054617313, 0.331453651137, -0.0466354774239,
      0.113020698707, 0.37427691966, -0.05575847198, 0.0603909705995, 0.233714442123, -0.0207337576383},
    cn = {0.258435563727, 0.487426352366, -0.121370744219, 0.235613809786, 0.518925148039, -0.392339544619,
      0.135642367994, 0.406386423846, 0.0056904197547, 0.237121546201, 0.350598507158, -0.390780358085,
      0.263715171689, 0.459365320521, -0.389777560117, 0.135642367994, 0.406386423846, 0.0056904197547,
      0.146311795804, 0.50403689623, -0.108778080408, 0.195231980816, 0.571023437868, -0.128811671274,
      0.107266177292, 0.36573931043, -0.0597611345107, 0.143230711253, 0.516927023328, -0.122184984218,
      0.194153888447, 0.590008512362, -0.145671706957, 0.107266177292, 0.36573931043, -0.0597611345107},
    xgrad = {0.0917700075993, 0.161903741799, 0.105464902281, 0.140630065158, 0, 0, 0, 0, 0.0848182397515,
      0.218032229774, -0.000559194798696, 0.139483886857, 0.0157820881797, 0.130137692061, 0.0474083689153,
      0.276792995776, 0.20099337116, 0.117902532569, 0, 0, 0, 0, 0, 0},
    wgrad = {0.00568373233475, 0.0221148189227, -0.00149521669104, 0.0594099335747, 0.223556954063, -0.017650931391,
      -0.000462544952678, -0.00206803123452, 4.25374182592e-05, 0.00302043677461, 0.0114935829443,
      -0.000855204558076},
  },
  gru = {
    y = {-0.0164232192377, 0.110185354677, -0.256132177212, 0.0688778344364, 0.484222082294, -0.0468435744143, 0, 0,
      0, 0, 0, 0, 0.291525696021, 0.312693152494, -0.0727407217207, 0.228630998473, 0.724579307891, -0.208186588637,
      0.259533187355, 0.626000725441, -0.191222328034, 0.231107564842, 0.826361590982, -0.254455731579,
      0.210815938639, 0.555612307274, -0.0163192530436, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    hn = {0.0688778344364, 0.484222082294, -0.0468435744143, 0.231107564842, 0.826361590982, -0.254455731579,
      0.210815938639, 0.555612307274, -0.0163192530436},
    xgrad = {-0.0238317874519, 0.0201261081114, 0.107647324942, -0.0797722383518, 0, 0, 0, 0, 0.15562808443,
      0.203638560157, 0.0569194071868, 0.058654238176, 0.0702262037859, -0.00656885191596, 0.0849008050798,
      -0.00930975466673, 0.119936402544, -0.0587285713085, 0, 0, 0, 0, 0, 0},
    wgrad = {0.00196738390851, 0.00371698357693, -0.00185625013324, 0.0244648362377, 0.0377025017202,
      -0.0199959040287, 0.000862760066493, 0.00613702204242, -0.00299959691175, -0.00110790316391,
      -0.00858463969197, 0.0137110923502},
  },
  rnn = {
    y = {0, 0, 0.54476, 0, 0.0426016, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.314648, 0, 0, 0, 0, 0, 0.199592, 0, 0, 0, 0,
      0.046712, 0.084536, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    hn = {0, 0.0426016, 0, 0, 0, 0, 0, 0.046712, 0.084536},
    xgrad = {-0.051539668992, -0.00613567488, -0.0374972416, -0.1365970944, 0, 0, 0, 0, -0.22848, -0.0272, 0, 0,
      -0.1008, -0.012, 0, 0, -0.069864704, -0.149045888, 0, 0, 0, 0, 0, 0},
    wgrad = {0, 0, 0, 0, 0, -0.182383904768, 0, 0, 0},
  },
}

describe('nn.utils.rnn', function()
  local R = utils.rnn

  it('pad_sequence pads to the longest sequence, time-major or batch_first', function()
    local a, b, c = flow.tensor({1, 2, 3}), flow.tensor({4, 5}), flow.tensor({6})
    H.close(R.pad_sequence({a, b, c}), {{1, 4, 6}, {2, 5, 0}, {3, 0, 0}}, 0)
    H.close(R.pad_sequence({a, b, c}, {batch_first = true, padding_value = -1}),
            {{1, 2, 3}, {4, 5, -1}, {6, -1, -1}}, 0)
    local t = R.pad_sequence({flow.ones(2, 3), flow.ones(1, 3)}, {batch_first = true})
    assert.are.same({2, 2, 3}, H.shape(t))
  end)

  it('pack_sequence / pack_padded_sequence match torch (1-based indices)', function()
    local a, b, c = flow.tensor({1, 2, 3}), flow.tensor({4, 5}), flow.tensor({6})
    local p = R.pack_sequence({a, b, c})
    H.close(p.data, {1, 4, 6, 2, 5, 3}, 0)
    assert.are.same({3, 2, 1}, p.batch_sizes:totable())
    assert.are.equal(flow.int64, p.batch_sizes.dtype)
    assert.is_nil(p.sorted_indices)
    assert.is_nil(p.unsorted_indices)
    assert.is_true(R.is_packed(p))
    -- torch: pack_sequence([b, a, c], enforce_sorted=False): sorted_indices [1, 0, 2]
    local q = R.pack_sequence({b, a, c}, {enforce_sorted = false})
    H.close(q.data, {1, 4, 6, 2, 5, 3}, 0)
    assert.are.same({2, 1, 3}, q.sorted_indices:totable())
    assert.are.same({2, 1, 3}, q.unsorted_indices:totable())
    local x = flow.tensor({{1, 2, 0}, {3, 4, 5}})
    local r = R.pack_padded_sequence(x, flow.tensor({2, 3}), {batch_first = true, enforce_sorted = false})
    H.close(r.data, {3, 1, 4, 2, 5}, 0)
    assert.are.same({2, 2, 1}, r.batch_sizes:totable())
    assert.are.same({2, 1}, r.sorted_indices:totable())
    H.raises(function() R.pack_padded_sequence(x:t(), {2, 3}) end, 'decreasing')
    H.raises(function() R.pack_padded_sequence(x:t(), {2, 0}) end, 'greater than 0')
    H.raises(function() R.pack_padded_sequence(x:t(), {2}) end, 'lengths')
  end)

  it('pad_packed_sequence restores the batch order, lengths and total_length', function()
    local b, a, c = flow.tensor({4, 5}), flow.tensor({1, 2, 3}), flow.tensor({6})
    local p = R.pack_sequence({b, a, c}, {enforce_sorted = false})
    local y, lengths = R.pad_packed_sequence(p, {batch_first = true, total_length = 4, padding_value = 9})
    H.close(y, {{4, 5, 9, 9}, {1, 2, 3, 9}, {6, 9, 9, 9}}, 0)
    assert.are.same({2, 3, 1}, lengths:totable())
    assert.are.equal(flow.int64, lengths.dtype)
    local z = R.pad_packed_sequence(p)
    assert.are.same({3, 3}, H.shape(z))
    H.raises(function() R.pad_packed_sequence(p, {total_length = 2}) end, 'total_length')
  end)

  it('packing and padding pass gradients through', function()
    local x = flow.tensor({{1, 2, 0}, {3, 4, 5}}, {dtype = flow.float64, requires_grad = true})
    local p = R.pack_padded_sequence(x, {2, 3}, {batch_first = true, enforce_sorted = false})
    local y = R.pad_packed_sequence(p, {batch_first = true})
    ;(y * flow.tensor({{1, 2, 3}, {4, 5, 6}}, f64)):sum():backward()
    H.close(x.grad, {{1, 2, 0}, {4, 5, 6}}, 0)
  end)

  local function run(name, cls, opts)
    local m = cls(2, 3, opts)
    local sd = {}
    for k, p in m:named_parameters() do sd[k] = W(unpack(p:size():totable())) * 0.8 end
    m:load_state_dict(sd)
    local x = (W(3, 4, 2) * 1.7 + 0.1):requires_grad_(true)
    local pk = R.pack_padded_sequence(x, {2, 4, 1}, {batch_first = true, enforce_sorted = false})
    local out, h
    if name == 'gru' then out, h = m(pk, W(1, 3, 3) * 0.5) else out, h = m(pk) end
    assert.is_true(R.is_packed(out))
    assert.are.same({3, 2, 1, 1}, out.batch_sizes:totable())
    assert.are.same({2, 1, 3}, out.sorted_indices:totable())
    local y, lengths = R.pad_packed_sequence(out, {batch_first = true})
    assert.are.same({2, 4, 1}, lengths:totable())
    local hn = name == 'lstm' and h[1] or h
    local loss = (y * W(unpack(y:size():totable()))):sum() + (hn * hn):sum()
    if name == 'lstm' then loss = loss + h[2]:pow(3):sum() end
    loss:backward()
    local ref = REF[name]
    H.close(y:reshape(-1), ref.y, 1e-9)
    H.close(hn:reshape(-1), ref.hn, 1e-9)
    if ref.cn then H.close(h[2]:reshape(-1), ref.cn, 1e-9) end
    H.close(x.grad:reshape(-1), ref.xgrad, 1e-9)
    local w = name == 'lstm' and m.weight_hh_l1_reverse or m.weight_hh_l0
    H.close(w.grad:narrow(1, 1, math.min(4, w:size(1))):reshape(-1), ref.wgrad, 1e-9)   -- torch grad[:4]
  end

  it('nn.LSTM (2 layers, bidirectional) takes and returns a PackedSequence like torch', function()
    run('lstm', nn.LSTM, {num_layers = 2, bidirectional = true, batch_first = true, dtype = flow.float64})
  end)

  it('nn.GRU with an initial state (permuted to the sorted order) matches torch', function()
    run('gru', nn.GRU, {batch_first = true, dtype = flow.float64})
  end)

  it('nn.RNN (relu) matches torch', function()
    run('rnn', nn.RNN, {nonlinearity = 'relu', batch_first = true, dtype = flow.float64})
  end)

  it('a packed batch gives the same h_n as running each sequence alone', function()
    local gru = nn.GRU(2, 3, {dtype = flow.float64})
    local seqs = {W(3, 2), W(5, 2) + 0.2, W(1, 2) - 0.1}
    local _, h = gru(R.pack_sequence(seqs, {enforce_sorted = false}))
    for i, s in ipairs(seqs) do
      local _, hi = gru(s:unsqueeze(2))
      H.close(h:select(2, i), hi:select(2, 1), 1e-12)
    end
    local lstm = nn.LSTM(2, 3, {dtype = flow.float64, bidirectional = true})
    local h0, c0 = W(2, 3, 3) * 0.3, W(2, 3, 3) * -0.2
    local out, st = lstm(R.pack_sequence(seqs, {enforce_sorted = false}), {h0, c0})
    local y = R.pad_packed_sequence(out)
    for i, s in ipairs(seqs) do
      local oi, sti = lstm(s:unsqueeze(2), {h0:narrow(2, i, 1), c0:narrow(2, i, 1)})
      H.close(st[1]:select(2, i), sti[1]:select(2, 1), 1e-12)
      H.close(st[2]:select(2, i), sti[2]:select(2, 1), 1e-12)
      H.close(y:select(2, i):narrow(1, 1, s:size(1)), oi:select(2, 1), 1e-12)
    end
  end)
end)
