"""Drives flow-serve's system shared memory with NVIDIA's tritonclient
(tritonclient.http and tritonclient.utils.shared_memory) for
spec/serve/serve_spec.lua.

usage: shm_check.py URL MODEL INPUT OUTPUT SHAPE(comma) OUT_ROWS_BYTES INFILE OUTFILE
Puts INFILE's float32 values into a region the client creates, registers
it and an output region, infers with both, and writes the output region's
float32 values to OUTFILE. Prints the registered regions' status before
and after unregistering them.
"""
import os
import sys

import numpy as np
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm


def main():
    url, model, inp, out, shape, out_bytes, infile, outfile = sys.argv[1:9]
    shape = [int(s) for s in shape.split(",")]
    out_bytes = int(out_bytes)
    x = np.fromfile(infile, dtype=np.float32).reshape(shape)
    key = "/of_spec_tc_%d" % os.getpid()
    c = httpclient.InferenceServerClient(url=url)
    print("extension", "system_shared_memory" in c.get_server_metadata()["extensions"])
    hin = shm.create_shared_memory_region("tc_in", key + "_in", x.nbytes)
    hout = shm.create_shared_memory_region("tc_out", key + "_out", out_bytes)
    try:
        shm.set_shared_memory_region(hin, [x])
        c.register_system_shared_memory("tc_in", key + "_in", x.nbytes)
        c.register_system_shared_memory("tc_out", key + "_out", out_bytes)
        status = c.get_system_shared_memory_status()
        print("status", sorted((r["name"], r["key"] == key + "_" + r["name"][3:], int(r["byte_size"]))
                               for r in status if r["name"].startswith("tc_")))
        i = httpclient.InferInput(inp, shape, "FP32")
        i.set_shared_memory("tc_in", x.nbytes)
        o = httpclient.InferRequestedOutput(out, binary_data=True)
        o.set_shared_memory("tc_out", out_bytes)
        r = c.infer(model, [i], outputs=[o])
        meta = r.get_output(out)
        print("output", meta["datatype"], meta["shape"], "data" in meta)
        y = shm.get_contents_as_numpy(hout, np.float32, meta["shape"])
        y.tofile(outfile)
        c.unregister_system_shared_memory("tc_in")
        c.unregister_system_shared_memory("tc_out")
        print("after", [r["name"] for r in c.get_system_shared_memory_status()
                        if r["name"].startswith("tc_")])
    finally:
        shm.destroy_shared_memory_region(hin)
        shm.destroy_shared_memory_region(hout)


if __name__ == "__main__":
    main()
