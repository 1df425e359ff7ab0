"""Drives flow-serve with NVIDIA's tritonclient (HTTP) for spec/serve/serve_spec.lua.

usage: client_check.py URL CASES
CASES: lines "model input output shape(comma) infile outfile binary(0|1)"; each
infile holds float32 values; the output is written as float32 to outfile.
Prints the server's name, the MLP's top 2 classes for a fixed input (the
classification extension), its log settings (the logging extension), each
model's metadata and readiness, the
ResNet's statistics (get_inference_statistics), and the MLP's max_batch_size
after load_model with a configuration override and after a plain reload.
"""
import json
import sys

import numpy as np
import tritonclient.http as httpclient


def main():
    url, cases = sys.argv[1], sys.argv[2]
    c = httpclient.InferenceServerClient(url=url)
    meta = c.get_server_metadata()
    print("server", meta["name"], c.is_server_live())
    # the classification extension: the top 2 of each row as binary BYTES
    xc = (np.arange(32, dtype=np.float32).reshape(2, 16) - 10) / 7
    i = httpclient.InferInput("x", [2, 16], "FP32")
    i.set_data_from_numpy(xc)
    o = httpclient.InferRequestedOutput("y", binary_data=True, class_count=2)
    top = c.infer("mlp_cls", [i], outputs=[o]).as_numpy("y")
    print("classes", list(top.shape), " ".join(s.decode() for s in top.flatten()))
    # the logging extension: update_log_settings answers the settings after it
    s = c.update_log_settings({"log_verbose_level": 1})
    print("log verbose", s["log_verbose_level"], c.get_log_settings()["log_format"])
    c.update_log_settings({"log_verbose_level": 0})
    for line in open(cases):
        model, inp, out, shape, infile, outfile, binary = line.split()
        shape = [int(s) for s in shape.split(",")]
        binary = binary == "1"
        md = c.get_model_metadata(model)
        print("metadata", model, json.dumps(md, sort_keys=True), c.is_model_ready(model))
        x = np.fromfile(infile, dtype=np.float32).reshape(shape)
        i = httpclient.InferInput(inp, shape, "FP32")
        i.set_data_from_numpy(x, binary_data=binary)
        o = httpclient.InferRequestedOutput(out, binary_data=binary)
        r = c.infer(model, [i], outputs=[o])
        y = r.as_numpy(out)
        print("infer", model, binary, list(y.shape))
        y.astype(np.float32).tofile(outfile)
    st = c.get_inference_statistics("resnet")["model_stats"][0]
    print("stats", st["name"], st["version"], st["inference_count"],
          st["inference_stats"]["success"]["count"])
    # load_model with a configuration override, then the folder's again
    cfg = c.get_model_config("mlp")
    cfg["max_batch_size"] = 2
    c.load_model("mlp", config=json.dumps(cfg))
    print("override max_batch_size", c.get_model_config("mlp")["max_batch_size"])
    c.load_model("mlp")
    print("reloaded max_batch_size", c.get_model_config("mlp")["max_batch_size"])
    # x + x in Triton's INT16 and UINT8/16/32/64 (models t_<dtype>), at the limits
    for name, dt in (("int16", "INT16"), ("uint8", "UINT8"), ("uint16", "UINT16"),
                     ("uint32", "UINT32"), ("uint64", "UINT64")):
        info = np.iinfo(np.dtype(name))
        x = np.array([[info.max, info.min, info.max // 2 + 1], [0, 1, 7]], dtype=name)
        ok = []
        for binary in (False, True):
            i = httpclient.InferInput("INPUT__0", list(x.shape), dt)
            i.set_data_from_numpy(x, binary_data=binary)
            o = httpclient.InferRequestedOutput("OUTPUT__0", binary_data=binary)
            y = c.infer("t_" + name, [i], outputs=[o]).as_numpy("OUTPUT__0")
            ok.append(y.dtype == x.dtype and np.array_equal(y, x + x))
        print("dtype", dt, "json", ok[0], "binary", ok[1])
    try:
        c.infer("no_such_model", [i])
    except Exception as e:  # the client raises InferenceServerException
        print("unknown model:", e)


main()
