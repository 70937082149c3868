-- PostgreSQL twin of the SQLite migration migrations/0011_ldap.down.sql.
ALTER TABLE users DROP COLUMN external_sign_in_at;
ALTER TABLE users DROP COLUMN external_sign_in_method;
DROP TABLE ldap_credential;
