-- Background jobs, admin notifications, and the sources of the structured-doc corpus
-- (web documents to crawl, documents pushed through the ingestion API).

CREATE TABLE job_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The job's name, e.g. scheduler_git, web_crawler, hourly.
    job         VARCHAR(255) NOT NULL,
    start_ts    TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    end_ts      TIMESTAMP,
    -- NULL while pending or running; 0 success, 1 failure, -1 cancelled or unreadable command.
    exit_code   INTEGER,
    stdout      TEXT NOT NULL DEFAULT '',
    stderr      TEXT NOT NULL DEFAULT '',
    -- The serialized job event (JSON), what `triggerJobRun` takes.
    command     TEXT NOT NULL,
    started_at  TIMESTAMP,
    created_at  TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at  TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);
CREATE INDEX job_runs_job_created_at_idx ON job_runs (job, created_at);
CREATE INDEX job_runs_command_idx ON job_runs (command);
CREATE INDEX job_runs_pending_idx ON job_runs (exit_code, started_at);

CREATE TABLE notifications (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    -- admin | all_user
    recipient  VARCHAR(255) NOT NULL DEFAULT 'admin',
    -- Markdown.
    content    TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);

CREATE TABLE read_notifications (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    notification_id INTEGER NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    created_at      TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    UNIQUE (user_id, notification_id)
);

CREATE TABLE web_documents (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       VARCHAR(255) NOT NULL UNIQUE,
    url        TEXT NOT NULL UNIQUE,
    is_preset  BOOLEAN NOT NULL DEFAULT 0,
    created_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);

CREATE TABLE ingested_documents (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The client's source name (the index source id is `ingested:<source>`).
    source     VARCHAR(255) NOT NULL,
    doc_id     VARCHAR(255) NOT NULL,
    link       TEXT,
    title      TEXT NOT NULL,
    body       TEXT NOT NULL,
    status     VARCHAR(16) NOT NULL DEFAULT 'pending'
               CHECK (status IN ('pending', 'indexed', 'failed')),
    -- Unix seconds after which the document is removed.
    expired_at INTEGER NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    UNIQUE (source, doc_id)
);
CREATE INDEX ingested_documents_status_idx ON ingested_documents (status);
CREATE INDEX ingested_documents_expired_at_idx ON ingested_documents (expired_at);
