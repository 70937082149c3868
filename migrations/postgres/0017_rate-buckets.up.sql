-- PostgreSQL twin of the SQLite migration migrations/0017_rate-buckets.up.sql.
-- Token buckets that every process on the database shares (the per-account limit on failed
-- sign-ins counts attempts through all replicas).
CREATE TABLE rate_buckets (
    key        TEXT PRIMARY KEY NOT NULL,
    tokens     DOUBLE PRECISION NOT NULL,
    updated_ms BIGINT NOT NULL
);
CREATE INDEX rate_buckets_updated_ms_idx ON rate_buckets (updated_ms);
