-- PostgreSQL twin of the SQLite migration migrations/0017_rate-buckets.down.sql.
DROP TABLE rate_buckets;
