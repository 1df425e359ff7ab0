"""sentence-transformers side of bench/text.lua: loads the model folder,
encodes each case's sentences once to warm up, then REPS timed times;
prints one JSON object {"torch": version, "<case>": [wall ms, ...],
"<case>_cpu": [process CPU ms, ...]} (CPU time: all of the process's
threads, as bench/text.lua's os.clock). With a fifth argument `int8` the
model is first dynamically quantized (torch.ao.quantization.quantize_dynamic
of its nn.Linear layers to qint8, the default engine's qconfig).

  python text_torch.py MODEL_DIR CASES.json THREADS REPS [int8]
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
if len(sys.argv) > 5 and sys.argv[5] == 'int8':
    import warnings
    warnings.simplefilter('ignore')
    st = torch.ao.quantization.quantize_dynamic(st, {torch.nn.Linear}, dtype=torch.qint8)
out = {'torch': torch.__version__}
for key, sentences in cases.items():
    st.encode(sentences, batch_size=len(sentences))
    times, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        st.encode(sentences, batch_size=len(sentences))
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    out[key] = times
    out[key + '_cpu'] = cpu
print(json.dumps(out))
