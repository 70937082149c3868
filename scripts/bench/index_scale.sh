#!/usr/bin/env bash
# Scale bench for `tabby index` (not a test): indexes CORPUS (a plain directory, e.g. from
# scripts/bench/rust_corpus.sh) cold into a fresh TABBY_ROOT with the default configuration,
# then re-indexes after changing one file, and prints MB/s, CPU %, peak RSS and index size;
# then serves the index (`tabby serve --no-webserver`) and measures /v1beta/search latency
# with scripts/bench/search_latency.py (SEARCH_QUERIES, default 200; 0 skips it).
# The models come from ~/.tabby/models (run `tabby download` once).
#
# Usage: scripts/bench/index_scale.sh TABBY_BINARY CORPUS
set -euo pipefail
tabby=${1:?usage: index_scale.sh TABBY_BINARY CORPUS}
corpus=${2:?usage: index_scale.sh TABBY_BINARY CORPUS}
root=$(mktemp -d /tmp/tabby-index-bench.XXXXXX)
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$root"' EXIT
ln -s "${TABBY_MODELS:-$HOME/.tabby/models}" "$root/models"
printf '[[repositories]]\ngit_url = "file://%s"\n' "$corpus" > "$root/config.toml"
export TABBY_ROOT=$root
mb=$(find "$corpus" -type f -printf '%s\n' | awk '{s+=$1} END {printf "%.1f", s/1e6}')
files=$(find "$corpus" -type f | wc -l)
echo "corpus $corpus: $files files, $mb MB"

run() { # label
  /usr/bin/time -v "$tabby" index --config "$root/config.toml" > "$root/out" 2> "$root/time" || {
    cat "$root/out" "$root/time"; exit 1; }
  local wall rss cpu
  wall=$(grep 'Elapsed (wall clock)' "$root/time" | awk '{print $NF}')
  rss=$(grep 'Maximum resident' "$root/time" | awk '{printf "%.0f", $NF/1024}')
  cpu=$(grep 'Percent of CPU' "$root/time" | awk '{print $NF}')
  echo "$1: wall $wall, CPU $cpu, peak RSS $rss MB"
  grep -E 'files indexed|stage' "$root/out" "$root/time" | sed 's/^[^:]*://' | sed 's/^/  /' || true
}
run cold
echo "index size: $(du -sm "$root/index" | cut -f1) MB"
run "unchanged re-run"
one=$(find "$corpus" -name '*.rs' -type f | sort | awk 'NR == 1')
cp "$one" "$root/saved"
printf '\n// edited by the bench\nfn bench_edit() {}\n' >> "$one"
run "one file changed"
cp "$root/saved" "$one"

queries=${SEARCH_QUERIES:-200}
if [ "$queries" -gt 0 ]; then
  port=${SEARCH_PORT:-18191}
  "$tabby" serve --no-webserver --host 127.0.0.1 --port "$port" --config "$root/config.toml" \
    > "$root/serve.log" 2>&1 &
  server=$!
  # Community mode re-indexes at start (nothing changed: seconds); measure after it.
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/v1/health" > /dev/null && grep -q 'files indexed' "$root/serve.log" && break
    sleep 1
  done
  python3 "$(dirname "$0")/search_latency.py" "http://127.0.0.1:$port" "$corpus" "$queries"
  echo "server peak RSS after the queries: $(awk '/VmHWM/ {printf "%.0f MB", $2/1024}' /proc/$server/status)"
fi
