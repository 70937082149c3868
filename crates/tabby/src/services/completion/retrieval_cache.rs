//! The last code search snippets per user, file and cursor line, so that the keystrokes of one
//! line get the same snippets: the prompt's start (where snippets go) then stays the same
//! while the user types, and the model's prompt cache can reuse it. A new line, another file
//! or [`TTL`] later, the search runs again.
//!
//! Across lines of one file the snippets are kept steady too ([`RetrievalCache::steady`]):
//! while a new line's search still ranks first a snippet the file's last prompt held, that
//! prompt's snippets come first again, in their order, then the search's other hits. Without
//! it nearly every new line changed the snippets' order or their tail (the search returns only
//! a few hits, and the second one flips between lines), and with them everything after them
//! in the prompt, so the model read the whole prompt again. When the search's best hit is new,
//! its order stands.

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

/// Who asks, where: the user, the sources they may read now (a SHA-256 of their ids), the
/// repository and the file as they are. The user is compared as is, so one user's snippets
/// (from sources only they may read) never answer another's request, whatever the request
/// holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    user: Option<String>,
    access: [u8; 32],
    git_url: Option<String>,
    filepath: Option<String>,
}

/// A [`FileKey`] and a SHA-256 of the lines above and below the cursor's (the line being
/// typed is left out).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LineKey {
    file: FileKey,
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
        let mut access = Sha256::new();
        for repository in &allowed.list {
            access.update((repository.source_id.len() as u64).to_le_bytes());
            access.update(repository.source_id.as_bytes());
        }
        let mut around = Sha256::new();
        around.update((above.len() as u64).to_le_bytes());
        around.update(above.as_bytes());
        around.update(below.as_bytes());
        LineKey {
            file: FileKey {
                user: user.map(str::to_string),
                access: access.finalize().into(),
                git_url: segments.git_url.clone(),
                filepath: segments.filepath.clone(),
            },
            around: around.finalize().into(),
        }
    }
}

/// Entries by key with the time they were stored, and keys in the order they came.
type Entries<K> = (HashMap<K, (Instant, Vec<Snippet>)>, VecDeque<K>);

/// The snippets per line, and the last ones served per file (for [`RetrievalCache::steady`]),
/// each kept for `ttl` ([`TTL`]).
pub struct RetrievalCache {
    inner: Mutex<Entries<LineKey>>,
    files: Mutex<Entries<FileKey>>,
    outlines: Mutex<Entries<LineKey>>,
    ttl: Duration,
}

impl Default for RetrievalCache {
    fn default() -> Self {
        Self::with_ttl(TTL)
    }
}

