-- oneflow.nn.graph: flow.nn.Graph, the same module code run as a static
-- graph (see doc/graph.md).
--
--   local TrainGraph = flow.nn.Graph:subclass('TrainGraph')
--   function TrainGraph:__init(model, loss_fn, opt)
--     flow.nn.Graph.__init(self)
--     self.model, self.loss_fn = model, loss_fn
--     self:add_optimizer(opt)            -- or (opt, {lr_sch = scheduler})
--   end
--   function TrainGraph:build(x, y)
--     local loss = self.loss_fn(self.model(x), y)
--     loss:backward()
--     return loss
--   end
--   local g = TrainGraph(net, nn.CrossEntropyLoss(), opt)
--   local loss = g(x, y)     -- traced and compiled on the first call per input signature
--
-- The first call with a given signature (input shapes and dtypes, other
-- arguments by value) runs build() eagerly on the real inputs while the C
-- tracer records every op, then optimizes the recorded graph; that call's
-- results are the eager ones. Later calls run the compiled plan. Optimizers
-- added with add_optimizer step inside the graph (fused update ops), after
-- build returns, and the grads are dropped (set to nil) after each step.
-- The parameters stay the module's own tensors: eager code sees the
-- graph's updates and the graph sees eager changes.
local A = require 'oneflow._args'
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local class = require 'oneflow.class'
local autograd = require 'oneflow.autograd'
local module = require 'oneflow.nn.module'

local GL = require 'oneflow.distributed.global'
local B = require 'oneflow.distributed.boxing'
local PL = require 'oneflow.distributed.placement'
local comm = require 'oneflow.distributed.comm'

local C, wrap = core.C, core.wrap
local is_tensor, is_module = T.is_tensor, module.is_module
local is_global = GL.is_global
local unpack = unpack

local function fail(msg, level) error('nn.Graph: ' .. msg, (level or 1) + 1) end
local channels_last
local function flow_stack(list) return T.flow.stack(list, 1) end

local function raise(prefix)
  local msg = ffi.string(C.of_last_error())
  if prefix then msg = prefix .. msg end
  error(msg, 3)
end

------------------------------------------------------------------ config
local Config = {}
Config.__index = Config

--- self.config:enable_amp(true): build's forward runs under autocast
-- (flow.amp: matmul/linear/conv in the AMP dtype, reductions, softmax,
-- losses and norms in float32), so the graph holds the casts as nodes and
-- backward follows them. With float16 the loss is scaled (a GradScaler, see
-- Graph:set_grad_scaler) and a step with inf/nan grads is skipped.
function Config:enable_amp(on)
  self.amp = on ~= false
end
--- self.config:set_amp_dtype(flow.bfloat16 | flow.float16): the AMP dtype
-- (default bfloat16; float16 turns on loss scaling).
function Config:set_amp_dtype(dt)
  local types = require 'oneflow.types'
  if type(dt) == 'string' then dt = types.by_name[dt] end
  if dt ~= types.by_name.float16 and dt ~= types.by_name.bfloat16 then
    fail('set_amp_dtype: expected flow.float16 or flow.bfloat16, got ' .. tostring(dt), 2)
  end
  self.amp_dtype = dt
end
--- self.config:enable_activation_checkpointing(true): every child module
-- of the graph's modules (a ResNet's layer1..layer4, a Sequential's
-- layers) is checkpointed: its forward activations are dropped after the
-- forward pass and recomputed in backward. Per module:
-- `self.model.layer2.config.activation_checkpointing = true` in __init.
function Config:enable_activation_checkpointing(on)
  self.checkpointing = on ~= false
end
--- self.config:set_gradient_accumulation_steps(n): each call splits its
-- tensor arguments along the first dim into n micro-batches, runs build on
-- each (grads add up), averages the grads and steps the optimizers once.
-- Results: scalars are averaged over the micro-batches, other tensors
-- concatenated along the first dim.
function Config:set_gradient_accumulation_steps(n)
  if type(n) ~= 'number' or n < 1 or n ~= math.floor(n) then
    fail('set_gradient_accumulation_steps: expected a positive integer', 2)
  end
  self.acc_steps = n
end
Config.enable_cudnn_conv_heuristic_search_algo = function() end

--- self.config:enable_cuda_graph(true[, {static_outputs = true}]) (OneFlow:
-- enable_cudagraph): on a CUDA device the compiled step is captured into a
-- CUDA graph after one warm-up call and replayed by later calls of the same
-- signature: the inputs are copied into static input tensors, one launch
-- runs the whole step. Results are clones of the graph's static outputs,
-- or (static_outputs) the static tensors themselves, which the next call
-- overwrites. A step that cannot be captured (random ops, host syncs) runs
-- as usual; graph:cuda_graph_status() says why.
function Config:enable_cuda_graph(on, opts)
  if on ~= nil and type(on) ~= 'boolean' then fail('enable_cuda_graph: expected a boolean', 2) end
  if opts ~= nil and type(opts) ~= 'table' then fail('enable_cuda_graph: expected an options table', 2) end
  self.cuda_graph = on ~= false and ((opts and opts.static_outputs) and 2 or 1) or 0
end
Config.enable_cudagraph = Config.enable_cuda_graph

--- self.config:set_concurrency(n): run nodes whose inputs are ready side
-- by side, up to n at once, one CPU thread each (a lone ready node keeps
-- all threads); helps graphs with independent branches of small ops.
-- Default 1: in order. Results are the same.
function Config:set_concurrency(n)
  if type(n) ~= 'number' or n < 1 or n ~= math.floor(n) then
    fail('set_concurrency: expected a positive integer', 2)
  end
  self.concurrency = n
end

--- self.config:enable_zero(true[, {stage = 1}]) (OneFlow:
-- config.enable_zero(True, stage=1)): for global parameters that are
-- broadcast along a grid axis (data parallel), the optimizer state is split
-- along that axis, the gradient reduce-scattered instead of all-reduced,
-- each rank updates its part of the parameter and the parts are
-- all-gathered back. Stages 1 and 2 do the same here (a graph already
-- frees each full gradient once its part is made). Stage 3 also splits
-- the parameters themselves: when the graph compiles, each such global
-- parameter becomes split along that axis (it stays the same logical
-- tensor), so the global ops gather it where they need it and its gradient
-- comes out reduce-scattered. Local (non-global) parameters are not affected.
function Config:enable_zero(on, opts)
  local stage = type(opts) == 'number' and opts or (type(opts) == 'table' and opts.stage) or 1
  if stage ~= 1 and stage ~= 2 and stage ~= 3 then
    fail('enable_zero: stage must be 1, 2 or 3, got ' .. tostring(stage), 2)
  end
  self.zero = on ~= false and stage or nil
end

--- self.config:enable_auto_parallel(true[, opts]) (OneFlow:
-- config.enable_auto_parallel(True)): when the graph compiles first, the
-- SBP of every leaf module call (and so of its parameters) is searched
-- with a cost model -- compute, and seconds per boxing measured once per
-- machine (oneflow.distributed.cost_model) -- and the cheapest plan is
-- applied and printed on the first rank. The parameters must be global on
-- one placement, 1-D or a 2-D grid (e.g. model:to_global(P, flow.sbp.broadcast)).
-- opts: {print = false} prints nothing ({print = function(text)} hands
-- the text over, on every rank); {figures = t} plans with the
-- given figures instead of the machine's. graph:auto_parallel_plan()
-- gives the plan.
function Config:enable_auto_parallel(on, opts)
  if opts ~= nil and type(opts) ~= 'table' then
    fail('enable_auto_parallel: opts must be a table ({print =, figures =}), got ' .. type(opts), 2)
  end
  opts = A.check_options('enable_auto_parallel', opts, {print = true, figures = true})
  self.auto_parallel = on ~= false and opts or nil
end

--- self.config:set_memory_format(f): the layout the graph computes 4-d
-- convolutions in. 'auto' (the default): channels-last where that measured
-- faster -- eval graphs on the CPU with a Conv2d, float32 inputs, oneDNN
-- built in and an AVX-512 CPU (doc/graph.md "Layouts"); flow.channels_last:
-- always; flow.contiguous_format: never. Channels-last graphs convert their
-- 4-d float inputs as their first nodes and 4-d results back to contiguous
-- as their last: callers see the layouts of eager mode.
function Config:set_memory_format(f)
  local mf = require 'oneflow.memory_format'
  if f ~= 'auto' and f ~= mf.channels_last and f ~= mf.contiguous_format then
    fail('set_memory_format: expected \'auto\', flow.channels_last or flow.contiguous_format, got '
         .. tostring(f), 2)
  end
  self.memory_format = f ~= 'auto' and f or nil
