-- tools/check_layers.sh: the C core's one-way stack. The real table passes
-- (make test runs the script too); a table that puts the ops below the
-- tensors must fail and name the offending calls, so the check can fail.
local build = os.getenv('OF_BUILD_DIR') or 'build'

local function run(env)
  local p = assert(io.popen(env .. ' sh tools/check_layers.sh ' .. build .. ' 2>&1; echo "rc=$?"'))
  local out = p:read('*a')
  p:close()
  return out, tonumber(out:match('rc=(%d+)'))
end

describe('tools/check_layers.sh', function()
  it('finds no call into a higher layer in this build', function()
    local out, rc = run('')
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find('no call into a higher layer', 1, true), out)
  end)

  it('fails and names file -> symbol pairs when a layer calls up', function()
    -- the same table with core/ops one layer under core/tensor: ops now "call
    -- up" into the tensors, and every such call is listed
    local tbl = table.concat({
      '0 storage core/storage/*.c', '1 ops core/ops/*.c', '2 tensor core/tensor/*.c',
      '3 device core/device/*.c', '3 device core/dist/comm.c', '4 dispatch core/dispatch/*.c',
      '5 autograd core/autograd/*.c', '6 graph core/graph/*.c', '6 graph core/graph/passes/*.c',
      '7 api core/io/*.c', '7 api cdef.c'}, '\n')
    local out, rc = run("OF_LAYERS='" .. tbl .. "'")
    assert.are.equal(1, rc, out)
    assert.is_truthy(out:find('core/ops/[%w_]+%.c %(ops%) %-> of_tensor_new %(core/tensor/tensor%.c, tensor%)'), out)
    assert.is_truthy(out:find('calls into a higher layer', 1, true), out)
  end)

  it('refuses a source file that no layer names', function()
    local out, rc = run("OF_LAYERS='0 storage core/storage/*.c'")
    assert.are.equal(1, rc)
    assert.is_truthy(out:find('core/tensor/tensor.c is in no layer', 1, true), out)
  end)
end)
