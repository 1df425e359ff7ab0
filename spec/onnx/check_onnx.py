#!/usr/bin/env python3
"""Checks ONNX files written by flow.onnx.export against the Lua outputs.

Usage: check_onnx.py MANIFEST

Each line of MANIFEST is tab-separated: case name, model path, inputs
(.safetensors, entries named after the graph inputs), expected outputs
(.safetensors, entries named after the graph outputs), tolerance.
For each case: onnx.checker.check_model (full check, with shape inference),
then onnxruntime inference, compared element-wise with the expected values
(|got - want| <= tol * (1 + |want|); integer and bool outputs must match
exactly). Prints one tab-separated line per case: name, "ok" or "fail",
the largest absolute error, a message. Exits 0 when the tools are
importable, whatever the cases gave; 3 when onnx or onnxruntime is missing.
"""
import json
import struct
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
except ImportError as e:  # pragma: no cover
    print("missing\t" + str(e))
    sys.exit(3)

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
          "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "F16": np.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    res = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        arr = np.frombuffer(data[base + b:base + end], dtype=DTYPES[e["dtype"]])
        res[name] = arr.reshape(e["shape"]).copy()
    return res


def check(name, model_path, in_path, out_path, tol):
    model = onnx.load(model_path)
    onnx.checker.check_model(model, full_check=True)
    feeds = read_safetensors(in_path)
    want = read_safetensors(out_path)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    got = sess.run(names, {i.name: feeds[i.name] for i in sess.get_inputs()})
    worst = 0.0
    for n, g in zip(names, got):
        w = want[n]
        if tuple(g.shape) != tuple(w.shape):
            return "fail", worst, "%s: shape %s, expected %s" % (n, g.shape, w.shape)
        if w.dtype.kind in "biu" or g.dtype.kind in "biu":
            if g.dtype != w.dtype:
                return "fail", worst, "%s: dtype %s, expected %s" % (n, g.dtype, w.dtype)
            bad = np.count_nonzero(g != w)
            if bad:
                return "fail", worst, "%s: %d integer values differ" % (n, bad)
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        both_nan = np.isnan(g64) & np.isnan(w64)
        same_inf = np.isinf(w64) & (g64 == w64)
        err = np.where(both_nan | same_inf, 0.0, np.abs(g64 - w64))
        if err.size:
            worst = max(worst, float(np.nanmax(np.where(np.isnan(err), np.inf, err))))
        lim = tol * (1 + np.abs(np.where(np.isinf(w64), 0, w64)))
        if np.any(~(err <= lim)):
            return "fail", worst, "%s: max error %.3g over tolerance %g" % (n, worst, tol)
    return "ok", worst, ""


def main():
    for line in open(sys.argv[1]):
        line = line.rstrip("\n")
        if not line:
            continue
        name, model_path, in_path, out_path, tol = line.split("\t")
        try:
            status, worst, msg = check(name, model_path, in_path, out_path, float(tol))
        except Exception as e:  # report, go on with the next case
            status, worst, msg = "fail", 0.0, (type(e).__name__ + ": " + str(e)).replace("\n", " ")[:2000]
        print("%s\t%s\t%.6g\t%s" % (name, status, worst, msg), flush=True)


if __name__ == "__main__":
    main()
