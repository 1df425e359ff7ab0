require 'oneflow'
local pb = require 'oneflow.onnx.protobuf'
local D = require 'oneflow.onnx.reader'

local function hex(s) return (s:gsub('.', function(c) return ('%02x'):format(c:byte()) end)) end

describe('onnx protobuf encoder', function()
  it('writes varints as protobuf does', function()
    assert.equal('00', hex(pb.varint(0)))
    assert.equal('01', hex(pb.varint(1)))
    assert.equal('7f', hex(pb.varint(127)))
    assert.equal('8001', hex(pb.varint(128)))
    assert.equal('ac02', hex(pb.varint(300)))
    assert.equal('8080808010', hex(pb.varint(2 ^ 32)))
    assert.equal('ffffffffffffffffff01', hex(pb.varint(-1)))
    assert.equal('80808080808080808001', hex(pb.varint(-2 ^ 63)))
    assert.equal('ffffffffffffffff7f', hex(pb.varint(0x7fffffffffffffffLL)))
  end)

  it('refuses what no varint can hold', function()
    assert.has_error(function() pb.varint(0.5) end)
    assert.has_error(function() pb.varint(2 ^ 64) end)
  end)

  it('frames fields and nested messages', function()
    local inner = pb.writer()
    pb.uint(inner, 1, 150)
    local w = pb.writer()
    pb.string(w, 2, 'testing')
    pb.message(w, 3, inner)
    pb.float(w, 4, 1.5)
    pb.packed_varints(w, 5, {3, 270, -1})
    local s = pb.tostring(w)
    assert.equal(w.len, #s)
    assert.equal('120774657374696e67' .. '1a03089601' .. '250000c03f', hex(s:sub(1, 19)))
    local f = D.fields(s)
    assert.equal('testing', f[2][1])
    assert.equal(150, D.fields(f[3][1])[1][1])
    assert.equal(1.5, D.float_of(f[4][1]))
    assert.same({3, 270, -1}, D.packed(f[5][1]))
  end)

  it('round-trips an ONNX model through the decoder', function()
    local m = {
      ir_version = 8, opsets = {{domain = '', version = 17}}, producer_name = 'test',
      graph = {
        name = 'g',
        nodes = {{op_type = 'Relu', name = 'r', inputs = {'x'}, outputs = {'y'},
                  attributes = {{name = 'alpha', type = 'f', value = 0.25},
                                {name = 'axes', type = 'ints', value = {0, -1}},
                                {name = 'mode', type = 's', value = 'edge'}}}},
        initializers = {{name = 'w', data_type = 7, dims = {2}, raw = ('\1\0\0\0\0\0\0\0'):rep(2)}},
        inputs = {{name = 'x', elem_type = 1, dims = {'batch', 3}}},
        outputs = {{name = 'y', elem_type = 1, dims = {'batch', 3}}},
      },
    }
    local d = D.model(pb.tostring(pb.model(m)))
    assert.equal(8, d.ir_version)
    assert.same({{domain = '', version = 17}}, d.opsets)
    assert.equal('test', d.producer_name)
    local n = d.graph.nodes[1]
    assert.equal('Relu', n.op_type)
    assert.same({'x'}, n.inputs)
    assert.same({'y'}, n.outputs)
    assert.equal(0.25, n.attrs.alpha.f)
    assert.equal(1, n.attrs.alpha.type)
    assert.same({0, -1}, n.attrs.axes.ints)
    assert.equal(7, n.attrs.axes.type)
    assert.equal('edge', n.attrs.mode.s)
    assert.same({2}, d.graph.initializers[1].dims)
    assert.equal(16, #d.graph.initializers[1].raw)
    assert.same({'batch', 3}, d.graph.inputs[1].dims)
    assert.equal(1, d.graph.outputs[1].elem_type)
  end)
end)
