-- Git repositories added through the API (config.toml repositories are not stored here).
CREATE TABLE repositories (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    name    VARCHAR(255) NOT NULL,
    git_url VARCHAR(255) NOT NULL,
    -- JSON array of ref names to index; empty means the default branch.
    refs    TEXT NOT NULL DEFAULT '[]',
    CONSTRAINT repositories_name_unique UNIQUE (name),
    CONSTRAINT repositories_git_url_unique UNIQUE (git_url)
);
