-- PostgreSQL twin of the SQLite migration migrations/0006_threads.down.sql.
DROP TABLE thread_messages;
DROP TABLE threads;
