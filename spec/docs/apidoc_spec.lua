-- The API reference: tools/make_doc.sh (what `make doc` runs) builds it with
-- LDoc from the doc comments, and the pages name the key public functions
-- with their parameters (doc/internals.md, "Docs").
local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local read = require('spec.helpers').read_file

-- {module page, the function's name as LDoc shows it, a parameter it must list}
local KEY = {
  {'oneflow.tensor', 'flow.tensor', 'data'},
  {'oneflow.tensor', 'flow.zeros', 'opts'},
  {'oneflow.tensor', 'flow.ones', 'opts'},
  {'oneflow.tensor', 'flow.full', 'value'},
  {'oneflow.tensor', 'flow.arange', 'opts'},
  {'oneflow.ops.random', 'flow.randn', 'opts'},
  {'oneflow.ops.random', 'flow.rand', 'opts'},
  {'oneflow.ops.random', 'flow.randint', 'd'},
  {'oneflow.ops.linalg', 'flow.matmul', 'b'},
  {'oneflow.ops.index', 'flow.cat', 'ts'},
  {'oneflow.ops.index', 'flow.stack', 'ts'},
  {'oneflow.nn.linear', 'nn.Linear', 'in_features'},
  {'oneflow.nn.conv', 'nn.Conv2d', 'kernel_size'},
  {'oneflow.optim.sgd', 'flow.optim.SGD', 'params'},
  {'oneflow.optim.adam', 'flow.optim.Adam', 'params'},
  {'oneflow.utils.data', 'flow.utils.data.DataLoader', 'dataset'},
  {'oneflow.serialization', 'flow.save', 'path'},
  {'oneflow.serialization', 'flow.load', 'path'},
  {'oneflow.autograd', 'flow.no_grad', 'fn'},
  {'oneflow.nn.functional.loss', 'F.cross_entropy', 'target'},
  {'oneflow.utils.data', 'flow.utils.data.TensorDataset', '...'},
  {'oneflow.io.torch', 'flow.load_torch', 'path'},
  {'oneflow.onnx', 'flow.onnx.export', 'example_inputs'},
  {'oneflow.onnx', 'flow.onnx.load', 'path'},
  {'oneflow.onnx', 'flow.onnx.run', 'inputs'},
  {'oneflow.nn.module', 'Module:parameters', 'recurse'},
  {'oneflow.nn.module', 'Module:train', 'mode'},
  {'oneflow.nn.module_state', 'Module:state_dict', 'opts'},
  {'oneflow.nn.module_state', 'Module:load_state_dict', 'sd'},
  {'oneflow.nn.graph', 'nn.Graph:add_optimizer', 'opt'},
  {'oneflow.nn.graph', 'nn.Graph:save', 'path'},
  {'oneflow.nn.graph', 'nn.Graph.load', 'path'},
  {'oneflow.autograd', 'Tensor:backward', 'grad'},
  {'oneflow.optim.lr_scheduler', 'flow.optim.lr_scheduler.StepLR', 'step_size'},
  {'oneflow.optim.lr_scheduler', 'flow.optim.lr_scheduler.CosineAnnealingLR', 'opt'},
  {'oneflow.ops.random', 'flow.manual_seed', 's'},
  {'oneflow.nn.rnn', 'nn.RNN', 'hidden_size'},
  {'oneflow.nn.functional.activation', 'F.relu', 'x'},
  {'oneflow.nn.container', 'nn.Sequential', '...'},
  {'oneflow.nn.normalization', 'nn.BatchNorm2d', 'num_features'},
  {'oneflow.nn.normalization', 'nn.LayerNorm', 'normalized_shape'},
  {'oneflow.nn.sparse', 'nn.Embedding', 'embedding_dim'},
  {'oneflow.nn.dropout', 'nn.Dropout', 'p'},
  {'oneflow.nn.loss', 'nn.CrossEntropyLoss', 'label_smoothing'},
  {'oneflow.nn.pooling', 'nn.MaxPool2d', 'kernel_size'},
  {'oneflow.optim.adamw', 'flow.optim.AdamW', 'params'},
  {'flowvision.models', 'flowvision.models.create', 'name'},
  {'flowvision.transforms', 'flowvision.transforms.Compose', 'transforms'},
  {'flowvision.transforms', 'flowvision.transforms.Normalize', 'std'},
}

describe('make doc (LDoc API reference)', function()
  local have_ldoc = os.execute('command -v ldoc >/dev/null 2>&1') == 0
  local dir = os.tmpname()
  os.remove(dir)

  teardown(function() os.execute('rm -rf ' .. sh_quote(dir)) end)

  it('builds with tools/make_doc.sh', function()
    if not have_ldoc then
      pending('ldoc not found (apt-get install lua-ldoc)')
      return
    end
    local p = io.popen('sh tools/make_doc.sh ' .. sh_quote(dir) .. ' 2>&1; echo "rc=$?"')
    local out = p:read('*a')
    p:close()
    assert(out:match('rc=0%s*$'), 'tools/make_doc.sh failed:\n' .. out)
    -- ldoc's warnings (unknown tags, undocumented parameters) are lines
    -- naming a file: the build must have none
    local warnings = {}
    for l in out:gmatch('[^\n]+') do
      if l:match('%.lua:%d+:') or l:match('[Ww]arning') then warnings[#warnings + 1] = l end
    end
    assert(#warnings == 0, 'ldoc warnings:\n' .. table.concat(warnings, '\n'))
    assert(read(dir .. '/index.html'), 'no index.html in ' .. dir)
  end)

  -- the page of module mod and where the entry of name starts on it (nil
  -- and pending without ldoc)
  local function entry(mod, name)
    if not have_ldoc then
      pending('ldoc not found (apt-get install lua-ldoc)')
      return nil
    end
    local page = read(dir .. '/modules/' .. mod .. '.html')
    assert(page, 'no page for module ' .. mod)
    local at = page:find('<a name = "' .. name .. '"></a>', 1, true)
    assert(at, mod .. ' does not document ' .. name)
    return page, at
  end

  -- functions made in loops or by factories are documented with @function
  for _, k in ipairs({{'oneflow.ops.elementwise', 'flow.abs'}, {'oneflow.nn.functional', 'F.conv2d'},
                      {'oneflow.nn.activation', 'nn.ReLU'}, {'oneflow.ops.views', 'Tensor:bfloat16'},
                      {'oneflow.nn.padding', 'nn.ZeroPad2d'}}) do
    it(('documents %s (%s), made by a factory'):format(k[2], k[1]), function()
      local page, at = entry(k[1], k[2])
      if not page then return end
      assert(page:find('<dd>%s*%S', at), k[2] .. ' has no description')
    end)
  end

  for _, k in ipairs(KEY) do
    it(('documents %s (%s) with its parameter %s'):format(k[2], k[1], k[3]), function()
      local page, at = entry(k[1], k[2])
      if not page then return end
      local anchor = '<a name = "' .. k[2] .. '"></a>'
      -- the entry runs to the next anchor
      local stop = page:find('<a name = "', at + #anchor, true) or #page
      local text = page:sub(at, stop)
      assert(text:find('<span class="parameter">' .. k[3] .. '</span>', 1, true),
             k[2] .. ' does not list its parameter ' .. k[3])
    end)
  end
end)
