-- flowtext: `local text = require 'flowtext'` -- text models beside
-- flowvision: BERT's WordPiece tokenizer, a BERT encoder that loads Hugging
-- Face checkpoints (safetensors) by their parameter names, and
-- sentence-transformers' embedding pipeline, and a small GPT trained from
-- scratch (flowtext.gpt, examples/gpt) (doc/flowtext.md).
local text = {}
text.tokenizer = require 'flowtext.tokenizer'
text.bert = require 'flowtext.bert'
text.sentence_transformer = require 'flowtext.sentence_transformer'
text.BertTokenizer = text.tokenizer.BertTokenizer
text.BertConfig = text.bert.BertConfig
text.BertModel = text.bert.BertModel
text.SentenceTransformer = text.sentence_transformer.SentenceTransformer
text.gpt = require 'flowtext.gpt'
text.GPT = text.gpt.GPT
return text
