-- A user's session generation: access tokens (JWTs) carry the generation they were issued in
-- and are refused once it moves on. It moves when the user signs out everywhere, changes the
-- password or is deactivated (upstream leaves access tokens valid until they expire).
ALTER TABLE users ADD COLUMN session_epoch INTEGER NOT NULL DEFAULT 0;
