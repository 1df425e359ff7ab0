-- oneflow.utils.progress: a text progress bar around any iterator.
--
--   for x, y in flow.utils.progress(loader:iter(), {total = #loader, desc = 'epoch 1'}) do
--   for x, y in flow.utils.progress(loader, {desc = 'epoch 1'}) do   -- loader:iter(), #loader
--   for x, y in loader:iter({progress = true}) do                    -- or progress = {desc = ...}
--
-- Prints "epoch 1:  45%|#########           | 45/100 [00:03<00:04, 12.3it/s]"
-- to stderr, redrawn with \r at most every opts.interval seconds (0.1), and a
-- newline when the iterator ends. Without a total it shows the count and
-- the rate. It only draws when stderr is a terminal (isatty), unless
-- opts.enable = true (or false to never draw); opts.file = an io file to
-- draw on instead of io.stderr, opts.width = bar width (20).
local A = require 'oneflow._args'
local P = require 'oneflow.utils.posix'

local M = {}

local function hms(s)
  if s ~= s or s == math.huge then return '?' end
  s = math.floor(s + 0.5)
  local h, m = math.floor(s / 3600), math.floor(s / 60) % 60
  if h > 0 then return string.format('%d:%02d:%02d', h, m, s % 60) end
  return string.format('%02d:%02d', m, s % 60)
end

local function rate_str(r)
  if r >= 1 or r == 0 then return string.format('%.2fit/s', r) end
  return string.format('%.2fs/it', 1 / r)
end

--- The text of the bar (without \r) for count n of total after `elapsed` s.
function M.format(n, total, elapsed, opts)
  opts = A.check_options('progress.format', opts, {desc = true, width = true})
  local desc = opts.desc and (opts.desc .. ': ') or ''
  local rate = elapsed > 0 and n / elapsed or 0
  if total and total > 0 then
    local frac = math.min(n / total, 1)
    local width = opts.width or 20
    local fill = math.floor(frac * width)
    local eta = rate > 0 and (total - n) / rate or math.huge
    return string.format('%s%3d%%|%s%s| %d/%d [%s<%s, %s]', desc, math.floor(frac * 100),
                         string.rep('#', fill), string.rep(' ', width - fill), n, total,
                         hms(elapsed), hms(eta), rate_str(rate))
  end
  return string.format('%s%d [%s, %s]', desc, n, hms(elapsed), rate_str(rate))
end

--- Wraps iterator function `it` (or anything with :iter(), e.g. a DataLoader).
function M.wrap(it, opts)
  opts = opts or {}
  local total = opts.total
  if type(it) ~= 'function' then
    if total == nil and it.len then total = it:len() end
    it = it:iter()
  end
  local enabled = opts.enable
  if enabled == nil then enabled = P.isatty(2) end
  if not enabled then return it end
  local out = opts.file or io.stderr
  local interval = opts.interval or 0.1
  local start = P.now()
  local last, n, done, width = -math.huge, 0, false, 0

  local function draw(final, force)
    local now = P.now()
    if not (final or force) and now - last < interval then return end
    last = now
    local s = M.format(n, total, now - start, opts)
    local padded = s .. string.rep(' ', math.max(width - #s, 0))
    width = #s
    out:write('\r', padded, final and '\n' or '')
    out:flush()
  end

  local function after(...)
    if (...) == nil then
      if not done then done = true; draw(true) end
      return nil
    end
    n = n + 1
    draw(false, total ~= nil and n >= total)
    return ...
  end
  draw(false)
  return function() return after(it()) end
end

return setmetatable(M, {__call = function(_, ...) return M.wrap(...) end})