end

--- self.config:set_passes('dce,cse,fold,fuse,inplace'): the optimization
-- passes to run (in order); '' runs none.
function Config:set_passes(list)
  if type(list) ~= 'string' then fail('set_passes: expected a comma-separated string', 2) end
  self.passes = list
end

--- self.config:enable_fusion(false): every pass but the fusions (relupool, convfuse, fuse).
function Config:enable_fusion(on)
  if on == false then self.passes = 'functionalize,dce,cse,bnfold,fold,dce,checkpoint,poolmask,inplace,schedule'
  else self.passes = nil end   -- the default list
end

------------------------------------------------------------------ Graph class
local Graph = class('Graph')
Graph.__label = 'nn.Graph '
-- local G = flow.nn.Graph:subclass('G')   (oneflow.class)

--- The base of a static graph: subclass it (`nn.Graph:subclass('Step')`),
-- call `nn.Graph.__init(self)` first in the subclass's `__init`, hold modules
-- and optimizers there and define `build(...)` (doc/graph.md).
-- @function nn.Graph.__init
-- @param self the new graph
function Graph:__init()
  rawset(self, '_optimizers', {})
  rawset(self, '_cache', {})
  rawset(self, '_hyper', {})
  rawset(self, '_debug', 0)
  rawset(self, 'config', setmetatable({}, Config))
end

function Graph:build()
  fail(self.__name .. ':build is not implemented (define ' .. self.__name .. ':build)', 2)
end

------------------------------------------------------------------ optimizers
local function optim_kind(opt)
  local optim = require 'oneflow.optim'
  local U = require 'oneflow.optim._util'
  if U.isinstance(opt, optim.Adam) then return 'adam' end   -- AdamW is an Adam
  if U.isinstance(opt, optim.SGD) then return 'sgd' end
  return nil
end

