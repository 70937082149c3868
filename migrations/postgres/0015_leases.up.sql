-- PostgreSQL twin of the SQLite migration migrations/0015_leases.up.sql.
-- Named leases, each held by one process at a time until it runs out unless renewed
-- (`worker`: the one process of those sharing a database that runs the jobs; the others stand
-- by and take over when it stops renewing). `expires_at` is TEXT in SQLite, where it holds
-- DATETIME(...) values: TIMESTAMPTZ here, so that `expires_at < DATETIME('now')` compares.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY NOT NULL,
    holder     TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
