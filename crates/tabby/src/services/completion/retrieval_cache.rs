//! The last code search snippets per user, file and cursor line, so that the keystrokes of one
//! line get the same snippets: the prompt's start (where snippets go) then stays the same
//! while the user types, and the model's prompt cache can reuse it. A new line, another file
//! or [`TTL`] later, the search runs again.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
    time::{Duration, Instant},
};

use sha2::{Digest, Sha256};
use tabby_common::api::code::AllowedCodeRepository;

use super::types::{Segments, Snippet};

/// Entries kept (least recently stored evicted first).
const CAPACITY: usize = 256;
/// How long one search's snippets are reused: bounds how stale they get after a re-index or a
/// change of read access.
pub const TTL: Duration = Duration::from_secs(30);

/// Who asks, where: the user, the repository and the file as they are, and a SHA-256 of the
/// lines above and below the cursor's (the line being typed is left out). The user is compared
/// as is, so one user's snippets (from sources only they may read) never answer another's
/// request, whatever the request holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LineKey {
    user: Option<String>,
    git_url: Option<String>,
    filepath: Option<String>,
    around: [u8; 32],
}

impl LineKey {
    /// `allowed`: the repositories the user may read now; a change of read access changes
    /// the key, so snippets of a source taken away are never served from here.
    pub fn new(user: Option<&str>, allowed: &AllowedCodeRepository, segments: &Segments) -> Self {
        let above = segments
            .prefix
            .rfind('\n')
            .map_or("", |i| &segments.prefix[..i]);
        // The lines below it too (typing does not change them).
        let after = segments.suffix.as_deref().unwrap_or_default();
        let below = after.split_once('\n').map_or("", |(_, below)| below);
        let mut digest = Sha256::new();
        for repository in &allowed.list {
            digest.update((repository.source_id.len() as u64).to_le_bytes());
            digest.update(repository.source_id.as_bytes());
        }
        digest.update((above.len() as u64).to_le_bytes());
        digest.update(above.as_bytes());
        digest.update(below.as_bytes());
        LineKey {
            user: user.map(str::to_string),
            git_url: segments.git_url.clone(),
            filepath: segments.filepath.clone(),
            around: digest.finalize().into(),
        }
    }
}

/// Entries by key with the time they were stored, and keys in the order they came.
type Entries = (HashMap<LineKey, (Instant, Vec<Snippet>)>, VecDeque<LineKey>);

#[derive(Default)]
pub struct RetrievalCache {
    inner: Mutex<Entries>,
}

impl RetrievalCache {
    /// The snippets stored for `key` less than [`TTL`] ago.
    pub fn get(&self, key: &LineKey) -> Option<Vec<Snippet>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .0
            .get(key)
            .filter(|(at, _)| at.elapsed() < TTL)
            .map(|(_, snippets)| snippets.clone())
    }

    pub fn put(&self, key: LineKey, snippets: Vec<Snippet>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *inner;
        if map
            .insert(key.clone(), (Instant::now(), snippets))
            .is_none()
        {
            order.push_back(key);
        }
        while order.len() > CAPACITY {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> AllowedCodeRepository {
        AllowedCodeRepository {
            list: vec![tabby_common::api::code::CodeRepository {
                git_url: "https://example.com/app.git".into(),
                source_id: "git:app".into(),
            }],
        }
    }

    fn segments(prefix: &str, suffix: &str) -> Segments {
        Segments {
            prefix: prefix.to_string(),
            suffix: Some(suffix.to_string()),
            filepath: Some("src/app.py".into()),
            git_url: Some("https://example.com/app.git".into()),
            ..Default::default()
        }
    }

    #[test]
    fn one_line_one_key() {
        let above = "import os\n\ndef main():\n    ";
        let typed = |word: &str| {
            LineKey::new(
                Some("u1"),
                &allowed(),
                &segments(&format!("{above}{word}"), ")\n    return\n"),
            )
        };
        // Keystrokes of one line share the key ...
        assert_eq!(typed("pri"), typed("print(os.getcwd"));
        // ... another line, another user or another file do not.
        let next = LineKey::new(
            Some("u1"),
            &allowed(),
            &segments(&format!("{above}print()\n    "), "\n    return\n"),
        );
        assert_ne!(typed("pri"), next);
        assert_ne!(
            typed("pri"),
            LineKey::new(
                Some("u2"),
                &allowed(),
                &segments(&format!("{above}pri"), ")\n    return\n")
            )
        );
        let mut other = segments(&format!("{above}pri"), ")\n    return\n");
        other.filepath = Some("src/other.py".into());
        assert_ne!(typed("pri"), LineKey::new(Some("u1"), &allowed(), &other));
        // Losing read access to a source changes the key.
        let fewer = AllowedCodeRepository { list: vec![] };
        let same_line = segments(&format!("{above}pri"), ")\n    return\n");
        assert_ne!(typed("pri"), LineKey::new(Some("u1"), &fewer, &same_line));
    }

    #[test]
    fn bounded_and_fresh() {
        let cache = RetrievalCache::default();
        let snippet = Snippet {
            filepath: "a.py".into(),
            body: "x = 1".into(),
            score: 1.0,
        };
        let key = |i: usize| {
            LineKey::new(
                Some("u"),
                &allowed(),
                &segments(&format!("line {i}\nx"), ""),
            )
        };
        for i in 0..CAPACITY + 10 {
            cache.put(key(i), vec![snippet.clone()]);
        }
        assert!(cache.get(&key(0)).is_none(), "the oldest was evicted");
        assert_eq!(cache.get(&key(CAPACITY + 9)), Some(vec![snippet]));
        assert_eq!(cache.inner.lock().unwrap().0.len(), CAPACITY);
    }
}
