-- oneflow.nn.functional.shuffle: pixel_shuffle, pixel_unshuffle and
-- channel_shuffle -- reshapes and permutes (differentiable).
local U = require 'oneflow.nn._util'

local fail, shape_str = U.fail, U.shape_str
local F = {}

------------------------------------------------------------------ pixel_shuffle
--- F.pixel_shuffle(x, r): [*, C r^2, H, W] -> [*, C, H r, W r].
function F.pixel_shuffle(x, r)
  require('oneflow._args').check_tensor('pixel_shuffle', x)
  require('oneflow._args').arg('pixel_shuffle', 2, 'upscale_factor', r, 'integer')
  local s = x:size():totable()
  local nd = #s
  if nd < 3 then fail(('pixel_shuffle: expected an input with at least 3 dims, got %s'):format(shape_str(x))) end
  local c, h, w = s[nd - 2], s[nd - 1], s[nd]
  if c % (r * r) ~= 0 then
    fail(('pixel_shuffle: channels %d are not divisible by upscale_factor^2 = %d'):format(c, r * r))
  end
  local lead = {unpack(s, 1, nd - 3)}
  local b = #lead
  local v = {unpack(lead)}
  for _, d in ipairs({c / (r * r), r, r, h, w}) do v[#v + 1] = d end
  local perm = {}
  for i = 1, b do perm[i] = i end
  for _, d in ipairs({1, 4, 2, 5, 3}) do perm[#perm + 1] = b + d end
  local out = {unpack(lead)}
  for _, d in ipairs({c / (r * r), h * r, w * r}) do out[#out + 1] = d end
  return x:reshape(v):permute(perm):reshape(out)
end

------------------------------------------------------------------ pixel_unshuffle
--- F.pixel_unshuffle(x, r): [*, C, H r, W r] -> [*, C r^2, H, W], the inverse
-- of pixel_shuffle.
function F.pixel_unshuffle(x, r)
  if type(r) ~= 'number' or r < 1 or r ~= math.floor(r) then
    fail(('pixel_unshuffle: downscale_factor must be a positive integer, got %s'):format(tostring(r)))
  end
  if x:dim() < 3 then
    fail(('pixel_unshuffle: expected an input of at least 3 dims [*, C, H, W], got %s'):format(shape_str(x)))
  end
  local s = x:size():totable()
  local nd = #s
  local c, h, w = s[nd - 2], s[nd - 1], s[nd]
  if h % r ~= 0 or w % r ~= 0 then
    fail(('pixel_unshuffle: height %d and width %d of input %s must be divisible by downscale_factor %d')
         :format(h, w, shape_str(x), r))
  end
  local b = nd - 3
  local v, perm, out = {}, {}, {}
  for i = 1, b do v[i], perm[i], out[i] = s[i], i, s[i] end
  for _, dd in ipairs({c, h / r, r, w / r, r}) do v[#v + 1] = dd end
  for _, dd in ipairs({1, 3, 5, 2, 4}) do perm[#perm + 1] = b + dd end
  for _, dd in ipairs({c * r * r, h / r, w / r}) do out[#out + 1] = dd end
  return x:reshape(v):permute(perm):reshape(out)
end

------------------------------------------------------------------ channel_shuffle
--- F.channel_shuffle(x, groups): [N, C, *] -> [N, C, *] with the channels
-- viewed as [groups, C / groups] and transposed.
function F.channel_shuffle(x, groups)
  if type(groups) ~= 'number' or groups < 1 or groups ~= math.floor(groups) then
    fail(('channel_shuffle: groups must be a positive integer, got %s'):format(tostring(groups)))
  end
  if x:dim() < 3 then
    fail(('channel_shuffle: expected an input of at least 3 dims [N, C, *], got %s'):format(shape_str(x)))
  end
  local s = x:size():totable()
  if s[2] % groups ~= 0 then
    fail(('channel_shuffle: channels %d of input %s are not divisible by groups %d'):format(
      s[2], shape_str(x), groups))
  end
  local v = {s[1], groups, s[2] / groups}
  for i = 3, #s do v[#v + 1] = s[i] end
  return x:reshape(v):transpose(2, 3):reshape(s)
end

return F
