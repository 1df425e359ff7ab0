#!/usr/bin/env python3
"""Makes the committed PyTorch checkpoint fixtures of spec/io/torch_spec.lua.

    /usr/bin/python3 tools/make_fixtures.py [OUTDIR]     # default spec/fixtures/torch

Writes (a few KB in all; keep the directory under 50 KB):
  small_state_dict.pt  torch.save zip format: w = [[1.5, -2], [3, 4.25]],
                       row = w[1] (a view: storage offset 2), b = int64 [1, -2],
                       h = float16 [0.5, -1], epoch = 3, name = 'tiny'
                       (an OrderedDict, keys in that order)
  legacy.pt            the same with _use_new_zipfile_serialization=False
  shared_views.pt      x = arange(12.).reshape(3, 4) and views sharing its
                       storage: tail = x[1:], t = x.t(), col = x[:, 1],
                       row = x[2]; other = [5., 6.] (a storage of its own)
  malicious.pt         a torch-style zip whose data.pkl calls
                       os.system('touch /tmp/oneflow_fixture_pwned') when
                       unpickled (what torch.load(weights_only=False) would do)
  malicious_legacy.pt  the same pickle as a bare file (the legacy format's
                       first record)

The first three need torch (they were made with torch 1.13; legacy.pt holds
memory addresses as storage keys, so its bytes change from run to run). The
malicious files are written opcode by opcode here, never by pickling an
object, and need only the standard library; NEVER unpickle them. After
regenerating, run `luajit $(command -v busted) spec/io` and commit the files.
"""
import collections
import os
import struct
import sys
import zipfile

MARKER = '/tmp/oneflow_fixture_pwned'


def evil_pickle():
    """Protocol 2: os.system('touch MARKER') via GLOBAL + TUPLE1 + REDUCE."""
    cmd = ('touch ' + MARKER).encode()
    return (b'\x80\x02'                                  # PROTO 2
            + b'cos\nsystem\n'                           # GLOBAL os.system
            + b'X' + struct.pack('<I', len(cmd)) + cmd   # BINUNICODE cmd
            + b'\x85'                                    # TUPLE1
            + b'R'                                       # REDUCE -> os.system(cmd)
            + b'.')                                      # STOP


def write_malicious(out):
    pkl = evil_pickle()
    path = os.path.join(out, 'malicious.pt')
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        for name, data in (('malicious/data.pkl', pkl), ('malicious/version', b'3\n')):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            z.writestr(info, data)
    with open(os.path.join(out, 'malicious_legacy.pt'), 'wb') as f:
        f.write(pkl)


def write_torch(out):
    import torch
    w = torch.tensor([[1.5, -2], [3, 4.25]])
    d = collections.OrderedDict()
    d['w'] = w
    d['row'] = w[1]
    d['b'] = torch.tensor([1, -2], dtype=torch.int64)
    d['h'] = torch.tensor([0.5, -1], dtype=torch.float16)
    d['epoch'] = 3
    d['name'] = 'tiny'
    torch.save(d, os.path.join(out, 'small_state_dict.pt'))
    torch.save(d, os.path.join(out, 'legacy.pt'), _use_new_zipfile_serialization=False)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    s = {'x': x, 'tail': x[1:], 't': x.t(), 'col': x[:, 1], 'row': x[2],
         'other': torch.tensor([5.0, 6.0])}
    torch.save(s, os.path.join(out, 'shared_views.pt'))
    return torch.__version__


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join('spec', 'fixtures', 'torch')
    os.makedirs(out, exist_ok=True)
    write_malicious(out)
    try:
        version = write_torch(out)
        print('torch', version)
    except ImportError:
        print('torch is not importable: wrote only the malicious fixtures')
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print('%s: %d bytes in all' % (out, total))
    if total > 50 * 1024:
        sys.exit('fixtures exceed 50 KB')


if __name__ == '__main__':
    main()
