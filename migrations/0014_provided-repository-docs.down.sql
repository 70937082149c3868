ALTER TABLE provided_repositories DROP COLUMN docs_synced_at;
