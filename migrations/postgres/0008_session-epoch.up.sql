-- PostgreSQL twin of the SQLite migration migrations/0008_session-epoch.up.sql.
-- A user's session generation: access tokens (JWTs) carry the generation they were issued in
-- and are refused once it moves on (sign out everywhere, password change, deactivation).
ALTER TABLE users ADD COLUMN session_epoch BIGINT NOT NULL DEFAULT 0;
