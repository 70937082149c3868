-- PostgreSQL twin of the SQLite migration migrations/0010_mail.down.sql.
ALTER TABLE server_secrets DROP COLUMN encryption_secret;
DROP INDEX email_outbox_due_idx;
DROP TABLE email_outbox;
DROP TABLE email_setting;
