-- PostgreSQL twin of the SQLite migration migrations/0014_provided-repository-docs.up.sql.
-- When the issues and pull/merge requests of a provided repository were last read (the start
-- of the last sync that finished); NULL: read all on the next sync. Cleared when the
-- repository is deactivated. TEXT in SQLite, where it holds a timestamp: TIMESTAMPTZ here, as
-- the code reads it as a DateTime<Utc>.
ALTER TABLE provided_repositories ADD COLUMN docs_synced_at TIMESTAMPTZ;
