-- oneflow.optim.LBFGS: limited-memory BFGS, step for step the algorithm of
-- torch.optim.LBFGS (1.13, after minFunc): two-loop recursion over the last
-- history_size curvature pairs, a first step of min(1, 1/|g|_1) * lr, and
-- optionally the strong-Wolfe line search (cubic interpolation, bracketing
-- then zoom). The parameters are handled as one flat vector (as PyTorch);
-- one parameter group only. step(closure) needs the closure: it is called
-- several times per step and must return the loss.
--   local opt = flow.optim.LBFGS(model:parameters(), {line_search_fn = 'strong_wolfe'})
--   opt:step(function() opt:zero_grad(); local l = loss_fn(); l:backward(); return l end)
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'
local autograd = require 'oneflow.autograd'

local LBFGS = Optimizer:subclass('LBFGS')
LBFGS.hyper = {
  {'lr', 1}, {'max_iter', 20}, {'max_eval', nil}, {'tolerance_grad', 1e-7},
  {'tolerance_change', 1e-9}, {'history_size', 100}, {'line_search_fn', nil},
}

--- LBFGS(params, {lr = 1, max_iter = 20, max_eval = max_iter * 5 // 4,
-- tolerance_grad = 1e-7, tolerance_change = 1e-9, history_size = 100,
-- line_search_fn = nil | 'strong_wolfe'})
function LBFGS:__init(params, ...)
  self:_construct(params, ...)
  if self.defaults.max_eval == nil then
    self.defaults.max_eval = math.floor(self.defaults.max_iter * 5 / 4)
    self.param_groups[1].max_eval = self.defaults.max_eval
  end
  if #self.param_groups ~= 1 then
    U.fail("LBFGS: doesn't support per-parameter options (parameter groups)")
  end
  self._params = self.param_groups[1].params
end

function LBFGS.validate(_, g)
  U.check_nonneg('LBFGS', 'learning rate', g.lr)
  if g.line_search_fn ~= nil and g.line_search_fn ~= 'strong_wolfe' then
    U.fail("LBFGS: only 'strong_wolfe' is supported as line_search_fn, got " .. tostring(g.line_search_fn))
  end
  if type(g.history_size) ~= 'number' or g.history_size < 1 then
    U.fail('LBFGS: history_size must be a positive integer, got ' .. tostring(g.history_size))
  end
end

local function cubic_interpolate(x1, f1, g1, x2, f2, g2, lo, hi)
  local xmin_bound, xmax_bound
  if lo ~= nil then xmin_bound, xmax_bound = lo, hi
  elseif x1 <= x2 then xmin_bound, xmax_bound = x1, x2
  else xmin_bound, xmax_bound = x2, x1 end
  local d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
  local d2_square = d1 * d1 - g1 * g2
  if d2_square >= 0 then
    local d2 = math.sqrt(d2_square)
    local min_pos
    if x1 <= x2 then min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2)) end
    return math.min(math.max(min_pos, xmin_bound), xmax_bound)
  end
  return (xmin_bound + xmax_bound) / 2
end

local function dot(a, b) return a:dot(b):item() end
local function absmax(v) return v:abs():max():item() end

