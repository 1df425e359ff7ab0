-- oneflow.distributed.placement: placements (a device type and a 1-D list or
-- 2-D grid of ranks) and SBP values (split(dim), broadcast, partial_sum).
-- Ranks are 0-based; split dims are 1-based, as every Lua dim.
local comm = require 'oneflow.distributed.comm'

local M = {}

------------------------------------------------------------------ SBP
local Sbp = require('oneflow._args').value_type({})
Sbp.__index = Sbp
Sbp.__tostring = function(s)
  if s.kind == 'S' then return ('oneflow.sbp.split(dim=%d)'):format(s.dim) end
  return s.kind == 'B' and 'oneflow.sbp.broadcast' or 'oneflow.sbp.partial_sum'
end
M.Sbp = Sbp

local splits = {}
local sbp = {
  broadcast = setmetatable({kind = 'B'}, Sbp),
  partial_sum = setmetatable({kind = 'P'}, Sbp),
}
--- flow.sbp.split(dim): dim is 1-based (negative dims are resolved against
-- the tensor when used). Values are interned: compare with ==.
function sbp.split(dim)
  if type(dim) ~= 'number' or dim ~= math.floor(dim) or dim == 0 then
    error(('sbp.split: dim must be a nonzero integer (1-based), got %s'):format(tostring(dim)), 2)
  end
  local s = splits[dim]
  if not s then
    s = setmetatable({kind = 'S', dim = dim}, Sbp)
    splits[dim] = s
  end
  return s
end
M.sbp = sbp

function M.is_sbp(x) return getmetatable(x) == Sbp end

-- The sbp a gradient lives in: the gradient of a broadcast value is a sum of
-- every copy's contribution (partial), that of a partial value is the same on
-- every rank (broadcast); splits stay splits.
function M.dual(s)
  if s.kind == 'B' then return sbp.partial_sum end
  if s.kind == 'P' then return sbp.broadcast end
  return s
end

------------------------------------------------------------------ placement
local Placement = require('oneflow._args').value_type({})
Placement.__index = Placement
M.Placement = Placement

local function fmt_ranks(p)
  if #p.hierarchy == 1 then return '[' .. table.concat(p.ranks, ', ') .. ']' end
  local rows = {}
  for i = 1, p.hierarchy[1] do
    local row = {}
    for j = 1, p.hierarchy[2] do row[j] = p.ranks[(i - 1) * p.hierarchy[2] + j] end
    rows[i] = '[' .. table.concat(row, ', ') .. ']'
  end
  return '[' .. table.concat(rows, ', ') .. ']'
end
Placement.__tostring = function(p)
  return ('oneflow.placement(type="%s", ranks=%s)'):format(p.type, fmt_ranks(p))
end
Placement.__eq = function(a, b) return a.key == b.key end

local cache = {}
--- flow.placement(type, ranks): type 'cpu' (or 'cuda'); ranks a list
-- {0, 1, 2, 3} or a grid {{0, 1}, {2, 3}} of distinct world ranks.
function M.placement(typ, ranks)
  if type(typ) == 'table' and ranks == nil then typ, ranks = typ.type, typ.ranks end
  if typ ~= 'cpu' and typ ~= 'cuda' then
    error(('placement: type must be "cpu" or "cuda", got %s'):format(tostring(typ)), 2)
  end
  if type(ranks) == 'number' then ranks = {ranks} end
  if type(ranks) ~= 'table' or #ranks == 0 then
    error('placement: ranks must be a non-empty list or grid of ranks', 2)
  end
  local flat, hierarchy = {}
  if type(ranks[1]) == 'table' then
    local cols = #ranks[1]
    for i, row in ipairs(ranks) do
      if type(row) ~= 'table' or #row ~= cols or cols == 0 then
        error(('placement: row %d of the grid has %s ranks, expected %d (rows must be equal)')
              :format(i, type(row) == 'table' and #row or type(row), cols), 2)
      end
      for _, r in ipairs(row) do flat[#flat + 1] = r end
    end
    hierarchy = {#ranks, cols}
  else
    for _, r in ipairs(ranks) do flat[#flat + 1] = r end
    hierarchy = {#flat}
  end
  local world = comm.env.get_world_size()
  local seen = {}
  for _, r in ipairs(flat) do
    if type(r) ~= 'number' or r ~= math.floor(r) or r < 0 or r >= world then
      error(('placement: rank %s is not one of the %d processes (ranks are 0..%d)')
            :format(tostring(r), world, world - 1), 2)
    end
    if seen[r] then error(('placement: rank %d is listed twice'):format(r), 2) end
    seen[r] = true
  end
  local p = setmetatable({type = typ, ranks = flat, hierarchy = hierarchy}, Placement)
  p.key = typ .. ':' .. fmt_ranks(p)
  if cache[p.key] then return cache[p.key] end
  local me = comm.env.get_rank()
  for i, r in ipairs(flat) do
    if r == me then p.index = i end   -- 1-based position of this rank
  end
  if p.index then
    local i = p.index - 1
    if #hierarchy == 1 then p.coord = {i}
    else p.coord = {math.floor(i / hierarchy[2]), i % hierarchy[2]} end
  end
  cache[p.key] = p
  return p
end

function Placement:ndim() return #self.hierarchy end
--- The device of this rank's shards: the CPU, or for "cuda" the GPU of the
-- process's local rank (modulo the GPUs of the host), as OneFlow does.
function Placement:device()
  local types = require 'oneflow.types'
  if self.type == 'cpu' then return types.device('cpu') end
  local cuda = require 'oneflow.cuda'
  local n = math.max(cuda.device_count(), 1)
  return types.device('cuda', comm.env.get_local_rank() % n)
end
function Placement:has_me() return self.index ~= nil end
function Placement:size() return #self.ranks end

--- The group of ranks along grid axis k through this rank's coordinate.
function Placement:axis_group(k)
  if #self.hierarchy == 1 then return comm.new_group(self.ranks) end
  local c, h, ranks = self.coord, self.hierarchy, {}
  if k == 1 then
    for i = 0, h[1] - 1 do ranks[#ranks + 1] = self.ranks[i * h[2] + c[2] + 1] end
  else
    for j = 0, h[2] - 1 do ranks[#ranks + 1] = self.ranks[c[1] * h[2] + j + 1] end
  end
  return comm.new_group(ranks)
end

function Placement:group() return comm.new_group(self.ranks) end

return M
