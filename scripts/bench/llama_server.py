#!/usr/bin/env python3
"""A llama.cpp server in this process (the `xllamacpp` PyPI package) on one GGUF, for side-by-side
benches: `python3 scripts/bench/llama_server.py MODEL.gguf PORT [THREADS]`. Prompt caching
(`cache_prompt`) is on, one slot, the context of tabby's embedded runtime (4096)."""

import sys
import time

import xllamacpp

params = xllamacpp.CommonParams()
params.model.path = sys.argv[1]
params.port = int(sys.argv[2])
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
params.n_ctx = 4096
params.n_parallel = 1
params.cpuparams.n_threads = threads
params.cpuparams_batch.n_threads = threads
params.cache_prompt = True
server = xllamacpp.Server(params)
print("listening", server.listening_address, flush=True)
while True:
    time.sleep(3600)
