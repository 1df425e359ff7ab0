-- flowvision.data.RandomErasing: timm's RandomErasing (timm/data/random_erasing.py),
-- applied to normalized float images [C, H, W] or batches [N, C, H, W], in place.
--
--   local re = vision.data.RandomErasing{probability = 0.25, mode = 'pixel', max_count = 1}
--   x = re(x)
--
-- Options (timm's names): probability = 0.5, min_area = 0.02, max_area = 1/3,
-- min_aspect = 0.3, max_aspect = 1/min_aspect, mode = 'const' | 'rand' | 'pixel'
-- (zeros, one normal colour per box, per-pixel normal noise), min_count = 1,
-- max_count = min_count, num_splits = 0 (with > 1 the first N/num_splits
-- samples of a batch are left clean).
local A = require 'oneflow._args'
local flow = require 'oneflow'
local R = require 'flowvision.data.random'

local is_tensor = flow.is_tensor
local log, exp, sqrt = math.log, math.exp, math.sqrt
local py_round = require('flowvision.transforms.functional')._py_round

local RandomErasing = flow.class('RandomErasing')

local function fail(msg) error('RandomErasing: ' .. msg, 3) end

function RandomErasing:__init(opts)
  opts = A.check_options('RandomErasing', opts, {
    max_area = true, max_aspect = true, max_count = true, min_area = true, min_aspect = true,
    min_count = true, mode = true, num_splits = true, p = true, probability = true})
  self.probability = opts.probability or opts.p or 0.5
  self.min_area = opts.min_area or 0.02
  self.max_area = opts.max_area or 1 / 3
  local min_aspect = opts.min_aspect or 0.3
  local max_aspect = opts.max_aspect or 1 / min_aspect
  self.log_aspect_ratio = {log(min_aspect), log(max_aspect)}
  self.min_count = opts.min_count or 1
  self.max_count = opts.max_count or self.min_count
  self.num_splits = opts.num_splits or 0
  self.mode = (opts.mode or 'const'):lower()
  if self.mode ~= 'const' and self.mode ~= 'rand' and self.mode ~= 'pixel' then
    fail(("mode must be 'const', 'rand' or 'pixel', got '%s'"):format(self.mode))
  end
  self.rand_color = self.mode == 'rand'
  self.per_pixel = self.mode == 'pixel'
  if self.probability < 0 or self.probability > 1 then fail('probability must be in [0, 1]') end
end
RandomErasing.new = RandomErasing   -- RandomErasing.new(...) == RandomErasing(...)

function RandomErasing:__tostring()
  return ('RandomErasing(p=%g, mode=%s, count=(%d, %d))'):format(self.probability, self.mode,
                                                                 self.min_count, self.max_count)
end

local function pixels(self, c, h, w, dtype)
  if self.per_pixel then return flow.randn(c, h, w, {dtype = dtype}) end
  if self.rand_color then return flow.randn(c, 1, 1, {dtype = dtype}):expand(c, h, w) end
  return 0
end

function RandomErasing:_erase(img, c, img_h, img_w)
  if R.random() > self.probability then return end
  local area = img_h * img_w
  local count = self.min_count
  if self.min_count ~= self.max_count then count = R.randint(self.min_count, self.max_count + 1) end
  for _ = 1, count do
    for _ = 1, 10 do
      local target_area = R.uniform(self.min_area, self.max_area) * area / count
      local aspect = exp(R.uniform(self.log_aspect_ratio[1], self.log_aspect_ratio[2]))
      local h = py_round(sqrt(target_area * aspect))
      local w = py_round(sqrt(target_area / aspect))
      if w < img_w and h < img_h and w > 0 and h > 0 then
        local top = R.randint(0, img_h - h + 1)
        local left = R.randint(0, img_w - w + 1)
        local patch = img:narrow(2, top + 1, h):narrow(3, left + 1, w)
        local v = pixels(self, c, h, w, img.dtype)
        if is_tensor(v) then patch:copy_(v) else patch:fill_(v) end
        break
      end
    end
  end
end

--- re(x) -> x erased in place ([C, H, W] or [N, C, H, W] float).
function RandomErasing:__call(input)
  if not is_tensor(input) or (input:dim() ~= 3 and input:dim() ~= 4) then
    fail('expected a float tensor [C, H, W] or [N, C, H, W]')
  end
  if not input:is_floating_point() then
    fail('expected a float (normalized) tensor, got ' .. input.dtype.name)
  end
  if input:dim() == 3 then
    self:_erase(input, input:size(1), input:size(2), input:size(3))
  else
    local n, c, h, w = input:size(1), input:size(2), input:size(3), input:size(4)
    local start = self.num_splits > 1 and math.floor(n / self.num_splits) or 0
    for i = start + 1, n do self:_erase(input[i], c, h, w) end
  end
  return input
end

return RandomErasing
