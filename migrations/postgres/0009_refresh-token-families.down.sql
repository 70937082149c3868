-- PostgreSQL twin of the SQLite migration migrations/0009_refresh-token-families.down.sql.
-- Older versions match tokens by plain value: plain tokens that were already redeemed must
-- not come back to life.
DELETE FROM refresh_tokens WHERE NOT hashed AND used_at IS NOT NULL;
DROP INDEX refresh_tokens_family_idx;
ALTER TABLE refresh_tokens DROP COLUMN used_at;
ALTER TABLE refresh_tokens DROP COLUMN family;
ALTER TABLE refresh_tokens DROP COLUMN hashed;
