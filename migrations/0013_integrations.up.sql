-- GitHub / GitLab integrations (cloud or self-hosted). `access_token` is sealed like the SMTP
-- password and never returned; `error` is the last sync's failure (NULL when it worked);
-- `synced` says whether a sync ever finished.
CREATE TABLE integrations (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    kind         TEXT NOT NULL
                 CHECK (kind IN ('github', 'gitlab', 'github_self_hosted', 'gitlab_self_hosted')),
    display_name TEXT NOT NULL,
    access_token TEXT NOT NULL,
    api_base     TEXT,
    error        TEXT,
    synced       BOOLEAN NOT NULL DEFAULT FALSE,
    created_at   TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at   TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);

-- The repositories an integration's token can see, as of its last sync.
CREATE TABLE provided_repositories (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    integration_id INTEGER NOT NULL REFERENCES integrations (id) ON DELETE CASCADE,
    vendor_id      TEXT NOT NULL,
    name           TEXT NOT NULL,
    git_url        TEXT NOT NULL,
    active         BOOLEAN NOT NULL DEFAULT FALSE,
    refs           TEXT NOT NULL DEFAULT '[]',
    created_at     TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at     TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    CONSTRAINT provided_repositories_vendor_unique UNIQUE (integration_id, vendor_id)
);
