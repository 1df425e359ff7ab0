-- flow.backends.cudnn and flow.cuda.CUDAGraph on any machine: settings,
-- and the errors they give where CUDA (or cuDNN) is unavailable.
local flow = require 'oneflow'
local H = require 'spec.helpers'

describe('flow.backends.cudnn', function()
  local cudnn = flow.backends.cudnn
  it('has PyTorch\'s settings with their defaults and checks them', function()
    assert.is_false(cudnn.benchmark)
    assert.is_false(cudnn.deterministic)
    assert.is_true(cudnn.allow_tf32)
    assert.is_true(cudnn.enabled)
    cudnn.benchmark = true
    assert.is_true(cudnn.benchmark)
    cudnn.benchmark = false
    H.raises(function() cudnn.benchmark = 'yes' end, 'backends.cudnn.benchmark', 'boolean')
    H.raises(function() cudnn.fastest = true end, 'unknown setting fastest')
  end)
  it('says why it is unavailable', function()
    if flow.cuda.is_available() then
      -- with a GPU: usable, or the dlopen error of libcudnn
      local why = cudnn.why_unavailable()
      assert.is_true(why == '' or why:find('cuDNN', 1, true) ~= nil, why)
      assert.are.equal(why == '', cudnn.is_available())
    else
      assert.is_false(cudnn.is_available())
      assert.are.equal(0, cudnn.version())
      assert.are.equal(flow.cuda.why_unavailable(), cudnn.why_unavailable())
      assert.is_true(#cudnn.why_unavailable() > 0)
    end
  end)
end)

describe('flow.cuda.CUDAGraph', function()
  it('is made anywhere; capturing needs CUDA and replay a capture', function()
    local g = flow.cuda.CUDAGraph()
    assert.are.equal(flow.cuda.CUDAGraph, flow.cuda.graphs.CUDAGraph)
    if not flow.cuda.is_available() then
      H.raises(function() g:capture_begin() end, 'CUDAGraph.capture_begin', 'not available')
      H.raises(function() g:capture(function() end) end, 'not available')
      H.raises(function() g:replay() end, 'CUDAGraph.replay', 'not available')
    else
      H.raises(function() g:replay() end, 'nothing captured')
      H.raises(function() g:capture_end() end, 'no capture in progress')
    end
  end)
end)
