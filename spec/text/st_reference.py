"""sentence-transformers / Hugging Face references for spec/text/*_spec.lua.

  python st_reference.py MODEL_DIR SENTENCES.json > OUT.json

SENTENCES.json is {"sentences": [...], "max_length": N}. Prints a JSON
object: "ids" (the fast tokenizer's ids with [CLS]/[SEP], truncated to
max_length; 0-based, as Hugging Face gives them), "ids512" (the same with
the tokenizer's own 512), "padded" (input_ids and attention_mask of the
whole list padded to the longest), "embeddings" (SentenceTransformer
.encode of the list, [N, dim]) and "embeddings_int8" (the same after
torch.ao.quantization.quantize_dynamic of the model's nn.Linear layers to
qint8, one sentence a batch: dynamic quantization takes a range per
batch). Exits with status 3 when the libraries are
missing, so that the spec can mark its parity tests pending.
"""
import json
import sys
import warnings

try:
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer
except Exception:  # pragma: no cover
    sys.exit(3)

model_dir, path = sys.argv[1], sys.argv[2]
with open(path, encoding='utf-8') as f:
    req = json.load(f)
sentences, max_length = req['sentences'], req['max_length']
torch.set_num_threads(1)
tok = AutoTokenizer.from_pretrained(model_dir)
out = {
    'torch': torch.__version__,
    'ids': [tok(s, truncation=True, max_length=max_length)['input_ids'] for s in sentences],
    'ids512': [tok(s, truncation=True, max_length=512)['input_ids'] for s in sentences],
}
b = tok(sentences, truncation=True, max_length=max_length, padding=True)
out['padded'] = {'input_ids': b['input_ids'], 'attention_mask': b['attention_mask']}
st = SentenceTransformer(model_dir, device='cpu')
out['max_seq_length'] = st.max_seq_length
out['embeddings'] = st.encode(sentences, batch_size=16).astype('float64').tolist()
with warnings.catch_warnings():   # PyTorch 2.x: eager quantization moves to torchao
    warnings.simplefilter('ignore')
    q = torch.ao.quantization.quantize_dynamic(st, {torch.nn.Linear}, dtype=torch.qint8)
    out['embeddings_int8'] = q.encode(sentences, batch_size=1).astype('float64').tolist()
json.dump(out, sys.stdout)
