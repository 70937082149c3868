-- PostgreSQL twin of the SQLite migration migrations/0001_users-and-auth.down.sql.
-- The citext extension stays installed.
DROP TABLE password_reset;
DROP TABLE refresh_tokens;
DROP TABLE invitations;
DROP TABLE users;
DROP TABLE registration_token;
DROP FUNCTION datetime(timestamptz, text);
DROP FUNCTION datetime(timestamptz);
DROP FUNCTION datetime(text, text);
DROP FUNCTION datetime(text);
