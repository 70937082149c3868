-- SMTP settings: a single row. `smtp_password` is sealed (AES-256-GCM under a key derived
-- from `server_secrets.encryption_secret`, or the environment's) and never returned by the API.
CREATE TABLE email_setting (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    smtp_username TEXT NOT NULL,
    smtp_password TEXT,
    smtp_server   TEXT NOT NULL,
    smtp_port     INTEGER NOT NULL,
    from_address  TEXT NOT NULL,
    encryption    TEXT NOT NULL CHECK (encryption IN ('ssltls', 'starttls', 'none')),
    auth_method   TEXT NOT NULL CHECK (auth_method IN ('plain', 'login', 'none')),
    created_at    TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at    TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);

-- Mails to send, sent by a background sender with retries (never inside a request). `body`
-- may hold a sign-up or reset link: it is cleared once the mail is sent or given up.
CREATE TABLE email_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind            TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    subject         TEXT NOT NULL,
    body            TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    next_attempt_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    last_error      TEXT,
    sent_at         TIMESTAMP,
    failed_at       TIMESTAMP,
    created_at      TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);
CREATE INDEX email_outbox_due_idx ON email_outbox (next_attempt_at)
    WHERE sent_at IS NULL AND failed_at IS NULL;

-- The secret stored secrets are sealed with, generated on first use like the JWT secret.
ALTER TABLE server_secrets ADD COLUMN encryption_secret TEXT;

-- From this version on, `password_reset.code` holds the SHA-256 digest of a reset code. A plain
-- code of an older version matches nothing and is removed with the stale codes.
