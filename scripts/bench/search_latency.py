#!/usr/bin/env python3
"""Search latency of a running tabby server over the corpus it indexed (a bench, not a test).

Queries are what an editor's completion request searches with: 10 lines of code, taken from
N files of CORPUS spread evenly over its sorted file list (the lines 40 % into each file), so
every run asks the same questions. Each query is POSTed to /v1beta/search one at a time on
one kept-alive connection, after 20 warm-up queries; prints p50/p90/p99 of the wall time per
request (HTTP on loopback included) and the mean number of hits.

Usage: scripts/bench/search_latency.py URL CORPUS [N]
"""

import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse

CODE_EXTS = {".rs", ".py", ".js", ".ts", ".go", ".c", ".h", ".cc", ".cpp", ".java"}


def queries(corpus, n):
    files = []
    for root, dirs, names in os.walk(corpus):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files.extend(os.path.join(root, f) for f in sorted(names)
                     if os.path.splitext(f)[1] in CODE_EXTS)
    out = []
    step = max(1, len(files) // (n * 2))
    for path in files[::step]:
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        lines = [line for line in lines if line.strip()]
        if len(lines) < 20:
            continue
        start = int(len(lines) * 0.4)
        out.append("\n".join(lines[start:start + 10]))
        if len(out) == n:
            break
    return out


def main():
    url, corpus = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    parsed = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    qs = queries(corpus, n + 20)
    times, hits = [], []
    for i, q in enumerate(qs):
        body = json.dumps({"query": q})
        started = time.perf_counter()
        conn.request("POST", "/v1beta/search", body, {"content-type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        elapsed = time.perf_counter() - started
        if resp.status != 200:
            raise SystemExit(f"search answered {resp.status}: {data[:300]!r}")
        if i >= 20:
            times.append(elapsed * 1000)
            hits.append(len(json.loads(data)["hits"]))
    times.sort()
    pct = lambda p: times[min(len(times) - 1, int(round(p / 100 * (len(times) - 1))))]
    print(f"search: {len(times)} queries, p50 {pct(50):.1f} ms, p90 {pct(90):.1f} ms, "
          f"p99 {pct(99):.1f} ms, mean {statistics.mean(times):.1f} ms, "
          f"{statistics.mean(hits):.1f} hits per query")


if __name__ == "__main__":
    main()
