-- PostgreSQL twin of the SQLite migration migrations/0003_repositories.down.sql.
DROP TABLE repositories;
