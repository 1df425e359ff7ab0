-- The ```lua blocks of README.md and doc/*.md run as written: each one in a
-- fresh luajit process (LUA_PATH set to this checkout), in its own temporary
-- directory, under a timeout. A block that is not a whole program carries a
-- marker on the line right above it (doc/internals.md, "Doc snippets"):
--   <!-- snippet: fragment -->            compiled, not run (names defined elsewhere)
--   <!-- snippet: needs cuda -->          run only where flow.cuda works
--   <!-- snippet: needs mpirun -np N -->  run under mpirun with N processes
--   <!-- snippet: after python3 F.py -->  the page's earlier ```python blocks
--        that start with `# NAME.py` are written as NAME.py, `python3 F.py`
--        runs first (pending where python3 cannot import torch)
--   <!-- snippet: needs minilm -->        run where tools/minilm.sh has unpacked
--        all-MiniLM-L6-v2 ($FLOWTEXT_MINILM or ~/.cache/oneflow/all-MiniLM-L6-v2)
--   <!-- snippet: needs REASON -->        any other need: pending, with REASON
-- A failure names the file and line of the block and the error.
local ROOT = (function()
  local src = debug.getinfo(1, 'S').source:sub(2)
  local dir = src:match('^(.*)/spec/docs/[^/]*$')
  if not dir or dir == '' then return io.popen('pwd'):read('*l') end
  if dir:sub(1, 1) ~= '/' then dir = io.popen('pwd'):read('*l') .. '/' .. dir end
  return dir
end)()

local TIMEOUT = tonumber(os.getenv('OF_SNIPPET_TIMEOUT') or '') or 120

