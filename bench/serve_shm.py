"""serve_shm.py URL MODEL ROUNDS REQUESTS -- one client's request time to
flow-serve with the input (1x3x224x224 float32) and output (1x1000) sent as
binary tensor data over HTTP, and the same through system shared memory
regions (tritonclient.utils.shared_memory), rounds alternating the two;
prints the median request time of each round in microseconds
(bench/serve_shm.sh; doc/benchmarks.md "Serving: shared memory")."""
import os
import statistics
import sys
import time

import numpy as np
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm


def main():
    url, model, rounds, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    c = httpclient.InferenceServerClient(url=url)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    key = "/of_bench_%d" % os.getpid()
    hin = shm.create_shared_memory_region("b_in", key + "_in", x.nbytes)
    hout = shm.create_shared_memory_region("b_out", key + "_out", 4000)
    try:
        shm.set_shared_memory_region(hin, [x])
        c.register_system_shared_memory("b_in", key + "_in", x.nbytes)
        c.register_system_shared_memory("b_out", key + "_out", 4000)

        def binary():
            i = httpclient.InferInput("INPUT__0", [1, 3, 224, 224], "FP32")
            i.set_data_from_numpy(x, binary_data=True)
            o = httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True)
            return c.infer(model, [i], outputs=[o]).as_numpy("OUTPUT__0")

        def shared():
            i = httpclient.InferInput("INPUT__0", [1, 3, 224, 224], "FP32")
            i.set_shared_memory("b_in", x.nbytes)
            o = httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True)
            o.set_shared_memory("b_out", 4000)
            r = c.infer(model, [i], outputs=[o])
            return shm.get_contents_as_numpy(hout, np.float32, r.get_output("OUTPUT__0")["shape"])

        a, b = binary(), shared()
        print("equal", bool(np.array_equal(a, b)))
        for r in range(rounds):
            for name, f in (("binary", binary), ("shm", shared)):
                t = []
                for _ in range(n):
                    t0 = time.perf_counter()
                    f()
                    t.append(time.perf_counter() - t0)
                print("ROUND %d %s %.1f" % (r, name, statistics.median(t) * 1e6))
        c.unregister_system_shared_memory()
    finally:
        shm.destroy_shared_memory_region(hin)
        shm.destroy_shared_memory_region(hout)


if __name__ == "__main__":
    main()
