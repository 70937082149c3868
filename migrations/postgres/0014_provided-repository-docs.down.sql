-- PostgreSQL twin of the SQLite migration migrations/0014_provided-repository-docs.down.sql.
ALTER TABLE provided_repositories DROP COLUMN docs_synced_at;
