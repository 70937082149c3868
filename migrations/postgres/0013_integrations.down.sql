-- PostgreSQL twin of the SQLite migration migrations/0013_integrations.down.sql.
DROP TABLE provided_repositories;
DROP TABLE integrations;
