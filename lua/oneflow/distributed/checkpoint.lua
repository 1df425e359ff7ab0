-- oneflow.distributed.checkpoint: saving and loading state dicts of global
-- tensors (flow.distributed.save / flow.distributed.load). Collective: every
-- rank calls them with the same names, in the same order.
--
--   flow.distributed.save(net, 'ck.safetensors')               -- rank 0 gathers
--   flow.distributed.save(net, 'ck_dir', {gather = false})      -- each rank its shard
--   flow.distributed.load('ck.safetensors', net2)               -- any placement/sbp
--   local full = flow.distributed.load('ck_dir')                 -- name -> local tensor
--
-- Gathered: one safetensors file written by the root rank with the full
-- tensors (readable by any safetensors reader). Sharded: a directory with
-- one file per rank that holds pieces (shard-<gen>-r<rank>.safetensors) and
-- index.safetensors, written by rank 0 last, that lists every piece (its
-- logical offset and size). A broadcast axis is written by its first rank
-- only; partial sums are reduced first. Each piece carries a CRC-32 that
-- loading checks. Files are written atomically (temporary file, fsync,
-- rename); a sharded save points the index at the new generation only once
-- every rank has written, then removes the previous generation's files, so
-- an interrupted save leaves the old checkpoint loadable.
--
-- Loading reads, on each rank, only the pieces that overlap the shard of
-- each target tensor under its own placement and sbp, so a checkpoint saved
-- on one layout loads into any other.
local ffi = require 'ffi'
local T = require 'oneflow.tensor'
local json = require 'oneflow.utils.json'
local autograd = require 'oneflow.autograd'
local serialization = require 'oneflow.serialization'
local zip = require 'oneflow.io.zip'
local comm = require 'oneflow.distributed.comm'
local PL = require 'oneflow.distributed.placement'
local B = require 'oneflow.distributed.boxing'
local A = require 'oneflow._args'

pcall(ffi.cdef, 'int mkdir(const char *path, unsigned int mode);')

local M = {}
local FORMAT, KEY = 'oneflow-lua-distributed', 'oneflow.distributed'
local st = serialization.safetensors

local function is_global(x) return type(x) == 'table' and x.is_global == true end

local function crc_of(t)
  local c = t:cpu():contiguous()   -- crc32 reads host memory
  return zip.crc32(c:data_ptr(), c:numel() * c:element_size()), c
end

local function sbp_strs(s)
  local r = {}
  for i, v in ipairs(s) do r[i] = v.kind == 'S' and ('S' .. v.dim) or v.kind end
  return r
end

-- the sbp with partial axes made broadcast
local function no_partial(s)
  local r, any = {}, false
  for i, v in ipairs(s) do
    if v.kind == 'P' then r[i], any = PL.sbp.broadcast, true else r[i] = v end
  end
  return r, any
end

