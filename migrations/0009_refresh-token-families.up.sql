-- Refresh tokens are stored as SHA-256 digests (`hashed`; rows from before keep their plain
-- value until they expire), belong to a family (every token rotated from one sign-in), and
-- are marked `used_at` when rotated instead of deleted: presenting a used token again is
-- theft, and revokes its whole family.
ALTER TABLE refresh_tokens ADD COLUMN hashed BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE refresh_tokens ADD COLUMN family VARCHAR(32);
ALTER TABLE refresh_tokens ADD COLUMN used_at TIMESTAMP;
CREATE INDEX refresh_tokens_family_idx ON refresh_tokens (family);
