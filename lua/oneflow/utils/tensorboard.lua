-- oneflow.utils.tensorboard: TensorBoard event files, written in Lua.
--
--   local SummaryWriter = flow.utils.tensorboard.SummaryWriter
--   local w = SummaryWriter('runs/exp1')                   -- default runs/<date>_<host>
--   w:add_scalar('loss/train', loss:item(), step)
--   w:add_scalars('loss', {train = 0.5, val = 0.7}, step) -- one run per key, like PyTorch
--   w:add_histogram('fc1.weight', net.fc1.weight, step)   -- {bins = 'tensorflow' | n}
--   w:add_image('sample', img, step)                      -- [C, H, W] float in [0, 1] or uint8
--   w:add_image('hw', img2d, step, {dataformats = 'HW'})  -- 'CHW' (default), 'HWC', 'HW'
--   w:add_images('batch', imgs, step)                     -- [N, C, H, W]: one grid, 8 per row
--   w:add_text('notes', 'lr = 0.1', step)
--   w:add_pr_curve('pr', labels, probs, step)             -- {num_thresholds = 127, weights =}
--   w:add_hparams({lr = 0.1, opt = 'sgd'}, {['hparam/acc'] = 0.9})
--   w:add_graph(graph)              -- a compiled nn.Graph
--   w:add_graph(net, example_x)     -- a module: traced through an nn.Graph once
--   w:flush(); w:close()
--
-- The file is what TensorFlow writes: TFRecord framing (a little-endian
-- uint64 length, its masked CRC-32C, the record, its masked CRC-32C) around
-- serialized Event protobufs (event.proto, summary.proto, graph.proto),
-- encoded with oneflow.onnx.protobuf's writer. It is append-only: each add_*
-- appends one record and flushes, so a reader (or a crash) sees whole
-- records up to the last call. `tensorboard --logdir runs` reads it.
local ffi = require 'ffi'
local bit = require 'bit'
local core = require 'oneflow._C'
local A = require 'oneflow._args'
local class = require 'oneflow.class'
local pb = require 'oneflow.onnx.protobuf'
local P = require 'oneflow.utils.posix'

local C = core.C
local band, bxor, bor, rshift, lshift, tobit = bit.band, bit.bxor, bit.bor, bit.rshift, bit.lshift, bit.tobit
local byte, char = string.byte, string.char

pcall(ffi.cdef, 'int mkdir(const char *path, uint32_t mode);')
pcall(ffi.cdef, 'int gethostname(char *name, size_t len);')

local M = {}

------------------------------------------------------------------ TFRecord
-- CRC-32C (Castagnoli), reflected polynomial 0x82F63B78
local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if band(c, 1) ~= 0 then c = bxor(rshift(c, 1), tobit(0x82F63B78)) else c = rshift(c, 1) end
  end
  crc_table[i] = c
end

--- crc32c(s) -> the CRC-32C of s as an unsigned number.
function M.crc32c(s)
  A.arg('crc32c', 1, 's', s, 'string')
  local c = tobit(0xFFFFFFFF)
  for i = 1, #s do
    c = bxor(rshift(c, 8), crc_table[band(bxor(c, byte(s, i)), 0xff)])
  end
  c = bxor(c, tobit(0xFFFFFFFF))
  return c < 0 and c + 2 ^ 32 or c
end

--- TFRecord's masked CRC: rotate right by 15, add 0xa282ead8.
function M.masked_crc(s)
  local c = tobit(M.crc32c(s))
  local r = tobit(bor(rshift(c, 15), lshift(c, 17)) + 0xa282ead8)
  return r < 0 and r + 2 ^ 32 or r
end

local function u32le(n)
  n = tobit(n)
  return char(band(n, 255), band(rshift(n, 8), 255), band(rshift(n, 16), 255), band(rshift(n, 24), 255))
end

