-- Server-wide settings: a single row with id 1.
CREATE TABLE server_setting (
    id                                     INTEGER PRIMARY KEY CHECK (id = 1),
    -- Comma-separated e-mail domains allowed to register; NULL or empty means any.
    security_allowed_register_domain_list  TEXT,
    security_disable_client_side_telemetry BOOLEAN NOT NULL DEFAULT 0,
    security_disable_password_login        BOOLEAN NOT NULL DEFAULT 0,
    network_external_url                   TEXT NOT NULL DEFAULT 'http://localhost:8080',
    billing_enterprise_license             TEXT,
    branding_logo                          TEXT,
    branding_icon                          TEXT
);
INSERT INTO server_setting (id) VALUES (1);

-- Secrets the server generates once and keeps across restarts; never exposed by the API.
-- Kept apart from server_setting so that reading settings can never leak them.
CREATE TABLE server_secrets (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    jwt_secret TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);
