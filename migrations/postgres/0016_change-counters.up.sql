-- PostgreSQL twin of the SQLite migration migrations/0016_change-counters.up.sql.
-- Counters that the processes sharing a database watch to learn what another process changed:
-- `directory` is bumped after every change to what the authorization snapshot holds, and each
-- process reloads its snapshot when it sees the value move (it reads the counter every second).
CREATE TABLE change_counters (
    name  TEXT PRIMARY KEY NOT NULL,
    value BIGINT NOT NULL
);
