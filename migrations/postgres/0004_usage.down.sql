-- PostgreSQL twin of the SQLite migration migrations/0004_usage.down.sql.
DROP TABLE user_completions;
DROP TABLE user_events;
