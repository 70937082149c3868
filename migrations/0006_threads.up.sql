-- Answer Engine conversations: a thread per conversation, its messages with their attachments.

CREATE TABLE threads (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    -- New threads are ephemeral until the user keeps them; idle ephemeral ones are removed.
    is_ephemeral       BOOLEAN NOT NULL DEFAULT 1,
    user_id            INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- JSON array of follow-up questions suggested with the last answer.
    relevant_questions BLOB,
    created_at         TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at         TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);
CREATE INDEX threads_user_id_idx ON threads (user_id);
CREATE INDEX threads_ephemeral_updated_at_idx ON threads (is_ephemeral, updated_at);

CREATE TABLE thread_messages (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id      INTEGER NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    role           VARCHAR(16) NOT NULL CHECK (role IN ('user', 'assistant')),
    content        TEXT NOT NULL,
    -- The source the code attachments were searched in (assistant messages of a code query).
    code_source_id VARCHAR(255),
    -- JSON: {code, client_code, doc, code_file_list}.
    attachment     BLOB NOT NULL DEFAULT '{}',
    created_at     TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at     TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);
CREATE INDEX thread_messages_thread_id_idx ON thread_messages (thread_id);
