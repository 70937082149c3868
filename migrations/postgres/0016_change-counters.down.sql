-- PostgreSQL twin of the SQLite migration migrations/0016_change-counters.down.sql.
DROP TABLE change_counters;