fn store<K: Clone + Eq + std::hash::Hash>(
    entries: &Mutex<Entries<K>>,
    key: K,
    snippets: Vec<Snippet>,
) {
    let mut inner = entries.lock().unwrap_or_else(|e| e.into_inner());
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

fn same(a: &Snippet, b: &Snippet) -> bool {
    a.filepath == b.filepath && a.body == b.body
}

/// `previous`, then the rest of `fresh` in its order, when `fresh`'s first snippet is one of
/// `previous`; else `fresh`.
fn steady_order(previous: &[Snippet], fresh: Vec<Snippet>) -> Vec<Snippet> {
    if !fresh
        .first()
        .is_some_and(|best| previous.iter().any(|p| same(p, best)))
    {
        return fresh;
    }
    let mut out = previous.to_vec();
    out.extend(
        fresh
            .into_iter()
            .filter(|f| !previous.iter().any(|p| same(p, f))),
    );
    out
}

impl RetrievalCache {
    /// A cache whose entries count for `ttl` (`tabby eval` keeps them for the whole run: its
    /// queries come at the machine's speed, not a user's, and a wall-clock expiry would make
    /// its figures depend on that speed).
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            inner: Default::default(),
            files: Default::default(),
            outlines: Default::default(),
            ttl,
        }
    }

    /// The snippets stored for `key` less than the TTL ago.
    pub fn get(&self, key: &LineKey) -> Option<Vec<Snippet>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .0
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, snippets)| snippets.clone())
    }

    pub fn put(&self, key: LineKey, snippets: Vec<Snippet>) {
        store(&self.inner, key, snippets);
    }

    /// A new line's search results (`fresh`) in the order that keeps the snippets of the
    /// file's last prompt first (see the module doc); those count for the TTL.
    pub fn steady(&self, key: &LineKey, fresh: Vec<Snippet>) -> Vec<Snippet> {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        match files
            .0
            .get(&key.file)
            .filter(|(at, _)| at.elapsed() < self.ttl)
        {
            Some((_, previous)) => steady_order(previous, fresh),
            None => fresh,
        }
    }

    /// The outline a request of this line should hold: `fresh` when the cursor follows a name
    /// (remembered for the line), else the line's last one, so that an outline stays while the
    /// member's name and its arguments are typed (its appearing and going changed the prompt
    /// ahead of the prefix at each keystroke).
    pub fn line_outline(&self, key: &LineKey, fresh: Vec<Snippet>) -> Vec<Snippet> {
        if !fresh.is_empty() {
            store(&self.outlines, key.clone(), fresh.clone());
            return fresh;
        }
        let outlines = self.outlines.lock().unwrap_or_else(|e| e.into_inner());
        outlines
            .0
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, kept)| kept.clone())
            .unwrap_or_default()
    }

    /// Remembers for the file's next line the snippets a prompt for `key` holds (`chosen`)
    /// that came from the search (`searched`): the editor's own snippets come with each
    /// request and are not carried over.
    pub fn served(&self, key: &LineKey, chosen: &[Snippet], searched: &[Snippet]) {
        let from_search = chosen
            .iter()
            .filter(|c| searched.iter().any(|s| same(s, c)))
            .cloned()
            .collect();
        store(&self.files, key.file.clone(), from_search);
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
    fn entries_count_for_the_cache_ttl() {
        let key = LineKey::new(Some("u1"), &allowed(), &segments("x = ", ""));
        for (cache, kept) in [
            (RetrievalCache::default(), true),
            (RetrievalCache::with_ttl(Duration::MAX), true),
            (RetrievalCache::with_ttl(Duration::ZERO), false),
        ] {
            cache.put(key.clone(), vec![hit("a")]);
            assert_eq!(cache.get(&key).is_some(), kept);
            // The file's last prompt held c and a; a new line's search finds a first.
            cache.served(&key, &[hit("c"), hit("a")], &[hit("c"), hit("a")]);
            let order = cache.steady(&key, vec![hit("a"), hit("b")]);
            let expected: &[&str] = if kept { &["c", "a", "b"] } else { &["a", "b"] };
            assert_eq!(names(&order), expected);
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

    fn hit(name: &str) -> Snippet {
        Snippet {
            filepath: format!("{name}.py"),
            body: format!("def {name}(): pass"),
            score: 1.0,
            defines: None,
        }
    }

    fn names(snippets: &[Snippet]) -> Vec<&str> {
        snippets
            .iter()
            .map(|s| s.filepath.trim_end_matches(".py"))
            .collect()
    }

    #[test]
    fn a_new_line_keeps_the_last_prompts_snippets_while_the_best_hit_stays() {
        let list = |names: &[&str]| names.iter().map(|n| hit(n)).collect::<Vec<_>>();
        let order = |previous: &[&str], fresh: &[&str]| {
            names(&steady_order(&list(previous), list(fresh)))
                .into_iter()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        // Same set, other order: the previous order.
        assert_eq!(order(&["a", "b"], &["b", "a", "c"]), ["a", "b", "c"]);
        // The second hit changed: the previous ones, then the new ones.
        assert_eq!(order(&["a", "b"], &["a", "c", "d"]), ["a", "b", "c", "d"]);
        // The search's best hit is new: its order stands.
        assert_eq!(order(&["a", "b"], &["c", "b", "a"]), ["c", "b", "a"]);
        // Nothing before, or nothing found: the search's order.
        assert_eq!(order(&[], &["b", "a"]), ["b", "a"]);
        assert!(order(&["a"], &[]).is_empty());
    }

    #[test]
    fn steady_order_is_per_user_and_file() {
        let cache = RetrievalCache::default();
        let list = |names: &[&str]| names.iter().map(|n| hit(n)).collect::<Vec<_>>();
        let key = |user: &str, file: &str, line: &str| {
            let mut s = segments(&format!("{line}\nx"), "");
            s.filepath = Some(file.into());
            LineKey::new(Some(user), &allowed(), &s)
        };
        let first = cache.steady(&key("u1", "a.py", "1"), list(&["a", "b", "c"]));
        assert_eq!(names(&first), ["a", "b", "c"]);
        // The prompt held a and c, and a snippet the editor sent (not carried over).
        let mut chosen = list(&["editor", "a", "c"]);
        chosen[0].filepath = "open_tab.py".into();
        cache.served(&key("u1", "a.py", "1"), &chosen, &first);
        let next = cache.steady(&key("u1", "a.py", "2"), list(&["a", "b", "c"]));
        assert_eq!(names(&next), ["a", "c", "b"]);
        // Another user or file starts from its own search order.
        let fresh = || list(&["a", "b", "c"]);
        assert_eq!(
            names(&cache.steady(&key("u2", "a.py", "2"), fresh())),
            ["a", "b", "c"]
        );
        assert_eq!(
            names(&cache.steady(&key("u1", "b.py", "2"), fresh())),
            ["a", "b", "c"]
        );
        // Another set of readable sources is another file key.
        let mut s = segments("3\nx", "");
        s.filepath = Some("a.py".into());
        let fewer = AllowedCodeRepository { list: vec![] };
        let other = LineKey::new(Some("u1"), &fewer, &s);
        assert_eq!(names(&cache.steady(&other, fresh())), ["a", "b", "c"]);
    }

    #[test]
    fn bounded_and_fresh() {
        let cache = RetrievalCache::default();
        let snippet = Snippet {
            filepath: "a.py".into(),
            body: "x = 1".into(),
            score: 1.0,
            defines: None,
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

    fn outline(path: &str) -> Vec<Snippet> {
        vec![Snippet {
            filepath: path.into(),
            body: "def f(x):\n".into(),
            score: 0.0,
            defines: None,
        }]
    }

    /// An outline stays for the rest of its line once the cursor followed a name there, and
    /// only there: another line or another user starts without it.
    #[test]
    fn an_outline_stays_for_its_line() {
        let cache = RetrievalCache::default();
        let above = "import util\n\ndef main():\n";
        let key = |user: &str, line: &str| {
            LineKey::new(
                Some(user),
                &allowed(),
                &segments(&format!("{above}{line}"), "\n"),
            )
        };
        assert!(cache.line_outline(&key("a", "    x = "), vec![]).is_empty());
        assert_eq!(
            cache.line_outline(&key("a", "    x = util."), outline("util.py")),
            outline("util.py")
        );
        assert_eq!(
            cache.line_outline(&key("a", "    x = util.f(1, "), vec![]),
            outline("util.py")
        );
        assert_eq!(
            cache.line_outline(&key("a", "    x = util.f(1, y."), outline("y.py")),
            outline("y.py"),
            "a newer one replaces it"
        );
        assert!(
            cache
                .line_outline(&key("b", "    x = util.f("), vec![])
                .is_empty()
        );
        let next_line = LineKey::new(
            Some("a"),
            &allowed(),
            &segments(&format!("{above}    x = util.f(1)\n    "), "\n"),
        );
        assert!(cache.line_outline(&next_line, vec![]).is_empty());
    }
}
