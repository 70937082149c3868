-- Usage recorded from the editor API: raw events and per-completion counters.

CREATE TABLE user_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- completion | chat_completion | select | view | dismiss
    kind       VARCHAR(255) NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    -- The event as pretty-printed JSON.
    payload    BLOB NOT NULL
);
CREATE INDEX user_events_user_id_created_at_idx ON user_events (user_id, created_at);
CREATE INDEX user_events_created_at_idx ON user_events (created_at);

CREATE TABLE user_completions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id       INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    completion_id VARCHAR(255) NOT NULL,
    language      VARCHAR(255) NOT NULL,
    views         INTEGER NOT NULL DEFAULT 0,
    selects       INTEGER NOT NULL DEFAULT 0,
    dismisses     INTEGER NOT NULL DEFAULT 0,
    created_at    TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at    TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);
CREATE INDEX user_completions_completion_id_idx ON user_completions (completion_id);
CREATE INDEX user_completions_created_at_language_idx ON user_completions (created_at, language);
CREATE INDEX user_completions_user_id_created_at_idx ON user_completions (user_id, created_at);