--- One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
function M.record(data)
  A.arg('record', 1, 'data', data, 'string')
  if #data >= 2 ^ 31 then A.fail('tensorboard: a record of ' .. #data .. ' bytes is too large') end
  local len = u32le(#data) .. '\0\0\0\0'
  return len .. u32le(M.masked_crc(len)) .. data .. u32le(M.masked_crc(data))
end

------------------------------------------------------------------ protobufs
-- Field numbers of tensorflow/core/util/event.proto, framework/summary.proto,
-- tensor.proto, tensor_shape.proto, graph.proto, node_def.proto, attr_value.proto.
local F = {
  Event = {wall_time = 1, step = 2, file_version = 3, graph_def = 4, summary = 5},
  Summary = {value = 1},
  Value = {tag = 1, simple_value = 2, image = 4, histo = 5, tensor = 8, metadata = 9},
  Image = {height = 1, width = 2, colorspace = 3, encoded_image_string = 4},
  Histogram = {min = 1, max = 2, num = 3, sum = 4, sum_squares = 5, bucket_limit = 6, bucket = 7},
  Metadata = {plugin_data = 1, display_name = 2, summary_description = 3},
  PluginData = {plugin_name = 1, content = 2},
  Tensor = {dtype = 1, tensor_shape = 2, float_val = 5, string_val = 8},
  -- tensorboard/plugins/pr_curve/plugin_data.proto
  PrCurvePluginData = {version = 1, num_thresholds = 2},
  -- tensorboard/plugins/hparams/plugin_data.proto, api.proto and
  -- google/protobuf/struct.proto's Value
  HParamsPluginData = {version = 1, experiment = 2, session_start_info = 3, session_end_info = 4},
  Experiment = {hparam_infos = 4, metric_infos = 5},
  HParamInfo = {name = 1, type = 4},
  MetricInfo = {name = 1},
  MetricName = {group = 1, tag = 2},
  SessionStartInfo = {hparams = 1, start_time_secs = 5},
  SessionEndInfo = {status = 1, end_time_secs = 2},
  MapEntry = {key = 1, value = 2},
  PbValue = {number_value = 2, string_value = 3, bool_value = 4},
  Shape = {dim = 2},
  Dim = {size = 1, name = 2},
  GraphDef = {node = 1, versions = 4},
  VersionDef = {producer = 1},
  NodeDef = {name = 1, op = 2, input = 3, device = 4, attr = 5},
  AttrEntry = {key = 1, value = 2},
  AttrValue = {list = 1, s = 2},
  ListValue = {shape = 7},
}
M.FIELDS = F
local DT_FLOAT, DT_STRING = 1, 7

local function packed_doubles(w, field, list)
  if #list == 0 then return end
  local buf = ffi.new('double[?]', #list)
  for i = 1, #list do buf[i - 1] = list[i] end
  pb.push(w, pb.varint(field * 8 + 2))
  pb.push(w, pb.varint(8 * #list))
  pb.push(w, ffi.string(buf, 8 * #list))
end

local function shape_msg(dims)
  local s = pb.writer()
  for _, d in ipairs(dims) do
    local dm = pb.writer()
    pb.int(dm, F.Dim.size, d)
    pb.message(s, F.Shape.dim, dm)
  end
  return s
end

local function event(wall_time, step, fill)
  local e = pb.writer()
  pb.double(e, F.Event.wall_time, wall_time)
  if step then pb.int(e, F.Event.step, step) end
  fill(e)
  return pb.tostring(e)
end

local function summary_event(wall_time, step, value)
  return event(wall_time, step, function(e)
    local s = pb.writer()
    pb.message(s, F.Summary.value, value)
    pb.message(e, F.Event.summary, s)
  end)
end

------------------------------------------------------------------ helpers
local ts = ffi.new('int64_t[2]')
local function now()
  if C.clock_gettime(0, ts) == 0 then return tonumber(ts[0]) + tonumber(ts[1]) * 1e-9 end
  return os.time()
end

local function hostname()
  local buf = ffi.new('char[256]')
  if C.gethostname(buf, 255) == 0 then return ffi.string(buf) end
  return 'localhost'
end

-- mkdir -p
local function makedirs(path)
  local acc = path:sub(1, 1) == '/' and '' or '.'
  for part in path:gmatch('[^/]+') do
    acc = acc .. '/' .. part
    if C.mkdir(acc, tonumber('755', 8)) ~= 0 and ffi.errno() ~= 17 then   -- EEXIST
      A.fail(('SummaryWriter: cannot create directory %s (%s)'):format(acc, P.strerror()))
    end
  end
end

local function number_of(op, v, what)
  if type(v) == 'number' then return v end
  if type(v) == 'cdata' and v.item then
    if v:numel() ~= 1 then
      A.fail(('%s: %s must be a number or a one-element tensor, got shape %s'):format(op, what, A.shape_str(v)))
    end
    return v:item()
  end
  A.fail(('%s: %s must be a number or a one-element tensor, got %s'):format(op, what, A.describe(v)))
end

local function check_step(op, step)
  if step == nil then return nil end
  if type(step) ~= 'number' or step ~= math.floor(step) then
    A.fail(('%s: global_step must be an integer, got %s'):format(op, A.describe(step)))
  end
  return step
end

local function check_tag(op, tag)
  if type(tag) ~= 'string' or tag == '' then
    A.fail(op .. ': tag must be a non-empty string, got ' .. A.describe(tag))
  end
  return tag
end

-- the values of a tensor or Lua array as a Lua array of numbers
local function values_of(op, v)
  if type(v) == 'table' then
    for i = 1, #v do
      if type(v[i]) ~= 'number' then A.fail(op .. ': values must be numbers') end
    end
    return v
  end
  if type(v) == 'cdata' and v.totable then
    local flat = v:detach():cpu():double():reshape(-1)
    return flat:totable()
  end
  A.fail(op .. ': values must be a tensor or a Lua array of numbers, got ' .. A.describe(v))
end

------------------------------------------------------------------ histograms
-- TensorFlow's default bucket edges: +-1e-12 * 1.1^k up to 1e20, and 0.
local tf_limits
local function default_limits()
  if tf_limits then return tf_limits end
  local pos, v = {}, 1e-12
  while v < 1e20 do pos[#pos + 1] = v; v = v * 1.1 end
  local lim = {}
  for i = #pos, 1, -1 do lim[#lim + 1] = -pos[i] end
  lim[#lim + 1] = 0
  for i = 1, #pos do lim[#lim + 1] = pos[i] end
  lim[#lim + 1] = math.huge
  tf_limits = lim
  return lim
end

--- histogram(values, bins) -> {min, max, num, sum, sum_squares, bucket_limit, bucket}
-- bins: 'tensorflow' (the default edges, empty buckets at both ends left
-- out, like PyTorch) or a number of equal-width buckets over [min, max].
function M.histogram(values, bins)
  A.arg('histogram', 1, 'values', values, 'table')
  local n = #values
  if n == 0 then A.fail('add_histogram: no values') end
  local lo, hi, sum, sq = math.huge, -math.huge, 0, 0
  for i = 1, n do
    local x = values[i]
    if type(x) ~= 'number' then A.fail(('histogram: values[%d] must be a number, got %s'):format(i, A.describe(x))) end
    if x ~= x or x == math.huge or x == -math.huge then A.fail('add_histogram: values contain NaN or infinity') end
    if x < lo then lo = x end
    if x > hi then hi = x end
    sum, sq = sum + x, sq + x * x
  end
  local limits, counts = {}, {}
  if bins == nil or bins == 'tensorflow' then
    local lim = default_limits()
    local c = {}
    for i = 1, #lim do c[i] = 0 end
    for i = 1, n do
      -- the first edge >= x (buckets are (lim[k-1], lim[k]])
      local x, a, b = values[i], 1, #lim
      while a < b do
        local m = math.floor((a + b) / 2)
        if lim[m] < x then a = m + 1 else b = m end
      end
      c[a] = c[a] + 1
    end
    local first, last = 1, #lim
    while first < last and c[first] == 0 do first = first + 1 end
    while last > first and c[last] == 0 do last = last - 1 end
    for k = first, last do limits[#limits + 1] = lim[k]; counts[#counts + 1] = c[k] end
    if limits[#limits] == math.huge then limits[#limits] = 1.7976931348623157e308 end
  elseif type(bins) == 'number' and bins >= 1 and bins == math.floor(bins) then
    local width = (hi - lo) / bins
    for k = 1, bins do limits[k] = lo + k * width; counts[k] = 0 end
    limits[bins] = hi
    for i = 1, n do
      local k = width > 0 and math.floor((values[i] - lo) / width) + 1 or 1
      if k > bins then k = bins end
      counts[k] = counts[k] + 1
    end
  else
    A.fail("add_histogram: bins must be 'tensorflow' or a positive integer, got " .. A.describe(bins))
  end
  return {min = lo, max = hi, num = n, sum = sum, sum_squares = sq, bucket_limit = limits, bucket = counts}
end

------------------------------------------------------------------ images
-- an image tensor -> uint8 [H, W, C] contiguous with C = 1, 3 or 4
local function image_hwc(op, img, fmt)
  local flow = require 'oneflow'
  if not flow.is_tensor(img) then A.fail(op .. ': expected an image tensor, got ' .. A.describe(img)) end
  fmt = A.arg(op, nil, 'dataformats', fmt or 'CHW', 'string')
  if #fmt ~= img:dim() then
    A.fail(('%s: dataformats %s needs a %d-d tensor, got shape %s'):format(op, fmt, #fmt, A.shape_str(img)))
  end
  local x = img:detach():cpu()
  if fmt == 'HW' then x = x:unsqueeze(3)
  elseif fmt == 'CHW' then x = x:permute(2, 3, 1)
  elseif fmt ~= 'HWC' then A.fail(op .. ": dataformats must be 'CHW', 'HWC' or 'HW', got " .. tostring(fmt)) end
  local c = x:size(3)
  if c ~= 1 and c ~= 3 and c ~= 4 then
    A.fail(('%s: an image has 1, 3 or 4 channels, got %d (shape %s)'):format(op, c, A.shape_str(img)))
  end
  if x.dtype ~= flow.uint8 then
    -- floats are in [0, 1], as PyTorch's SummaryWriter takes them
    x = x:double():mul(255):add(0.5):clamp(0, 255):to(flow.uint8)
  end
  return x:contiguous()
end

--- encode_png(img [, dataformats]) -> PNG bytes (a Lua string), height, width, channels
function M.encode_png(img, fmt)
  local hwc = image_hwc('add_image', img, fmt)
  if C.of_image_supported(C.OF_IMAGE_PNG) == 0 then
    A.fail('add_image: this build has no PNG encoder (libpng was not found when it was built)')
  end
  local out = ffi.new('of_tensor*[1]')
  if C.of_image_encode(hwc.p, C.OF_IMAGE_PNG, 0, out) ~= 0 then A.raise_c() end
  local bytes = core.wrap(out[0])
  local s = ffi.string(bytes:data_ptr(), bytes:numel())
  return s, hwc:size(1), hwc:size(2), hwc:size(3)
end

------------------------------------------------------------------ graphs
--- graph_def(ir) -> GraphDef bytes from oneflow.nn.graph_view.ir(): inputs
-- and outputs are 'IO Node's, parameters/buffers 'Parameter' nodes, ops
-- their op name; each node's _output_shapes and record ('attr') are attrs.
function M.graph_def(ir)
  A.arg('graph_def', 1, 'ir', ir, 'table')
  A.arg('graph_def', 1, 'ir.inputs', ir.inputs, 'table')
  local GV = require 'oneflow.nn.graph_view'
  local g = pb.writer()
  local names, count = {}, 0
  local function node(name, op, inputs, shapes, attr)
    local n = pb.writer()
    pb.string(n, F.NodeDef.name, name)
    pb.string(n, F.NodeDef.op, op)
    for _, i in ipairs(inputs) do pb.string(n, F.NodeDef.input, i) end
    if shapes then
      local lv = pb.writer()
      for _, s in ipairs(shapes) do pb.message(lv, F.ListValue.shape, shape_msg(s)) end
      local av = pb.writer()
      pb.message(av, F.AttrValue.list, lv)
      local e = pb.writer()
      pb.string(e, F.AttrEntry.key, '_output_shapes')
      pb.message(e, F.AttrEntry.value, av)
      pb.message(n, F.NodeDef.attr, e)
    end
    if attr and attr ~= '' then
      local av = pb.writer()
      pb.bytes(av, F.AttrValue.s, attr)
      local e = pb.writer()
      pb.string(e, F.AttrEntry.key, 'attr')
      pb.message(e, F.AttrEntry.value, av)
      pb.message(n, F.NodeDef.attr, e)
    end
    pb.message(g, F.GraphDef.node, n)
    count = count + 1
  end
  for i, v in ipairs(ir.inputs) do
    names[v] = 'input/input_' .. i
    node(names[v], 'IO Node', {}, {ir.values[v].shape}, GV.type_str(ir.values[v]))
  end
  for _, n in ipairs(ir.nodes) do
    for _, v in ipairs(n.inputs) do
      local val = v >= 0 and ir.values[v]
      if val and val.kind == 'external' and not names[v] then
        names[v] = (val.name and ('params/' .. val.name:gsub('%.', '/'))) or ('const/c' .. v)
        node(names[v], val.is_const and 'Constant' or 'Parameter', {}, {val.shape}, GV.type_str(val))
      end
    end
  end
  for _, n in ipairs(ir.nodes) do
    local nm = ('ops/%s_%d'):format(n.op, n.index)
    local ins, shapes = {}, {}
    for _, v in ipairs(n.inputs) do if v >= 0 and names[v] then ins[#ins + 1] = names[v] end end
    for _, v in ipairs(n.outputs) do
      if v >= 0 and ir.values[v] then shapes[#shapes + 1] = ir.values[v].shape; names[v] = nm end
    end
    node(nm, n.op, ins, shapes, n.attrs ~= '' and n.attrs or nil)
  end
  for i, v in ipairs(ir.outputs) do
    node('output/output_' .. i, 'IO Node', names[v] and {names[v]} or {}, ir.values[v] and {ir.values[v].shape} or nil)
  end
  local ver = pb.writer()
  pb.int(ver, F.VersionDef.producer, 22)
  pb.message(g, F.GraphDef.versions, ver)
  return pb.tostring(g), count
end

------------------------------------------------------------------ writer
--- SummaryWriter(log_dir = 'runs/<date>_<host>', {comment =, purge_step =, flush_secs =, filename_suffix =}):
-- writes TensorBoard event files into log_dir.
-- @function SummaryWriter
M.SummaryWriter = class('SummaryWriter')
local SummaryWriter = M.SummaryWriter

local file_counter = 0

function SummaryWriter:__init(log_dir, opts)
  if A.is_options(log_dir) and opts == nil then log_dir, opts = nil, log_dir end
  opts = A.check_options('SummaryWriter', opts, {'comment', 'filename_suffix'})
  if log_dir == nil then
    log_dir = 'runs/' .. os.date('%b%d_%H-%M-%S') .. '_' .. hostname() .. (opts.comment or '')
  end
  if type(log_dir) ~= 'string' or log_dir == '' then
    A.fail('SummaryWriter: log_dir must be a directory path, got ' .. A.describe(log_dir))
  end
  makedirs(log_dir)
  file_counter = file_counter + 1
  local t = now()
  self.log_dir = log_dir
  self.path = ('%s/events.out.tfevents.%d.%s.%d.%d%s'):format(log_dir, math.floor(t), hostname(),
    tonumber(P.C.getpid()), file_counter, opts.filename_suffix or '')
  local f, err = io.open(self.path, 'ab')
  if not f then A.fail('SummaryWriter: cannot open ' .. self.path .. ' (' .. tostring(err) .. ')') end
  self.file = f
  self.children = {}
  self:_write(event(t, nil, function(e) pb.string(e, F.Event.file_version, 'brain.Event:2') end))
end

function SummaryWriter:_write(ev)
  if not self.file then A.fail('SummaryWriter: the writer is closed (' .. self.log_dir .. ')') end
  local ok, err = self.file:write(M.record(ev))
  if ok then ok, err = self.file:flush() end
  if not ok then A.fail('SummaryWriter: writing ' .. self.path .. ' failed (' .. tostring(err) .. ')') end
end

--- add_scalar(tag, value, global_step [, walltime])
function SummaryWriter:add_scalar(tag, value, step, walltime)
  check_tag('add_scalar', tag)
  local v = number_of('add_scalar', value, 'value')
  step = check_step('add_scalar', step)
  local val = pb.writer()
  pb.string(val, F.Value.tag, tag)
  pb.float(val, F.Value.simple_value, v)
  self:_write(summary_event(walltime or now(), step, val))
  return self
end

--- add_scalars(main_tag, {name = value}, global_step [, walltime]): each name
-- in its own run directory log_dir/main_tag_name, under tag main_tag.
function SummaryWriter:add_scalars(main_tag, values, step, walltime)
  check_tag('add_scalars', main_tag)
  if type(values) ~= 'table' then A.fail('add_scalars: expected a table {name = value}, got ' .. A.describe(values)) end
  local t = walltime or now()
  local keys = {}
  for k in pairs(values) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local dir = self.log_dir .. '/' .. main_tag:gsub('/', '_') .. '_' .. tostring(k)
    local w = self.children[dir]
    if not w then w = SummaryWriter(dir); self.children[dir] = w end
    w:add_scalar(main_tag, number_of('add_scalars', values[k], k), step, t)
  end
  return self
end

--- add_histogram(tag, values, global_step [, {bins =}])
function SummaryWriter:add_histogram(tag, values, step, opts)
  check_tag('add_histogram', tag)
  opts = A.check_options('add_histogram', opts, {'bins', 'walltime'})
  step = check_step('add_histogram', step)
  local h = M.histogram(values_of('add_histogram', values), opts.bins)
  local hw = pb.writer()
  local H = F.Histogram
  pb.double(hw, H.min, h.min)
  pb.double(hw, H.max, h.max)
  pb.double(hw, H.num, h.num)
  pb.double(hw, H.sum, h.sum)
  pb.double(hw, H.sum_squares, h.sum_squares)
  packed_doubles(hw, H.bucket_limit, h.bucket_limit)
  packed_doubles(hw, H.bucket, h.bucket)
  local val = pb.writer()
  pb.string(val, F.Value.tag, tag)
  pb.message(val, F.Value.histo, hw)
  self:_write(summary_event(opts.walltime or now(), step, val))
  return self
end

local function image_value(tag, png, h, w, c)
  local iw = pb.writer()
  pb.int(iw, F.Image.height, h)
  pb.int(iw, F.Image.width, w)
  pb.int(iw, F.Image.colorspace, c)
  pb.bytes(iw, F.Image.encoded_image_string, png)
  local val = pb.writer()
  pb.string(val, F.Value.tag, tag)
  pb.message(val, F.Value.image, iw)
  return val
end

--- add_image(tag, img, global_step [, {dataformats = 'CHW'}]): PNG-encoded.
function SummaryWriter:add_image(tag, img, step, opts)
  check_tag('add_image', tag)
  opts = A.check_options('add_image', opts, {'dataformats', 'walltime'})
  step = check_step('add_image', step)
  local png, h, w, c = M.encode_png(img, opts.dataformats)
  self:_write(summary_event(opts.walltime or now(), step, image_value(tag, png, h, w, c)))
  return self
end

-- a batch [N, C, H, W] (or NHWC) -> one [C, rows * H, 8 * W] grid, images
-- left to right, top to bottom, zeros after the last, 1 channel made 3: what
-- PyTorch's add_images (utils.tensorboard._utils.make_grid) writes
local function image_grid(op, imgs, fmt)
  local flow = require 'oneflow'
  if not flow.is_tensor(imgs) then A.fail(op .. ': expected a tensor of images, got ' .. A.describe(imgs)) end
  fmt = fmt or 'NCHW'
  if fmt ~= 'NCHW' and fmt ~= 'NHWC' then
    A.fail(op .. ": dataformats must be 'NCHW' or 'NHWC', got " .. tostring(fmt))
  end
  if imgs:dim() ~= 4 then
    A.fail(('%s: dataformats %s needs a 4-d tensor, got shape %s'):format(op, fmt, A.shape_str(imgs)))
  end
  local x = imgs:detach():cpu()
  if fmt == 'NHWC' then x = x:permute(1, 4, 2, 3) end
  local n, c, h, w = x:size(1), x:size(2), x:size(3), x:size(4)
  if n == 0 then A.fail(op .. ': no images (shape ' .. A.shape_str(imgs) .. ')') end
  if c == 1 then x = x:expand(n, 3, h, w); c = 3 end
  local cols = math.min(n, 8)
  local rows = math.ceil(n / cols)
  if rows * cols > n then
    x = flow.cat({x, flow.zeros({rows * cols - n, c, h, w}, {dtype = x.dtype})}, 1)
  end
  return x:reshape(rows, cols, c, h, w):permute(3, 1, 4, 2, 5):reshape(c, rows * h, cols * w)
end

--- add_images(tag, imgs, global_step [, {dataformats = 'NCHW'}]): a batch of
-- images [N, C, H, W] (or 'NHWC') as one PNG grid of up to 8 per row, as
-- PyTorch's add_images writes it. Floats are in [0, 1]; uint8 as is.
function SummaryWriter:add_images(tag, imgs, step, opts)
  check_tag('add_images', tag)
  opts = A.check_options('add_images', opts, {'dataformats', 'walltime'})
  step = check_step('add_images', step)
  local png, h, w, c = M.encode_png(image_grid('add_images', imgs, opts.dataformats), 'CHW')
  self:_write(summary_event(opts.walltime or now(), step, image_value(tag, png, h, w, c)))
  return self
end

local function plugin_metadata(name, content)
  local pd = pb.writer()
  pb.string(pd, F.PluginData.plugin_name, name)
  if content then pb.bytes(pd, F.PluginData.content, content) end
  local md = pb.writer()
  pb.message(md, F.Metadata.plugin_data, pd)
  return md
end

--- pr_curve(labels, predictions, num_thresholds [, weights]) -> the 6 rows
-- {tp, fp, tn, fn, precision, recall} of num_thresholds numbers each, as
-- PyTorch's compute_curve: prediction p falls in bucket floor(p * (n - 1)),
-- counts are summed from each threshold up.
function M.pr_curve(labels, preds, n, weights)
  A.arg('pr_curve', 1, 'labels', labels, 'table')
  A.arg('pr_curve', 2, 'predictions', preds, 'table')
  A.arg('pr_curve', 3, 'num_thresholds', n, 'integer')
  A.arg('pr_curve', 4, 'weights', weights, 'table|nil')
  local tp_b, fp_b = {}, {}
  for i = 1, n do tp_b[i], fp_b[i] = 0, 0 end
  for i = 1, #preds do
    local p = preds[i]
    if p ~= p or p < 0 or p > 1 then
      A.fail(('add_pr_curve: predictions must be in [0, 1], got %s at %d'):format(tostring(p), i))
    end
    local l = labels[i]
    if l == true then l = 1 elseif l == false then l = 0 end
    local wt = weights and weights[i] or 1
    -- numpy.histogram(bucket, bins = n, range = (0, n - 1)): bin width
    -- (n - 1) / n, the last bin closed
    local b = math.floor(p * (n - 1))
    local bin = math.min(math.floor(b * n / (n - 1)), n - 1) + 1
    tp_b[bin] = tp_b[bin] + l * wt
    fp_b[bin] = fp_b[bin] + (1 - l) * wt
  end
  local tp, fp, tn, fn, prec, rec = {}, {}, {}, {}, {}, {}
  local st, sf = 0, 0
  for i = n, 1, -1 do
    st, sf = st + tp_b[i], sf + fp_b[i]
    tp[i], fp[i] = st, sf
  end
  for i = 1, n do
    tn[i], fn[i] = fp[1] - fp[i], tp[1] - tp[i]
    prec[i] = tp[i] / math.max(1e-7, tp[i] + fp[i])
    rec[i] = tp[i] / math.max(1e-7, tp[i] + fn[i])
  end
  return {tp, fp, tn, fn, prec, rec}
end

local function numbers_of(op, what, v)
  local flow = require 'oneflow'
  if flow.is_tensor(v) then v = v:detach():cpu():double():reshape(-1):totable() end
  if type(v) ~= 'table' then A.fail(('%s: %s must be a tensor or a list, got %s'):format(op, what, A.describe(v))) end
  return v
end

--- add_pr_curve(tag, labels, predictions, global_step [, {num_thresholds = 127, weights =}]):
-- a precision-recall curve for the pr_curves plugin; labels are 0/1 (or
-- booleans), predictions probabilities in [0, 1], one per label.
function SummaryWriter:add_pr_curve(tag, labels, predictions, step, opts)
  check_tag('add_pr_curve', tag)
  opts = A.check_options('add_pr_curve', opts, {'num_thresholds', 'weights', 'walltime'})
  step = check_step('add_pr_curve', step)
  local n = opts.num_thresholds or 127
  if type(n) ~= 'number' or n ~= math.floor(n) or n < 2 then
    A.fail('add_pr_curve: num_thresholds must be an integer >= 2, got ' .. A.describe(n))
  end
  local l = numbers_of('add_pr_curve', 'labels', labels)
  local p = numbers_of('add_pr_curve', 'predictions', predictions)
  local wt = opts.weights and numbers_of('add_pr_curve', 'weights', opts.weights)
  if #l ~= #p or (wt and #wt ~= #p) then
    A.fail(('add_pr_curve: labels (%d), predictions (%d)%s must have the same length'):format(
      #l, #p, wt and (' and weights (' .. #wt .. ')') or ''))
  end
  local rows = M.pr_curve(l, p, n, wt)
  local flat = {}
  for _, r in ipairs(rows) do for _, v in ipairs(r) do flat[#flat + 1] = v end end
  local content = pb.writer()
  pb.int(content, F.PrCurvePluginData.num_thresholds, n)
  local tw = pb.writer()
  pb.int(tw, F.Tensor.dtype, DT_FLOAT)
  pb.message(tw, F.Tensor.tensor_shape, shape_msg({6, n}))
  pb.packed_floats(tw, F.Tensor.float_val, flat)
  local val = pb.writer()
  pb.string(val, F.Value.tag, tag)
  pb.message(val, F.Value.metadata, plugin_metadata('pr_curves', pb.tostring(content)))
  pb.message(val, F.Value.tensor, tw)
  self:_write(summary_event(opts.walltime or now(), step, val))
  return self
end

-- a google.protobuf.Value of a hyperparameter (number, string or boolean)
local function pb_value(k, v)
  local w = pb.writer()
  if type(v) == 'number' then pb.double(w, F.PbValue.number_value, v)
  elseif type(v) == 'string' then pb.string(w, F.PbValue.string_value, v)
  elseif type(v) == 'boolean' then pb.int(w, F.PbValue.bool_value, v and 1 or 0)
  else A.fail(('add_hparams: hyperparameter %s must be a number, string or boolean, got %s'):format(
    tostring(k), A.describe(v))) end
  return w
end

local function hparams_value(tag, field, msg)
  local d = pb.writer()
  pb.message(d, field, msg)
  local val = pb.writer()
  pb.string(val, F.Value.tag, tag)
  pb.message(val, F.Value.metadata, plugin_metadata('hparams', pb.tostring(d)))
  return val
end

--- add_hparams(hparam_dict, metric_dict [, {run_name =}]): one run of the
-- hparams plugin, in log_dir/run_name (default: the time): the experiment
-- (hyperparameter and metric names), the session's values, and each metric
-- as a scalar at step 0, as PyTorch's add_hparams writes them.
function SummaryWriter:add_hparams(hparams, metrics, opts)
  opts = A.check_options('add_hparams', opts, {'run_name'})
  if type(hparams) ~= 'table' then A.fail('add_hparams: hparam_dict must be a table, got ' .. A.describe(hparams)) end
  if type(metrics) ~= 'table' then A.fail('add_hparams: metric_dict must be a table, got ' .. A.describe(metrics)) end
  local hk, mk = {}, {}
  for k in pairs(hparams) do hk[#hk + 1] = k end
  for k in pairs(metrics) do mk[#mk + 1] = k end
  table.sort(hk)
  table.sort(mk)
  local exp, ssi = pb.writer(), pb.writer()
  for _, k in ipairs(hk) do
    local v = hparams[k]
    local info = pb.writer()
    pb.string(info, F.HParamInfo.name, tostring(k))
    -- DataType: 1 string, 2 bool, 3 float64
    pb.int(info, F.HParamInfo.type, type(v) == 'string' and 1 or type(v) == 'boolean' and 2 or 3)
    pb.message(exp, F.Experiment.hparam_infos, info)
    local e = pb.writer()
    pb.string(e, F.MapEntry.key, tostring(k))
    pb.message(e, F.MapEntry.value, pb_value(k, v))
    pb.message(ssi, F.SessionStartInfo.hparams, e)
  end
  for _, k in ipairs(mk) do
    local name = pb.writer()
    pb.string(name, F.MetricName.tag, tostring(k))
    local info = pb.writer()
    pb.message(info, F.MetricInfo.name, name)
    pb.message(exp, F.Experiment.metric_infos, info)
  end
  local t = now()
  pb.double(ssi, F.SessionStartInfo.start_time_secs, t)
  local sei = pb.writer()
  pb.int(sei, F.SessionEndInfo.status, 1)   -- STATUS_SUCCESS
  pb.double(sei, F.SessionEndInfo.end_time_secs, t)
  local run = opts.run_name or ('%.6f'):format(t)
  local w = SummaryWriter(self.log_dir .. '/' .. run)
  local H = F.HParamsPluginData
  w:_write(summary_event(t, nil, hparams_value('_hparams_/experiment', H.experiment, exp)))
  w:_write(summary_event(t, nil, hparams_value('_hparams_/session_start_info', H.session_start_info, ssi)))
  w:_write(summary_event(t, nil, hparams_value('_hparams_/session_end_info', H.session_end_info, sei)))
  for _, k in ipairs(mk) do w:add_scalar(k, number_of('add_hparams', metrics[k], k), 0, t) end
  w:close()
  return self
end

--- add_text(tag, text, global_step): the text plugin's string tensor (the
-- tag becomes tag/text_summary, as PyTorch writes it).
function SummaryWriter:add_text(tag, text, step, walltime)
  check_tag('add_text', tag)
  if type(text) ~= 'string' then A.fail('add_text: text must be a string, got ' .. A.describe(text)) end
  step = check_step('add_text', step)
  local md = plugin_metadata('text')
  local tw = pb.writer()
  pb.int(tw, F.Tensor.dtype, DT_STRING)
  pb.message(tw, F.Tensor.tensor_shape, shape_msg({1}))
  pb.bytes(tw, F.Tensor.string_val, text)
  local val = pb.writer()
  pb.string(val, F.Value.tag, tag .. '/text_summary')
  pb.message(val, F.Value.metadata, md)
  pb.message(val, F.Value.tensor, tw)
  self:_write(summary_event(walltime or now(), step, val))
  return self
end

--- add_graph(graph) for a compiled nn.Graph, or add_graph(module, inputs...)
-- (the module is traced once through an nn.Graph). Returns the node count.
function SummaryWriter:add_graph(model, ...)
  local flow = require 'oneflow'
  local GV = require 'oneflow.nn.graph_view'
  local g = model
  if flow.nn.is_module(model) then
    local nargs = select('#', ...)
    if nargs == 0 then A.fail('add_graph: give example inputs to trace the module with') end
    local args = {...}
    if nargs == 1 and type(args[1]) == 'table' and not flow.is_tensor(args[1]) then args = args[1] end
    local Wrap = flow.nn.Graph:subclass('TracedModule')
    function Wrap.__init(gs, m) flow.nn.Graph.__init(gs); gs.m = m end
    function Wrap.build(gs, ...) return gs.m(...) end
    g = Wrap(model)
    g(unpack(args))
  elseif type(model) ~= 'table' or not rawget(model, '_cache') then
    A.fail('add_graph: expected an nn.Graph or an nn.Module, got ' .. A.describe(model))
  end
  local bytes, count = M.graph_def(GV.ir(g, 'add_graph'))
  self:_write(event(now(), nil, function(e) pb.bytes(e, F.Event.graph_def, bytes) end))
  return count
end

--- writer:flush(): writes buffered events to disk.
function SummaryWriter:flush()
  if self.file then self.file:flush() end
  for _, w in pairs(self.children) do w:flush() end
  return self
end

--- writer:close(): flushes and closes the event file (and those of add_scalars' children).
function SummaryWriter:close()
  for _, w in pairs(self.children) do w:close() end
  if self.file then self.file:close(); self.file = nil end
end

function SummaryWriter:__tostring() return ('SummaryWriter(%s)'):format(self.log_dir) end

return M
