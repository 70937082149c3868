//! A constraint on how a completion starts: with one of a set of names (what may follow
//! `module.` when every name the module offers is known), then anything. A backend that picks
//! tokens itself (the embedded runtime) masks the tokens that would leave the set; others
//! ignore it.
//!
//! The check is on bytes, whatever the tokenizer: a token is allowed when the text generated so
//! far plus the token's bytes is still the start of a name, or is a whole name followed by a
//! byte that cannot continue an identifier.

use std::fmt;

/// Most names one set holds; a larger set is no constraint worth its memory.
pub const MAX_NAMES: usize = 4096;
/// Most bytes of one name; longer names are left out of the set (and so never written).
pub const MAX_NAME_BYTES: usize = 128;

/// Whether `b` may continue an identifier (ASCII letters, digits, `_`, `$`, and any byte of a
/// non-ASCII character).
pub fn is_identifier_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// The names a completion may start with, as a byte trie.
#[derive(Clone)]
pub struct FirstNames {
    names: Vec<String>,
    /// Per node, its children by byte, sorted.
    children: Vec<Vec<(u8, u32)>>,
    /// Per node, whether a name ends there.
    terminal: Vec<bool>,
}

/// Where the text generated so far stands against the names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameState {
    /// The text is the start of a name (trie node).
    Open(u32),
    /// The text starts with a whole name and a byte that ends it: anything may follow.
    Done,
}

impl FirstNames {
    /// The set of `names` (empty names stand for "no name at all": the completion may start
    /// with a byte that ends an identifier); none when no name is usable (nothing to constrain)
    /// or there are more than [`MAX_NAMES`].
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Option<Self> {
        let mut list: Vec<String> = names
            .into_iter()
            .map(|n| n.as_ref().to_string())
            .filter(|n| n.len() <= MAX_NAME_BYTES && n.bytes().all(is_identifier_byte))
            .collect();
        list.sort();
        list.dedup();
        if list.is_empty() || list.len() > MAX_NAMES {
            return None;
        }
        let mut set = FirstNames {
            names: Vec::new(),
            children: vec![Vec::new()],
            terminal: vec![false],
        };
        for name in &list {
            let mut node = 0usize;
            for &b in name.as_bytes() {
                node = match set.child(node as u32, b) {
                    Some(next) => next as usize,
                    None => {
                        set.children.push(Vec::new());
                        set.terminal.push(false);
                        let next = (set.children.len() - 1) as u32;
                        let at = set.children[node].partition_point(|&(c, _)| c < b);
                        set.children[node].insert(at, (b, next));
                        next as usize
                    }
                };
            }
            set.terminal[node] = true;
        }
        set.names = list;
        Some(set)
    }

    /// The names, sorted.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn child(&self, node: u32, b: u8) -> Option<u32> {
        let children = &self.children[node as usize];
        children
            .binary_search_by_key(&b, |&(c, _)| c)
            .ok()
            .map(|i| children[i].1)
    }

    /// The state before anything is generated.
    pub fn start(&self) -> NameState {
        NameState::Open(0)
    }

    /// The state after `bytes` more are generated; `None` when they leave the set.
    pub fn advance(&self, state: NameState, bytes: &[u8]) -> Option<NameState> {
        let NameState::Open(mut node) = state else {
            return Some(NameState::Done);
        };
        for &b in bytes {
            match self.child(node, b) {
                Some(next) => node = next,
                None if self.terminal[node as usize] && !is_identifier_byte(b) => {
                    return Some(NameState::Done);
                }
                None => return None,
            }
        }
        Some(NameState::Open(node))
    }

    /// Whether the generation may end in `state` (a stop token): only after a whole name.
    pub fn may_end(&self, state: NameState) -> bool {
        match state {
            NameState::Open(node) => self.terminal[node as usize],
            NameState::Done => true,
        }
    }

    /// Whether `text` (a whole completion) starts as the set demands: a name then a byte that
    /// ends it, or a name and nothing else.
    pub fn accepts(&self, text: &str) -> bool {
        match self.advance(self.start(), text.as_bytes()) {
            Some(state) => self.may_end(state),
            None => false,
        }
    }
}

impl PartialEq for FirstNames {
    fn eq(&self, other: &Self) -> bool {
        self.names == other.names
    }
}

impl fmt::Debug for FirstNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FirstNames({} names)", self.names.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> FirstNames {
        FirstNames::new(names.iter().copied()).unwrap()
    }

    #[test]
    fn a_completion_starts_with_a_whole_name_then_anything() {
        let s = set(&["map", "mapError", "flatMap"]);
        assert!(s.accepts("map(f)"));
        assert!(s.accepts("mapError((e) => e)"));
        assert!(s.accepts("flatMap"));
        assert!(s.accepts("map"));
        // A name's start, a longer name, another name, a leading space: not in the set.
        assert!(!s.accepts("ma"));
        assert!(!s.accepts("mapper(x)"));
        assert!(!s.accepts("filter(x)"));
        assert!(!s.accepts(" map(f)"));
        assert!(!s.accepts(""));
    }

    #[test]
    fn tokens_are_checked_byte_by_byte_across_their_boundaries() {
        let s = set(&["toMillis", "toSeconds"]);
        let to = s.advance(s.start(), b"to").unwrap();
        assert!(!s.may_end(to));
        assert_eq!(s.advance(to, b"Epoch"), None);
        let millis = s.advance(to, b"Millis").unwrap();
        assert!(s.may_end(millis));
        // The token that ends the name may carry what follows it.
        assert_eq!(s.advance(millis, b"(self"), Some(NameState::Done));
        assert_eq!(s.advance(millis, b"x"), None);
        // Once done, anything goes.
        assert_eq!(
            s.advance(NameState::Done, b"anything"),
            Some(NameState::Done)
        );
        // A control token (no bytes) leaves the state as it is.
        assert_eq!(s.advance(to, b""), Some(to));
    }

    #[test]
    fn an_empty_name_lets_the_completion_start_past_the_identifier() {
        // The editor typed `Duration.toMillis` already: the rest may be empty.
        let s = set(&["", "Seconds"]);
        assert!(s.accepts("(d)"));
        assert!(s.accepts("Seconds(d)"));
        assert!(!s.accepts("Minutes(d)"));
    }

    #[test]
    fn sets_without_usable_names_or_too_large_are_no_constraint() {
        assert!(FirstNames::new(Vec::<String>::new()).is_none());
        assert!(FirstNames::new(["a b", "x-y"]).is_none());
        assert!(FirstNames::new((0..=MAX_NAMES).map(|i| format!("n{i}"))).is_none());
        let s = FirstNames::new(["b", "a", "b", "c d"]).unwrap();
        assert_eq!(s.names(), ["a", "b"]);
        assert_eq!(format!("{s:?}"), "FirstNames(2 names)");
        // Non-ASCII identifiers are names too.
        assert!(FirstNames::new(["größe"]).unwrap().accepts("größe()"));
    }
}
