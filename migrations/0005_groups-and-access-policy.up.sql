-- User groups and which groups may read which source (repository, web corpus, ...).
-- A source id without any policy row is readable by everyone.

CREATE TABLE user_groups (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       VARCHAR(255) NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    CONSTRAINT user_groups_name_unique UNIQUE (name)
);

CREATE TABLE user_group_memberships (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id        INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    user_group_id  INTEGER NOT NULL REFERENCES user_groups (id) ON DELETE CASCADE,
    is_group_admin BOOLEAN NOT NULL DEFAULT 0,
    created_at     TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at     TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    CONSTRAINT user_group_memberships_unique UNIQUE (user_id, user_group_id)
);
CREATE INDEX user_group_memberships_user_group_id_idx ON user_group_memberships (user_group_id);

CREATE TABLE source_id_read_access_policies (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    source_id     VARCHAR(255) NOT NULL,
    user_group_id INTEGER NOT NULL REFERENCES user_groups (id) ON DELETE CASCADE,
    created_at    TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at    TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    CONSTRAINT source_id_read_access_policies_unique UNIQUE (source_id, user_group_id)
);
CREATE INDEX source_id_read_access_policies_user_group_id_idx
    ON source_id_read_access_policies (user_group_id);