--- Makes `opt` step inside the graph after `build` (SGD, Adam, AdamW); the
-- scheduler, if any, steps after each call.
-- @function nn.Graph:add_optimizer
-- @tparam Optimizer opt
-- @tparam[opt] table opts `{lr_sch = scheduler}`
function Graph:add_optimizer(opt, opts)
  if type(opt) ~= 'table' or type(opt.param_groups) ~= 'table' then
    fail('add_optimizer: expected an optimizer', 2)
  end
  local kind = optim_kind(opt)
  if not kind then
    fail(('add_optimizer: %s has no graph update yet (supported: SGD, Adam, AdamW)')
         :format(opt.__name or 'this optimizer'), 2)
  end
  opts = A.check_options('add_optimizer', opts, {lr_sch = true, lr_scheduler = true})
  local os = self._optimizers
  os[#os + 1] = {opt = opt, kind = kind, lr_sch = opts.lr_sch or opts.lr_scheduler}
end

-- The global parameter whose local shard p is (optimizers keep the shards
-- of global parameters, oneflow.optim._global), or nil.
local function global_of(opt, p)
  local map = rawget(opt, '_globals')
  return map and map[p] or nil
end

-- ZeRO: the sbp a global parameter's optimizer state, gradient and update
-- use -- the first grid axis along which the parameter is broadcast gets
-- split(d), d the first dim no other axis splits with at least as many
-- elements as that axis has ranks (the same choice on every rank) -- or nil
-- (nothing to shard).
local function zero_sbp(g)
  local P, s, shape = g.placement, g._sbp, g._shape
  for k = 1, #P.hierarchy do
    if s[k].kind == 'B' and P.hierarchy[k] > 1 then
      for d = 1, #shape do
        local free = shape[d] >= P.hierarchy[k]
        for m = 1, #s do
          if m ~= k and s[m].kind == 'S' and B.norm_dim(s[m].dim, #shape) == d then free = false end
        end
        if free then
          local z = {}
          for m = 1, #s do z[m] = s[m] end
          z[k] = PL.sbp.split(d)
          return z
        end
      end
    end
  end
  return nil
end

-- Per parameter shard p: {g = global parameter, zero = sbp or nil,
-- shape = local shape of the state}.
local function param_plan(self, opt, p)
  local plans = rawget(self, '_plans')
  if plans == nil then
    plans = setmetatable({}, {__mode = 'k'})
    rawset(self, '_plans', plans)
  end
  local g = global_of(opt, p)
  local zero = self.config.zero
  local pl = plans[p]
  if pl and pl.g == g and pl.stage == zero then return pl end
  pl = {g = g, stage = zero}
  if pl.g and pl.g.placement:has_me() and rawget(pl.g, '_zero3') then
    pl.zero = nil   -- the parameter itself is already split (stage 3)
  elseif g and zero and g.placement:has_me() then
    pl.zero = zero_sbp(g)
    if pl.zero then
      pl.shape = B.shard(g._shape, g.placement.hierarchy, pl.zero, g.placement.coord)
    end
  end
  plans[p] = pl
  return pl
end

-- Optimizer state for a ZeRO-sharded parameter: its part (a state made
-- before, e.g. by eager steps, the same on every rank, is cut).
local function shard_state(t, pl)
  if t == nil then return T.flow.zeros(pl.shape, {dtype = pl.g._dtype}) end
  local same = t:dim() == #pl.shape
  for i = 1, #pl.shape do same = same and t:size(i) == pl.shape[i] end
  if same then return t end
  local g = pl.g
  return B.box(t, g._shape, g.placement, g._sbp, g.placement, pl.zero, g._dtype):contiguous()
end

-- ZeRO stage 3: the global parameter whose shard is group.params[i] becomes
-- split as its ZeRO sbp says -- a new leaf holding this rank's part takes
-- the old shard's place in the optimizer (its state cut to the part) and
-- in the global tensor the modules hold.
local function split_parameter(self, opt, group, i)
  local p = group.params[i]
  local pl = param_plan(self, opt, p)
  if not pl.zero then return end
  local g = pl.g
  local part = autograd.no_grad(function()
    return B.box(p:detach(), g._shape, g.placement, g._sbp, g.placement, pl.zero, g._dtype)
             :contiguous():clone()
  end)
  part:requires_grad_(p.requires_grad)
  local st = opt.state[p]
  if st then
    for _, key in ipairs({'exp_avg', 'exp_avg_sq', 'max_exp_avg_sq', 'momentum_buffer'}) do
      if st[key] then st[key] = shard_state(st[key], pl) end
    end
    opt.state[part], opt.state[p] = st, nil
  end
  local map = rawget(opt, '_globals')
  map[p], map[part] = nil, g
  for j, q in ipairs(map.list) do if q == p then map.list[j] = part end end
  group.params[i] = part
  self._hyper[part], self._hyper[p] = self._hyper[p], nil
  rawset(g, '_local', part)
  rawset(g, '_sbp', pl.zero)
  rawset(g, '_zero3', true)
  GL.note(part, g.placement, g._sbp)
end

-- The graph's own per-parameter tensors {lr, steps} (float64), shared by
-- every compiled signature; the step count follows the optimizer's state.
-- On a device the tensor lives there (the update kernels read it there, so
-- that a CUDA graph sees each step's lr and step count): lr is written only
-- when it changed, by a fill (a kernel, no host sync).
local function hyper_of(self, p, steps)
  local h = self._hyper[p]
  local dev = p.device
  if h ~= nil and tostring(h.t.device) ~= tostring(dev) then h = nil end
  if h == nil then
    local t = T.flow.zeros(2, {dtype = require('oneflow.types').by_name.float64, device = dev})
    h = {t = t}
    if dev.type == 'cpu' then h.ptr = ffi.cast('double*', C.of_tensor_data(t.p)) end
    self._hyper[p] = h
  end
  if h.ptr then h.ptr[1] = steps or 0
  else h.t:narrow(1, 2, 1):fill_(steps or 0) end
  return h
end

-- Creates the optimizer state the update ops write (so that it exists
-- before tracing and is bound by reference).
local function prepare_state(self, e)
  local opt = e.opt
  for _, group in ipairs(opt.param_groups) do
    for _, p in ipairs(group.params) do
      local st = opt.state[p]
      if st == nil then
        st = {}
        opt.state[p] = st
      end
      local pl = param_plan(self, opt, p)
      local function fresh(t)
        if pl.zero then return shard_state(t, pl) end
        return t or T.flow.zeros_like(p)
      end
      if e.kind == 'adam' then
        if st.exp_avg == nil then st.step = st.step or 0 end
        st.exp_avg = fresh(st.exp_avg)
        st.exp_avg_sq = fresh(st.exp_avg_sq)
        if group.amsgrad then st.max_exp_avg_sq = fresh(st.max_exp_avg_sq) end
        hyper_of(self, p, st.step)
      else
        local had = st.momentum_buffer ~= nil
        if group.momentum ~= 0 then st.momentum_buffer = fresh(st.momentum_buffer) end
        hyper_of(self, p, had and 1 or 0)
      end
    end
  end
end

local function write_lr(self)
  for _, e in ipairs(self._optimizers) do
    for _, group in ipairs(e.opt.param_groups) do
      for _, p in ipairs(group.params) do
        local h = self._hyper[p]
        if h then
          if h.ptr then h.ptr[0] = group.lr
          elseif h.lr ~= group.lr then
            h.t:narrow(1, 1, 1):fill_(group.lr)
            h.lr = group.lr
          end
        end
      end
    end
  end
end

-- The update ops, called while tracing (eagerly, and recorded).
local function step_optimizers(self, updated)
  local sc = self._scaling
  local found = sc and sc.found.p or nil
  if sc then   -- unscale every grad, noting inf/nan (the updates then skip)
    sc.found:zero_()
    for _, e in ipairs(self._optimizers) do
      for _, group in ipairs(e.opt.param_groups) do
        for _, p in ipairs(group.params) do
          local g = p.grad
          if g ~= nil then
            if C.of_tensor_is_contiguous(g.p) == 0 then g = g:contiguous(); p.grad = g end
            if C.of_amp_unscale_(g.p, sc.scaler._scale.p, sc.found.p) ~= 0 then
              raise('nn.Graph: loss scaling: ')
            end
          end
        end
      end
    end
  end
  if sc then
    -- with global parameters each rank saw only its part of the grads:
    -- every rank skips when one saw inf/nan
    for _, e in ipairs(self._optimizers) do
      if rawget(e.opt, '_globals') then
        comm.all_reduce(sc.found, {op = 'max'})
        break
      end
    end
  end
  for _, e in ipairs(self._optimizers) do
    local opt = e.opt
    for _, group in ipairs(opt.param_groups) do
      for _, p in ipairs(group.params) do
        local g = p.grad
        if g ~= nil then
          local st, h = opt.state[p], self._hyper[p]
          local target = p   -- what the update writes: the shard, or its ZeRO part
          local pl = param_plan(self, opt, p)
          local glob = pl.g
          if glob and glob.placement:has_me() then
            -- the shard's grad is in the dual sbp (partial sums where the
            -- parameter is broadcast): boxed to the parameter's sbp
            -- (all-reduce), or to its ZeRO sbp (reduce-scatter)
            local P, shape = glob.placement, glob._shape
            local dual = {}
            for k, v in ipairs(glob._sbp) do dual[k] = PL.dual(v) end
            g = B.box(g, shape, P, dual, P, pl.zero or glob._sbp, glob._dtype)
            if pl.zero then
              target = B.box(p, shape, P, glob._sbp, P, pl.zero, glob._dtype):contiguous()
            end
          end
          g = g:contiguous()
          local rc
          if e.kind == 'adam' then
            local decoupled = (opt.decoupled or group.decoupled_weight_decay) and 1 or 0
            rc = C.of_optim_adam_(target.p, g.p, st.exp_avg.p, st.exp_avg_sq.p,
                                  group.amsgrad and st.max_exp_avg_sq.p or nil, h.t.p,
                                  group.betas[1], group.betas[2], group.eps, group.weight_decay,
                                  group.amsgrad and 1 or 0, group.maximize and 1 or 0, decoupled,
                                  found)
          else
            rc = C.of_optim_sgd_(target.p, g.p, st.momentum_buffer and st.momentum_buffer.p or nil,
                                 h.t.p, group.momentum, group.dampening, group.weight_decay,
                                 group.nesterov and 1 or 0, group.maximize and 1 or 0, found)
          end
          if rc ~= 0 then raise('nn.Graph: optimizer step: ') end
          if target ~= p then   -- ZeRO: every rank's part, gathered into the shard
            local full = B.box(target, glob._shape, glob.placement, pl.zero, glob.placement,
                               glob._sbp, glob._dtype)
            p:copy_(full)
          end
          updated[#updated + 1] = {kind = e.kind, opt = opt, p = p, state = st,
                                   bound = {st.exp_avg, st.exp_avg_sq, st.max_exp_avg_sq,
                                            st.momentum_buffer}}
        end
      end
    end
  end
  if sc then
    local k = sc.scaler
    if C.of_amp_update_scale_(k._scale.p, k._growth_tracker.p, sc.found.p, k._growth_factor,
                              k._backoff_factor, k._growth_interval) ~= 0 then
      raise('nn.Graph: loss scaling: ')
    end
  end
end

local function zero_grads(self)
  for _, e in ipairs(self._optimizers) do e.opt:zero_grad(true) end
end

-- After every call: the Lua optimizer state follows the graph's steps, and
-- schedulers step.
local function after_step(self, entry)
  local sc = entry.scaling
  local skipped = sc and sc.found:item() ~= 0
  rawset(self, '_skipped', skipped or false)
  for _, u in ipairs(entry.updated) do
    if u.kind == 'adam' and not skipped then u.state.step = (u.state.step or 0) + 1 end
  end
  for _, e in ipairs(self._optimizers) do
    if e.lr_sch then e.lr_sch:step() end
  end
end

------------------------------------------------------------------ values in and out
-- Flattens build's results into a list of tensors and a template to
-- rebuild the same shape of results from new tensors.
local function flatten(v, list, depth)
  if is_tensor(v) then
    list[#list + 1] = v
    return {tensor = #list}
  end
  if is_global(v) then   -- its shard is the graph's result
    list[#list + 1] = v._local
    return {global = #list, shape = v._shape, placement = v.placement, sbp = v._sbp,
            dtype = v._dtype}
  end
  if type(v) == 'table' and getmetatable(v) == nil then
    if depth > 20 then fail('build returned a table nested too deeply', 3) end
    local t = {}
    for k, x in pairs(v) do t[k] = flatten(x, list, depth + 1) end
    return {table = t}
  end
  if type(v) == 'table' or type(v) == 'userdata' or type(v) == 'function' or type(v) == 'cdata' then
    fail(('build may return tensors, numbers, strings, booleans and tables of them, got a %s')
         :format(type(v)), 3)
  end
  return {value = v}
end

local function rebuild(tpl, list)
  if tpl.tensor then return list[tpl.tensor] end
  if tpl.global then
    return GL.new(list[tpl.global], tpl.shape, tpl.placement, tpl.sbp, tpl.dtype)
  end
  if tpl.table then
    local t = {}
    for k, x in pairs(tpl.table) do t[k] = rebuild(x, list) end
    return t
  end
  return tpl.value
end

-- Whether the optimizer state the compiled graph updates is still the
-- optimizer's (load_state_dict replaces it): else the graph is compiled again.
local function state_current(entry)
  for _, u in ipairs(entry.updated) do
    local st = u.opt.state[u.p]
    if st ~= u.state then return false end
    local b = u.bound
    if st.exp_avg ~= b[1] or st.exp_avg_sq ~= b[2] or st.max_exp_avg_sq ~= b[3]
       or st.momentum_buffer ~= b[4] then
      return false
    end
  end
  return true
end

-- The modules' train/eval mode is part of the signature: a graph traced in
-- training mode (dropout, batch statistics) is not the eval one.
local function modes(self)
  local names = rawget(self, '_module_names')
  if names == nil then
    names = {}
    for k, v in pairs(self) do
      if type(k) == 'string' and is_module(v) then names[#names + 1] = k end
    end
    table.sort(names)
    rawset(self, '_module_names', names)
  end
  local m = {}
  for i, k in ipairs(names) do
    local mod = self[k]
    m[i] = (mod and mod.training) and 't' or 'e'
  end
  return table.concat(m)
end

-- channels-last inputs are passed as they are (the graph keeps the layout)
channels_last = function(a)
  local mf = require 'oneflow.memory_format'
  local nd = a:dim()
  return (nd == 4 and mf.is_contiguous(a, mf.channels_last))
      or (nd == 5 and mf.is_contiguous(a, mf.channels_last_3d))
end

-- The device a call computes on: its tensor arguments' and its modules'
-- parameters'. Mixing is refused before tracing, naming what is where.
local function call_device(self, args, n)
  local pdev, pname
  for k, v in pairs(self) do
    if pdev == nil and type(k) == 'string' and is_module(v) then
      local iter, st, ctl = v:named_parameters()
      local name, p = iter(st, ctl)
      if p ~= nil then pdev, pname = p.device, k .. '.' .. name end
    end
  end
  local dev, where = pdev, pname
  for i = 1, n do
    local a = args[i]
    if is_tensor(a) and not (a:dim() == 0 and a.device.type == 'cpu') then
      local d = a.device
      if dev == nil then dev, where = d, ('input %d'):format(i)
      elseif tostring(d) ~= tostring(dev) then
        fail(('input %d is on %s but %s is on %s: a graph runs on one device; move the inputs '
              .. "(x:to('%s')) or the module (module:to('%s')) before calling it")
             :format(i, tostring(d), where, tostring(dev), tostring(dev), tostring(d)), 3)
      end
    end
  end
  return dev or require('oneflow.types').device('cpu')
end

local function signature(args, n)
  local parts = {}
  for i = 1, n do
    local a = args[i]
    if is_tensor(a) then
      local nd, shape = C.of_tensor_ndim(a.p), C.of_tensor_shape(a.p)
      local s = {'T', tostring(C.of_tensor_dtype(a.p)), tostring(C.of_tensor_device(a.p)),
                 C.of_tensor_is_contiguous(a.p) == 0 and 'cl' or ''}
      for d = 0, nd - 1 do s[#s + 1] = tostring(tonumber(shape[d])) end
      parts[i] = table.concat(s, ',')
    elseif is_global(a) then
      -- the logical tensor and its layout; the shard's shape follows
      local s = {'G', tostring(a._dtype), a.placement.key, GL.sbp_str(a._sbp),
                 table.concat(a._shape, ','), table.concat(a._local:size():totable(), ',')}
      parts[i] = table.concat(s, ';')
    elseif type(a) == 'number' or type(a) == 'string' or type(a) == 'boolean' or a == nil then
      parts[i] = type(a) .. ':' .. tostring(a)
    else
      fail(('argument %d: graphs take tensors, numbers, strings and booleans, got a %s')
           :format(i, type(a)), 3)
    end
  end
  return table.concat(parts, '|')
end

-- names of the parameters and buffers of the graph's modules (and of the
-- optimizer state), keyed by C pointer
local function addr(p) return tostring(ffi.cast('intptr_t', p)) end

local function external_names(self)
  local names = {}
  local function ptr(t) return is_global(t) and t._local.p or t.p end
  local function add(prefix, m)
    for name, p in m:named_parameters() do names[addr(ptr(p))] = prefix .. name end
    for name, b in m:named_buffers() do names[addr(ptr(b))] = prefix .. name end
  end
  for k, v in pairs(self) do
    if type(k) == 'string' and is_module(v) then add(k .. '.', v) end
  end
  for i, e in ipairs(self._optimizers) do
    for _, group in ipairs(e.opt.param_groups) do
      for _, p in ipairs(group.params) do
        local base = ('optimizer%d.%s.'):format(i, names[addr(p.p)] or addr(p.p))
        local st = e.opt.state[p] or {}
        for _, key in ipairs({'exp_avg', 'exp_avg_sq', 'max_exp_avg_sq', 'momentum_buffer'}) do
          if st[key] then names[addr(st[key].p)] = base .. key end
        end
        local h = self._hyper[p]
        if h then names[addr(h.t.p)] = base .. 'hyper' end
      end
    end
  end
  return names
end

local function name_externals(self, g)
  local names = external_names(self)
  for i = 0, C.of_graph_num_externals(g) - 1 do
    local name = names[addr(C.of_graph_external(g, i))]
    if name then C.of_graph_set_external_name(g, i, name) end
  end
end

------------------------------------------------------------------ compile and run
local graph_ptr = ffi.typeof('of_graph*[1]')
local tensor_list = ffi.typeof('of_tensor*[?]')

-- The tensor arguments cut into acc micro-batches along the first dim:
-- micro(k) gives the k-th argument list.
local function micro_batches(acc, args, n)
  local size
  local full = {}   -- global arguments: their whole value on every rank
  for i = 1, n do
    local a = args[i]
    if is_global(a) then
      -- micro-batch k is rows (k-1)m+1 .. km of the logical tensor, as in one
      -- process: the argument is gathered once (a collective, recorded) and
      -- each micro-batch cut from it takes the argument's sbp again
      local b = {}
      for k = 1, #a._sbp do b[k] = PL.sbp.broadcast end
      full[i] = a:to_global(a.placement, b)._local
      local s = #a._shape > 0 and a._shape[1] or 0
      if size and s ~= size then fail('gradient accumulation: tensor arguments differ in batch size', 4) end
      size = s
    elseif is_tensor(a) then
      local s = a:dim() > 0 and a:size(1) or 0
      if size and s ~= size then fail('gradient accumulation: tensor arguments differ in batch size', 4) end
      size = s
    end
  end
  if not size or size % acc ~= 0 then
    fail(('gradient accumulation: the batch (%s) does not split into %d micro-batches')
         :format(tostring(size), acc), 4)
  end
  local m = size / acc
  return function(k)
    local micro = {}
    for i = 1, n do
      local a = args[i]
      if full[i] and not a.placement:has_me() then   -- an empty stand-in here
        local shape = {}
        for d, v in ipairs(a._shape) do shape[d] = d == 1 and m or v end
        micro[i] = GL.new(a._local, shape, a.placement, a._sbp, a._dtype)
      elseif full[i] then
        micro[i] = GL.from_full(full[i]:narrow(1, (k - 1) * m + 1, m), a.placement, a._sbp)
      else
        micro[i] = is_tensor(a) and a:narrow(1, (k - 1) * m + 1, m) or a
      end
    end
    return micro
  end
end

-- The grads of the optimizers' parameters divided by acc (the mean over
-- the micro-batches).
local function average_grads(self, acc)
  autograd.no_grad(function()
    for _, e in ipairs(self._optimizers) do
      for _, group in ipairs(e.opt.param_groups) do
        for _, p in ipairs(group.params) do
          local g = p.grad
          if g ~= nil then g:mul_(1 / acc) end
        end
      end
    end
  end)
end

-- The results of the micro-batches as one call's: scalar tensors averaged,
-- other tensors concatenated along the first dim, other values the last's.
local function combine(results, acc)
  local out = {}
  for j = 1, table.maxn(results[1]) do
    local first = results[1][j]
    if is_tensor(first) then
      local parts = {}
      for k = 1, acc do parts[k] = results[k][j] end
      if first:dim() == 0 then out[j] = flow_stack(parts):mean()
      else out[j] = T.flow.cat(parts, 1) end
    elseif is_global(first) then   -- the same, with global ops
      local parts = {}
      for k = 1, acc do parts[k] = results[k][j] end
      if #first._shape == 0 then
        local sum = parts[1]
        for k = 2, acc do sum = sum + parts[k] end
        out[j] = sum / acc
      else
        out[j] = T.flow.cat(parts, 1)
      end
    else
      out[j] = results[acc][j]
    end
  end
  return out, table.maxn(results[1])
end

-- build on acc micro-batches (while tracing); grads are averaged
local function accumulate(self, acc, args, n)
  local micro, results = micro_batches(acc, args, n), {}
  for k = 1, acc do results[k] = {self:build(unpack(micro(k), 1, n))} end
  average_grads(self, acc)
  local out, nout = combine(results, acc)
  return unpack(out, 1, nout)
end

-- Pipeline parallelism (oneflow.nn.graph_pipeline): this rank's stage on
-- acc micro-batches in the 1F1B order; grads averaged; scalar results on
-- every rank.
local function pipeline_call(self, pipe, acc, args, n)
  local GP = require 'oneflow.nn.graph_pipeline'
  local micro = micro_batches(acc, args, n)
  local results = GP.schedule(self, pipe, acc, micro, n)
  average_grads(self, acc)
  local out, nout = {}, 0
  if results then out, nout = combine(results, acc) end
  out, nout = GP.share(pipe, out, nout)
  return unpack(out, 1, nout)
end

-- AMP: the autocast to trace build's forward under, and the loss scaling
-- state (float16, or a scaler set with set_grad_scaler) of a train graph.
local function amp_dtype(cfg, dev)
  local types = require 'oneflow.types'
  return cfg.amp_dtype or (dev.type == 'cuda' and types.by_name.float16 or types.by_name.bfloat16)
end

local function amp_setup(self, training, dev)
  local cfg = self.config
  rawset(self, '_scaling', nil)
  if not cfg.amp then return nil, nil end
  local amp, types = require 'oneflow.amp', require 'oneflow.types'
  local dt = amp_dtype(cfg, dev)
  local scaler = rawget(self, '_grad_scaler')
  if training and scaler == nil and dt == types.by_name.float16 then
    scaler = amp.GradScaler()
    rawset(self, '_grad_scaler', scaler)
  end
  local sc
  if training and scaler and scaler:is_enabled() then
    -- the scaler's tensors and the inf flag live on the graph's device, so
    -- that unscaling, the skip test and the scale update stay there
    scaler:to(dev)
    scaler._device_fixed = true
    local found = rawget(self, '_found_inf')
    if found == nil or tostring(found.device) ~= tostring(dev) then
      found = T.flow.zeros(1, {dtype = types.by_name.float32, device = dev})
      rawset(self, '_found_inf', found)
    end
    sc = {scaler = scaler, found = found}
    rawset(self, '_scaling', sc)
  end
  return amp.autocast(dev.type, {dtype = dt}), sc
end

-- Activation checkpointing: the modules whose calls are traced as segments
-- (of_trace_set_scope), for the checkpoint pass.
local function checkpointed(self)
  local set, list = {}, {}
  local function add(m)
    if not set[m] then set[m] = true; list[#list + 1] = m end
  end
  for k, v in pairs(self) do
    if type(k) == 'string' and is_module(v) then
      if self.config.checkpointing then
        for _, c in v:named_children() do add(c) end
      end
      for _, m in v:named_modules() do
        local cfg = rawget(m, 'config')
        if type(cfg) == 'table' and cfg.activation_checkpointing then add(m) end
      end
    end
  end
  return list
end

-- Wraps the forward of each checkpointed module so that its calls are
-- segments while tracing; returns the function that undoes it.
local function mark_segments(list)
  local saved, next_id = {}, 0
  for i, m in ipairs(list) do
    local own = rawget(m, 'forward')
    saved[i] = own or false
    local fwd = own or getmetatable(m).forward
    rawset(m, 'forward', function(...)
      local outer = C.of_trace_set_scope(0)
      if outer > 0 then   -- inside another segment: part of it
        C.of_trace_set_scope(outer)
        return fwd(...)
      end
      next_id = next_id + 1
      C.of_trace_set_scope(next_id)
      local res = {pcall(fwd, ...)}
      C.of_trace_set_scope(0)
      if not res[1] then error(res[2], 0) end
      return unpack(res, 2, table.maxn(res))
    end)
  end
  return function()
    for i, m in ipairs(list) do rawset(m, 'forward', saved[i] or nil) end
  end
end

-- The placement and sbp of every global value the graph binds (inputs,
-- parameters and buffers, ZeRO-sharded optimizer state) go with their
-- values into the IR printout.
local function note_globals(self, args, n)
  local any = false
  local function note(g)
    if is_global(g) then
      GL.note(g._local, g.placement, g._sbp)
      any = true
    end
  end
  for i = 1, n do note(args[i]) end
  for k, v in pairs(self) do
    if type(k) == 'string' and is_module(v) then
      for _, p in v:named_parameters() do note(p) end
      for _, b in v:named_buffers() do note(b) end
    end
  end
  local plans = rawget(self, '_plans') or {}
  for _, e in ipairs(self._optimizers) do
    for _, group in ipairs(e.opt.param_groups) do
      for _, p in ipairs(group.params) do
        local pl, st = plans[p], e.opt.state[p]
        local sbp = pl and (pl.zero or (pl.g and rawget(pl.g, '_zero3') and pl.g._sbp))
        if sbp and st then
          for _, key in ipairs({'exp_avg', 'exp_avg_sq', 'max_exp_avg_sq', 'momentum_buffer'}) do
            if st[key] then GL.note(st[key], pl.g.placement, sbp) end
          end
        end
      end
    end
  end
  return any
end

-- Graphs without an optimizer hand their grads out as eager mode does: each
-- call adds this call's grad into p.grad (or sets it) for the parameters of
-- the graph's modules. While tracing, the grads existing before are set
-- aside so that the grads the trace records are this call's alone; each of
-- them becomes a hidden result of the graph.
local function own_parameters(self)
  local list, seen = {}, {}
  for k, v in pairs(self) do
    if type(k) == 'string' and is_module(v) then
      for _, p in v:named_parameters() do
        if is_tensor(p) and not seen[p] then
          seen[p] = true
          list[#list + 1] = p
        end
      end
    end
  end
  return list
end

local function set_grads_aside(self)
  local aside = {}
  for _, p in ipairs(own_parameters(self)) do
    aside[#aside + 1] = {p = p, grad = p.grad}
    p.grad = nil
  end
  return aside
end

-- g: this call's grad of e.p (detached), added to what was there before
local function add_grad(e, g)
  local before = e.grad or e.p.grad
  if before ~= nil then
    autograd.no_grad(function() before:add_(g) end)
    e.p.grad = before
  else
    e.p.grad = g
  end
end

-- Whether this compile runs in channels-last (Config:set_memory_format).
-- 'auto' asks for an eval CPU graph (every module in eval mode, no
-- optimizer) with a Conv2d module and a 4-d float32 input, on an AVX-512
-- CPU with oneDNN, which runs NHWC convolutions without reorders
-- (doc/benchmarks.md "Models", seventh pass).
local function wants_channels_last(self, training, pipe, acc, autocast, dev, ins)
  local flow, mf = require 'oneflow', require 'oneflow.memory_format'
  local f = self.config.memory_format
  if f == mf.contiguous_format or pipe or acc > 1 then return false end
  local any = false
  for _, t in ipairs(ins) do
    if t:dim() == 4 and t.dtype == flow.float32 then any = true end
  end
  if not any then return false end
  if f == mf.channels_last then return true end
  if training or autocast or dev.type ~= 'cpu' or not flow.backends.mkldnn.is_available()
     or flow.backends.cpu.get_cpu_capability() ~= 'AVX512' then
    return false
  end
  -- eval mode throughout: a graph that trains (a backward in build, even
  -- without an optimizer) keeps eager mode's layout and numbers
  local isinstance, Conv2d = require('oneflow.class').isinstance, flow.nn.Conv2d
  local conv = false
  for k, v in pairs(self) do
    if type(k) == 'string' and is_module(v) then
      for _, m in ipairs(v:modules()) do
        if m.training then return false end
        conv = conv or isinstance(m, Conv2d)
      end
    end
  end
  return conv
end

-- build, with 4-d float inputs laid out channels-last first and 4-d results
-- made contiguous last (both recorded as nodes: the graph's edges)
local function build_channels_last(self, ...)
  local flow, mf = require 'oneflow', require 'oneflow.memory_format'
  local args, n = {...}, select('#', ...)
  for i = 1, n do
    local a = args[i]
    if is_tensor(a) and a:dim() == 4 and a.dtype == flow.float32 then
      args[i] = a:contiguous({memory_format = mf.channels_last})
    end
  end
  local function back(v, seen)
    if is_tensor(v) then return v:dim() == 4 and v:contiguous() or v end
    if type(v) ~= 'table' or is_module(v) or getmetatable(v) ~= nil or seen[v] then return v end
    seen[v] = true
    local r = {}
    for k, x in pairs(v) do r[k] = back(x, seen) end
    return r
  end
  local out = {self.build(self, unpack(args, 1, n))}
  for i = 1, table.maxn(out) do out[i] = back(out[i], {}) end
  return unpack(out, 1, table.maxn(out))
end

local function compile(self, key, rest, args, n, dev)
  local ins, ninputs, globals = {}, 0, false
  for i = 1, n do
    if is_tensor(args[i]) then
      ninputs = ninputs + 1
      ins[ninputs] = args[i]
    elseif is_global(args[i]) then
      ninputs = ninputs + 1
      ins[ninputs] = args[i]._local
      globals = true
    end
  end
  local training = #self._optimizers > 0
  local pipe = require('oneflow.nn.graph_pipeline').stages(self)
  if pipe and not training then
    fail('pipeline stages (config:set_stage) need a training graph (add_optimizer)', 3)
  end
  local auto = self.config.auto_parallel
  if auto and pipe then
    fail('auto-parallel and pipeline stages (config:set_stage) cannot be combined', 3)
  end
  if auto and not rawget(self, '_auto_plan') then
    local GA = require 'oneflow.nn.graph_auto'
    local acc0 = self.config.acc_steps or 1
    local pargs = acc0 > 1 and micro_batches(acc0, args, n)(1) or args
    local plan = GA.plan(self, pargs, n, training, auto)
    GA.apply(self, plan)
    rawset(self, '_auto_plan', plan)
    if type(auto.print) == 'function' then auto.print(GA.format(plan, self.__name))
    elseif auto.print ~= false and comm.world().rank == 0 then
      io.stdout:write(GA.format(plan, self.__name))
      io.stdout:flush()
    end
  end
  local unhook = auto and rawget(self, '_auto_plan')
                 and require('oneflow.nn.graph_auto').install(self._auto_plan) or function() end
  if self.config.zero == 3 then
    for _, e in ipairs(self._optimizers) do
      for _, group in ipairs(e.opt.param_groups) do
        for i = 1, #group.params do split_parameter(self, e.opt, group, i) end
      end
    end
  end
  for _, e in ipairs(self._optimizers) do prepare_state(self, e) end
  zero_grads(self)
  local aside = not training and set_grads_aside(self) or {}
  write_lr(self)
  local autocast, sc = amp_setup(self, training, dev)   -- its tensors exist before tracing
  local unmark = training and mark_segments(checkpointed(self)) or function() end
  local cins = tensor_list(math.max(ninputs, 1))
  for i = 1, ninputs do cins[i - 1] = ins[i].p end
  local acc = self.config.acc_steps or 1
  local nhwc = not globals and wants_channels_last(self, training, pipe, acc, autocast, dev, ins)
  if C.of_trace_begin(cins, ninputs) ~= 0 then raise() end
  local updated = {}
  local res = {pcall(function()
    local prev = C.of_is_grad_enabled()
    if training then C.of_set_grad_enabled(1) end   -- else build runs in the caller's mode
    if autocast then autocast:enter() end
    if sc then autograd._loss_scale = sc.scaler._scale end
    -- an eval graph's build records no backward of its own: F.linear then
    -- traces eager inference's addmm (the bias as the gemm's C)
    autograd._eval_trace = not training
    local out
    if pipe then
      out = {pcall(pipeline_call, self, pipe, acc, args, n)}
    elseif acc == 1 then
      out = {pcall(nhwc and build_channels_last or self.build, self, unpack(args, 1, n))}
    else
      out = {pcall(accumulate, self, acc, args, n)}
    end
    autograd._loss_scale = nil
    autograd._eval_trace = nil
    if autocast then autocast:exit() end
    C.of_set_grad_enabled(prev)
    if not out[1] then error(out[2], 0) end
    if training then autograd.no_grad(step_optimizers, self, updated) end
    globals = note_globals(self, args, n) or globals
    return unpack(out, 2, table.maxn(out))
  end)}
  unmark()
  unhook()
  if not res[1] then
    C.of_trace_abort()
    for _, e in ipairs(aside) do e.p.grad = e.grad end
    zero_grads(self)
    local msg = tostring(res[2])
    if not msg:find('nn.Graph', 1, true) then msg = 'nn.Graph: in ' .. self.__name .. ':build: ' .. msg end
    error(msg, 0)
  end
  zero_grads(self)
  local nres = table.maxn(res) - 1
  local list = {}
  local tpl = {}
  for i = 1, nres do
    tpl[i] = flatten(res[i + 1], list, 0)
    if tpl[i].global then globals = true end
  end
  local grads = {}   -- this call's grads: hidden results after the user's
  for _, e in ipairs(aside) do
    local g = e.p.grad
    if g ~= nil then
      list[#list + 1] = g
      grads[#grads + 1] = {p = e.p, k = #list}
    end
  end
  local couts = tensor_list(math.max(#list, 1))
  for i = 1, #list do couts[i - 1] = list[i].p end
  local gp = graph_ptr()
  local traced_end = C.of_trace_end(couts, #list, gp)
  for _, e in ipairs(aside) do   -- the traced call's grads, added as eager mode does
    local traced = e.p.grad
    e.p.grad = nil
    if traced ~= nil and traced_end == 0 then add_grad(e, traced:detach()) else e.p.grad = e.grad end
  end
  if traced_end ~= 0 then raise() end
  local g = ffi.gc(gp[0], C.of_graph_release)
  name_externals(self, g)
  if self._debug > 0 then C.of_graph_set_debug(g, self._debug) end
  if self._profile then C.of_graph_set_profile(g, 1) end
  if self.config.concurrency then C.of_graph_set_concurrency(g, self.config.concurrency) end
  if self.config.cuda_graph then C.of_graph_set_cuda_graph(g, self.config.cuda_graph) end
  local passes = self.config.passes
  if C.of_graph_optimize(g, passes) ~= 0 then raise('nn.Graph: optimizing: ') end
  if self._debug > 0 then
    io.stderr:write(ffi.string(C.of_graph_dump(g, self._debug)))
    C.of_graph_set_debug(g, 0)
  end
  local entry = {g = g, template = tpl, nres = nres, ninputs = ninputs, noutputs = #list,
                 grads = grads,
                 updated = updated, key = key, rest = rest, scaling = sc, global = globals,
                 cuda_graph = self.config.cuda_graph, pipe = pipe, acc = acc,
                 cins = tensor_list(math.max(ninputs, 1)),
                 couts = tensor_list(math.max(#list, 1))}
  self._cache[key] = entry
  rawset(self, '_last', entry)
  after_step(self, entry)
  -- results without history, as every later call gives them
  local plain = {}
  for i, t in ipairs(list) do plain[i] = t.requires_grad and t:detach() or t end
  local out = {}
  for i = 1, nres do out[i] = rebuild(tpl[i], plain) end
  return unpack(out, 1, nres)
end

local function run(self, entry, args, n)
  local cins, k = entry.cins, 0
  for i = 1, n do
    local a = args[i]
    if is_tensor(a) then
      cins[k] = a.p
      k = k + 1
    elseif is_global(a) then
      cins[k] = a._local.p
      k = k + 1
    end
  end
  write_lr(self)
  local couts = entry.couts
  if entry.pipe then   -- timed, for the bubble graph:debug reports
    local total, idle, rc = require('oneflow.nn.graph_pipeline').timed(function()
      return C.of_graph_run(entry.g, cins, entry.ninputs, couts, entry.noutputs)
    end)
    if rc ~= 0 then raise() end
    if total then entry.measured = {total = total, idle = idle} end
  elseif C.of_graph_run(entry.g, cins, entry.ninputs, couts, entry.noutputs) ~= 0 then
    raise()
  end
  local list = {}
  for i = 1, entry.noutputs do list[i] = wrap(couts[i - 1]) end
  for _, e in ipairs(entry.grads) do add_grad(e, list[e.k]) end
  rawset(self, '_last', entry)
  after_step(self, entry)
  if entry.nres == 1 and entry.template[1].tensor == 1 then return list[1] end
  local out = {}
  for i = 1, entry.nres do out[i] = rebuild(entry.template[i], list) end
  return unpack(out, 1, entry.nres)
end

--- Calls the graph: the first call with a new input signature (shapes,
-- dtypes, devices, other arguments by value) traces `build` and compiles;
-- later calls run the compiled plan.
-- @function nn.Graph:__call
-- @param ... the arguments of `build`
-- @return what `build` returns
function Graph:__call(...)
  local n = select('#', ...)
  local args = {...}
  if C.of_tracing() ~= 0 then fail('a graph cannot be called inside another graph\'s build()', 2) end
  for i = 1, n do
    local a = args[i]
    if is_tensor(a) and C.of_tensor_is_contiguous(a.p) == 0 and not channels_last(a) then
      args[i] = a:contiguous()
    end
    if is_global(a) and C.of_tensor_is_contiguous(a._local.p) == 0 then
      args[i] = GL.new(a._local:contiguous(), a._shape, a.placement, a._sbp, a._dtype)
    end
  end
  local cfg = self.config
  -- the signature of the inputs, then what else compiles differently
  local rest = '|' .. modes(self) .. '|' .. (cfg.acc_steps or 1) .. '|'
              .. (cfg.amp and tostring(cfg.amp_dtype or 'default') or '') .. '|'
              .. (cfg.checkpointing and 'ck' or '') .. '|' .. (cfg.zero or '') .. '|'
              .. tostring(cfg.memory_format or 'auto')
  local key = signature(args, n) .. rest
  local entry = self._cache[key]
  if entry ~= nil and not state_current(entry) then
    self._cache[key] = nil
    entry = nil
  end
  if entry == nil then return compile(self, key, rest, args, n, call_device(self, args, n)) end
  if cfg.cuda_graph ~= entry.cuda_graph then
    C.of_graph_set_cuda_graph(entry.g, cfg.cuda_graph or 0)
    entry.cuda_graph = cfg.cuda_graph
  end
  return run(self, entry, args, n)
end

--- self:set_grad_scaler(flow.amp.GradScaler{...}) (in __init): the loss
-- scaler of an AMP train graph; its scale and growth tracker are updated
-- inside the graph. A float16 AMP graph without one gets GradScaler().
function Graph:set_grad_scaler(scaler)
  if getmetatable(scaler) ~= require('oneflow.amp').GradScaler_class then
    fail('set_grad_scaler: expected a flow.amp.GradScaler', 2)
  end
  rawset(self, '_grad_scaler', scaler)
end

--- The CUDA graph state of the last compiled graph: 'off' (not enabled),
-- '' (not captured yet: the first call after compiling is the warm-up),
-- 'captured', or why the step could not be captured.
function Graph:cuda_graph_status()
  if not self._last then return 'off' end
  return ffi.string(C.of_graph_cuda_graph_status(self._last.g))
end

--- The device the last compiled graph computes on.
function Graph:device()
  if not self._last then return nil end
  return require('oneflow.types').device_of_code(C.of_graph_device(self._last.g))
end

--- Whether the last call skipped the optimizer step (inf/nan grads under
-- loss scaling).
function Graph:step_skipped() return rawget(self, '_skipped') or false end

------------------------------------------------------------------ inspection
--- graph:debug(level[, out]): print the IR around every pass on the next
-- compile (1: nodes, 2: with externals; C writes it to stderr), and the
-- current graph now to `out` (a file, default io.stderr).
-- For a pipeline graph it also prints the bubble of the last call
-- (graph:pipeline_stats(); a collective: call it on every rank).
function Graph:debug(level, out)
  rawset(self, '_debug', level == nil and 1 or (level == false and 0 or level))
  if self._last and self._debug > 0 then
    (out or io.stderr):write(ffi.string(C.of_graph_dump(self._last.g, self._debug)))
    local st = self._last.pipe and self:pipeline_stats()
    if st then (out or io.stderr):write(require('oneflow.nn.graph_pipeline').report(st)) end
  end
end

--- The pipeline bubble of the last call on every stage (a collective over
-- the world: call it on every rank), measured on a compiled run (the
-- first call traces): {p =, m =, measured = mean idle share, formula =
-- (p-1)/(m+p-1), stages = {{stage =, rank =, total =, idle =, fraction =},
-- ...}}, or nil (not a pipeline graph, or not measured yet).
--- The auto-parallel plan (config:enable_auto_parallel), after the first
-- call: {{module =, type =, signature =, input =, output =, params =
-- {name = 'S(1)'}, cost =}, ..., cost = estimated seconds per step,
-- data_parallel = the same for the all-data-parallel plan, cached = the
-- machine figures came from the cache}, or nil.
function Graph:auto_parallel_plan()
  local plan = rawget(self, '_auto_plan')
  return plan and require('oneflow.nn.graph_auto').summary(plan) or nil
end

function Graph:pipeline_stats()
  local e = self._last
  if not (e and e.pipe) then return nil end
  return require('oneflow.nn.graph_pipeline').stats(e.pipe, e.acc, e.measured)
end

--- graph:profile(true): time every node of the compiled graphs from now
-- on; graph:ir() then shows each node's fastest time.
function Graph:profile(on)
  rawset(self, '_profile', on ~= false)
  for _, e in pairs(self._cache) do C.of_graph_set_profile(e.g, on ~= false and 1 or 0) end
end

--- The compiled graph of the last call (nil before the first call).
function Graph:_graph() return self._last and self._last.g end

local function summary(g, name, ncompiled)
  local nodes = C.of_graph_num_nodes(g)
  local values = tonumber(C.of_graph_stat(g, C.OF_GRAPH_NUM_VALUES))
  local peak = tonumber(C.of_graph_stat(g, C.OF_GRAPH_PLANNED_PEAK))
  local next = tonumber(C.of_graph_stat(g, C.OF_GRAPH_NUM_EXTERNALS))
  local arena = tonumber(C.of_graph_stat(g, C.OF_GRAPH_ARENA_BYTES))
  return ('%s(%s%d nodes, %d values, %d externals, planned peak %.1f KiB, arena %.1f KiB, passes: %s)')
         :format(name, ncompiled and (ncompiled .. ' compiled, ') or '', nodes, values, next,
                 peak / 1024, arena / 1024, ffi.string(C.of_graph_passes(g)))
end

function Graph:__tostring()
  local n = 0
  for _ in pairs(self._cache) do n = n + 1 end
  if not self._last then return ('%s(not compiled yet)'):format(self.__name) end
  return summary(self._last.g, self.__name, n)
end

--- The last compiled graph as Graphviz DOT text (oneflow.nn.graph_view).
function Graph:to_dot(opts) return require('oneflow.nn.graph_view').to_dot(self, opts) end
--- Renders it with Graphviz `dot` to path (.svg, .png, .pdf, .dot).
function Graph:render(path, opts) return require('oneflow.nn.graph_view').render(self, path, opts) end

--- The IR of the last compiled graph as text.
function Graph:ir(level)
  if not self._last then return '' end
  return ffi.string(C.of_graph_dump(self._last.g, level or 1))
end

------------------------------------------------------------------ state dict
local STATE_KEYS = {'exp_avg', 'exp_avg_sq', 'max_exp_avg_sq', 'momentum_buffer'}

-- name -> {t = the live tensor (global where the parameter is), set =
-- function(v) for values that are not tensors of the graph's own}
local function state_entries(self)
  local out, names = {}, {}
  for k, v in pairs(self) do
    if type(k) == 'string' and is_module(v) then names[#names + 1] = k end
  end
  table.sort(names)
  local pname = {}
  for _, k in ipairs(names) do
    local function add(name, t)   -- the live tensors (state_dict may copy)
      out[k .. '.' .. name] = {t = t}
      pname[addr((is_global(t) and t._local or t).p)] = k .. '.' .. name
    end
    for name, t in self[k]:named_parameters() do add(name, t) end
    for name, t in self[k]:named_buffers() do add(name, t) end
  end
  for i, e in ipairs(self._optimizers) do
    prepare_state(self, e)
    local opt = e.opt
    for _, group in ipairs(opt.param_groups) do
      for j, p in ipairs(group.params) do
        local base = ('optimizer%d.%s.'):format(i, pname[addr(p.p)] or ('param' .. j))
        local st, pl = opt.state[p], param_plan(self, opt, p)
        for _, key in ipairs(STATE_KEYS) do
          local t = st[key]
          if t ~= nil then
            if pl.g and pl.g.placement:has_me() then   -- the shard of a global state
              t = GL.new(t, pl.g._shape, pl.g.placement, pl.zero or pl.g._sbp, pl.g._dtype)
            end
            out[base .. key] = {t = t}
          end
        end
        local steps = T.flow.tensor({st.step or 0}, {dtype = 'float64'})
        out[base .. 'step'] = {t = steps, set = function(v)
          local n = v:item()
          if e.kind == 'adam' then st.step = n end
          hyper_of(self, p, n)
        end}
      end
    end
  end
  return out
end

--- The graph's state (OneFlow: nn.Graph.state_dict): name -> tensor for
-- the parameters and buffers of its modules ("model.fc.weight") and the
-- state of its optimizers ("optimizer1.model.fc.weight.exp_avg", and
-- ".step", the update count); global tensors stay global (with ZeRO: the
-- optimizer state split as the graph keeps it). The tensors are the live
-- ones, so `flow.distributed.save(graph:state_dict(), path)` saves them
-- and `flow.distributed.load(path, graph:state_dict())` fills them in
-- place (on any layout); then `graph:load_state_dict(that)` sets the
-- step counts.
function Graph:state_dict()
  local out = {}
  for name, e in pairs(state_entries(self)) do out[name] = e.t end
  return out
end

--- Copies a state dict (Graph:state_dict's names) into the graph's
-- modules and optimizers, in place (the compiled graphs keep running on
-- them). Global values are boxed to the graph's own placement and sbp.
-- Names missing from sd are errors; unknown names too.
function Graph:load_state_dict(sd)
  if type(sd) ~= 'table' then fail('load_state_dict: expected a table name -> tensor', 2) end
  local own = state_entries(self)
  for name in pairs(sd) do
    if own[name] == nil then fail(('load_state_dict: unknown entry %q'):format(tostring(name)), 2) end
  end
  local names = {}
  for name in pairs(own) do names[#names + 1] = name end
  table.sort(names)   -- the same order on every rank: boxing is collective
  autograd.no_grad(function()
    for _, name in ipairs(names) do
      local e, v = own[name], sd[name]
      if v == nil then fail(('load_state_dict: missing entry %q'):format(name), 4) end
      if e.set then e.set(is_global(v) and v:to_local() or v)
      elseif v ~= e.t then
        if is_global(e.t) then   -- a local value is the full tensor
          local src = is_global(v) and v:to_global(e.t.placement, e.t._sbp)
                      or GL.from_full(v, e.t.placement, e.t._sbp)
          if e.t.placement:has_me() then e.t._local:copy_(src._local) end
        else
          e.t:copy_(is_global(v) and v:to_local() or v)
        end
      end
    end
  end)
end

------------------------------------------------------------------ save / load
-- graphs: the compiled signatures to keep, the one to run first first.
-- The first is "__graph__" with its externals "ext.0", ... (what older
-- builds read); each other one "__graph__.<i>" with "__graph__.<i>.ext",
-- the file's external of each of its externals, so that the signatures
-- share the weights in the file as they do in memory.
local function save_graph(graphs, path)
  local serialization = require 'oneflow.serialization'
  local tbl, index, nfile = {}, {}, 0
  for gi, g in ipairs(graphs) do
    local out = ffi.new('of_tensor*[1]')
    if C.of_graph_serialize(g, out) ~= 0 then raise('nn.Graph.save: ') end
    local name = gi == 1 and '__graph__' or ('__graph__.' .. (gi - 1))
    tbl[name] = wrap(out[0])
    local map = {}
    for i = 0, C.of_graph_num_externals(g) - 1 do
      local t = C.of_graph_external(g, i)
      local a = addr(t)
      if not index[a] then
        C.of_tensor_retain(t)
        tbl['ext.' .. nfile] = wrap(t)
        index[a] = nfile
        nfile = nfile + 1
      end
      map[i + 1] = index[a]
    end
    if gi > 1 then
      tbl[name .. '.ext'] = require('oneflow').tensor(map, {dtype = require('oneflow').int32})
    end
  end
  local meta = {format = 'oneflow-graph', version = '1'}
  serialization.safetensors.save_file(tbl, path, meta)
end

--- Writes the compiled graph (IR and weights, one safetensors file) with
-- every input signature it compiled in the same mode (train/eval, AMP,
-- ...) as the last call: `flow.nn.Graph.load(path)` runs it without this
-- code at each of those signatures (e.g. batch 4 and batch 2).
-- @function nn.Graph:save
-- @tparam string path
function Graph:save(path)
  if not self._last then fail('save: call the graph once first (it compiles on the first call)', 2) end
  if self._last.global then
    fail('save: graphs with global tensors (placements, SBP, collectives) cannot be saved as a '
         .. 'compiled graph; save their state with flow.distributed.save(graph:state_dict(), path) '
         .. 'and load it into a new graph (flow.distributed.load(path, graph:state_dict()), '
         .. 'graph:load_state_dict)', 2)
  end
  local others = {}
  for key, e in pairs(self._cache) do
    if e ~= self._last and e.rest == self._last.rest and not e.global and state_current(e) then
      others[#others + 1] = {key, e.g}
    end
  end
  table.sort(others, function(a, b) return a[1] < b[1] end)
  local graphs = {self._last.g}
  for _, o in ipairs(others) do graphs[#graphs + 1] = o[2] end
  save_graph(graphs, path)
end

local Loaded = {__name = 'LoadedGraph'}
Loaded.__index = Loaded

--- Loads a saved graph, callable like the original (tensors in, tensors
-- out; a single result is returned as is).
-- @function nn.Graph.load
-- @tparam string path what `graph:save` wrote
-- @tparam[opt] table opts `{device =}` (or `map_location`): where to run it
-- @return the loaded graph
function Graph.load(path, opts)
  if type(path) ~= 'string' then fail('load: expected a path', 2) end
  if opts ~= nil and type(opts) ~= 'table' then fail('load: expected an options table {device =}', 2) end
  local gp = graph_ptr()
  local dev = opts and (opts.device or opts.map_location)
  if dev ~= nil then
    local types = require 'oneflow.types'
    if C.of_graph_load_on(path, types.device_code(types.device(dev)), gp) ~= 0 then raise() end
  elseif C.of_graph_load(path, gp) ~= 0 then
    raise()
  end
  local g = ffi.gc(gp[0], C.of_graph_release)
  local nin, nout = C.of_graph_num_inputs(g), C.of_graph_num_outputs(g)
  return setmetatable({g = g, path = path, ninputs = nin, noutputs = nout,
                       cins = tensor_list(math.max(nin, 1)), couts = tensor_list(math.max(nout, 1))},
                      Loaded)
end

function Loaded:__call(...)
  local n = select('#', ...)
  if n ~= self.ninputs then
    fail(('the loaded graph takes %d inputs, %d given'):format(self.ninputs, n), 2)
  end
  for i = 1, n do
    local a = select(i, ...)
    if not is_tensor(a) then fail(('input %d is not a tensor'):format(i), 2) end
    self.cins[i - 1] = a.p
  end
  if C.of_graph_run(self.g, self.cins, n, self.couts, self.noutputs) ~= 0 then raise() end
  local out = {}
  for i = 1, self.noutputs do out[i] = wrap(self.couts[i - 1]) end
  return unpack(out, 1, self.noutputs)
end

function Loaded:__tostring() return summary(self.g, 'LoadedGraph') end
--- loaded:to(device): moves the graph's weights and state to device.
function Loaded:to(device)
  local types = require 'oneflow.types'
  if C.of_graph_to(self.g, types.device_code(types.device(device))) ~= 0 then raise() end
  return self
end
function Loaded:device()
  return require('oneflow.types').device_of_code(C.of_graph_device(self.g))
end
--- loaded:enable_cuda_graph(true[, {static_outputs = true}]): as config:enable_cuda_graph.
function Loaded:enable_cuda_graph(on, opts)
  C.of_graph_set_cuda_graph(self.g, on ~= false and ((opts and opts.static_outputs) and 2 or 1) or 0)
  return self
end
function Loaded:cuda_graph_status() return ffi.string(C.of_graph_cuda_graph_status(self.g)) end
function Loaded:ir(level) return ffi.string(C.of_graph_dump(self.g, level or 1)) end
function Loaded:save(path)
  local graphs = {}
  for i = 0, C.of_graph_num_variants(self.g) - 1 do graphs[i + 1] = C.of_graph_variant(self.g, i) end
  save_graph(graphs, path)
end
--- The input shapes of each compiled signature the loaded graph holds
-- (a list of lists of shapes, 1 per variant, the first one first).
function Loaded:signatures()
  local out = {}
  local desc = ffi.new('of_graph_value_desc')
  for i = 0, C.of_graph_num_variants(self.g) - 1 do
    local v, shapes = C.of_graph_variant(self.g, i), {}
    for k = 0, C.of_graph_num_inputs(v) - 1 do
      if C.of_graph_describe_value(v, C.of_graph_io_value(v, 0, k), desc) ~= 0 then raise() end
      local s = {}
      for d = 0, desc.ndim - 1 do s[d + 1] = tonumber(desc.shape[d]) end
      shapes[k + 1] = s
    end
    out[i + 1] = shapes
  end
  return out
end
function Loaded:debug(level)
  io.stderr:write(ffi.string(C.of_graph_dump(self.g, level or 1)))
end

return Graph
