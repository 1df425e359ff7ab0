-- flowtext._files: reading a model folder's files, with errors that name
-- the caller and the path (shared by the tokenizer, BERT and
-- SentenceTransformer loaders).
local A = require 'oneflow._args'
local json = require 'oneflow.utils.json'

local M = {}

function M.exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

function M.read(op, path)
  local f, err = io.open(path, 'rb')
  if not f then A.fail(('%s: cannot open %s (%s)'):format(op, path, tostring(err))) end
  local s = f:read('*a')
  f:close()
  return s
end

-- JSON from path; a syntax error names the file and the byte.
function M.read_json(op, path)
  local ok, v = pcall(json.decode, M.read(op, path))
  if not ok then A.fail(('%s: %s: %s'):format(op, path, tostring(v))) end
  return v
end

return M