-- Strong-Wolfe line search along d from the current point (loss f, flat
-- gradient g, directional derivative gtd); obj(t) evaluates at x + t d.
-- Returns loss, flat grad, step and the number of evaluations.
local function strong_wolfe(obj, t, d, f, g, gtd, c1, c2, tolerance_change, max_ls)
  c1, c2, tolerance_change, max_ls = c1 or 1e-4, c2 or 0.9, tolerance_change or 1e-9, max_ls or 25
  local d_norm = absmax(d)
  g = g:clone()
  local f_new, g_new = obj(t)
  local evals = 1
  local gtd_new = dot(g_new, d)
  local t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
  local done, ls_iter = false, 0
  local bracket, bracket_f, bracket_g, bracket_gtd
  while ls_iter < max_ls do
    if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev) then
      bracket, bracket_f, bracket_g = {t_prev, t}, {f_prev, f_new}, {g_prev, g_new:clone()}
      bracket_gtd = {gtd_prev, gtd_new}
      break
    end
    if math.abs(gtd_new) <= -c2 * gtd then
      bracket, bracket_f, bracket_g, done = {t}, {f_new}, {g_new}, true
      break
    end
    if gtd_new >= 0 then
      bracket, bracket_f, bracket_g = {t_prev, t}, {f_prev, f_new}, {g_prev, g_new:clone()}
      bracket_gtd = {gtd_prev, gtd_new}
      break
    end
    local min_step, max_step = t + 0.01 * (t - t_prev), t * 10
    local tmp = t
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, min_step, max_step)
    t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new:clone(), gtd_new
    f_new, g_new = obj(t)
    evals = evals + 1
    gtd_new = dot(g_new, d)
    ls_iter = ls_iter + 1
  end
  if ls_iter == max_ls then
    bracket, bracket_f, bracket_g = {0, t}, {f, f_new}, {g, g_new}
  end
  -- zoom: shrink the bracket until the strong Wolfe conditions hold
  local insuf_progress = false
  local low, high = 1, 2
  if bracket_f[1] > bracket_f[#bracket_f] then low, high = 2, 1 end
  while not done and ls_iter < max_ls do
    if math.abs(bracket[2] - bracket[1]) * d_norm < tolerance_change then break end
    t = cubic_interpolate(bracket[1], bracket_f[1], bracket_gtd[1], bracket[2], bracket_f[2], bracket_gtd[2])
    local bmax, bmin = math.max(bracket[1], bracket[2]), math.min(bracket[1], bracket[2])
    local eps = 0.1 * (bmax - bmin)
    if math.min(bmax - t, t - bmin) < eps then
      if insuf_progress or t >= bmax or t <= bmin then
        if math.abs(t - bmax) < math.abs(t - bmin) then t = bmax - eps else t = bmin + eps end
        insuf_progress = false
      else
        insuf_progress = true
      end
    else
      insuf_progress = false
    end
    f_new, g_new = obj(t)
    evals = evals + 1
    gtd_new = dot(g_new, d)
    ls_iter = ls_iter + 1
    if f_new > f + c1 * t * gtd or f_new >= bracket_f[low] then
      bracket[high], bracket_f[high], bracket_g[high], bracket_gtd[high] = t, f_new, g_new:clone(), gtd_new
      if bracket_f[1] <= bracket_f[2] then low, high = 1, 2 else low, high = 2, 1 end
    else
      if math.abs(gtd_new) <= -c2 * gtd then
        done = true
      elseif gtd_new * (bracket[high] - bracket[low]) >= 0 then
        bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
        bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
      end
      bracket[low], bracket_f[low], bracket_g[low], bracket_gtd[low] = t, f_new, g_new:clone(), gtd_new
    end
  end
  return bracket_f[low], bracket_g[low], bracket[low], evals
end
LBFGS._strong_wolfe = strong_wolfe

function LBFGS:_numel()
  if self._numel_cache == nil then
    local n = 0
    for _, p in ipairs(self._params) do n = n + p:numel() end
    self._numel_cache = n
  end
  return self._numel_cache
end

function LBFGS:_gather_flat_grad()
  local views = {}
  for i, p in ipairs(self._params) do
    local g = p.grad
    views[i] = g and g:reshape(-1) or p:new_zeros(p:numel())
  end
  return T.flow.cat(views, 1)
end

function LBFGS:_add_grad(step, update)
  local offset = 1
  for _, p in ipairs(self._params) do
    local n = p:numel()
    U.add_(p, update:narrow(1, offset, n):view(p:size():totable()), step)
    offset = offset + n
  end
end

function LBFGS:_clone_param()
  local r = {}
  for i, p in ipairs(self._params) do r[i] = p:clone() end
  return r
end

function LBFGS:_set_param(data)
  for i, p in ipairs(self._params) do p:copy_(data[i]) end
end

local function call_closure(closure)
  local loss = autograd.enable_grad(closure)
  if loss == nil then U.fail('LBFGS: the closure must return the loss') end
  return loss, type(loss) == 'number' and loss or loss:item()
end

--- step(closure): up to max_iter L-BFGS iterations; closure() must clear
-- the grads, compute the loss, call backward and return the loss. Returns
-- the loss of the first evaluation (as PyTorch).
function LBFGS:step(closure)
  if type(closure) ~= 'function' then U.fail('LBFGS: step needs a closure that returns the loss') end
  return autograd.no_grad(self._lbfgs_step, self, closure)
end

function LBFGS:_lbfgs_step(closure)
  local group = self.param_groups[1]
  local lr, max_iter, max_eval = group.lr, group.max_iter, group.max_eval
  local tolerance_grad, tolerance_change = group.tolerance_grad, group.tolerance_change
  local history_size = group.history_size
  local key = self._params[1]
  local state = self.state[key]
  if state == nil then
    state = {func_evals = 0, n_iter = 0}
    self.state[key] = state
  end
  local orig_loss, loss = call_closure(closure)
  local current_evals = 1
  state.func_evals = state.func_evals + 1
  local flat_grad = self:_gather_flat_grad()
  if absmax(flat_grad) <= tolerance_grad then return orig_loss end
  local d, t = state.d, state.t
  local old_dirs, old_stps, ro, H_diag = state.old_dirs, state.old_stps, state.ro, state.H_diag
  local prev_flat_grad, prev_loss = state.prev_flat_grad, state.prev_loss
  local n_iter = 0
  while n_iter < max_iter do
    n_iter = n_iter + 1
    state.n_iter = state.n_iter + 1
    if state.n_iter == 1 then
      d = -flat_grad
      old_dirs, old_stps, ro, H_diag = {}, {}, {}, 1
    else
      local y = flat_grad - prev_flat_grad
      local s = d * t
      local ys = dot(y, s)
      if ys > 1e-10 then
        if #old_dirs == history_size then
          table.remove(old_dirs, 1)
          table.remove(old_stps, 1)
          table.remove(ro, 1)
        end
        old_dirs[#old_dirs + 1], old_stps[#old_stps + 1], ro[#ro + 1] = y, s, 1 / ys
        H_diag = ys / dot(y, y)
      end
      -- two-loop recursion: d = -H g
      local al = {}
      local q = -flat_grad
      for i = #old_dirs, 1, -1 do
        al[i] = dot(old_stps[i], q) * ro[i]
        U.add_(q, old_dirs[i], -al[i])
      end
      local r = q * H_diag
      for i = 1, #old_dirs do
        local be_i = dot(old_dirs[i], r) * ro[i]
        U.add_(r, old_stps[i], al[i] - be_i)
      end
      d = r
    end
    prev_flat_grad = flat_grad:clone()
    prev_loss = loss
    if state.n_iter == 1 then
      t = math.min(1, 1 / flat_grad:abs():sum():item()) * lr
    else
      t = lr
    end
    local gtd = dot(flat_grad, d)
    if gtd > -tolerance_change then break end
    local ls_func_evals = 0
    local opt_cond = false
    if group.line_search_fn ~= nil then
      local x_init = self:_clone_param()
      local function obj(step)
        self:_add_grad(step, d)
        local _, l = call_closure(closure)
        local fg = self:_gather_flat_grad()
        self:_set_param(x_init)
        return l, fg
      end
      loss, flat_grad, t, ls_func_evals = strong_wolfe(obj, t, d, loss, flat_grad, gtd)
      self:_add_grad(t, d)
      opt_cond = absmax(flat_grad) <= tolerance_grad
    else
      self:_add_grad(t, d)
      if n_iter ~= max_iter then
        local _, l = call_closure(closure)
        loss = l
        flat_grad = self:_gather_flat_grad()
        opt_cond = absmax(flat_grad) <= tolerance_grad
        ls_func_evals = 1
      end
    end
    current_evals = current_evals + ls_func_evals
    state.func_evals = state.func_evals + ls_func_evals
    if n_iter == max_iter or current_evals >= max_eval or opt_cond then break end
    if absmax(d * t) <= tolerance_change then break end
    if math.abs(loss - prev_loss) < tolerance_change then break end
  end
  state.d, state.t, state.old_dirs, state.old_stps, state.ro = d, t, old_dirs, old_stps, ro
  state.H_diag, state.prev_flat_grad, state.prev_loss = H_diag, prev_flat_grad, prev_loss
  return orig_loss
end

return LBFGS
