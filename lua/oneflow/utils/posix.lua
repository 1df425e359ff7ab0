-- oneflow.utils.posix: the few libc calls that flow.save/flow.load and the
-- DataLoader workers need (stdio, fsync, rename, fork, pipes, waitpid,
-- isatty, a monotonic clock), declared to the FFI one by one.
--
-- Each declaration is made in its own pcall: another module may already
-- have declared the same function (LuaJIT refuses a second declaration),
-- and then that declaration is used. FILE* is declared as void*, which
-- converts to and from any other FILE* declaration. Types are fixed-width
-- (LP64 Linux: pid_t = int, off_t = int64_t, ssize_t = intptr_t); the
-- constants below are the Linux ones.
local ffi = require 'ffi'

local decls = {
  'void *fopen(const char *path, const char *mode);',
  'int fclose(void *f);',
  'size_t fread(void *ptr, size_t size, size_t n, void *f);',
  'size_t fwrite(const void *ptr, size_t size, size_t n, void *f);',
  'int fflush(void *f);',
  'int fileno(void *f);',
  'int fseeko(void *f, int64_t off, int whence);',
  'int64_t ftello(void *f);',
  'int ferror(void *f);',
  'int fsync(int fd);',
  'int rename(const char *from, const char *to);',
  'int remove(const char *path);',
  'char *strerror(int errnum);',
  'int open(const char *path, int flags, ...);',
  'int close(int fd);',
  'intptr_t read(int fd, void *buf, size_t n);',
  'intptr_t write(int fd, const void *buf, size_t n);',
  'int pipe(int fds[2]);',
  'int fcntl(int fd, int cmd, ...);',
  'int fork(void);',
  'void _exit(int status);',
  'int getpid(void);',
  'int getppid(void);',
  'int waitpid(int pid, int *status, int options);',
  'int kill(int pid, int sig);',
  'int prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4, unsigned long a5);',
  'int isatty(int fd);',
  'int clock_gettime(int clk, void *ts);',
  'int socketpair(int domain, int type, int protocol, int sv[2]);',
  'intptr_t send(int fd, const void *buf, size_t n, int flags);',
  'int setsockopt(int fd, int level, int name, const void *val, uint32_t len);',
  'struct pollfd { int fd; short events; short revents; };',
  'int poll(struct pollfd *fds, unsigned long nfds, int timeout);',
}
for _, d in ipairs(decls) do pcall(ffi.cdef, d) end

local C = ffi.C
local M = {C = C}

M.SEEK_SET, M.SEEK_END = 0, 2
M.WNOHANG = 1
M.SIGKILL, M.SIGTERM = 9, 15
M.EINTR, M.ECHILD, M.EAGAIN = 4, 10, 11
M.F_SETPIPE_SZ = 1031
M.PR_SET_PDEATHSIG = 1
M.O_RDONLY = 0
M.EPIPE, M.ECONNRESET = 32, 104
M.AF_UNIX, M.SOCK_STREAM, M.SOCK_CLOEXEC = 1, 1, 0x80000
M.MSG_NOSIGNAL = 0x4000
M.POLLIN = 1
M.SOL_SOCKET, M.SO_SNDBUF, M.SO_RCVBUF = 1, 7, 8

--- The message for errno `e` (default: the current errno).
function M.strerror(e)
  e = e or ffi.errno()
  local s = C.strerror(e)
  if s == nil then return 'errno ' .. tostring(e) end
  return ffi.string(s)
end

--- Seconds on a monotonic clock (os.time() if clock_gettime is unusable).
local ts = ffi.new('int64_t[2]')
function M.now()
  local ok, r = pcall(C.clock_gettime, 1, ts)   -- CLOCK_MONOTONIC
  if ok and r == 0 then return tonumber(ts[0]) + tonumber(ts[1]) * 1e-9 end
  return os.time()
end

--- Seconds of CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID;
-- os.clock(), the process's, if clock_gettime is unusable).
function M.thread_cpu()
  local ok, r = pcall(C.clock_gettime, 3, ts)
  if ok and r == 0 then return tonumber(ts[0]) + tonumber(ts[1]) * 1e-9 end
  return os.clock()
end

--- Whether file descriptor fd is a terminal.
function M.isatty(fd)
  local ok, r = pcall(C.isatty, fd)
  return ok and r == 1
end

--- Decodes a waitpid status: 'exit', code or 'signal', number.
function M.wait_status(st)
  local sig = bit.band(st, 0x7f)
  if sig == 0 then return 'exit', bit.band(bit.rshift(st, 8), 0xff) end
  return 'signal', sig
end

return M
