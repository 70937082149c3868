//! Which of a module's names the edited file itself tends to write after the access before the
//! cursor: a cache model of the file's own code (code is repetitive where it is written, more
//! than across a repository: Tu et al. 2014, "On the localness of software"). After
//! `core.map(core.`, the names that followed `core.map` in a `core.` access elsewhere in the
//! file are counted; the completion's first name is then a mixture of the model's choice and
//! these counts (`[completion] name_cache_weight`, `tabby_inference::FirstNames::with_prior`).
//! A pair counts only within a block of code (no blank line between the two accesses), and
//! the access before the cursor's only when no blank line lies between them either.
//!
//! The file is what the editor shows (the prefix and the suffix) and, around it, the indexed
//! copy of the file (possibly older) without the part the editor's window replaces: the
//! window is found in the indexed text by lines that occur there once, so that the indexed
//! version of the lines being edited (which may hold the very completion) never counts.

use std::collections::HashMap;

use tabby_inference::is_identifier_byte;

use super::typed_part;

/// Lines of the editor's window tried, from the cursor outwards, to place it in the indexed
/// text; and how long a line must be (trimmed) to be tried.
const PROBES: usize = 20;
const MIN_PROBE_BYTES: usize = 8;
/// Most indexed lines read (the rest of a longer file does not count).
const MAX_INDEXED_LINES: usize = 50_000;
/// Bytes of the prefix before the access read for the previous access.
const PREVIOUS_ACCESS_BYTES: usize = 4096;

/// One `name.member` or `name::member` access, in text order, and where it starts and ends
/// (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Access<'a> {
    owner: &'a str,
    member: &'a str,
    start: usize,
    end: usize,
}

impl Access<'_> {
    fn same(&self, other: &Access) -> bool {
        self.owner == other.owner && self.member == other.member
    }
}

/// Whether a blank line lies between two places of `text`: a blank line ends a block of code,
/// and an access before it says little about what follows it (a test's `t.Fatal(…)` then,
/// after a blank line, the next step's `f.`).
fn blank_line_between(text: &str, from: usize, to: usize) -> bool {
    let between: Vec<&str> = text[from..to].split('\n').collect();
    between.len() > 2
        && between[1..between.len() - 1]
            .iter()
            .any(|l| l.trim().is_empty())
}

/// How often each member of the module before the cursor followed the access before it,
/// elsewhere in the file; empty when the prefix does not end with an access after another
/// access, or the file never shows that pair.
pub fn following_counts(prefix: &str, suffix: &str, indexed: Option<&str>) -> Vec<(String, f32)> {
    let Some((owner, before)) = receiver_before_cursor(prefix) else {
        return vec![];
    };
    let tail =
        &before[before.floor_char_boundary(before.len().saturating_sub(PREVIOUS_ACCESS_BYTES))..];
    let Some(previous) = accesses(tail).last().copied() else {
        return vec![];
    };
    if blank_line_between(tail, previous.end, tail.len()) {
        return vec![];
    }
    let mut segments = vec![before, suffix];
    let outside = indexed.and_then(|text| outside_window(text, prefix, suffix));
    if let Some((above, below)) = &outside {
        segments.push(above);
        segments.push(below);
    }
    let mut counts: HashMap<&str, f32> = HashMap::new();
    for segment in segments {
        let list = accesses(segment);
        for pair in list.windows(2) {
            if pair[0].same(&previous)
                && pair[1].owner == owner
                && !blank_line_between(segment, pair[0].end, pair[1].start)
            {
                *counts.entry(pair[1].member).or_default() += 1.0;
            }
        }
    }
    let mut counts: Vec<(String, f32)> = counts
        .into_iter()
        .map(|(name, count)| (name.to_string(), count))
        .collect();
    counts.sort_by(|a, b| a.0.cmp(&b.0));
    counts
}

/// The owner of the access the prefix ends with (past the member being typed), and the prefix
/// before that owner.
fn receiver_before_cursor(prefix: &str) -> Option<(&str, &str)> {
    let typed = typed_part(prefix);
    let before_typed = &prefix[..prefix.len() - typed.len()];
    let before_separator = before_typed
        .strip_suffix('.')
        .or_else(|| before_typed.strip_suffix("::"))?;
    let owner = typed_part(before_separator);
    if owner.is_empty() || owner.as_bytes()[0].is_ascii_digit() {
        return None;
    }
    Some((
        owner,
        &before_separator[..before_separator.len() - owner.len()],
    ))
}

