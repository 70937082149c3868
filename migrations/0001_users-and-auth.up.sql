-- Accounts and everything that authenticates them.
-- Timestamps are UTC text in SQLite's DATETIME('now') format ("YYYY-MM-DD HH:MM:SS").

-- The token that registers a worker or authorizes ingestion; the server keeps exactly row 1.
CREATE TABLE registration_token (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    token      VARCHAR(255) NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    CONSTRAINT registration_token_token_unique UNIQUE (token)
);

-- AUTOINCREMENT: a deleted user's id is never handed to a new user, so a token that still
-- names the old id can never authenticate someone else. The owner is user 1.
CREATE TABLE users (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    email              VARCHAR(150) NOT NULL COLLATE NOCASE,
    -- argon2 PHC string; NULL for accounts that sign in through SSO only.
    password_encrypted VARCHAR(128),
    is_admin           BOOLEAN NOT NULL DEFAULT 0,
    auth_token         VARCHAR(128) NOT NULL,
    active             BOOLEAN NOT NULL DEFAULT 1,
    avatar             BLOB,
    name               VARCHAR(255),
    created_at         TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at         TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    CONSTRAINT users_email_unique UNIQUE (email),
    CONSTRAINT users_auth_token_unique UNIQUE (auth_token)
);

CREATE TABLE invitations (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    email      VARCHAR(150) NOT NULL COLLATE NOCASE,
    code       VARCHAR(36) NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    CONSTRAINT invitations_email_unique UNIQUE (email),
    CONSTRAINT invitations_code_unique UNIQUE (code)
);

CREATE TABLE refresh_tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- The UNIQUE constraint is also the lookup index for refresh.
    token      VARCHAR(255) NOT NULL COLLATE NOCASE,
    expires_at TIMESTAMP NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    CONSTRAINT refresh_tokens_token_unique UNIQUE (token)
);
CREATE INDEX refresh_tokens_user_id_idx ON refresh_tokens (user_id);
CREATE INDEX refresh_tokens_expires_at_idx ON refresh_tokens (expires_at);

-- At most one pending reset per user.
CREATE TABLE password_reset (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    code       VARCHAR(36) NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    CONSTRAINT password_reset_user_id_unique UNIQUE (user_id),
    CONSTRAINT password_reset_code_unique UNIQUE (code)
);
