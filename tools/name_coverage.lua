-- tools/name_coverage.lua: how many of PyTorch's extended-ring names
-- (torch.fft, torch.special, torch.linalg, torch.distributions; the list is
-- spec/fixtures/torch_names.txt, written by tools/torch_names.py) exist in
-- flow.fft / flow.special / flow.linalg / flow.distributions.
--   luajit tools/name_coverage.lua [--missing]
-- prints one line per ring ("special 56/56 100.0%"), then "total N/M P%";
-- with --missing, the missing names of each ring after its line.
local flow = require 'oneflow'

local list = arg and arg[0] and arg[0]:match('^(.*)tools/name_coverage.lua$') or ''
local f = assert(io.open(list .. 'spec/fixtures/torch_names.txt'))
local rings, order = {}, {}
for line in f:lines() do
  local ring, name = line:match('^(%w+) ([%w_]+)$')
  if ring then
    if not rings[ring] then rings[ring] = {}; order[#order + 1] = ring end
    table.insert(rings[ring], name)
  end
end
f:close()

local show_missing = arg and arg[1] == '--missing'
local have, all = 0, 0
for _, ring in ipairs(order) do
  local ns = flow[ring]
  local missing = {}
  for _, name in ipairs(rings[ring]) do
    if type(ns) ~= 'table' or ns[name] == nil then missing[#missing + 1] = name end
  end
  local n = #rings[ring]
  print(('%s %d/%d %.1f%%'):format(ring, n - #missing, n, 100 * (n - #missing) / n))
  if show_missing and #missing > 0 then print('  missing: ' .. table.concat(missing, ' ')) end
  have, all = have + n - #missing, all + n
end
print(('total %d/%d %.1f%%'):format(have, all, 100 * have / all))
