//! The last code search snippets per user, file and cursor line, so that the keystrokes of one
//! line get the same snippets: the prompt's start (where snippets go) then stays the same
//! while the user types, and the model's prompt cache can reuse it. A new line, another file
//! or [`TTL`] later, the search runs again.

use std::{
    collections::{HashMap, VecDeque},
    hash::{DefaultHasher, Hash, Hasher},
    sync::Mutex,
    time::{Duration, Instant},
};

use super::types::{Segments, Snippet};

/// Entries kept (least recently stored evicted first).
const CAPACITY: usize = 256;
/// How long one search's snippets are reused: bounds how stale they get after a re-index or a
/// change of read access.
pub const TTL: Duration = Duration::from_secs(30);

/// Who asks, where: the user, the repository, the file, and the prefix up to the cursor's
/// line (the lines above it, hashed); the line being typed is left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LineKey(u64);

impl LineKey {
    pub fn new(user: Option<&str>, segments: &Segments) -> Self {
        let mut h = DefaultHasher::new();
        user.hash(&mut h);
        segments.git_url.hash(&mut h);
        segments.filepath.hash(&mut h);
        let above = segments
            .prefix
            .rfind('\n')
            .map_or("", |i| &segments.prefix[..i]);
        above.hash(&mut h);
        // And the lines below it (typing does not change them).
        let after = segments.suffix.as_deref().unwrap_or_default();
        after.split_once('\n').map(|(_, below)| below).hash(&mut h);
        LineKey(h.finish())
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
    pub fn get(&self, key: LineKey) -> Option<Vec<Snippet>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .0
            .get(&key)
            .filter(|(at, _)| at.elapsed() < TTL)
            .map(|(_, snippets)| snippets.clone())
    }

    pub fn put(&self, key: LineKey, snippets: Vec<Snippet>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *inner;
        if map.insert(key, (Instant::now(), snippets)).is_none() {
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
                &segments(&format!("{above}{word}"), ")\n    return\n"),
            )
        };
        // Keystrokes of one line share the key ...
        assert_eq!(typed("pri"), typed("print(os.getcwd"));
        // ... another line, another user or another file do not.
        let next = LineKey::new(
            Some("u1"),
            &segments(&format!("{above}print()\n    "), "\n    return\n"),
        );
        assert_ne!(typed("pri"), next);
        assert_ne!(
            typed("pri"),
            LineKey::new(
                Some("u2"),
                &segments(&format!("{above}pri"), ")\n    return\n")
            )
        );
        let mut other = segments(&format!("{above}pri"), ")\n    return\n");
        other.filepath = Some("src/other.py".into());
        assert_ne!(typed("pri"), LineKey::new(Some("u1"), &other));
    }

    #[test]
    fn bounded_and_fresh() {
        let cache = RetrievalCache::default();
        let snippet = Snippet {
            filepath: "a.py".into(),
            body: "x = 1".into(),
            score: 1.0,
        };
        for i in 0..(CAPACITY as u64 + 10) {
            cache.put(LineKey(i), vec![snippet.clone()]);
        }
        assert!(cache.get(LineKey(0)).is_none(), "the oldest was evicted");
        assert_eq!(cache.get(LineKey(CAPACITY as u64 + 9)), Some(vec![snippet]));
        assert_eq!(cache.inner.lock().unwrap().0.len(), CAPACITY);
    }
}