-- module or flat table -> names (sorted) and the table
local function state_of(obj, op)
  local tbl = obj
  if type(obj) == 'table' and type(obj.state_dict) == 'function' then tbl = obj:state_dict() end
  if type(tbl) ~= 'table' or T.is_tensor(tbl) or is_global(tbl) then
    error(('%s: expected a module or a table name -> tensor, got %s'):format(op, type(obj)), 3)
  end
  local names = {}
  for k, v in pairs(tbl) do
    if type(k) ~= 'string' then
      error(('%s: state keys must be strings, got %s'):format(op, type(k)), 3)
    end
    if not (T.is_tensor(v) or is_global(v)) then
      error(('%s: %s is a %s, not a tensor'):format(op, k, type(v)), 3)
    end
    names[#names + 1] = k
  end
  table.sort(names)
  return names, tbl
end

-- Every rank learns whether any rank failed; the failing ranks' messages
-- stay theirs, the others name them.
local function agree(ok, err, op)
  local w = comm.world()
  local flag = T.flow.tensor({ok and 0 or 1}, {dtype = 'int32'})
  local all = comm.all_gather(flag)
  local bad = {}
  for i, f in ipairs(all) do if f[1]:item() ~= 0 then bad[#bad + 1] = i - 1 end end
  if #bad == 0 then return end
  if not ok then error(err, 0) end
  error(('%s: failed on rank %s (see its error); nothing was changed here on rank %d')
        :format(op, table.concat(bad, ', '), w.rank), 0)
end

local function tensor_info(name, v)
  local info = {dtype = tostring(v.dtype):gsub('^oneflow%.', ''),
                shape = v:size():totable()}
  if is_global(v) then
    info.sbp = sbp_strs(v.sbp)
    info.ranks, info.hierarchy = v.placement.ranks, v.placement.hierarchy
  end
  info.name = name
  return info
end

------------------------------------------------------------------ saving
local function save_gathered(names, tbl, path, root)
  local me = comm.env.get_rank()
  local Proot = PL.placement('cpu', {root})
  local out, meta = {}, {format = FORMAT, version = 1, mode = 'gather', tensors = {}}
  for _, name in ipairs(names) do
    local v = tbl[name]
    local full
    if is_global(v) then
      local g = v:to_global(Proot, PL.sbp.broadcast)   -- a collective over both placements
      if me == root then full = g:to_local() end
    elseif me == root then
      full = v
    end
    local info = tensor_info(name, v)
    if me == root then
      local crc, c = crc_of(full:detach())
      out[name] = c
      info.crc = crc
    end
    meta.tensors[#meta.tensors + 1] = info
  end
  local ok, err = true, nil
  if me == root then
    ok, err = pcall(st.save_file, out, path, {[KEY] = json.encode(meta)})
  end
  agree(ok, err, 'flow.distributed.save')
end

local function read_index(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  f:close()
  local ok, _, md = pcall(st.load_file, path)
  if not ok or not md[KEY] then return nil end
  local ok2, idx = pcall(json.decode, md[KEY])
  return ok2 and idx or nil
end

local function save_sharded(names, tbl, dir, root)
  local me = comm.env.get_rank()
  if me == root then ffi.C.mkdir(dir, tonumber('755', 8)) end
  -- a generation number every rank agrees on names this save's files
  local gen = T.flow.tensor({me == root and (os.time() * 1000 + math.random(0, 999)) or 0},
                            {dtype = 'int64'})
  comm.broadcast(gen, root)
  gen = string.format('%d', gen[1]:item())
  local file = ('shard-%s-r%d.safetensors'):format(gen, me)
  local pieces, out, infos = {}, {}, {}
  for _, name in ipairs(names) do
    local v = tbl[name]
    infos[#infos + 1] = tensor_info(name, v)
    local shape = v:size():totable()
    if is_global(v) then
      local P = v.placement
      local s, any_p = no_partial(v.sbp)
      local g = any_p and v:to_global(P, s) or v
      if P:has_me() then
        local first = true
        for k, x in ipairs(s) do if x.kind == 'B' and P.coord[k] ~= 0 then first = false end end
        if first then
          local size, start = B.shard(shape, P.hierarchy, s, P.coord)
          local key = name
          local crc, c = crc_of(g:to_local():detach())
          out[key] = c
          pieces[#pieces + 1] = {name = name, key = key, file = file, start = start,
                                 size = size, crc = crc}
        end
      end
    elseif me == root then
      local start = {}
      for i = 1, #shape do start[i] = 0 end
      local crc, c = crc_of(v:detach())
      out[name] = c
      pieces[#pieces + 1] = {name = name, key = name, file = file, start = start, size = shape,
                             crc = crc}
    end
  end
  local ok, err = true, nil
  if #pieces > 0 then
    ok, err = pcall(st.save_file, out, dir .. '/' .. file,
                    {[KEY] = json.encode({format = FORMAT, version = 1, gen = gen})})
  end
  agree(ok, err, 'flow.distributed.save')
  -- the piece lists meet at the root, which writes the index last
  local mine = json.encode(pieces)
  local bytes = T.flow.tensor({string.byte(mine, 1, -1)}, {dtype = 'uint8'})
  if #mine == 0 then bytes = T.flow.zeros(0, {dtype = 'uint8'}) end
  local lists = comm.all_gather(bytes)
  ok, err = true, nil
  if me == root then
    ok, err = pcall(function()
      local all = {}
      for _, l in ipairs(lists) do
        local s = string.char(unpack(l:totable()))
        for _, p in ipairs(json.decode(s)) do all[#all + 1] = p end
      end
      local index = dir .. '/index.safetensors'
      local old = read_index(index)
      st.save_file({}, index, {[KEY] = json.encode({format = FORMAT, version = 1,
                                                    mode = 'shard', gen = gen,
                                                    tensors = infos, pieces = all})})
      if old and old.pieces and old.gen ~= gen then
        local seen = {}
        for _, p in ipairs(old.pieces) do
          if not seen[p.file] then
            seen[p.file] = true
            os.remove(dir .. '/' .. p.file)
          end
        end
      end
    end)
  end
  agree(ok, err, 'flow.distributed.save')
end

--- flow.distributed.save(state, path[, {gather = true, root = 0}]): state
-- is a module or a table name -> tensor (global or local). gather: the
-- root rank writes one file with the full tensors; gather = false: path is
-- a directory where each rank writes its shard.
function M.save(obj, path, opts)
  local op = 'flow.distributed.save'
  if type(path) ~= 'string' or path == '' then
    error(op .. ': expected a path (string), got ' .. tostring(path), 2)
  end
  opts = A.check_options('distributed.checkpoint.save', opts, {gather = true, root = true})
  local root = opts.root or 0
  if type(root) ~= 'number' or root < 0 or root >= comm.env.get_world_size() then
    error(('%s: root %s is not a rank (0..%d)'):format(op, tostring(root),
          comm.env.get_world_size() - 1), 2)
  end
  local names, tbl = state_of(obj, op)
  autograd.no_grad(function()
    if opts.gather == false then save_sharded(names, tbl, path, root)
    else save_gathered(names, tbl, path, root) end
  end)
end

------------------------------------------------------------------ loading
local function is_dir(path)
  local f = io.open(path .. '/index.safetensors', 'rb')
  if f then f:close() return true end
  return false
end

-- Reads the checkpoint's description: tensors (by name) and pieces (by name).
local function open_checkpoint(path, op)
  local idx, files = nil, {}
  if is_dir(path) then
    local okr, _, md = pcall(st.load_file, path .. '/index.safetensors')
    if not okr then error(('%s: %s'):format(op, tostring(_)), 0) end
    idx = md[KEY] and json.decode(md[KEY])
    if not idx or idx.format ~= FORMAT or idx.mode ~= 'shard' then
      error(('%s: %s/index.safetensors is not a sharded oneflow checkpoint index'):format(op, path), 0)
    end
  else
    local f = io.open(path, 'rb')
    if not f then error(('%s: %s: no such file or checkpoint directory'):format(op, path), 0) end
    f:close()
    local okr, tensors, md = pcall(st.load_file, path)
    if not okr then error(('%s: %s'):format(op, tostring(tensors)), 0) end
    files[path] = tensors
    if md[KEY] then idx = json.decode(md[KEY]) end
    if not idx then   -- a plain safetensors file: full tensors
      idx = {mode = 'gather', tensors = {}}
      for name, t in pairs(tensors) do
        idx.tensors[#idx.tensors + 1] = {name = name, shape = t:size():totable()}
      end
    end
    idx.pieces = {}
    for _, info in ipairs(idx.tensors) do
      local start = {}
      for i = 1, #info.shape do start[i] = 0 end
      idx.pieces[#idx.pieces + 1] = {name = info.name, key = info.name, file = path,
                                     start = start, size = info.shape, crc = info.crc}
    end
  end
  local by_name, pieces = {}, {}
  for _, info in ipairs(idx.tensors) do by_name[info.name] = info end
  for _, p in ipairs(idx.pieces) do
    pieces[p.name] = pieces[p.name] or {}
    table.insert(pieces[p.name], p)
  end
  return {path = path, dir = is_dir(path), tensors = by_name, pieces = pieces, files = files,
          checked = {}}
end

local function piece_tensor(ck, p, op)
  local file = ck.dir and (ck.path .. '/' .. p.file) or p.file
  local tensors = ck.files[file]
  if not tensors then
    local f = io.open(file, 'rb')
    if not f then
      error(('%s: %s: the shard file %s is missing'):format(op, ck.path, p.file), 0)
    end
    f:close()
    local okr, res = pcall(st.load_file, file)
    if not okr then error(('%s: %s'):format(op, tostring(res)), 0) end
    tensors = res
    ck.files[file] = tensors
  end
  local t = tensors[p.key]
  if t == nil then
    error(('%s: %s: %s lacks the piece %s of tensor %s'):format(op, ck.path, file, p.key,
          p.name), 0)
  end
  local ck_key = file .. '\0' .. p.key
  if p.crc and not ck.checked[ck_key] then
    if crc_of(t) ~= p.crc then
      error(('%s: %s: tensor %s in %s fails its CRC-32 check (the file is corrupt)')
            :format(op, ck.path, p.name, file), 0)
    end
    ck.checked[ck_key] = true
  end
  return t
end

-- The region [start, start + size) of tensor `name` assembled from pieces.
local function region(ck, name, start, size, dtype, op)
  local out = T.flow.zeros(size, {dtype = dtype})
  local covered, want = 0, 1
  for i = 1, #size do want = want * size[i] end
  for _, p in ipairs(ck.pieces[name] or {}) do
    local lo, n, vol = {}, {}, 1
    for d = 1, #size do
      local a = math.max(start[d], p.start[d])
      local b = math.min(start[d] + size[d], p.start[d] + p.size[d])
      lo[d], n[d] = a, b - a
      vol = vol * math.max(0, b - a)
    end
    if vol > 0 then
      local src = piece_tensor(ck, p, op)
      local dst = out
      for d = 1, #size do
        src = src:narrow(d, lo[d] - p.start[d] + 1, n[d])
        dst = dst:narrow(d, lo[d] - start[d] + 1, n[d])
      end
      dst:copy_(src)
      covered = covered + vol
    end
  end
  if covered ~= want and want > 0 then
    error(('%s: %s: the checkpoint covers %d of the %d elements of %s needed on rank %d')
          :format(op, ck.path, covered, want, name, comm.env.get_rank()), 0)
  end
  return out
end


--- flow.distributed.load(path[, target]): target a module or a table
-- name -> tensor (global or local): each is filled in place with its own
-- shard of the saved value (any placement and sbp; partial targets get the
-- value on the first rank of each partial axis). Without a target, returns
-- name -> full local tensor. Collective when the target has global tensors.
function M.load(path, target)
  local op = 'flow.distributed.load'
  if type(path) ~= 'string' or path == '' then
    error(op .. ': expected a path (string), got ' .. tostring(path), 2)
  end
  local ck = open_checkpoint(path, op)
  if target == nil then
    local res = {}
    for name, info in pairs(ck.tensors) do
      local z = {}
      for i = 1, #info.shape do z[i] = 0 end
      res[name] = region(ck, name, z, info.shape, info.dtype, op)
    end
    return res
  end
  local names, tbl = state_of(target, op)
  local missing = {}
  for _, name in ipairs(names) do
    if not ck.tensors[name] then missing[#missing + 1] = name end
  end
  if #missing > 0 then
    error(('%s: %s has no tensor named %s'):format(op, path, table.concat(missing, ', ')), 2)
  end
  autograd.no_grad(function()
    for _, name in ipairs(names) do
      local v, info = tbl[name], ck.tensors[name]
      local shape = v:size():totable()
      if A.shape_str(shape, ', ') ~= A.shape_str(info.shape, ', ') then
        error(('%s: %s: tensor %s has shape %s in the checkpoint but %s in the target')
              :format(op, path, name, A.shape_str(info.shape, ', '), A.shape_str(shape, ', ')), 0)
      end
      if is_global(v) then
        local P = v.placement
        if P:has_me() then
          local s, any_p = no_partial(v.sbp)
          local size, start = B.shard(shape, P.hierarchy, s, P.coord)
          local piece = region(ck, name, start, size, v.dtype, op)
          if any_p then piece = B.box(piece, shape, P, s, P, v.sbp, v.dtype) end
          v:to_local():copy_(piece)
        end
      else
        local z = {}
        for i = 1, #shape do z[i] = 0 end
        v:copy_(region(ck, name, z, shape, v.dtype, op))
      end
    end
  end)
  return target
end

return M
