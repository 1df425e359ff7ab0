-- The GPU kit (tools/device_kit.sh, doc/gpu.md) runs from its folder alone:
-- in a mount namespace where Debian's luajit, busted, Lua modules and
-- OpenBLAS are hidden and the folder is mounted elsewhere
-- (tools/device_kit_proof.sh), the environment report and one CUDA spec file
-- run with the kit's luajit, busted and libraries. Pending without a kit
-- (`make device-kit`, which builds the CUDA library: minutes) or where
-- `unshare -m` is not permitted. The whole check there: `make device-kit-proof`.
local KIT = os.getenv('OF_DEVICE_KIT') or 'device-kit'

local function sh(cmd)
  local f = assert(io.popen(cmd .. ' 2>&1; echo "rc=$?"'))
  local out = f:read('*a')
  f:close()
  return out, tonumber(out:match('rc=(%d+)%s*$'))
end

local function kit_ready()
  local f = io.open(KIT .. '/check.sh')
  if not f then return false, 'no kit at ' .. KIT .. ' (make device-kit)' end
  f:close()
  local _, rc = sh('unshare -m true')
  if rc ~= 0 then return false, 'unshare -m is not permitted here' end
  return true
end

describe('the device kit', function()
  local ok, why = kit_ready()
  if not ok then
    pending('proof skipped: ' .. why)
    return
  end
  it('runs the environment report and a CUDA spec with the system Lua and OpenBLAS hidden', function()
    local out, rc = sh('sh tools/device_kit_proof.sh ' .. KIT .. ' /tmp -- sh -c ' ..
      [['luajit -v; luajit tools/gpu_env.lua; luajit "$KIT/bin/busted" -o TAP spec/cuda/dnn_api_spec.lua']])
    assert.are.equal(0, rc, out)
    -- the system's luajit and Lua modules were hidden, the kit was moved
    assert.truthy(out:find('hidden: luajit sh: %d+: luajit: Permission denied'), out)
    assert.truthy(out:find('lua modules: 0 entries', 1, true), out)
    assert.truthy(out:find('libopenblas.so.0 => /tmp/of%-kit%-moved%.[%w]+/lib/libopenblas'), out)
    assert.truthy(out:find('LuaJIT 2.1', 1, true), out)
    assert.truthy(out:find('cuda built: +true'), out)
    -- a spec ran with the kit's busted, all passing or pending
    assert.truthy(out:find('\n1%.%.%d+'), out)
    assert.falsy(out:find('\nnot ok', 1, true), out)
    if not out:find('cuda available: +true') then
      assert.truthy(out:find('why unavailable: +%S'), out)
    end
  end)
  it('takes the CUDA libraries the system lacks from the PyTorch installation', function()
    -- a stand-in for site-packages/nvidia/*/lib, found through python3
    local dir = os.tmpname()
    os.remove(dir)
    local lib = dir .. '/nvidia/cu13/lib'
    assert(os.execute('mkdir -p ' .. lib .. ' && touch ' .. lib .. '/libcudnn.so.9 ' ..
                      lib .. '/libnccl.so.2') == 0)
    local out, rc = sh(('PROOF_HIDE=/usr/local/cuda-13.0/lib PYTHONPATH=%s ' ..
      'sh tools/device_kit_proof.sh %s /tmp -- sh -c \'echo "torch libs:$OF_KIT_TORCH_LIBS"; ' ..
      'echo "path:$LD_LIBRARY_PATH"\''):format(dir, KIT))
    os.execute('rm -rf ' .. dir)
    assert.are.equal(0, rc, out)
    assert.truthy(out:find('torch libs:', 1, true), out)
    if not out:find('torch libs:[^\n]*libcudnn%.so%.9') then
      pending('this machine has libcudnn.so.9 outside /usr/local/cuda-13.0/lib: no stand-in needed')
      return
    end
    local pat = lib:gsub('%p', '%%%0')
    assert.truthy(out:find('torch libs:[^\n]*libcudnn%.so%.9=' .. pat), out)
    assert.truthy(out:find('path:[^\n]*' .. pat), out)
  end)
end)
