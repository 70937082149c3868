-- PostgreSQL twin of the SQLite migration migrations/0009_refresh-token-families.up.sql.
-- Refresh tokens are stored as SHA-256 digests (`hashed`), belong to a family (every token
-- rotated from one sign-in), and are marked `used_at` when rotated instead of deleted:
-- presenting a used token again is theft, and revokes its whole family.
ALTER TABLE refresh_tokens ADD COLUMN hashed BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE refresh_tokens ADD COLUMN family TEXT;
ALTER TABLE refresh_tokens ADD COLUMN used_at TIMESTAMPTZ;
CREATE INDEX refresh_tokens_family_idx ON refresh_tokens (family);
