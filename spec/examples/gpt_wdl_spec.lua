-- examples/gpt/train.lua and examples/wdl/train.lua run end to end from
-- /tmp with tiny settings: GPT trains a few graph steps under bf16 autocast,
-- writes an atomic checkpoint and a loss curve, resumes from it and
-- samples (with and without the cache); WDL trains with SparseAdam and
-- beats the click-rate baseline.
local H = require 'spec.helpers'

local src = debug.getinfo(1, 'S').source:sub(2)
if src:sub(1, 1) ~= '/' then src = os.getenv('PWD') .. '/' .. src end
local root = src:match('^(.*)/spec/examples/[^/]*$')

local function run(script, args)
  local p = io.popen(('cd /tmp && env -u LUA_PATH luajit %s/examples/%s %s 2>&1; echo "rc=$?"'):format(
    root, script, args))
  local out = p:read('*a')
  p:close()
  return tonumber(out:match('rc=(%d+)%s*$')), out
end

describe('examples/gpt/train.lua', function()
  teardown(H.remove_tmpdirs)
  local corpus = io.open('/usr/share/common-licenses/GPL-3')   -- Debian's base-files
  local with_corpus = corpus and it or pending
  if corpus then corpus:close() end

  with_corpus('trains (nn.Graph, bf16), checkpoints, plots, resumes and samples', function()
    local d = H.tmpdir()
    local rc, out = run('gpt/train.lua', ('--steps 4 --eval-every 2 --eval-batches 1 --batch-size 2 '
      .. '--block-size 16 --n-embd 16 --n-head 2 --n-layer 1 --tokens 8 --out-dir %s'):format(d))
    assert.equal(0, rc, out)
    assert.truthy(out:find('step 4: train loss %d'), out)
    assert.truthy(out:find('tokens/s with the key/value cache', 1, true), out)
    assert.truthy(H.read_file(d .. '/loss.svg'):find('<svg', 1, true))
    assert.truthy(H.read_file(d .. '/gpt.safetensors'))
    -- resume: steps continue from the checkpoint's; --steps 0 only samples
    rc, out = run('gpt/train.lua', ('--resume --steps 2 --eval-every 1 --eval-batches 1 --batch-size 2 '
      .. '--tokens 0 --prompt GNU --out-dir %s'):format(d))
    assert.equal(0, rc, out)
    assert.truthy(out:find('step 6: train loss', 1, true), out)
    assert.truthy(out:find('--- sample (0 characters) ---\nGNU\n', 1, true), out)
    rc, out = run('gpt/train.lua', ('--resume --steps 0 --tokens 3 --temperature 0 --out-dir %s'):format(d))
    assert.equal(0, rc, out)
    assert.truthy(out:find('--- sample (3 characters) ---', 1, true), out)
  end)

  it('says what is wrong with a missing corpus', function()
    local rc, out = run('gpt/train.lua', '--corpus /nonexistent/corpus --steps 1')
    assert.are_not.equal(0, rc)
    assert.truthy(out:find('no text files at /nonexistent/corpus', 1, true), out)
  end)
end)

describe('examples/wdl/train.lua', function()
  it('trains wide & deep with sparse embeddings and beats the click-rate baseline', function()
    local rc, out = run('wdl/train.lua', '--rows 5000 --vocab 50 --steps 60 --log-every 30 --test 2048')
    assert.equal(0, rc, out)
    local tl, prior, floor = out:match('test log%-loss (%S+); the click rate alone gives (%S+), the true '
      .. 'probabilities (%S+)')
    assert.truthy(tl, out)
    assert.is_true(tonumber(tl) < tonumber(prior), out)
    assert.is_true(tonumber(floor) < tonumber(tl), out)
  end)
end)
