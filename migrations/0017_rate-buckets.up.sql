-- Token buckets that every process on the database shares: the per-account limit on failed
-- sign-ins counts attempts through all replicas, not per replica. `tokens` after the refill
-- at `updated_ms` (Unix milliseconds, the writing process's clock).
CREATE TABLE rate_buckets (
    key        TEXT PRIMARY KEY NOT NULL,
    tokens     REAL NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE INDEX rate_buckets_updated_ms_idx ON rate_buckets (updated_ms);