local function read(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- OF_SNIPPET_FILES='doc/cuda.md doc/gpu.md': only those pages (the GPU
-- check, tools/device_check.sh, runs the CUDA pages within its time budget)
local function doc_files()
  local only = os.getenv('OF_SNIPPET_FILES')
  if only and only ~= '' then
    local files = {}
    for f in only:gmatch('%S+') do files[#files + 1] = f end
    return files
  end
  local files = {'README.md'}
  local p = io.popen('ls ' .. shell_quote(ROOT .. '/doc') .. '/*.md')
  for line in p:lines() do files[#files + 1] = 'doc/' .. line:match('([^/]+)$') end
  p:close()
  return files
end

-- Splits a Markdown file into its fenced blocks: {info, line, code, marker}.
-- `line` is the line of the opening fence; `marker` the text of a
-- `<!-- snippet: ... -->` comment on the last non-blank line above it.
-- Returns the blocks, or nil and the line of a fence left open.
local function blocks_of(text)
  local blocks, cur, prev = {}, nil, nil
  local n = 0
  for line in (text .. '\n'):gmatch('([^\n]*)\n') do
    n = n + 1
    local indent, fence, info = line:match('^(%s*)(```+)%s*(.-)%s*$')
    if cur then
      if fence and #indent <= cur.indent and info == '' then
        cur.code = table.concat(cur.lines, '\n') .. '\n'
        blocks[#blocks + 1] = cur
        cur = nil
      else
        cur.lines[#cur.lines + 1] = line:sub(cur.indent + 1)
      end
    elseif fence then
      cur = {info = info, line = n, indent = #indent, lines = {},
             marker = prev and prev:match('^%s*<!%-%-%s*snippet:%s*(.-)%s*%-%->%s*$')}
    end
    if not cur and line:match('%S') then prev = line end
    if cur and cur.line == n then prev = nil end
  end
  if cur then return nil, cur.line end
  return blocks
end

local function run(cmd)
  local p = io.popen(cmd .. ' 2>&1; echo "__rc=$?"')
  local out = p:read('*a')
  p:close()
  local rc = tonumber(out:match('__rc=(%d+)%s*$'))
  return rc, (out:gsub('__rc=%d+%s*$', ''))
end

local function tail(s, n)
  local lines = {}
  for l in s:gmatch('[^\n]+') do lines[#lines + 1] = l end
  return table.concat(lines, '\n', math.max(1, #lines - n + 1))
end

local function write_file(path, text)
  local f = assert(io.open(path, 'wb'))
  f:write(text)
  f:close()
end

-- Runs one block in a fresh process; errors with "file:line: output".
-- `prep(dir)`, if given, readies the directory first (returns an error or nil).
local function run_block(where, code, np, prep)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute('mkdir -p ' .. shell_quote(dir)) == 0)
  local perr = prep and prep(dir)
  if perr then
    os.execute('rm -rf ' .. shell_quote(dir))
    error(('%s: %s'):format(where, perr), 0)
  end
  write_file(dir .. '/snippet.lua', code)
  local env = ('LUA_PATH=%s'):format(
    shell_quote(ROOT .. '/lua/?.lua;' .. ROOT .. '/lua/?/init.lua;;'))
  local launch = 'luajit snippet.lua'
  if np then
    launch = ('mpirun --allow-run-as-root --oversubscribe -np %d luajit snippet.lua'):format(np)
  end
  local rc, out = run(('cd %s && %s timeout %d %s'):format(shell_quote(dir), env, TIMEOUT, launch))
  os.execute('rm -rf ' .. shell_quote(dir))
  if rc ~= 0 then
    local why = rc == 124 and ('timed out after %d s'):format(TIMEOUT) or ('exit ' .. rc)
    -- the error line first (mpirun's banners would push it out of the tail)
    local msg = out:match('[^\n]*luajit: [^\n]*') or ''
    error(('%s: the snippet failed (%s): %s\n%s'):format(where, why, msg, tail(out, 12)), 0)
  end
end

local cuda_ok
-- the all-MiniLM-L6-v2 folder doc/flowtext.md's snippets read
local function have_minilm()
  local home = (os.getenv('XDG_CACHE_HOME') or (os.getenv('HOME') or '') .. '/.cache') .. '/oneflow'
  local f = io.open((os.getenv('FLOWTEXT_MINILM') or home .. '/all-MiniLM-L6-v2') .. '/model.safetensors', 'rb')
  if f then f:close() end
  return f ~= nil
end

local function have_cuda()
  if cuda_ok == nil then
    local rc = run(('LUA_PATH=%s luajit -e %s'):format(
      shell_quote(ROOT .. '/lua/?.lua;' .. ROOT .. '/lua/?/init.lua;;'),
      shell_quote("os.exit(require('oneflow').cuda.is_available() and 0 or 1)")))
    cuda_ok = rc == 0
  end
  return cuda_ok
end

local function have_mpirun() return os.execute('command -v mpirun >/dev/null 2>&1') == 0 end

local PYTHON = '/usr/bin/python3'
local torch_ok
local function have_torch()
  if torch_ok == nil then
    torch_ok = os.execute(PYTHON .. ' -c "import torch" >/dev/null 2>&1') == 0
  end
  return torch_ok
end

-- The page's ```python blocks before `line` that name their file (`# x.py`
-- on their first line), written into dir; then `python3 script` there.
local function python_prep(blocks, line, script)
  return function(dir)
    for _, b in ipairs(blocks) do
      local name = b.line < line and b.info:match('^python') and b.code:match('^#%s*([%w_]+%.py)%s*\n')
      if name then write_file(dir .. '/' .. name, b.code) end
    end
    local rc, out = run(('cd %s && timeout %d %s %s'):format(shell_quote(dir), TIMEOUT, PYTHON, script))
    if rc ~= 0 then return ('python3 %s failed (exit %d):\n%s'):format(script, rc, tail(out, 12)) end
  end
end

describe('doc snippets', function()
  for _, file in ipairs(doc_files()) do
    describe(file, function()
      local blocks, open_line = blocks_of(read(ROOT .. '/' .. file))
      it('closes every code fence', function()
        assert(blocks, ('%s:%s: a code fence is never closed'):format(file, tostring(open_line)))
      end)
      for _, b in ipairs(blocks or {}) do
        local lang = b.info:match('^(%S*)')
        local where = ('%s:%d'):format(file, b.line)
        if lang == 'lua' then
          local m = b.marker
          if m == 'fragment' or (m and m:match('^fragment%s')) then
            it(where .. ' (fragment) compiles', function()
              -- not run (it uses names defined elsewhere), but it must be Lua:
              -- elisions are written as comments, `--[[ ... ]]`
              local ok, err = loadstring(b.code, '=' .. where)
              assert(ok, err)
            end)
          elseif m == 'needs cuda' then
            it(where .. ' runs (needs cuda)', function()
              if not have_cuda() then
                pending(where .. ': needs a usable GPU')
                return
              end
              run_block(where, b.code)
            end)
          elseif m and m:match('^needs mpirun %-np %d+$') then
            local np = tonumber(m:match('(%d+)$'))
            it(where .. ' runs (needs mpirun -np ' .. np .. ')', function()
              if not have_mpirun() then
                pending(where .. ': needs mpirun')
                return
              end
              run_block(where, b.code, np)
            end)
          elseif m == 'needs minilm' then
            it(where .. ' runs (needs minilm)', function()
              if not have_minilm() then
                pending(where .. ': needs all-MiniLM-L6-v2 (sh tools/minilm.sh)')
                return
              end
              run_block(where, b.code)
            end)
          elseif m and m:match('^after python3 [%w_]+%.py$') then
            local script = m:match('([%w_]+%.py)$')
            it(where .. ' runs (after python3 ' .. script .. ')', function()
              if not have_torch() then
                pending(where .. ': needs ' .. PYTHON .. ' with torch (to run ' .. script .. ')')
                return
              end
              run_block(where, b.code, nil, python_prep(blocks, b.line, script))
            end)
          elseif m and m:match('^needs ') then
            it(where .. ' (' .. m .. ')', function() pending(where .. ': ' .. m) end)
          elseif m then
            it(where .. ' has a known marker', function()
              error(('%s: unknown snippet marker %q (fragment, needs cuda, needs mpirun -np N, needs minilm, '
                     .. 'after python3 F.py, needs REASON)')
                :format(where, m), 0)
            end)
          else
            it(where .. ' runs', function() run_block(where, b.code) end)
          end
        end
      end
    end)
  end

  it('README.md links only into the repository, to files that exist', function()
    local text = read(ROOT .. '/README.md')
    local n = 0
    for target in text:gmatch('%]%(([^)]+)%)') do
      n = n + 1
      assert(not target:match('^%a+:'), 'README.md links outside the repository: ' .. target)
      local path = target:gsub('#.*$', '')
      local f = io.open(ROOT .. '/' .. path)
      assert(f, 'README.md links to a missing file: ' .. target)
      f:close()
    end
    assert(n > 0, 'README.md has no links into doc/')
  end)

  it('finds the markers it documents in doc/internals.md', function()
    local doc = read(ROOT .. '/doc/internals.md')
    for _, m in ipairs({'<!-- snippet: fragment -->', '<!-- snippet: needs cuda -->',
                        '<!-- snippet: needs mpirun -np N -->'}) do
      assert(doc:find(m, 1, true), 'doc/internals.md does not document ' .. m)
    end
  end)
end)
