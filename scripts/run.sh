#!/usr/bin/env bash
# Builds the server in release mode and starts it on port 8080 with $TABBY_ROOT/config.toml
# (default ~/.tabby/config.toml). Extra args go to `tabby serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cc >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq gcc; }
cargo build --release -p tabby
target_dir="${CARGO_TARGET_DIR:-target}"
exec "$target_dir/release/tabby" serve "$@"
