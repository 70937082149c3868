//! A constraint on how a completion starts: with one of a set of names (what may follow
//! `module.` when every name the module offers is known), then anything. A backend that picks
//! tokens itself (the embedded runtime) masks the tokens that would leave the set; others
//! ignore it.
//!
//! The check is on bytes, whatever the tokenizer: a token is allowed when the text generated so
//! far plus the token's bytes is still the start of a name, or is a whole name followed by a
//! byte that cannot continue an identifier.
//!
//! A set may also carry a prior over its names ([`FirstNames::with_prior`]: how often each
//! followed the same access elsewhere in the file, a cache model of the file's own code). A
//! backend that picks tokens mixes it into the model's distribution over the allowed tokens:
//! `(1 - w) · p_model(t) + w · p_prior(t)`, where `p_prior(t)` is the share of the prior's
//! mass, among the names still open, that stays open (or ends) after `t`.
//!
//! An open set ([`FirstNames::open_prior`]) is a prior alone: where the names are not all
//! known (a value's members, `self.`), the names the file wrote there lead the model's
//! choice, and no token is masked.

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
    /// Per node, the prior mass of the names at or below it, and of the name ending there
    /// (all zero without a prior).
    mass: Vec<f32>,
    end_mass: Vec<f32>,
    /// The prior's weight in the mixture (0: no prior).
    prior_weight: f32,
    /// A prior alone: tokens that leave the names are not masked.
    open: bool,
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
            mass: Vec::new(),
            end_mass: Vec::new(),
            prior_weight: 0.0,
            open: false,
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
        set.mass = vec![0.0; set.terminal.len()];
        set.end_mass = vec![0.0; set.terminal.len()];
        Some(set)
    }

    /// The set with a prior over its names: `counts` (names outside the set and counts that
    /// are not positive and finite are left out), mixed with weight `weight` (clamped to
    /// 0..=1). Without any usable count, or with weight 0, the set has no prior.
    pub fn with_prior<S: AsRef<str>>(
        mut self,
        counts: impl IntoIterator<Item = (S, f32)>,
        weight: f32,
    ) -> Self {
        self.mass.iter_mut().for_each(|m| *m = 0.0);
        self.end_mass.iter_mut().for_each(|m| *m = 0.0);
        self.prior_weight = 0.0;
        let weight = if weight.is_finite() {
            weight.clamp(0.0, 1.0)
        } else {
            0.0
        };
        if weight == 0.0 {
            return self;
        }
        let mut any = false;
        for (name, count) in counts {
            if !(count.is_finite() && count > 0.0) {
                continue;
            }
            let Some(path) = self.path(name.as_ref().as_bytes()) else {
                continue;
            };
            let end = *path.last().expect("the path starts at the root");
            if !self.terminal[end as usize] {
                continue;
            }
            for node in path {
                self.mass[node as usize] += count;
            }
            self.end_mass[end as usize] += count;
            any = true;
        }
        if any {
            self.prior_weight = weight;
        }
        self
    }

    /// A prior alone over the names `counts` holds (positive, finite counts of usable names),
    /// with weight `weight`: the completion may start with anything, and these names lead
    /// the model's choice. None without a usable count or with weight 0.
    pub fn open_prior<S: AsRef<str>>(
        counts: impl IntoIterator<Item = (S, f32)>,
        weight: f32,
    ) -> Option<Self> {
        let counts: Vec<(String, f32)> = counts
            .into_iter()
            .filter(|(_, c)| c.is_finite() && *c > 0.0)
            .map(|(n, c)| (n.as_ref().to_string(), c))
            .collect();
        let mut set = FirstNames::new(counts.iter().map(|(n, _)| n))?.with_prior(counts, weight);
        set.open = true;
        set.prior_weight(set.start()).is_some().then_some(set)
    }

    /// Whether the set is a prior alone, no constraint ([`FirstNames::open_prior`]).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The nodes from the root down `bytes`; none when they leave the trie.
    fn path(&self, bytes: &[u8]) -> Option<Vec<u32>> {
        let mut path = vec![0u32];
        for &b in bytes {
            path.push(self.child(*path.last().expect("never empty"), b)?);
        }
        Some(path)
    }

    /// The prior's weight in the mixture, when `state` still has prior mass below it (names
    /// the prior counted are still open); none otherwise.
    pub fn prior_weight(&self, state: NameState) -> Option<f32> {
        match state {
            NameState::Open(node) if self.prior_weight > 0.0 && self.mass[node as usize] > 0.0 => {
                Some(self.prior_weight)
            }
            _ => None,
        }
    }

    /// The share of `state`'s prior mass that `bytes` keep: of the names still open after
    /// them, or of the name they end (0 when they leave the set or the state has no mass).
    pub fn prior_share(&self, state: NameState, bytes: &[u8]) -> f32 {
        let NameState::Open(start) = state else {
            return 0.0;
        };
        let total = self.mass[start as usize];
        if total <= 0.0 {
            return 0.0;
        }
        let mut node = start;
        for &b in bytes {
            match self.child(node, b) {
                Some(next) => node = next,
                None if self.terminal[node as usize] && !is_identifier_byte(b) => {
                    return self.end_mass[node as usize] / total;
                }
                None => return 0.0,
            }
        }
        self.mass[node as usize] / total
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
        let open = if self.open { "open " } else { "" };
        write!(f, "FirstNames({open}{} names)", self.names.len())?;
        if self.prior_weight > 0.0 {
            write!(f, " with a prior of weight {}", self.prior_weight)?;
        }
        Ok(())
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

    #[test]
    fn a_prior_shares_its_mass_among_the_tokens_that_keep_its_names() {
        let s = set(&["map", "mapError", "flatMap", "filter"]);
        // No prior: no weight anywhere.
        assert_eq!(s.prior_weight(s.start()), None);
        assert_eq!(s.prior_share(s.start(), b"map"), 0.0);
        let p = s.clone().with_prior(
            [
                ("map", 3.0),
                ("mapError", 1.0),
                ("nope", 9.0),
                ("ma", 5.0),
                ("filter", -1.0),
            ],
            0.5,
        );
        assert_eq!(p.prior_weight(p.start()), Some(0.5));
        assert_eq!(p.prior_share(p.start(), b"ma"), 1.0);
        assert_eq!(p.prior_share(p.start(), b"map"), 1.0);
        // A token that ends the name keeps only that name's mass.
        assert_eq!(p.prior_share(p.start(), b"map("), 0.75);
        assert_eq!(p.prior_share(p.start(), b"mapE"), 0.25);
        assert_eq!(p.prior_share(p.start(), b"fl"), 0.0);
        assert_eq!(p.prior_share(p.start(), b"x"), 0.0);
        // Below a node without mass the prior has nothing to say.
        let fl = p.advance(p.start(), b"fl").unwrap();
        assert_eq!(p.prior_weight(fl), None);
        assert_eq!(p.prior_weight(NameState::Done), None);
        assert_eq!(
            format!("{p:?}"),
            "FirstNames(4 names) with a prior of weight 0.5"
        );
        // Weight 0, or nothing usable counted: no prior.
        assert_eq!(
            s.clone()
                .with_prior([("map", 1.0)], 0.0)
                .prior_weight(s.start()),
            None
        );
        assert_eq!(
            s.clone()
                .with_prior([("zip", 1.0)], 1.0)
                .prior_weight(s.start()),
            None
        );
        assert_eq!(
            s.clone()
                .with_prior([("map", f32::NAN)], f32::NAN)
                .prior_weight(s.start()),
            None
        );
        assert_eq!(
            s.clone()
                .with_prior([("map", 1.0)], 7.0)
                .prior_weight(s.start()),
            Some(1.0)
        );
    }

    #[test]
    fn an_open_prior_leads_without_constraining() {
        let p = FirstNames::open_prior([("succeed", 2.0), ("fail", 1.0), ("bad name", 4.0)], 0.5)
            .unwrap();
        assert!(p.is_open());
        assert_eq!(p.names(), ["fail", "succeed"]);
        assert_eq!(p.prior_weight(p.start()), Some(0.5));
        assert!((p.prior_share(p.start(), b"succ") - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(
            format!("{p:?}"),
            "FirstNames(open 2 names) with a prior of weight 0.5"
        );
        assert!(!set(&["a"]).is_open());
        // Nothing usable, or no weight: no prior at all.
        assert!(FirstNames::open_prior([("x", 0.0)], 0.5).is_none());
        assert!(FirstNames::open_prior([("x", 1.0)], 0.0).is_none());
        assert!(FirstNames::open_prior(Vec::<(String, f32)>::new(), 0.5).is_none());
    }
}
