#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback for the tests: `source scripts/postgres.sh;
# start_test_postgres` sets TABBY_TEST_POSTGRES_URL (and TABBY_TEST_POSTGRES_CA, the
# self-signed certificate the server offers TLS with, for 127.0.0.1) and stops and removes the
# cluster when the shell exits. Run directly (`bash scripts/postgres.sh`), it starts one and waits, printing the
# URL, until Ctrl-C. Uses Debian's server package (postgresql); as root, the server runs as the
# `postgres` user, since PostgreSQL refuses to run as root.

start_test_postgres() {
  local bin
  bin=$(dirname "$(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -n 1)")
  PG_TEST_DIR=$(mktemp -d /tmp/tabby-pg.XXXXXX)
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local as=()
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres "$PG_TEST_DIR"
    as=(runuser -u postgres --)
  fi
  PG_TEST_AS=("${as[@]}")
  PG_TEST_BIN=$bin
  "${as[@]}" "$bin/initdb" -D "$PG_TEST_DIR/data" -A trust -U tabby >/dev/null
  # TLS: a test CA and a server certificate it signs for 127.0.0.1, so that a client can verify
  # the server (sslmode=verify-full&sslrootcert=$TABBY_TEST_POSTGRES_CA).
  local tls="$PG_TEST_DIR/tls"
  mkdir -p "$tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=tabby test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
    -keyout "$tls/ca.key" -out "$PG_TEST_DIR/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$PG_TEST_DIR/data/server.key" -out "$tls/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
    >"$tls/server.ext"
  openssl x509 -req -in "$tls/server.csr" -CA "$PG_TEST_DIR/ca.crt" -CAkey "$tls/ca.key" \
    -CAcreateserial -days 2 -extfile "$tls/server.ext" -out "$PG_TEST_DIR/data/server.crt" 2>/dev/null
  chmod 600 "$PG_TEST_DIR/data/server.key"
  chmod 644 "$PG_TEST_DIR/ca.crt"
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres "$PG_TEST_DIR/data/server.key" "$PG_TEST_DIR/data/server.crt"
  fi
  # fsync off: the cluster is thrown away. Each test's servers hold up to 16 connections.
  "${as[@]}" "$bin/pg_ctl" -D "$PG_TEST_DIR/data" -l "$PG_TEST_DIR/log" -w -o \
    "-p $port -k $PG_TEST_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=400 -c ssl=on" \
    start >/dev/null
  trap stop_test_postgres EXIT
  TABBY_TEST_POSTGRES_URL="postgres://tabby@127.0.0.1:$port/postgres"
  TABBY_TEST_POSTGRES_CA="$PG_TEST_DIR/ca.crt"
}

stop_test_postgres() {
  if [ -n "${PG_TEST_DIR:-}" ]; then
    "${PG_TEST_AS[@]}" "$PG_TEST_BIN/pg_ctl" -D "$PG_TEST_DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$PG_TEST_DIR"
    PG_TEST_DIR=
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  start_test_postgres
  echo "TABBY_TEST_POSTGRES_URL=$TABBY_TEST_POSTGRES_URL"
  echo "TABBY_TEST_POSTGRES_CA=$TABBY_TEST_POSTGRES_CA"
  echo "Ctrl-C stops and removes it."
  while true; do sleep 3600; done
fi
