-- Older versions match tokens by plain value: digests then match nothing (those sessions
-- sign in again), and plain tokens that were already redeemed must not come back to life.
DELETE FROM refresh_tokens WHERE NOT hashed AND used_at IS NOT NULL;
DROP INDEX refresh_tokens_family_idx;
ALTER TABLE refresh_tokens DROP COLUMN used_at;
ALTER TABLE refresh_tokens DROP COLUMN family;
ALTER TABLE refresh_tokens DROP COLUMN hashed;
