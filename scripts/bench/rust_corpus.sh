#!/usr/bin/env bash
# Assembles a corpus of real Rust crates from the local cargo registry cache into DIR, stopping
# once it holds about MB megabytes of .rs files. The crates reserved for evaluation (ignore,
# globset, grep*, regex*, serde*, clap*, tokio*) are left out. Crates are taken in name order,
# one version each, so the corpus is the same on every run with the same cache.
#
# Usage: scripts/bench/rust_corpus.sh DIR MB
set -euo pipefail
dir=${1:?usage: rust_corpus.sh DIR MB}
mb=${2:?usage: rust_corpus.sh DIR MB}
registry=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ | head -1)
mkdir -p "$dir"
limit=$((mb * 1000 * 1000))
total=0
seen=""
for crate in $(ls "$registry" | sort); do
  name=${crate%-[0-9]*}
  case "$name" in
    ignore|globset|grep*|regex*|serde*|clap*|tokio*) continue ;;
  esac
  case " $seen " in *" $name "*) continue ;; esac
  seen="$seen $name"
  size=$(find "$registry/$crate" -name '*.rs' -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
  [ "$size" -eq 0 ] && continue
  (cd "$registry/$crate" && find . -name '*.rs' -type f -exec cp --parents -t "$dir/$crate" {} +) 2>/dev/null \
    || { mkdir -p "$dir/$crate" && (cd "$registry/$crate" && find . -name '*.rs' -type f -exec cp --parents -t "$dir/$crate" {} +); }
  total=$((total + size))
  [ "$total" -ge "$limit" ] && break
done
files=$(find "$dir" -name '*.rs' -type f | wc -l)
echo "$dir: $files files, $((total / 1000000)) MB of Rust"
