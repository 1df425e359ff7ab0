-- oneflow.utils.atomic: files that appear whole or not at all (flow.save,
-- flow.safetensors.save_file, nn.Graph:save, flow.save_torch, flow.onnx).
--
--   local h = atomic.open(path)          -- raises 'cannot create ...'
--   ... C.fwrite(..., h.f) ...
--   atomic.commit(h)                     -- or atomic.abort(h) on error
--
-- Where the file system has O_TMPFILE (ext4, xfs, btrfs, tmpfs) the data is
-- written to an unnamed inode in the target's directory: a writer killed
-- at any moment (SIGKILL, OOM) leaves nothing behind, since the kernel frees
-- an inode with no name when its last descriptor closes. On commit the
-- data is flushed and fsync'ed, the inode is linked to a temporary name
-- (linkat through /proc/self/fd) and renamed over the target, then the
-- directory is fsync'ed. Elsewhere (no O_TMPFILE, no /proc) the data goes
-- to the temporary name itself, as before.
--
-- Temporary names are "<target>.tmp-<pid>-<n>". A writer killed between
-- the link and the rename (microseconds with O_TMPFILE; the whole write
-- without) leaves one; every open() removes those of dead writers in the
-- same directory: the pid is not alive (kill(pid, 0) fails with ESRCH), or
-- it is this process's own pid but not one of its saves in flight (a file
-- of an earlier process that had the same pid). A temporary file of a
-- writer that is alive is never touched.
local ffi = require 'ffi'
local P = require 'oneflow.utils.posix'

for _, d in ipairs({
  'void *fdopen(int fd, const char *mode);',
  'int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags);',
  'int access(const char *path, int mode);',
  'void *opendir(const char *name);',
  'void *readdir(void *dir);',
  'int closedir(void *dir);',
  'char *strstr(const char *haystack, const char *needle);',
}) do pcall(ffi.cdef, d) end
-- glibc's struct dirent on LP64 Linux
pcall(ffi.cdef, [[typedef struct of_dirent { uint64_t d_ino; int64_t d_off; uint16_t d_reclen;
                                            uint8_t d_type; char d_name[256]; } of_dirent;]])

local C = P.C
local format = string.format

local M = {}
M._hooks = {}   -- for tests: force_named = true writes to the temporary name

local O_WRONLY, O_CREAT, O_EXCL, O_CLOEXEC = 1, 64, 128, 0x80000
local O_TMPFILE = ({x64 = 0x410000, arm64 = 0x404000})[ffi.arch]
local AT_FDCWD, AT_SYMLINK_FOLLOW = -100, 0x400
local ESRCH, EISDIR, EINVAL, EOPNOTSUPP = 3, 21, 22, 95
local MODE = 438   -- 0666, less the umask, as fopen(path, 'w') does

local counter = 0
local in_flight = {}   -- temporary names this process is writing now

local proc_ok   -- /proc/self/fd usable for linkat (checked once)
local function have_proc()
  if proc_ok == nil then
    local ok, r = pcall(C.access, '/proc/self/fd', 0)
    proc_ok = ok and r == 0
  end
  return proc_ok
end

local function dir_of(path)
  local dir = path:match('^(.*)/[^/]*$')
  if dir == nil then return '.' end
  if dir == '' then return '/' end
  return dir
end
M.dir_of = dir_of

local function alive(pid)
  if C.kill(pid, 0) == 0 then return true end
  return ffi.errno() ~= ESRCH   -- EPERM: alive, someone else's
end

