-- flowvision.utils (vision.utils): make_grid and save_image, as torchvision.utils.
--
--   local grid = vision.utils.make_grid(batch, {nrow = 8, padding = 2, normalize = false,
--                                       value_range = {lo, hi}, scale_each = false, pad_value = 0})
--   vision.utils.save_image(batch, 'samples.png', {nrow = 4})   -- .png, .jpg or .jpeg
--
-- batch: float [N, C, H, W] (or [C, H, W], [H, W], or a Lua list of [C, H, W]
-- tensors) with values in [0, 1]; one-channel images are repeated to RGB.
local flow = require 'oneflow'
local vio = require 'flowvision.io'

local is_tensor = flow.is_tensor
local M = {}

local function fail(op, msg) error(op .. ': ' .. msg, 3) end

local known = {nrow = true, padding = true, normalize = true, value_range = true, range = true,
               scale_each = true, pad_value = true, quality = true, format = true}

--- make_grid(tensor, opts) -> [C, H', W'] image of the batch laid out in rows of nrow.
function M.make_grid(tensor, opts)
  opts = require('oneflow._args').check_options('make_grid', opts, known)
  if type(tensor) == 'table' and not is_tensor(tensor) then
    if #tensor == 0 then fail('make_grid', 'expected a tensor or a non-empty list of tensors') end
    tensor = flow.stack(tensor, 1)
  end
  if not is_tensor(tensor) then fail('make_grid', 'expected a tensor or a list of tensors, got ' .. type(tensor)) end
  local nrow, padding = opts.nrow or 8, opts.padding or 2
  local pad_value = opts.pad_value or 0
  local value_range = opts.value_range or opts.range
  if tensor:dim() == 2 then tensor = tensor:unsqueeze(1) end
  if tensor:dim() == 3 then
    if tensor:size(1) == 1 then tensor = flow.cat({tensor, tensor, tensor}, 1) end
    tensor = tensor:unsqueeze(1)
  end
  if tensor:dim() ~= 4 then
    fail('make_grid', ('expected [N, C, H, W], [C, H, W] or [H, W], got a %d-d tensor'):format(tensor:dim()))
  end
  if tensor:size(2) == 1 then tensor = flow.cat({tensor, tensor, tensor}, 2) end
  if not tensor:is_floating_point() then tensor = tensor:float() end
  if opts.normalize then
    tensor = tensor:clone()
    local function norm_ip(img, low, high)
      img:clamp_(low, high)
      img:sub_(low):div_(math.max(high - low, 1e-5))
    end
    local function norm_range(t)
      if value_range then norm_ip(t, value_range[1], value_range[2])
      else norm_ip(t, t:min():item(), t:max():item()) end
    end
    if opts.scale_each then
      for i = 1, tensor:size(1) do norm_range(tensor[i]) end
    else
      norm_range(tensor)
    end
  end
  if tensor:size(1) == 1 then return tensor:squeeze(1) end
  local nmaps = tensor:size(1)
  local xmaps = math.min(nrow, nmaps)
  local ymaps = math.ceil(nmaps / xmaps)
  local height, width = tensor:size(3) + padding, tensor:size(4) + padding
  local c = tensor:size(2)
  local grid = flow.full({c, height * ymaps + padding, width * xmaps + padding}, pad_value,
                         {dtype = tensor.dtype})
  local k = 0
  for y = 0, ymaps - 1 do
    for x = 0, xmaps - 1 do
      if k >= nmaps then break end
      grid:narrow(2, y * height + padding + 1, height - padding)
          :narrow(3, x * width + padding + 1, width - padding):copy_(tensor[k + 1])
      k = k + 1
    end
  end
  return grid
end

--- save_image(tensor, path, opts): make_grid(tensor, opts), scaled to uint8
-- (x * 255 + 0.5, clamped) and written as PNG or JPEG (by the extension or
-- opts.format = 'png' | 'jpeg'; opts.quality for JPEG).
function M.save_image(tensor, path, opts)
  opts = opts or {}
  if type(path) ~= 'string' then fail('save_image', 'path must be a string, got ' .. type(path)) end
  local grid = M.make_grid(tensor, opts)
  local img = grid:mul(255):add(0.5):clamp(0, 255):to(flow.uint8)
  local fmt = opts.format
  if not fmt then
    local ext = path:lower():match('%.([a-z]+)$')
    fmt = ext == 'png' and 'png' or ((ext == 'jpg' or ext == 'jpeg') and 'jpeg') or nil
    if not fmt then fail('save_image', path .. ': unknown extension (use .png, .jpg or .jpeg, or opts.format)') end
  end
  if fmt == 'png' then vio.write_png(img, path)
  elseif fmt == 'jpeg' or fmt == 'jpg' then vio.write_jpeg(img, path, {quality = opts.quality or 75})
  else fail('save_image', "format must be 'png' or 'jpeg', got " .. tostring(fmt)) end
end

return M
