-- When the issues and pull/merge requests of a provided repository were last read (the start
-- of the last sync that finished, as the vendor's `since` / `updated_after`); NULL: read all
-- on the next sync. Cleared when the repository is deactivated, since its documents leave
-- the index then.
ALTER TABLE provided_repositories ADD COLUMN docs_synced_at TEXT;