--- Removes the temporary files of dead writers in `dir`; returns how many.
function M.cleanup(dir)
  local ok, d = pcall(C.opendir, dir)
  if not ok or d == nil then return 0 end
  local me, stale = C.getpid(), {}
  while true do
    local e = C.readdir(d)
    if e == nil then break end
    local dn = ffi.cast('of_dirent *', e).d_name
    -- most names are not ours: skip them without making a Lua string
    local name = C.strstr(dn, '.tmp-') ~= nil and ffi.string(dn)
    local pid = name and tonumber(name:match('%.tmp%-(%d+)%-%d+$'))
    if pid and pid > 0 and pid < 2 ^ 31 then
      local full = dir .. '/' .. name
      if (pid == me and not in_flight[full]) or (pid ~= me and not alive(pid)) then
        stale[#stale + 1] = full
      end
    end
  end
  C.closedir(d)
  local n = 0
  for _, f in ipairs(stale) do
    if C.remove(f) == 0 then n = n + 1 end
  end
  return n
end

--- Opens a writer for `path`: {f = FILE*, path, tmp (its temporary name),
-- named (true when the data goes to tmp itself)}. Raises
-- 'cannot create <tmp> (<why>)'.
function M.open(path)
  local dir = dir_of(path)
  M.cleanup(dir)
  counter = counter + 1
  local h = {path = path, dir = dir, tmp = format('%s.tmp-%d-%d', path, C.getpid(), counter)}
  local fd = -1
  if O_TMPFILE and not M._hooks.force_named and have_proc() then
    fd = C.open(dir, O_TMPFILE + O_WRONLY + O_CLOEXEC, ffi.cast('int', MODE))
    if fd < 0 then
      local e = ffi.errno()
      -- anything but "this file system has no O_TMPFILE" is the caller's error
      if e ~= EISDIR and e ~= EINVAL and e ~= EOPNOTSUPP then
        error(format('cannot create %s (%s)', h.tmp, P.strerror(e)), 0)
      end
    end
  end
  if fd < 0 then
    fd = C.open(h.tmp, O_WRONLY + O_CREAT + O_EXCL + O_CLOEXEC, ffi.cast('int', MODE))
    if fd < 0 then error(format('cannot create %s (%s)', h.tmp, P.strerror()), 0) end
    h.named = true
    in_flight[h.tmp] = true
  end
  h.fd = fd
  h.f = C.fdopen(fd, 'wb')
  if h.f == nil then
    local e = P.strerror()
    C.close(fd)
    if h.named then C.remove(h.tmp); in_flight[h.tmp] = nil end
    error(format('cannot create %s (%s)', h.tmp, e), 0)
  end
  return h
end

local function fsync_dir(dir)
  local fd = C.open(dir, P.O_RDONLY)
  if fd >= 0 then
    C.fsync(fd)   -- best effort: some file systems refuse fsync on a directory
    C.close(fd)
  end
end

--- Drops a writer: nothing of it stays on disk.
function M.abort(h)
  if h.f ~= nil then C.fclose(h.f); h.f = nil end
  if h.named or h.linked then C.remove(h.tmp) end
  in_flight[h.tmp] = nil
end

--- Flushes, fsyncs and puts the file in place of h.path; on failure the
-- target is left as it was and an error is raised (no temporary remains).
-- before(tmp) runs after the fsync, before the file gets its name (tests).
-- The rename follows the link at once (the descriptor is closed after it),
-- so that the window in which a kill leaves a named file is the two calls.
function M.commit(h, before)
  local ok, err = pcall(function()
    if C.fflush(h.f) ~= 0 then error('flush failed (' .. P.strerror() .. ')', 0) end
    if C.fsync(h.fd) ~= 0 then error('fsync failed (' .. P.strerror() .. ')', 0) end
    if before then before(h.tmp) end
    if not h.named then
      in_flight[h.tmp] = true
      if C.linkat(AT_FDCWD, '/proc/self/fd/' .. h.fd, AT_FDCWD, h.tmp, AT_SYMLINK_FOLLOW) ~= 0 then
        error(format('cannot link the written file to %s (%s)', h.tmp, P.strerror()), 0)
      end
      h.linked = true
    end
    if C.rename(h.tmp, h.path) ~= 0 then
      error(format('cannot rename %s over it (%s)', h.tmp, P.strerror()), 0)
    end
  end)
  if not ok then
    M.abort(h)
    error(tostring(err) .. ' (the file was left as it was)', 0)
  end
  in_flight[h.tmp] = nil
  -- the data is on disk (fsync succeeded) and in place: a failing close
  -- cannot lose it, so it is not an error here
  C.fclose(h.f)
  h.f = nil
  fsync_dir(h.dir)
end

return M
