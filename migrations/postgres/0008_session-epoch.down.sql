-- PostgreSQL twin of the SQLite migration migrations/0008_session-epoch.down.sql.
ALTER TABLE users DROP COLUMN session_epoch;
