-- OAuth 2.0 / OpenID Connect sign-in: one row per provider. `client_secret` is sealed like
-- the SMTP password and never returned. `config_url`: the issuer of a generic OIDC provider,
-- or the base URL of a self-hosted GitHub Enterprise / GitLab.
CREATE TABLE oauth_credential (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    provider      TEXT NOT NULL UNIQUE CHECK (provider IN ('github', 'google', 'gitlab', 'oidc')),
    client_id     TEXT NOT NULL,
    client_secret TEXT NOT NULL,
    config_url    TEXT,
    config_scopes TEXT,
    created_at    TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at    TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);
