ALTER TABLE server_secrets DROP COLUMN encryption_secret;
DROP INDEX email_outbox_due_idx;
DROP TABLE email_outbox;
DROP TABLE email_setting;
