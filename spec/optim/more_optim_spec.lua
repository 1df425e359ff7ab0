-- flow.optim Adadelta, Adamax, NAdam, RAdam, Rprop and ASGD against
-- torch.optim (1.13) trajectories, float64, to 1e-6 (relative): a linear
-- model out = X W^T + b with two parameter groups (the second with its own
-- lr / weight_decay), trained 8 steps on
--   loss = sum((X W^T + b - Y)^2) + 0.1 sum(W^4);
-- maximize where torch 1.13 has it; state_dict saved after 4 steps and
-- loaded into a fresh optimizer on fresh parameters must continue the same
-- trajectory; the final state of W (torch's keys and values) is compared.
--
-- REF below was printed by this script (/usr/bin/python3, torch 1.13.0):
--
--   import torch
--   torch.set_default_dtype(torch.float64)
--   X = torch.tensor([[1.0, -0.5, 0.3], [0.2, 0.8, -1.1], [-0.7, 0.4, 0.9], [0.5, 0.5, 0.5]])
--   Y = torch.tensor([[0.3, -0.2], [1.0, 0.4], [-0.6, 0.1], [0.2, 0.9]])
--   W0 = [[0.5, -1.2, 0.8], [0.1, 0.4, -0.3]]; B0 = [0.2, -0.1]; STEPS = 8
--   def loss_fn(W, b):
--       return ((X @ W.t() + b - Y) ** 2).sum() + 0.1 * (W ** 4).sum()
--   for key, name, defaults, g2 in CASES:    # CASES as in the Lua table below
--       W = torch.tensor(W0, requires_grad=True); b = torch.tensor(B0, requires_grad=True)
--       opt = getattr(torch.optim, name)([{'params': [W]}, dict(params=[b], **g2)], **defaults)
--       for _ in range(STEPS):
--           opt.zero_grad(); loss_fn(W, b).backward(); opt.step()
--           print(W.flatten().tolist() + b.tolist())     # one row of traj
--       print(opt.state_dict()['state'][0])              # state (of W)
local flow = require 'oneflow'
local H = require 'spec.helpers'

local optim = flow.optim
local f64 = {dtype = flow.float64}
local TOL = 1e-6
local STEPS = 8

local X = {{1.0, -0.5, 0.3}, {0.2, 0.8, -1.1}, {-0.7, 0.4, 0.9}, {0.5, 0.5, 0.5}}
local Y = {{0.3, -0.2}, {1.0, 0.4}, {-0.6, 0.1}, {0.2, 0.9}}
local W0 = {{0.5, -1.2, 0.8}, {0.1, 0.4, -0.3}}
local B0 = {0.2, -0.1}

-- {key, optimizer, defaults, second group's options}; torch's arguments in
-- the comment after each.
local CASES = {
  {'Adadelta', 'Adadelta', {rho = 0.8, eps = 1e-5}, {lr = 0.5, weight_decay = 0.1}},
  -- dict(rho=0.8, eps=1e-5), dict(lr=0.5, weight_decay=0.1)
  {'Adadelta_max', 'Adadelta', {lr = 0.7, maximize = true}, {weight_decay = 0.05}},
  -- dict(lr=0.7, maximize=True), dict(weight_decay=0.05)
  {'Adamax', 'Adamax', {lr = 0.05, betas = {0.8, 0.95}}, {lr = 0.02, weight_decay = 0.1}},
  -- dict(lr=0.05, betas=(0.8, 0.95)), dict(lr=0.02, weight_decay=0.1)
  {'Adamax_max', 'Adamax', {lr = 0.05, maximize = true}, {weight_decay = 0.05}},
  -- dict(lr=0.05, maximize=True), dict(weight_decay=0.05)
  {'NAdam', 'NAdam', {lr = 0.05, betas = {0.8, 0.95}, momentum_decay = 0.01}, {lr = 0.02, weight_decay = 0.1}},
  -- dict(lr=0.05, betas=(0.8, 0.95), momentum_decay=0.01), dict(lr=0.02, weight_decay=0.1)
  {'RAdam', 'RAdam', {lr = 0.05, betas = {0.9, 0.9}}, {lr = 0.02, weight_decay = 0.1}},
  -- dict(lr=0.05, betas=(0.9, 0.9)), dict(lr=0.02, weight_decay=0.1)   (rho_t > 5 from step 6)
  {'Rprop', 'Rprop', {lr = 0.05, etas = {0.4, 1.5}, step_sizes = {1e-3, 0.1}}, {lr = 0.02}},
  -- dict(lr=0.05, etas=(0.4, 1.5), step_sizes=(1e-3, 0.1)), dict(lr=0.02)
  {'Rprop_max', 'Rprop', {maximize = true}, {lr = 0.03}},
  -- dict(maximize=True), dict(lr=0.03)
  {'ASGD', 'ASGD', {lr = 0.02, lambd = 0.01, alpha = 0.6, t0 = 3}, {lr = 0.01, weight_decay = 0.1}},
  -- dict(lr=0.02, lambd=0.01, alpha=0.6, t0=3), dict(lr=0.01, weight_decay=0.1)
  {'ASGD_max', 'ASGD', {lr = 0.01, lambd = 0.05, t0 = 2, maximize = true}, {weight_decay = 0.05}},
  -- dict(lr=0.01, lambd=0.05, t0=2, maximize=True), dict(weight_decay=0.05)
}

local REF = {
  Adadelta = {
    traj = {
      {0.4929294264727618, -1.1929289382657244, 0.7929289350723941, 0.10707029939681041, 0.4070708025990019,
        -0.29292897539125745, 0.20353546085997537, -0.0964644813120864},
      {0.4855972940741801, -1.1855064531807409, 0.7854907607991652, 0.11435866908679171, 0.41445354057819167,
        -0.28552215696171046, 0.20722694470666128, -0.09278573907954729},
      {0.4781722927657363, -1.1778591232258655, 0.7778049914676676, 0.12167475773243258, 0.42200243957617467,
        -0.2779137034448992, 0.21100151126988229, -0.08904254946539417},
      {0.4707409463551391, -1.170049145440914, 0.7699297416761665, 0.12891968361463732, 0.42964310395065053,
        -0.27017074192180757, 0.21482177261822377, -0.08527536911919005},
      {0.4633553779207609, -1.1621133489101667, 0.7618992049634131, 0.13603419133669759, 0.4373298854301503,
        -0.26233380304934123, 0.2186646085512956, -0.08150892543915307},
      {0.4560497310584538, -1.1540759725794556, 0.7537358252127658, 0.14298039629694342, 0.4450316843397652,
        -0.2544301434872057, 0.22251409172519812, -0.07775985683552854},
      {0.44884745365862727, -1.145954094945795, 0.7454554309118191, 0.14973350209542524, 0.4527258359254134,
        -0.24647943231003708, 0.22635844745032713, -0.074040050678843},
      {0.4417650755585496, -1.1377603383663162, 0.7370697748565264, 0.15627740646208974, 0.46039503108423596,
        -0.23849659343812077, 0.23018852528309844, -0.07035834953707176},
    },
    state = {acc_delta = {4.3801421089242525e-05, 5.251451852544704e-05, 5.411775113069562e-05, 3.990976842016521e-05,
      4.8350153759734027e-05, 5.082299128063354e-05}, square_avg = {0.20845331845532533, 22.062085356070114,
      48.68143381459483, 0.11819581744867967, 0.44754865687259837, 2.9556377054057723}, step = 8.0},
  },
  Adadelta_max = {
    traj = {
      {0.502213563412409, -1.2022135939816, 0.8022135941815346, 0.09778645375454897, 0.3977864222435813,
        -0.30221359165715467, 0.19778641430567664, -0.10221359243256607},
      {0.5044925538064363, -1.204488353381512, 0.8044860704641201, 0.0954947136077274, 0.3955048881023895,
        -0.3044900695445793, 0.1955004210532088, -0.10449803069970784},
      {0.5068220284208377, -1.2068076912118597, 0.8067999294216868, 0.09313475272106735, 0.39316933865704184,
        -0.3068135111478587, 0.19315422559801393, -0.10684049843789017},
      {0.5091948937208116, -1.2091636087341529, 0.8091466401818939, 0.09071072505565098, 0.39078626314423326,
        -0.3091762840437443, 0.19075330046254294, -0.10923515949201464},
      {0.5116070937968904, -1.2115514632791144, 0.8115211890529836, 0.08822457081148077, 0.3883592738167285,
        -0.31157398340772124, 0.18830053652332665, -0.1116788594583404},
      {0.5140560534856947, -1.2139682622951042, 0.8139202963636334, 0.08567716233788378, 0.38589058211281363,
        -0.31400378626834097, 0.18579757344201106, -0.11416974507467431},
      {0.5165400254877246, -1.216411943576359, 0.8163416622194053, 0.0830687780875969, 0.3833816164134022,
        -0.3164637587771751, 0.18324535348337068, -0.11670668855391864},
      {0.5190577696284058, -1.2188810197782523, 0.8187835931860782, 0.08039933270041687, 0.38083332500280853,
        -0.3189525147861907, 0.18064439186133358, -0.11928900616547294},
    },
    state = {acc_delta = {6.73348830003338e-06, 6.585751603459347e-06, 6.505110758877746e-06, 7.202056238957373e-06,
      6.825861180360522e-06, 6.645238976806459e-06}, square_avg = {0.21669269825496565, 17.051249545713688,
      35.28397692255425, 0.1543601953519014, 0.412177971405698, 2.4309253707020098}, step = 8.0},
  },
  Adamax = {
    traj = {
      {0.4500000008361204, -1.1500000000927093, 0.7500000000638668, 0.14999999895746458, 0.44999999938755514,
        -0.2500000002471821, 0.21999999981818183, -0.08000000008298755},
      {0.4051208721861491, -1.0992109515478932, 0.6992364805410803, 0.19336764380723565, 0.4986972461901911,
        -0.20015175007839361, 0.23975544886714983, -0.06109242691874605},
      {0.3657660980394319, -1.0477841646181478, 0.6477047096737175, 0.22977011892528326, 0.5455073631394272,
        -0.15081912459734628, 0.25901938788086776, -0.04349993245179429},
      {0.332212868450807, -0.9958807396586813, 0.5953953253438748, 0.2591179834693984, 0.5898132015230588,
        -0.10240282029084505, 0.27751301871999123, -0.02743619081806069},
      {0.3045883478205681, -0.9436689543824879, 0.5422929809370225, 0.2816001967548057, 0.6309873425464855,
        -0.05533606645486827, 0.294929958409537, -0.013098032597035524},
      {0.28285177764901487, -0.8913213809205345, 0.48837477883637526, 0.29770049980081237, 0.6684221565215819,
        -0.010077930400797297, 0.3109433385808829, -0.0006574407465420457},
      {0.26678514950860693, -0.839011860672511, 0.43360840788320937, 0.30818891531759496, 0.7015669754898068,
        0.0328961585126655, 0.32521609512189825, 0.009746111315424364},
      {0.2559949301239717, -0.7869124863646483, 0.377949848056016, 0.3140842614247141, 0.7299707522874818,
        0.0731069492484745, 0.3374146132107929, 0.01801246435508182},
    },
    state = {exp_avg = {0.07500132547030698, -3.266002455013253, 5.4789862575526636, -0.03286441931005293,
      -0.26953586727336076, -0.9454379548112828}, exp_inf = {0.41760571004743535, 3.766272712276184,
      5.914200053582808, 0.33492257418993543, 0.5701225755143102, 1.41259668952181}, step = 8.0},
  },
  Adamax_max = {
    traj = {
      {0.5499999991638796, -1.2499999999072906, 0.8499999999361333, 0.05000000104253543, 0.3500000006124449,
        -0.34999999975281787, 0.15000000044247788, -0.14999999979123174},
      {0.5965618860976789, -1.2982924221436458, 0.8993273308470092, 0.0072446037840501465, 0.3042678441761195,
        -0.39757865258824576, 0.10569217232174394, -0.1947775252663801},
      {0.6406646437333419, -1.3452442342108977, 0.9480114285981325, -0.032622544998085874, 0.2609692910593412,
        -0.44335560395122786, 0.06418044008625894, -0.23681246784605556},
      {0.6830183510420728, -1.3910985254315784, 0.9960962615262842, -0.0708957783635002, 0.2192407058964478,
        -0.48775562548724033, 0.024352467166492683, -0.2771492392849054},
      {0.7240852381321129, -1.4360357787167553, 1.0436277374068146, -0.10817533755398001, 0.17859618610257436,
        -0.5310779573526035, -0.014369523367142402, -0.31635139620483027},
      {0.7641771076245164, -1.4801972369476495, 1.090650203456641, -0.14479853572174423, 0.13873033329730602,
        -0.573541723683083, -0.052332483413424544, -0.3547643691092114},
      {0.8035134400534675, -1.5236970038707018, 1.1372052872743819, -0.18097712584256687, 0.09943667524418454,
        -0.6153125974550859, -0.08976391776932091, -0.39261766280845145},
      {0.842254510236488, -1.566629282450979, 1.1833315689638415, -0.21685396014476768, 0.060568314691622396,
        -0.6565190954275053, -0.12682216602499458, -0.43007253112349664},
    },
    state = {exp_avg = {-0.5708931965019607, 3.991385962580283, -5.015529223954103, 0.6768566927243967,
      0.8201988115817255, 1.6538417424184833}, exp_inf = {1.2937028213513524, 8.161896029299525, 9.545959549363692,
      1.6562804820813999, 1.8525681120080328, 3.523542497792151}, step = 8.0},
  },
  NAdam = {
    traj = {
      {0.44572253132223927, -1.1457225305152299, 0.7457225304839198, 0.15427746845368703, 0.4542774689205716,
        -0.24572253068291766, 0.2217109876367917, -0.07828901225592279},
      {0.40911190151055876, -1.1039010666966838, 0.703277784910558, 0.18922844048907891, 0.49445494486418723,
        -0.20461327597299742, 0.23800928571983232, -0.0627143092657273},
      {0.37781315138678095, -1.0639883332168472, 0.6624073145367873, 0.2176766361056194, 0.5314609614479343,
        -0.16594193050822453, 0.2531605727704017, -0.048688777786394924},
      {0.3505487620495579, -1.0241068861726528, 0.621217054481129, 0.24081718303435093, 0.5668204813752511,
        -0.1279642240952339, 0.2677887879294384, -0.035625911524333115},
      {0.3276097188991589, -0.9839435498969767, 0.5793629401089572, 0.2586221432669155, 0.6003545987628995,
        -0.09056496383098142, 0.28182695318908757, -0.023616630398120713},
      {0.3093330929451253, -0.9435984906770812, 0.5369264975326953, 0.2715025268197111, 0.6314358375202338,
        -0.05407600163045174, 0.2949932517994503, -0.012909771050642834},
      {0.29566248252308236, -0.9032725344132008, 0.49410590246097, 0.2805335749573368, 0.659392853897067,
        -0.01894749191940829, 0.3069292738413735, -0.0037641304435212016},
      {0.2861104073438505, -0.8631676584343103, 0.45111533673032855, 0.28709680802700227, 0.6837159445413262,
        0.014368652389720444, 0.31726439445684773, 0.0036066060058372643},
    },
    state = {exp_avg = {0.12006151124294664, -3.435273463089933, 5.627671186461348, -0.07267716411517698,
      -0.32140632593937174, -1.0485951262814437}, exp_avg_sq = {0.026323172520015547, 6.454100970983708,
      16.346413126032278, 0.014379484226762908, 0.08456708542056675, 0.695608406429282},
      mu_product = 0.0006650396837049923, step = 8.0},
  },
  RAdam = {
    traj = {
      {0.4701, -0.93034, 0.40856000000000003, 0.12398, 0.44082, -0.19885999999999998, 0.222, -0.05180000000000001},
      {0.44113612332525265, -0.6994683103098599, 0.07520663836271557, 0.14555893998327588, 0.4782775353250593,
        -0.11072522128127939, 0.24088572631578947, -0.010523326315789484},
      {0.4132836984757165, -0.5023685766862275, -0.2064864433340861, 0.16487837191326266, 0.5124790897400608,
        -0.034727214608580484, 0.25689870748848326, 0.02422413378715322},
      {0.38671188420768904, -0.3350638125620863, -0.44122254090254814, 0.1820867455140616, 0.5435458164633629,
        0.02999294341053016, 0.27026773594122944, 0.05285573235770015},
      {0.3615856178029318, -0.1942905779592022, -0.6327618545114277, 0.19733786584380494, 0.5716125716609761,
        0.08429117044685444, 0.2812074041686108, 0.07580060121098721},
      {0.3490302408045186, -0.18372194591293126, -0.6425198445311463, 0.20907735202551572, 0.5836667577906915,
        0.09482814207915549, 0.28515251183718865, 0.07951984507980682},
      {0.3329261796981232, -0.17081897944092872, -0.6539116999167116, 0.2237469959276881, 0.598996802457075,
        0.10754851901809817, 0.28975130701656643, 0.08363025503600156},
      {0.3140277627301818, -0.15625410895643715, -0.6661954090399923, 0.2403332506207834, 0.6169019650062708,
        0.12167738242438636, 0.2946579708234991, 0.08763087806831223},
    },
    state = {exp_avg = {0.2323751838946347, -0.9831094637648534, 1.1550283248046729, -0.11721775411005039,
      -0.23855731708444203, -0.3641515490907839}, exp_avg_sq = {0.1021173411233557, 3.0772400833095457,
      5.971687931084049, 0.03373346642142131, 0.11989465130430517, 0.44866350409660954}, step = 8.0},
  },
  Rprop = {
    traj = {
      {0.45, -1.15, 0.75, 0.15000000000000002, 0.45, -0.25, 0.22, -0.08},
      {0.375, -1.075, 0.675, 0.22500000000000003, 0.525, -0.175, 0.25, -0.05},
      {0.275, -0.975, 0.5750000000000001, 0.32500000000000007, 0.625, -0.07499999999999998, 0.295,
        -0.0050000000000000044},
      {0.275, -0.875, 0.4750000000000001, 0.32500000000000007, 0.725, 0.025000000000000022, 0.3625, 0.0625},
      {0.23500000000000001, -0.775, 0.3750000000000001, 0.28500000000000003, 0.725, 0.12500000000000003, 0.3625,
        0.0625},
      {0.23500000000000001, -0.675, 0.27500000000000013, 0.22500000000000003, 0.6849999999999999, 0.22500000000000003,
        0.33549999999999996, 0.0355},
      {0.251, -0.5750000000000001, 0.17500000000000013, 0.22500000000000003, 0.6849999999999999, 0.22500000000000003,
        0.29499999999999993, -0.005000000000000011},
      {0.275, -0.4750000000000001, 0.07500000000000012, 0.24900000000000005, 0.701, 0.18500000000000003,
        0.29499999999999993, -0.005000000000000011},
    },
    state = {prev = {-0.2296146996000002, -2.21578375, 4.414543750000001, -0.3663437499999999, -0.27793235000000027,
      0.27015625000000026}, step = 8.0, step_size = {0.024000000000000007, 0.1, 0.1, 0.024000000000000007,
      0.016000000000000004, 0.04000000000000001}},
  },
  Rprop_max = {
    traj = {
      {0.51, -1.21, 0.81, 0.09000000000000001, 0.39, -0.31, 0.17, -0.13},
      {0.522, -1.222, 0.8220000000000001, 0.07800000000000001, 0.378, -0.322, 0.134, -0.166},
      {0.5364, -1.2364, 0.8364, 0.06360000000000002, 0.3636, -0.33640000000000003, 0.09080000000000002, -0.2092},
      {0.55368, -1.25368, 0.85368, 0.046320000000000014, 0.34631999999999996, -0.35368000000000005,
        0.03896000000000003, -0.26104},
      {0.5744159999999999, -1.274416, 0.874416, 0.025584000000000013, 0.325584, -0.374416, -0.023247999999999956,
        -0.323248},
      {0.5992991999999999, -1.2992992, 0.8992992, 0.0007008000000000118, 0.3007008, -0.3992992, -0.09789759999999995,
        -0.39789759999999996},
      {0.6291590399999999, -1.3291590400000002, 0.9291590399999999, -0.029159039999999987, 0.27084096,
        -0.42915904000000005, -0.18747711999999994, -0.48747711999999993},
      {0.6649908479999999, -1.3649908480000001, 0.9649908479999999, -0.06499084799999999, 0.23500915200000003,
        -0.46499084800000007, -0.29497254399999995, -0.5949725439999999},
    },
    state = {prev = {-0.3505530099868774, 7.111100714702405, -8.120527067847817, 1.5416972257849986,
      1.8957403122440588, 2.9322307676795853}, step = 8.0, step_size = {0.035831808, 0.035831808, 0.035831808,
      0.035831808, 0.035831808, 0.035831808}},
  },
  ASGD = {
    traj = {
      {0.48794, -1.091896, 0.6432640000000001, 0.10957200000000002, 0.41624800000000006, -0.259484,
        0.21098000000000003, -0.07589000000000001},
      {0.4760930414873599, -0.9961948158854582, 0.5047463519083885, 0.11821925977855102, 0.43124614808272455,
        -0.223072219936909, 0.2205964810226779, -0.05480417012449073},
      {0.4645288797587418, -0.9109675921101973, 0.3816808591190075, 0.12606104824543765, 0.44512279899074186,
        -0.19030978104104745, 0.22903495236428173, -0.0363991865474016},
      {0.4533000968277078, -0.8347011295273993, 0.2719417763396843, 0.1332017602871187, 0.4579928635872714,
        -0.16079758196040694, 0.23645135716080284, -0.02037054826840648},
      {0.44244619289046316, -0.7661823525162533, 0.1738440674578681, 0.1397326587205508, 0.46995912684305685,
        -0.13418404828862338, 0.24297710989570365, -0.006448130865066989},
      {0.43199644761098727, -0.7044205913568145, 0.08601511467919626, 0.14573343239322023, 0.48111346345140377,
        -0.11015846115920623, 0.2487232664016412, 0.005607732511487612},
      {0.4219719864672669, -0.6485938224113978, 0.007309980845778282, 0.15127358482699124, 0.49153795101887837,
        -0.08844548444900469, 0.2537839717253063, 0.01600971090503636},
      {0.4123873159716651, -0.5980105683070055, -0.06324582387538924, 0.1564136682423248, 0.5013058838673703,
        -0.06880061616690386, 0.25823931287536833, 0.024946533702771608},
    },
    state = {ax = {0.4272004857350956, -0.6793018336478678, 0.05098083477686336, 0.14828833604577177,
      0.48597910629517727, -0.10039715251593453}, eta = 0.019980824541970282, mu = 0.2, step = 8.0},
  },
  ASGD_max = {
    traj = {
      {0.50573, -1.2533320000000001, 0.8778880000000001, 0.09515400000000002, 0.39163600000000004,
        -0.32007800000000003, 0.18860000000000002, -0.12390000000000001},
      {0.5113757225362731, -1.3099361436538437, 0.9603175779118859, 0.08984370444165111, 0.38267726748548264,
        -0.341296320496779, 0.17607338518702348, -0.15021682380774418},
      {0.5169088602602101, -1.3701105259836, 1.0476894353083723, 0.0840161191123137, 0.3730637488831909,
        -0.363733207381348, 0.16230636453014613, -0.1791766630604475},
      {0.5222975700395754, -1.4341945290312832, 1.140467326446445, 0.07761285363941052, 0.362729584900824,
        -0.38747328804125203, 0.14717338654344184, -0.21102674095190865},
      {0.5275060274440908, -1.502576766988534, 1.2391920967266283, 0.0705696031031573, 0.3516025756987361,
        -0.41260821820092547, 0.13053592466074102, -0.24603726316788985},
      {0.5324939144411968, -1.5757049902480917, 1.3444996163831182, 0.06281558117615992, 0.3396035986809057,
        -0.43923741308832576, 0.11224113802730282, -0.2845035499254559},
      {0.5372158266104846, -1.6540985451867787, 1.4571439418118273, 0.05427290018874151, 0.3266459747058359,
        -0.4674688770182006, 0.09212039656353012, -0.3267483660979574},
      {0.5416205819723482, -1.7383642064203906, 1.5780275916525763, 0.044855893011095195, 0.3126347780604549,
        -0.4974201483840191, 0.06998765969472873, -0.37312446806207994},
    },
    state = {ax = {0.5322267841015392, -1.5809878075750154, 1.351866114604119, 0.06202536622371288,
      0.3386433024093513, -0.4408415889465446}, eta = 0.009970104616438286, mu = 0.16666666666666666, step = 8.0},
  },
}

------------------------------------------------------------------ helpers
local function model()
  local W = flow.tensor(W0, {dtype = flow.float64, requires_grad = true})
  local b = flow.tensor(B0, {dtype = flow.float64, requires_grad = true})
  return W, b
end

local Xt, Yt = flow.tensor(X, f64), flow.tensor(Y, f64)

local function train_step(opt, W, b)
  opt:zero_grad()
  local out = Xt:matmul(W:t()) + b
  local loss = ((out - Yt) ^ 2):sum() + (W ^ 4):sum() * 0.1
  loss:backward()
  opt:step()
end

local function row(W, b)
  local r = H.flat(W:detach():totable())
  for _, v in ipairs(b:detach():totable()) do r[#r + 1] = v end
  return r
end

local function make(name, defaults, g2, W, b)
  local second = {params = {b}}
  for k, v in pairs(g2) do second[k] = v end
  local d = {}
  for k, v in pairs(defaults) do d[k] = v end
  return optim[name]({{params = {W}}, second}, d)
end

-- A state value as a plain number or flat list.
local function plain(v)
  if flow.is_tensor(v) then
    if v:dim() == 0 then return v:item() end
    return H.flat(v:totable())
  end
  return v
end

------------------------------------------------------------------ trajectories
describe('optimizers against torch.optim 1.13', function()
  for _, c in ipairs(CASES) do
    local key, name, defaults, g2 = c[1], c[2], c[3], c[4]
    local ref = REF[key]

    it(key .. ' follows torch step for step, param groups and state included', function()
      local W, b = model()
      local opt = make(name, defaults, g2, W, b)
      for i = 1, STEPS do
        train_step(opt, W, b)
        H.close(row(W, b), ref.traj[i], TOL, ('%s step %d'):format(key, i))
      end
      local st = opt:state_dict().state[0]
      local keys, want_keys = {}, {}
      for k in pairs(st) do keys[#keys + 1] = k end
      for k in pairs(ref.state) do want_keys[#want_keys + 1] = k end
      table.sort(keys)
      table.sort(want_keys)
      assert.are.same(want_keys, keys)
      for k, v in pairs(ref.state) do
        H.close(plain(st[k]), v, TOL, ('%s state %s'):format(key, k))
      end
    end)

    it(key .. ' continues identically after a state_dict round trip', function()
      local W, b = model()
      local opt = make(name, defaults, g2, W, b)
      for _ = 1, STEPS / 2 do train_step(opt, W, b) end
      local sd = opt:state_dict()
      local W2 = W:detach():clone():requires_grad_()
      local b2 = b:detach():clone():requires_grad_()
      -- the fresh optimizer has other hyper-parameters: load_state_dict
      -- takes the saved ones
      local opt2 = optim[name]({{params = {W2}}, {params = {b2}}})
      opt2:load_state_dict(sd)
      assert.are.equal(opt.param_groups[2].lr, opt2.param_groups[2].lr)
      for i = STEPS / 2 + 1, STEPS do
        train_step(opt, W, b)
        train_step(opt2, W2, b2)
        assert.are.same(row(W, b), row(W2, b2))
        H.close(row(W2, b2), ref.traj[i], TOL, ('%s step %d after loading'):format(key, i))
      end
    end)
  end

  -- PyTorch saves step, mu_product, eta and mu as 0-d tensors: a dict in
  -- that form loads and continues the same trajectory
  for _, key in ipairs({'NAdam', 'ASGD'}) do
    it(key .. ' loads scalar state saved as 0-d tensors, as PyTorch saves it', function()
      local c
      for _, x in ipairs(CASES) do if x[1] == key then c = x end end
      local W, b = model()
      local opt = make(c[2], c[3], c[4], W, b)
      for _ = 1, STEPS / 2 do train_step(opt, W, b) end
      local sd = opt:state_dict()
      for _, st in pairs(sd.state) do
        for k, v in pairs(st) do
          if type(v) == 'number' then st[k] = flow.tensor(v, f64) end
        end
      end
      local W2 = W:detach():clone():requires_grad_()
      local b2 = b:detach():clone():requires_grad_()
      local opt2 = optim[c[2]]({{params = {W2}}, {params = {b2}}})
      opt2:load_state_dict(sd)
      for i = STEPS / 2 + 1, STEPS do
        train_step(opt2, W2, b2)
        H.close(row(W2, b2), REF[key].traj[i], TOL, ('%s step %d after loading'):format(key, i))
      end
    end)
  end
end)

------------------------------------------------------------------ defaults and errors
describe('Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD arguments', function()
  local p = flow.zeros(3, f64):requires_grad_()

  it("take torch 1.13's defaults", function()
    local function defaults(name) return optim[name]({p}).param_groups[1] end
    local g = defaults('Adadelta')
    assert.are.same({1.0, 0.9, 1e-6, 0, false}, {g.lr, g.rho, g.eps, g.weight_decay, g.maximize})
    g = defaults('Adamax')
    assert.are.same({2e-3, {0.9, 0.999}, 1e-8, 0, false}, {g.lr, g.betas, g.eps, g.weight_decay, g.maximize})
    g = defaults('NAdam')
    assert.are.same({2e-3, {0.9, 0.999}, 1e-8, 0, 4e-3}, {g.lr, g.betas, g.eps, g.weight_decay, g.momentum_decay})
    g = defaults('RAdam')
    assert.are.same({1e-3, {0.9, 0.999}, 1e-8, 0}, {g.lr, g.betas, g.eps, g.weight_decay})
    g = defaults('Rprop')
    assert.are.same({1e-2, {0.5, 1.2}, {1e-6, 50}, false}, {g.lr, g.etas, g.step_sizes, g.maximize})
    g = defaults('ASGD')
    assert.are.same({1e-2, 1e-4, 0.75, 1e6, 0, false}, {g.lr, g.lambd, g.alpha, g.t0, g.weight_decay, g.maximize})
  end)

  it('take lr positionally, and foreach as PyTorch does (ignored)', function()
    assert.are.equal(0.3, optim.Adadelta({p}, 0.3).param_groups[1].lr)
    assert.are.equal(0.3, optim.ASGD({p}, 0.3, {foreach = true}).param_groups[1].lr)
  end)

  it("reject bad hyper-parameters with torch's meaning", function()
    for _, name in ipairs({'Adadelta', 'Adamax', 'NAdam', 'RAdam', 'Rprop', 'ASGD'}) do
      H.raises(function() optim[name]({p}, {lr = -1}) end, name .. ': invalid learning rate -1')
    end
    H.raises(function() optim.Adadelta({p}, {rho = 1.5}) end, 'Adadelta: invalid rho value 1.5')
    H.raises(function() optim.Adadelta({p}, {eps = -1}) end, 'Adadelta: invalid epsilon value -1')
    H.raises(function() optim.Adadelta({p}, {weight_decay = -1}) end, 'Adadelta: invalid weight_decay value -1')
    for _, name in ipairs({'Adamax', 'NAdam', 'RAdam'}) do
      H.raises(function() optim[name]({p}, {betas = {1.0, 0.9}}) end,
               name .. ': invalid beta parameter at index 1: 1')
      H.raises(function() optim[name]({p}, {betas = {0.9, -0.1}}) end,
               name .. ': invalid beta parameter at index 2: -0.1')
      H.raises(function() optim[name]({p}, {eps = -1}) end, name .. ': invalid epsilon value -1')
      H.raises(function() optim[name]({p}, {weight_decay = -1}) end, name .. ': invalid weight_decay value -1')
    end
    H.raises(function() optim.NAdam({p}, {momentum_decay = -1}) end, 'NAdam: invalid momentum_decay value -1')
    H.raises(function() optim.Rprop({p}, {etas = {1.2, 0.5}}) end, 'Rprop: invalid eta values 1.2, 0.5')
    H.raises(function() optim.Rprop({p}, {etas = {0.5, 1}}) end, 'Rprop: invalid eta values 0.5, 1')
    H.raises(function() optim.ASGD({p}, {weight_decay = -1}) end, 'ASGD: invalid weight_decay value -1')
    -- checked again for a group added later
    local opt = optim.Adamax({p})
    H.raises(function() opt:add_param_group({params = {flow.zeros(2):requires_grad_()}, lr = -0.5}) end,
             'Adamax: invalid learning rate -0.5')
  end)

  it('reject options torch 1.13 does not have', function()
    H.raises(function() optim.NAdam({p}, {maximize = true}) end, "NAdam: unknown option 'maximize'")
    H.raises(function() optim.RAdam({p}, {maximize = true}) end, "RAdam: unknown option 'maximize'")
    H.raises(function() optim.Rprop({p}, {weight_decay = 0.1}) end, "Rprop: unknown option 'weight_decay'")
  end)

  it('skip parameters without a grad and make no state for them', function()
    local a = flow.ones(2, f64):requires_grad_()
    local c = flow.ones(2, f64):requires_grad_()
    for _, name in ipairs({'Adadelta', 'Adamax', 'NAdam', 'RAdam', 'Rprop', 'ASGD'}) do
      local opt = optim[name]({a, c})
      a.grad = flow.ones(2, f64)
      c.grad = nil
      opt:step()
      assert.is_not_nil(opt.state[a])
      assert.is_nil(opt.state[c])
      assert.are.same({1, 1}, c:detach():totable())
    end
  end)
end)

------------------------------------------------------------------ CyclicLR
-- Rows {lr1, lr2[, momentum1, momentum2]} before each of 14 steps, printed
-- by torch 1.13 (float64 default) as:
--   opt = torch.optim.SGD([{'params': [a]}, {'params': [b]}], lr=0.1, momentum=0.5)
--   s = torch.optim.lr_scheduler.CyclicLR(opt, **kwargs)
--   for _ in range(14):
--       g = opt.param_groups
--       print([g[0]['lr'], g[1]['lr']] + ([g[0]['momentum'], g[1]['momentum']] if cycle_momentum else []))
--       opt.step(); s.step()
-- with kwargs as in CYCLIC_ARGS.
local CYCLIC_ARGS = {
  triangular = {{0.01, 0.02}, {0.1, 0.3}, {step_size_up = 3, step_size_down = 2}},
  -- base_lr=[0.01, 0.02], max_lr=[0.1, 0.3], step_size_up=3, step_size_down=2
  triangular2 = {0.01, 0.1, {step_size_up = 2, mode = 'triangular2', base_momentum = {0.7, 0.75},
                             max_momentum = 0.95}},
  -- base_lr=0.01, max_lr=0.1, step_size_up=2, mode='triangular2', base_momentum=[0.7, 0.75], max_momentum=0.95
  exp_range = {0.01, 0.1, {step_size_up = 3, mode = 'exp_range', gamma = 0.9}},
  -- base_lr=0.01, max_lr=0.1, step_size_up=3, mode='exp_range', gamma=0.9
  scale_fn_cycle = {0.01, 0.1, {step_size_up = 2, step_size_down = 3, scale_fn = function(x) return 1 / x end,
                                cycle_momentum = false}},
  -- base_lr=0.01, max_lr=0.1, step_size_up=2, step_size_down=3, scale_fn=lambda x: 1 / x, cycle_momentum=False
  scale_fn_iterations = {0.01, 0.1, {step_size_up = 2, scale_fn = function(x) return 0.95 ^ x end,
                                     scale_mode = 'iterations', cycle_momentum = false}},
  -- base_lr=0.01, max_lr=0.1, step_size_up=2, scale_fn=lambda x: 0.95 ** x, scale_mode='iterations',
  -- cycle_momentum=False
}

local CYCLIC = {
  triangular = {
    {0.01, 0.02, 0.9, 0.9},
    {0.039999999999999994, 0.11333333333333331, 0.8666666666666667, 0.8666666666666667},
    {0.06999999999999999, 0.2066666666666666, 0.8333333333333334, 0.8333333333333334},
    {0.09999999999999999, 0.29999999999999993, 0.8, 0.8},
    {0.055, 0.15999999999999995, 0.8500000000000001, 0.8500000000000001},
    {0.01, 0.02, 0.9, 0.9},
    {0.04000000000000003, 0.11333333333333341, 0.8666666666666667, 0.8666666666666667},
    {0.06999999999999999, 0.2066666666666666, 0.8333333333333334, 0.8333333333333334},
    {0.09999999999999999, 0.29999999999999993, 0.8, 0.8},
    {0.05500000000000005, 0.1600000000000001, 0.85, 0.85},
    {0.01, 0.02, 0.9, 0.9},
    {0.04000000000000003, 0.11333333333333341, 0.8666666666666667, 0.8666666666666667},
    {0.06999999999999999, 0.2066666666666666, 0.8333333333333334, 0.8333333333333334},
    {0.09999999999999999, 0.29999999999999993, 0.8, 0.8},
  },
  triangular2 = {
    {0.01, 0.01, 0.95, 0.95},
    {0.05500000000000001, 0.05500000000000001, 0.825, 0.85},
    {0.1, 0.1, 0.7, 0.75},
    {0.05500000000000001, 0.05500000000000001, 0.825, 0.85},
    {0.01, 0.01, 0.95, 0.95},
    {0.0325, 0.0325, 0.8875, 0.8999999999999999},
    {0.05500000000000001, 0.05500000000000001, 0.825, 0.85},
    {0.0325, 0.0325, 0.8875, 0.8999999999999999},
    {0.01, 0.01, 0.95, 0.95},
    {0.02125, 0.02125, 0.91875, 0.9249999999999999},
    {0.0325, 0.0325, 0.8875, 0.8999999999999999},
    {0.02125, 0.02125, 0.91875, 0.9249999999999999},
    {0.01, 0.01, 0.95, 0.95},
    {0.015625, 0.015625, 0.934375, 0.9375},
  },
  exp_range = {
    {0.01, 0.01, 0.9, 0.9},
    {0.03700000000000001, 0.03700000000000001, 0.87, 0.87},
    {0.0586, 0.0586, 0.8460000000000001, 0.8460000000000001},
    {0.07561000000000001, 0.07561000000000001, 0.8271000000000001, 0.8271000000000001},
    {0.04936600000000002, 0.04936600000000002, 0.85626, 0.85626},
    {0.027714699999999988, 0.027714699999999988, 0.880317, 0.880317},
    {0.01, 0.01, 0.9, 0.9},
    {0.02434890700000003, 0.02434890700000003, 0.8840567699999999, 0.8840567699999999},
    {0.03582803259999999, 0.03582803259999999, 0.8713021860000001, 0.8713021860000001},
    {0.04486784401000001, 0.04486784401000001, 0.8612579511, 0.8612579511},
    {0.03092070640599999, 0.03092070640599999, 0.8767547706600001, 0.8767547706600001},
    {0.019414317882700018, 0.019414317882700018, 0.889539646797, 0.889539646797},
    {0.01, 0.01, 0.9, 0.9},
    {0.017625597484986995, 0.017625597484986995, 0.89152711390557, 0.89152711390557},
  },
  scale_fn_cycle = {
    {0.01, 0.01},
    {0.055, 0.055},
    {0.09999999999999999, 0.09999999999999999},
    {0.06999999999999999, 0.06999999999999999},
    {0.039999999999999994, 0.039999999999999994},
    {0.01, 0.01},
    {0.03250000000000002, 0.03250000000000002},
    {0.055, 0.055},
    {0.039999999999999994, 0.039999999999999994},
    {0.025000000000000015, 0.025000000000000015},
    {0.01, 0.01},
    {0.025000000000000015, 0.025000000000000015},
    {0.04, 0.04},
    {0.03, 0.03},
  },
  scale_fn_iterations = {
    {0.01, 0.01},
    {0.052750000000000005, 0.052750000000000005},
    {0.091225, 0.091225},
    {0.048581875000000004, 0.048581875000000004},
    {0.01, 0.01},
    {0.044820142187499995, 0.044820142187499995},
    {0.07615827015624999, 0.07615827015624999},
    {0.04142517832421874, 0.04142517832421874},
    {0.01, 0.01},
    {0.038361223437607415, 0.038361223437607415},
    {0.06388632453145408, 0.06388632453145408},
    {0.035596004152440686, 0.035596004152440686},
    {0.01, 0.01},
    {0.03310039374757772, 0.03310039374757772},
  },
}

describe('CyclicLR against torch 1.13', function()
  local S = optim.lr_scheduler

  local function sgd()
    local a = flow.zeros(2, {requires_grad = true})
    local b = flow.zeros(1, {requires_grad = true})
    return optim.SGD({{params = {a}}, {params = {b}}}, {lr = 0.1, momentum = 0.5})
  end

  local function values(opt, with_momentum)
    local g = opt.param_groups
    local r = {g[1].lr, g[2].lr}
    if with_momentum then r[3], r[4] = g[1].momentum, g[2].momentum end
    return r
  end

  for key, a in pairs(CYCLIC_ARGS) do
    it(key .. ' gives torch\'s lrs and momenta step for step', function()
      local opt = sgd()
      local s = S.CyclicLR(opt, a[1], a[2], a[3])
      local with_m = a[3].cycle_momentum ~= false
      for i, want in ipairs(CYCLIC[key]) do
        H.close(values(opt, with_m), want, 1e-12, ('%s step %d'):format(key, i - 1))
        assert.are.same({opt.param_groups[1].lr, opt.param_groups[2].lr}, s:get_last_lr())
        s:step()
      end
    end)
  end

  it('continues identically after a state_dict round trip', function()
    local a = CYCLIC_ARGS.triangular2
    local opt = sgd()
    local s = S.CyclicLR(opt, a[1], a[2], a[3])
    for _ = 1, 5 do s:step() end
    local sd = s:state_dict()
    local opt2 = sgd()
    local s2 = S.CyclicLR(opt2, 0.5, 0.9, {step_size_up = 7})
    s2:load_state_dict(sd)
    for i = 7, #CYCLIC.triangular2 do
      s:step()
      s2:step()
      H.close(values(opt2, true), CYCLIC.triangular2[i], 1e-12, 'loaded step ' .. (i - 1))
    end
    -- a scale_fn is not saved; the loading scheduler keeps its own
    local c = CYCLIC_ARGS.scale_fn_cycle
    local s3 = S.CyclicLR(sgd(), c[1], c[2], c[3])
    assert.is_nil(s3:state_dict()._scale_fn_custom)
  end)

  it('cycles beta1 of an Adam-style optimizer like momentum', function()
    local p = flow.zeros(2, {requires_grad = true})
    local opt = optim.Adam({p}, {lr = 0.1, betas = {0.5, 0.99}})
    local s = S.CyclicLR(opt, 0.01, 0.1, {step_size_up = 2, mode = 'triangular2', base_momentum = 0.7,
                                          max_momentum = 0.95})
    for i, want in ipairs(CYCLIC.triangular2) do
      H.close({opt.param_groups[1].lr, opt.param_groups[1].betas[1]}, {want[1], want[3]}, 1e-12,
              'Adam step ' .. (i - 1))
      assert.are.equal(0.99, opt.param_groups[1].betas[2])
      s:step()
    end
  end)

  it('jumps to an iteration with step(epoch)', function()
    local a = CYCLIC_ARGS.exp_range
    local opt = sgd()
    local s = S.CyclicLR(opt, a[1], a[2], a[3])
    s:step(9)
    H.close(values(opt, true), CYCLIC.exp_range[10], 1e-12, 'step(9)')
  end)

  it("rejects bad arguments with torch's meaning", function()
    local p = flow.zeros(2, {requires_grad = true})
    H.raises(function() S.CyclicLR(optim.Adagrad({p}), 0.1, 1.0) end,
             'CyclicLR: optimizer must support momentum or beta1 with `cycle_momentum` option enabled')
    -- fine without cycle_momentum
    S.CyclicLR(optim.Adagrad({p}), 0.1, 1.0, {cycle_momentum = false})
    H.raises(function() S.CyclicLR(sgd(), 0.1, 1.0, {mode = 'foo'}) end,
             'CyclicLR: mode is invalid and scale_fn is nil')
    H.raises(function() S.CyclicLR(sgd(), {0.1, 0.2, 0.3}, 1.0) end,
             'CyclicLR: base_lr must have the same length as optimizer.param_groups')
    H.raises(function() S.CyclicLR(sgd(), 0.1) end, 'CyclicLR: missing required argument max_lr')
    H.raises(function() S.CyclicLR({}, 0.1, 1.0) end, 'CyclicLR: expected an optimizer')
  end)
end)
