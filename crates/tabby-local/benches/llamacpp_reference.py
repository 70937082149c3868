#!/usr/bin/env python3
"""llama.cpp reference figures for `benches/llm.rs`: prompt and decode tokens/s of a GGUF model
under llama.cpp's server, from the PyPI package `xllamacpp==2026.10.11549`.

Measurement only, never part of the product. Install it into a throwaway venv:

    python3 -m venv /tmp/llamacpp-venv
    /tmp/llamacpp-venv/bin/pip install xllamacpp==2026.10.11549

Usage: llamacpp_reference.py MODEL.gguf PROMPT_FILE N_PREDICT [THREADS] [RUNS]
Prints one JSON object: llama.cpp's own timings (best and median over RUNS) and the generated
text.
"""
import json
import statistics
import sys
import urllib.request

import xllamacpp


def rss_mib(key):
    # /proc, not getrusage: ru_maxrss carries the parent's peak across fork + exec.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return None


def main():
    model, prompt_file, n_predict = sys.argv[1], sys.argv[2], int(sys.argv[3])
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    runs = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    prompt = open(prompt_file, encoding="utf-8").read()

    params = xllamacpp.CommonParams()
    params.model.path = model
    params.n_ctx = 4096
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.port = 0
    server = xllamacpp.Server(params)
    url = server.listening_address

    def complete(n):
        body = {
            "prompt": prompt,
            "n_predict": n,
            "temperature": 0,
            "cache_prompt": False,
            "ignore_eos": True,
            "stream": False,
        }
        req = urllib.request.Request(
            url + "/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        return json.loads(urllib.request.urlopen(req).read())

    complete(8)  # warm-up
    results = [complete(n_predict) for _ in range(runs)]
    t = [r["timings"] for r in results]
    print(json.dumps({
        "prompt_tokens": t[0]["prompt_n"],
        "prompt_tokens_per_s": max(x["prompt_per_second"] for x in t),
        "prompt_tokens_per_s_median": statistics.median(x["prompt_per_second"] for x in t),
        "decode_tokens": t[0]["predicted_n"],
        "decode_tokens_per_s": max(x["predicted_per_second"] for x in t),
        "decode_tokens_per_s_median": statistics.median(x["predicted_per_second"] for x in t),
        "peak_rss_mib": rss_mib("VmHWM:"),
        "rss_mib": rss_mib("VmRSS:"),
        "text": results[0]["content"],
    }))
    del server


if __name__ == "__main__":
    main()