/// Every `name.member` / `name::member` access of `text`, left to right, each identifier in at
/// most one (`a.b.c` is `a.b`).
fn accesses(text: &str) -> Vec<Access<'_>> {
    let bytes = text.as_bytes();
    let identifier_at = |start: usize| -> usize {
        let mut end = start;
        while end < bytes.len() && is_identifier_byte(bytes[end]) {
            end += 1;
        }
        end
    };
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_identifier_byte(bytes[i]) {
            i += 1;
            continue;
        }
        let end = identifier_at(i);
        let separator = if bytes[end..].starts_with(b"::") {
            2
        } else if bytes[end..].starts_with(b".") {
            1
        } else {
            0
        };
        let member_end = if separator > 0 {
            identifier_at(end + separator)
        } else {
            end
        };
        // A number (`1.5`) owns nothing.
        if separator > 0 && member_end > end + separator && !bytes[i].is_ascii_digit() {
            found.push(Access {
                owner: &text[i..end],
                member: &text[end + separator..member_end],
                start: i,
                end: member_end,
            });
            i = member_end;
        } else {
            i = end.max(i + 1);
        }
    }
    found
}

/// The indexed text above and below the part the editor's window (prefix and suffix) stands
/// for; none when the window cannot be placed in it (a new file, or one that changed too much
/// around the cursor).
fn outside_window(indexed: &str, prefix: &str, suffix: &str) -> Option<(String, String)> {
    let lines: Vec<&str> = indexed.lines().take(MAX_INDEXED_LINES).collect();
    let mut once: HashMap<&str, Option<usize>> = HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim();
        if trimmed.len() >= MIN_PROBE_BYTES {
            once.entry(trimmed)
                .and_modify(|at| *at = None)
                .or_insert(Some(i));
        }
    }
    let found = |line: &str| -> Option<usize> {
        let trimmed = line.trim();
        (trimmed.len() >= MIN_PROBE_BYTES)
            .then(|| once.get(trimmed).copied().flatten())
            .flatten()
    };
    let above: Vec<&str> = prefix.split('\n').collect();
    // A suffix that ends with a line break has no line after it.
    let below: Vec<&str> = suffix
        .strip_suffix('\n')
        .unwrap_or(suffix)
        .split('\n')
        .collect();
    // The editor's window: the prefix's lines, the cursor's line (the last of the prefix, the
    // first of the suffix), then the suffix's.
    let height = above.len() + below.len() - 1;
    // Lines of the window above the cursor's: the probe at `k` (from the top) places the
    // window's first line at `i - k`.
    let start = above[..above.len() - 1]
        .iter()
        .enumerate()
        .rev()
        .take(PROBES)
        .find_map(|(k, line)| found(line).map(|i| i.checked_sub(k)))
        .flatten();
    // Lines below the cursor's: the probe at `k` (suffix line k, k ≥ 1) places the window's
    // last line at `i + (below.len() - 1 - k)`.
    let end = below
        .iter()
        .enumerate()
        .skip(1)
        .take(PROBES)
        .find_map(|(k, line)| found(line).map(|i| i + (below.len() - 1 - k)));
    let (start, end) = match (start, end) {
        (Some(start), Some(end)) if start <= end => (start, end),
        (Some(_), Some(_)) => return None,
        (Some(start), None) => (start, start + height - 1),
        (None, Some(end)) => (end.saturating_sub(height - 1), end),
        (None, None) => return None,
    };
    let start = start.min(lines.len());
    let end = (end + 1).min(lines.len());
    Some((lines[..start].join("\n"), lines[end..].join("\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(prefix: &str, suffix: &str, indexed: Option<&str>) -> Vec<(String, f32)> {
        following_counts(prefix, suffix, indexed)
    }

    fn pairs(list: &[(&str, f32)]) -> Vec<(String, f32)> {
        list.iter().map(|(n, c)| (n.to_string(), *c)).collect()
    }

    #[test]
    fn accesses_are_read_left_to_right() {
        let found: Vec<(&str, &str)> =
            accesses("x = core.map(core.flatMap(a.b.c), 1.5, crate::error::Kind)")
                .into_iter()
                .map(|a| (a.owner, a.member))
                .collect();
        assert_eq!(
            found,
            [
                ("core", "map"),
                ("core", "flatMap"),
                ("a", "b"),
                ("crate", "error")
            ]
        );
    }

    #[test]
    fn the_receiver_is_the_name_before_the_last_access() {
        assert_eq!(
            receiver_before_cursor("  return core.map(core."),
            Some(("core", "  return core.map("))
        );
        assert_eq!(
            receiver_before_cursor("x = core.fl"),
            Some(("core", "x = "))
        );
        assert_eq!(
            receiver_before_cursor("use crate::error::"),
            Some(("error", "use crate::"))
        );
        assert_eq!(receiver_before_cursor("x = f()."), None);
        assert_eq!(receiver_before_cursor("x = 1."), None);
        assert_eq!(receiver_before_cursor("x = core"), None);
    }

    #[test]
    fn what_followed_the_same_access_in_the_window_counts() {
        let prefix = "a = core.map(core.succeed(1))\nb = core.map(core.succeed(2))\nc = core.map(core.fail(3))\nd = core.map(core.";
        let suffix = ")\ne = core.map(core.succeed(4))\nf = other.map(core.never)\n";
        assert_eq!(
            counts(prefix, suffix, None),
            pairs(&[("fail", 1.0), ("succeed", 3.0)])
        );
        // No access before the receiver's, or none of its pairs in the file: nothing.
        assert!(counts("d = core.", "", None).is_empty());
        assert!(counts("d = list.push(core.", "", None).is_empty());
        // Not an access at all.
        assert!(counts("d = core", "", None).is_empty());
    }

    #[test]
    fn a_blank_line_ends_what_an_access_says() {
        // Pairs across a blank line do not count; one within a block does.
        let prefix = "t.Fatal(err)\n\ngetBS := f.GetBoolSlice()\nt.Fatal(err)\nx := f.Lookup()\nt.Fatal(err)\n}\ngetDS := f.";
        assert_eq!(counts(prefix, "", None), pairs(&[("Lookup", 1.0)]));
        // A blank line between the access before the cursor's and the cursor: nothing.
        let after_blank = "t.Fatal(err)\nx := f.Lookup()\nt.Fatal(err)\n\ngetDS := f.";
        assert!(counts(after_blank, "", None).is_empty());
        assert!(blank_line_between("a\n  \nb", 0, 6));
        assert!(!blank_line_between("a\nb\nc", 0, 5));
        assert!(!blank_line_between("a\n\n", 0, 2));
    }

    #[test]
    fn any_text_is_read_without_a_panic() {
        // Non-ASCII names, a prefix longer than the bytes read for the previous access (cut
        // inside a character), empty texts.
        let long = format!("{}größe.map(größe.", "é".repeat(5000));
        assert!(counts(&long, "", Some("größe.map(größe.ñ)\n")).is_empty());
        assert_eq!(
            counts("größe.map(größe.ñ)\nx = größe.map(größe.", "", None),
            pairs(&[("ñ", 1.0)])
        );
        for prefix in ["", ".", "::", "a.", "\n\n.", "é."] {
            for suffix in ["", "\n", "\n\n"] {
                assert!(counts(prefix, suffix, Some("")).is_empty());
                assert!(outside_window("", prefix, suffix).is_none());
            }
        }
    }

    #[test]
    fn the_indexed_file_counts_outside_the_editor_s_window_only() {
        // The indexed copy: two uses above the window, the window's old text (whose cursor line
        // holds the completion), one use below.
        let indexed = "\
top = core.map(core.succeed(1))
again = core.map(core.succeed(2))
function windowStart() {
  const first = 1
  const value = core.map(core.answerInTheOldWindow(x))
  return value
}
bottom = core.map(core.fail(0))
";
        let prefix = "function windowStart() {\n  const first = 1\n  const value = core.map(core.";
        let suffix = "\n  return value\n}\n";
        let got = counts(prefix, suffix, Some(indexed));
        assert_eq!(got, pairs(&[("fail", 1.0), ("succeed", 2.0)]));
        // The window cannot be placed (no line of it occurs once): the indexed copy is unused.
        let moved = "top = core.map(core.succeed(1))\n";
        assert!(counts("x\ny = core.map(core.", "\nz\n", Some(moved)).is_empty());
    }

    #[test]
    fn the_window_is_placed_from_either_side() {
        let indexed: String = (0..30).map(|i| format!("line number {i:02}\n")).collect();
        // The prefix's lines place it; the suffix is new text.
        let prefix = "line number 10\nline number 11\nnew cursor line";
        let suffix = " rest\nbrand new text 1\nbrand new text 2\n";
        let (above, below) = outside_window(&indexed, prefix, suffix).unwrap();
        assert_eq!(above.lines().last(), Some("line number 09"));
        // Window: 10, 11, the cursor's line and two more lines: 10 to 14.
        assert_eq!(below.lines().next(), Some("line number 15"));
        // The suffix places it; the prefix is new text.
        let prefix = "new text\ncursor";
        let suffix = "\nline number 20\nline number 21";
        let (above, below) = outside_window(&indexed, prefix, suffix).unwrap();
        assert_eq!(above.lines().last(), Some("line number 17"));
        assert_eq!(below.lines().next(), Some("line number 22"));
        // Neither side: nothing.
        assert!(outside_window(&indexed, "new\ncursor", "\nnew again").is_none());
        // Sides that disagree (the suffix found above the prefix): nothing.
        assert!(outside_window(&indexed, "line number 20\ncursor", "\nline number 05").is_none());
    }
}
