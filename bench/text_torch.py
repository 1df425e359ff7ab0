"""sentence-transformers side of bench/text.lua: loads the model folder,
encodes each case's sentences once to warm up, then REPS timed times;
prints one JSON object {"torch": version, "<case>": [ms, ...]}.

  python text_torch.py MODEL_DIR CASES.json THREADS REPS
"""
import json
import sys
import time

import torch
from sentence_transformers import SentenceTransformer

model_dir, cases_path, threads, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
with open(cases_path, encoding='utf-8') as f:
    cases = json.load(f)
st = SentenceTransformer(model_dir, device='cpu')
out = {'torch': torch.__version__}
for key, sentences in cases.items():
    st.encode(sentences, batch_size=len(sentences))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        st.encode(sentences, batch_size=len(sentences))
        times.append((time.perf_counter() - t0) * 1000)
    out[key] = times
print(json.dumps(out))
