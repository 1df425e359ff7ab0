-- flowvision.datasets.ImageFolder / DatasetFolder: torchvision's folder datasets.
--
--   root/dog/xxx.png, root/dog/nested/xxy.jpg, root/cat/123.jpg ...
--   local ds = vision.datasets.ImageFolder(root, {transform = tf, target_transform =,
--                                                 extensions = {'.jpg', '.png'}, is_valid_file =,
--                                                 loader =, allow_empty = false})
--   ds.classes (sorted folder names), ds.class_to_idx (name -> 1-based index),
--   ds.samples ({path, index} pairs, by class then path), ds.targets.
--   local img, label = ds:get(1)   -- transform(uint8 [3, H, W]) or the uint8 image; label 1-based
--
-- Images are decoded in C (vision.io.read_image, RGB); a corrupt file raises
-- an error naming it. Folders are walked recursively (symbolic links
-- followed, 32 levels at most), names sorted bytewise as Python's sorted().
local A = require 'oneflow._args'
local ffi = require 'ffi'
local flow = require 'oneflow'
local vio = require 'flowvision.io'

local M = {}

-- A private view of struct dirent (glibc, x86-64 / aarch64 layout).
ffi.cdef [[
struct of_vision_dirent { uint64_t d_ino; int64_t d_off; unsigned short d_reclen;
                          unsigned char d_type; char d_name[256]; };
]]
for _, d in ipairs({'void *opendir(const char *name);', 'void *readdir(void *dir);',
                    'int closedir(void *dir);'}) do
  pcall(ffi.cdef, d)
end
pcall(ffi.cdef, 'char *strerror(int errnum);')
local C = ffi.C
local DT_DIR, DT_REG, DT_LNK, DT_UNKNOWN = 4, 8, 10, 0

--- list_dir(path) -> sorted list of {name, is_dir}; nil, message when it cannot be opened.
function M.list_dir(path)
  local d = C.opendir(path)
  if d == nil then return nil, ('cannot open directory %s (%s)'):format(path, ffi.string(C.strerror(ffi.errno()))) end
  local out = {}
  while true do
    local e = C.readdir(d)
    if e == nil then break end
    e = ffi.cast('struct of_vision_dirent *', e)
    local name = ffi.string(e.d_name)
    if name ~= '.' and name ~= '..' then
      local t, is_dir = e.d_type, false
      if t == DT_DIR then is_dir = true
      elseif t == DT_LNK or t == DT_UNKNOWN then
        local sub = C.opendir(path .. '/' .. name)
        if sub ~= nil then C.closedir(sub); is_dir = true end
      elseif t ~= DT_REG then
        name = nil   -- sockets, fifos, devices
      end
      if name then out[#out + 1] = {name, is_dir} end
    end
  end
  C.closedir(d)
  table.sort(out, function(a, b) return a[1] < b[1] end)
  return out
end
M.IMG_EXTENSIONS = {'.jpg', '.jpeg', '.png'}

local function has_extension(name, extensions)
  local lower = name:lower()
  for _, ext in ipairs(extensions) do
    if lower:sub(-#ext) == ext:lower() then return true end
  end
  return false
end

--- find_classes(dir) -> sorted class names, class_to_idx (1-based)
function M.find_classes(dir)
  local entries, err = M.list_dir(dir)
  if not entries then error('ImageFolder: ' .. err, 3) end
  local classes, idx = {}, {}
  for _, e in ipairs(entries) do
    if e[2] then
      classes[#classes + 1] = e[1]
      idx[e[1]] = #classes
    end
  end
  if #classes == 0 then error(('ImageFolder: couldn\'t find any class folder in %s'):format(dir), 3) end
  return classes, idx
end

local function walk(dir, depth, valid, out)
  if depth > 32 then error(('ImageFolder: %s is nested more than 32 levels deep (a link loop?)'):format(dir), 4) end
  local entries, err = M.list_dir(dir)
  if not entries then error('ImageFolder: ' .. err, 4) end
  -- os.walk order: the files of a folder, then each subfolder, all sorted
  for _, e in ipairs(entries) do
    local path = dir .. '/' .. e[1]
    if not e[2] and valid(path) then out[#out + 1] = path end
  end
  for _, e in ipairs(entries) do
    if e[2] then walk(dir .. '/' .. e[1], depth + 1, valid, out) end
  end
end

--- make_dataset(dir, class_to_idx, extensions, is_valid_file, allow_empty) -> samples
function M.make_dataset(dir, class_to_idx, extensions, is_valid_file, allow_empty)
  if extensions and is_valid_file then
    error('ImageFolder: give extensions or is_valid_file, not both', 3)
  end
  local valid = is_valid_file or function(p) return has_extension(p, extensions) end
  local names = {}
  for name in pairs(class_to_idx) do names[#names + 1] = name end
  table.sort(names, function(a, b) return class_to_idx[a] < class_to_idx[b] end)
  local samples, empty = {}, {}
  for _, name in ipairs(names) do
    local files = {}
    walk(dir .. '/' .. name, 1, valid, files)
    for _, p in ipairs(files) do samples[#samples + 1] = {p, class_to_idx[name]} end
    if #files == 0 then empty[#empty + 1] = name end
  end
  if #empty > 0 and not allow_empty then
    local msg = ('ImageFolder: found no valid file for the classes %s in %s'):format(table.concat(empty, ', '), dir)
    if extensions then msg = msg .. '. Supported extensions are: ' .. table.concat(extensions, ', ') end
    error(msg, 3)
  end
  return samples
end

--- The default loader: the file decoded as uint8 RGB [3, H, W].
function M.default_loader(path) return vio.read_image(path, {mode = 'rgb'}) end

local Dataset = flow.utils.data.Dataset
local DatasetFolder = Dataset:subclass('DatasetFolder')
M.DatasetFolder = DatasetFolder

--- DatasetFolder(root, {loader =, extensions =, transform =, target_transform =,
--                       is_valid_file =, allow_empty = false})
function DatasetFolder:__init(root, opts)
  opts = A.check_options('DatasetFolder', opts, {
    allow_empty = true, extensions = true, is_valid_file = true, loader = true,
    target_transform = true, transform = true})
  if type(root) ~= 'string' then error(self.__name .. ': root must be a directory path, got ' .. type(root), 3) end
  self.root = root
  self.loader = opts.loader or M.default_loader
  local extensions = opts.extensions
  if extensions == nil and opts.is_valid_file == nil then extensions = M.IMG_EXTENSIONS end
  if type(extensions) == 'string' then extensions = {extensions} end
  self.extensions = extensions
  self.classes, self.class_to_idx = M.find_classes(root)
  self.samples = M.make_dataset(root, self.class_to_idx, extensions, opts.is_valid_file, opts.allow_empty)
  self.imgs = self.samples
  local targets = {}
  for i, s in ipairs(self.samples) do targets[i] = s[2] end
  self.targets = targets
  self.transform, self.target_transform = opts.transform, opts.target_transform
end

function DatasetFolder:len() return #self.samples end

function DatasetFolder:get(i)
  local n = #self.samples
  if type(i) ~= 'number' or i < 1 or i > n or i ~= math.floor(i) then
    error(('%s: index %s out of range for a dataset of size %d'):format(self.__name, tostring(i), n), 2)
  end
  local path, target = self.samples[i][1], self.samples[i][2]
  local sample = self.loader(path)
  if self.transform then sample = self.transform(sample) end
  if self.target_transform then target = self.target_transform(target) end
  return sample, target
end

M.ImageFolder = DatasetFolder:subclass('ImageFolder')

return M
