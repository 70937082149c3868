//! Where things live under `$TABBY_ROOT` (default `~/.tabby`).

use std::path::{Path, PathBuf};

/// The root directory and the well-known paths below it.
#[derive(Clone, Debug)]
pub struct TabbyPaths {
    root: PathBuf,
}

impl TabbyPaths {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `$TABBY_ROOT`, else `$HOME/.tabby`, else `./.tabby`.
    pub fn from_env() -> Self {
        if let Some(root) = std::env::var_os("TABBY_ROOT").filter(|v| !v.is_empty()) {
            return Self::new(root);
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        Self::new(home.join(".tabby"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    pub fn events_dir(&self) -> PathBuf {
        self.root.join("events")
    }
    pub fn index_dir(&self) -> PathBuf {
        self.root.join("index")
    }
    pub fn repositories_dir(&self) -> PathBuf {
        self.root.join("repositories")
    }
    /// `$TABBY_MODEL_CACHE_ROOT`, else `$TABBY_ROOT/models`.
    pub fn models_dir(&self) -> PathBuf {
        std::env::var_os("TABBY_MODEL_CACHE_ROOT")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| self.root.join("models"))
    }
    pub fn ee_dir(&self) -> PathBuf {
        self.root.join("ee")
    }
    /// The enterprise layer's SQLite database.
    pub fn ee_db_file(&self) -> PathBuf {
        self.ee_dir().join("db.sqlite")
    }
}
