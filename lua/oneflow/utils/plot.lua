-- oneflow.utils.plot: line plots (loss and accuracy curves) as SVG files,
-- written by a small SVG writer in Lua -- no gnuplot or matplotlib needed.
--
--   local plot = flow.utils.plot
--   local fig = plot.Figure({title = 'MNIST', xlabel = 'step', ylabel = 'loss'})
--   fig:line(losses)                               -- x = 1..n
--   fig:line(steps, val_losses, {label = 'val', color = '#d62728', marker = true})
--   fig:save('loss.svg')                           -- atomic (temporary file + rename)
--   local text = fig:svg()
--   plot.curves('curves.svg', {train = losses, val = val_losses}, {xlabel = 'epoch'})
--
-- Figure options: title, xlabel, ylabel, width (640), height (400),
-- logy (false: a log10 y axis, for losses spanning decades), xlim / ylim
-- ({lo, hi}), legend ('upper right' default, 'lower right', 'upper left',
-- 'lower left' or false). Series options: label, color (a CSS colour;
-- default from a 10-colour cycle), width (stroke, 1.5), marker (false),
-- dash (false). Values may be Lua arrays or 1-d tensors; NaN and
-- infinite values break the line rather than failing.
local A = require 'oneflow._args'
local class = require 'oneflow.class'

local M = {}

M.COLORS = {'#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
            '#7f7f7f', '#bcbd22', '#17becf'}

local FIG_OPTS = {'title', 'xlabel', 'ylabel', 'width', 'height', 'logy', 'xlim', 'ylim', 'legend'}
local LINE_OPTS = {'label', 'color', 'width', 'marker', 'dash'}

local function finite(v) return v == v and v ~= math.huge and v ~= -math.huge end

local function esc(s)
  return (tostring(s):gsub('[&<>"]', {['&'] = '&amp;', ['<'] = '&lt;', ['>'] = '&gt;', ['"'] = '&quot;'}))
end

local function to_list(v, what)
  if type(v) == 'table' then return v end
  if type(v) == 'cdata' and v.totable then
    if v:dim() ~= 1 then A.fail(('plot: %s must be 1-d, got %d dims'):format(what, v:dim())) end
    return v:double():totable()
  end
  A.fail(('plot: %s must be a Lua array or a 1-d tensor, got %s'):format(what, A.describe(v)))
end

