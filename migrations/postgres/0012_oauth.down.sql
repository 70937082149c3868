-- PostgreSQL twin of the SQLite migration migrations/0012_oauth.down.sql.
DROP TABLE oauth_credential;