--- "Nice" tick values covering [lo, hi] with about n ticks (1, 2, 5 x 10^k steps).
function M.ticks(lo, hi, n)
  A.arg('ticks', 1, 'lo', lo, 'number')
  A.arg('ticks', 2, 'hi', hi, 'number')
  A.arg('ticks', 3, 'n', n, 'integer|nil')
  n = n or 6
  if hi < lo then lo, hi = hi, lo end
  if hi == lo then
    local d = (lo == 0) and 1 or math.abs(lo) * 0.1
    lo, hi = lo - d, hi + d
  end
  local raw = (hi - lo) / n
  local mag = 10 ^ math.floor(math.log10(raw))
  local step = mag
  for _, f in ipairs({1, 2, 5, 10}) do
    step = f * mag
    if step >= raw then break end
  end
  local t, k = {}, math.ceil(lo / step - 1e-9)
  while k * step <= hi + step * 1e-9 do
    local v = tonumber(('%.12g'):format(k * step))   -- 0.6, not 0.6000000000000001
    if math.abs(v) < step * 1e-9 then v = 0 end
    t[#t + 1] = v
    k = k + 1
  end
  return t, step
end

local function fmt(v, step)
  if v == 0 then return '0' end
  local a = math.abs(v)
  if a >= 1e5 or a < 1e-3 then return ('%.3g'):format(v) end
  local dec = -math.floor(math.log10(step) + 1e-9)
  if dec < 1 then dec = 0 end   -- never "-0" in the format
  return (('%%.%df'):format(dec)):format(v)
end

--- plot.Figure({title =, xlabel =, ylabel =, width =, height =, logy =, xlim =, ylim =, legend =}): an SVG line
-- chart; fig:line([xs,] ys, {label =}), fig:save(path).
-- @function utils.plot.Figure
M.Figure = class('Figure')
local Figure = M.Figure

function Figure:__init(opts)
  opts = A.check_options('plot.Figure', opts, FIG_OPTS)
  self.opts = {}
  for k, v in pairs(opts) do self.opts[k] = v end
  self.series = {}
end

--- fig:line([xs,] ys [, opts]): adds a series; returns the figure.
function Figure:line(xs, ys, opts)
  if ys == nil or A.is_options(ys) then xs, ys, opts = nil, xs, ys end
  opts = A.check_options('plot.line', opts, LINE_OPTS)
  ys = to_list(ys, 'ys')
  if xs == nil then
    xs = {}
    for i = 1, #ys do xs[i] = i end
  else
    xs = to_list(xs, 'xs')
  end
  if #xs ~= #ys then A.fail(('plot.line: %d x values and %d y values'):format(#xs, #ys)) end
  local k = #self.series + 1
  self.series[k] = {xs = xs, ys = ys, label = opts.label, color = opts.color or M.COLORS[(k - 1) % #M.COLORS + 1],
                    width = opts.width or 1.5, marker = opts.marker, dash = opts.dash}
  return self
end

-- the data range over all series, with the y values as plotted (log10 if logy)
local function ranges(self)
  local logy = self.opts.logy
  local x0, x1, y0, y1 = math.huge, -math.huge, math.huge, -math.huge
  for _, s in ipairs(self.series) do
    for i = 1, #s.xs do
      local x, y = s.xs[i], s.ys[i]
      if logy then y = (y > 0) and math.log10(y) or 0 / 0 end
      if finite(x) and finite(y) then
        x0, x1 = math.min(x0, x), math.max(x1, x)
        y0, y1 = math.min(y0, y), math.max(y1, y)
      end
    end
  end
  if x0 > x1 then x0, x1, y0, y1 = 0, 1, 0, 1 end
  if self.opts.xlim then x0, x1 = self.opts.xlim[1], self.opts.xlim[2] end
  if self.opts.ylim then
    y0, y1 = self.opts.ylim[1], self.opts.ylim[2]
    if logy then y0, y1 = math.log10(y0), math.log10(y1) end
  end
  return x0, x1, y0, y1
end

--- The SVG text of the figure.
function Figure:svg()
  local o = self.opts
  local W, H = o.width or 640, o.height or 400
  local L, R, T, B = 70, 20, (o.title and 36 or 16), 50
  local pw, ph = W - L - R, H - T - B
  local x0, x1, y0, y1 = ranges(self)
  local xt, xstep = M.ticks(x0, x1, 8)
  local yt, ystep
  if o.logy then
    yt, ystep = {}, 1
    for e = math.floor(y0), math.ceil(y1) do yt[#yt + 1] = e end
    if #yt < 2 then yt = {math.floor(y0), math.floor(y0) + 1} end
  else
    yt, ystep = M.ticks(y0, y1, 6)
  end
  -- the axes span the ticks, so the data never touches the frame
  x0, x1 = math.min(x0, xt[1]), math.max(x1, xt[#xt])
  y0, y1 = math.min(y0, yt[1]), math.max(y1, yt[#yt])
  if x1 == x0 then x1 = x0 + 1 end
  if y1 == y0 then y1 = y0 + 1 end
  local function px(x) return L + (x - x0) / (x1 - x0) * pw end
  local function py(y) return T + ph - (y - y0) / (y1 - y0) * ph end

  local out = {}
  local function add(s) out[#out + 1] = s end
  add(('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
       .. 'font-family="sans-serif" font-size="12">'):format(W, H, W, H))
  add(('<rect width="%d" height="%d" fill="white"/>'):format(W, H))
  if o.title then
    add(('<text x="%.1f" y="22" text-anchor="middle" font-size="15">%s</text>'):format(L + pw / 2, esc(o.title)))
  end
  -- grid and ticks
  add('<g class="grid" stroke="#e0e0e0" stroke-width="1">')
  for _, v in ipairs(xt) do add(('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>'):format(px(v), T, px(v), T + ph)) end
  for _, v in ipairs(yt) do add(('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>'):format(L, py(v), L + pw, py(v))) end
  add('</g>')
  add('<g class="xticks" text-anchor="middle">')
  for _, v in ipairs(xt) do
    add(('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black"/>'):format(px(v), T + ph, px(v), T + ph + 5))
    add(('<text x="%.1f" y="%d">%s</text>'):format(px(v), T + ph + 18, fmt(v, xstep)))
  end
  add('</g>')
  add('<g class="yticks" text-anchor="end">')
  for _, v in ipairs(yt) do
    add(('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>'):format(L - 5, py(v), L, py(v)))
    local label = o.logy and ('1e' .. v) or fmt(v, ystep)
    add(('<text x="%d" y="%.1f">%s</text>'):format(L - 8, py(v) + 4, label))
  end
  add('</g>')
  add(('<rect class="frame" x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>'):format(L, T, pw, ph))
  if o.xlabel then
    add(('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'):format(L + pw / 2, H - 10, esc(o.xlabel)))
  end
  if o.ylabel then
    add(('<text x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>')
        :format(T + ph / 2, T + ph / 2, esc(o.ylabel)))
  end
  -- series, clipped to the plot area; a non-finite value breaks the line
  add(('<clipPath id="plotarea"><rect x="%d" y="%d" width="%d" height="%d"/></clipPath>'):format(L, T, pw, ph))
  for k, s in ipairs(self.series) do
    add(('<g class="series" id="series%d" clip-path="url(#plotarea)">'):format(k))
    local segs, cur = {}, {}
    for i = 1, #s.xs do
      local x, y = s.xs[i], s.ys[i]
      if o.logy then y = (y > 0) and math.log10(y) or 0 / 0 end
      if finite(x) and finite(y) then
        cur[#cur + 1] = ('%.2f,%.2f'):format(px(x), py(y))
      elseif #cur > 0 then
        segs[#segs + 1], cur = cur, {}
      end
    end
    if #cur > 0 then segs[#segs + 1] = cur end
    local dash = s.dash and ' stroke-dasharray="6,4"' or ''
    for _, seg in ipairs(segs) do
      add(('<polyline fill="none" stroke="%s" stroke-width="%s"%s points="%s"/>'):format(
        esc(s.color), tostring(s.width), dash, table.concat(seg, ' ')))
      if s.marker then
        for _, pt in ipairs(seg) do
          local cx, cy = pt:match('([^,]+),(.+)')
          add(('<circle cx="%s" cy="%s" r="2.5" fill="%s"/>'):format(cx, cy, esc(s.color)))
        end
      end
    end
    add('</g>')
  end
  -- legend
  local labelled = {}
  for _, s in ipairs(self.series) do if s.label then labelled[#labelled + 1] = s end end
  if #labelled > 0 and o.legend ~= false then
    local where = o.legend or 'upper right'
    local lw = 40
    for _, s in ipairs(labelled) do lw = math.max(lw, 34 + 7 * #tostring(s.label)) end
    local lh = 8 + 18 * #labelled
    local lx = where:find('left') and (L + 10) or (L + pw - lw - 10)
    local ly = where:find('lower') and (T + ph - lh - 10) or (T + 10)
    add(('<g class="legend"><rect x="%d" y="%d" width="%d" height="%d" fill="white" fill-opacity="0.85" '
         .. 'stroke="#999"/>'):format(lx, ly, lw, lh))
    for i, s in ipairs(labelled) do
      local yy = ly + 4 + 18 * i - 5
      add(('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>'):format(
        lx + 6, yy - 4, lx + 26, yy - 4, esc(s.color)))
      add(('<text x="%d" y="%d">%s</text>'):format(lx + 32, yy, esc(s.label)))
    end
    add('</g>')
  end
  add('</svg>\n')
  return table.concat(out, '\n')
end

--- Writes text to path atomically: a temporary file beside it, then rename.
function M.write_atomic(path, text, op)
  op = op or 'write'
  if type(path) ~= 'string' or path == '' then A.fail(op .. ': expected a file path, got ' .. A.describe(path)) end
  local tmp = ('%s.tmp-%d'):format(path, math.random(0, 2 ^ 30))
  local f, err = io.open(tmp, 'wb')
  if not f then A.fail(('%s: cannot create %s (%s)'):format(op, tmp, tostring(err))) end
  local ok, werr = f:write(text)
  local closed = f:close()
  if not ok or not closed then
    os.remove(tmp)
    A.fail(('%s: writing %s failed (%s)'):format(op, path, tostring(werr)))
  end
  local rok, rerr = os.rename(tmp, path)
  if not rok then
    os.remove(tmp)
    A.fail(('%s: cannot rename %s over %s (%s)'):format(op, tmp, path, tostring(rerr)))
  end
end

--- fig:save(path): writes the SVG atomically; returns the figure.
function Figure:save(path)
  M.write_atomic(path, self:svg(), 'plot.save')
  return self
end

--- curves(path, {name = values, ...} or {{label =, ys =, xs =}...}, fig_opts):
-- one figure with a labelled line per series (names in sorted order).
function M.curves(path, series, opts)
  if type(series) ~= 'table' then A.fail('plot.curves: expected a table of series, got ' .. A.describe(series)) end
  local fig = Figure(opts)
  if series[1] ~= nil then
    for _, s in ipairs(series) do
      local so = {label = s.label, color = s.color, marker = s.marker, dash = s.dash, width = s.width}
      if s.xs then fig:line(s.xs, s.ys, so) else fig:line(s.ys, so) end
    end
  else
    local names = {}
    for k in pairs(series) do names[#names + 1] = k end
    table.sort(names)
    for _, k in ipairs(names) do fig:line(series[k], {label = k}) end
  end
  if path then fig:save(path) end
  return fig
end

return M
