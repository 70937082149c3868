//! Fitting a FIM prompt into `max_input_length` bytes.
//!
//! Upstream clips the *templated* prompt from the front, which can cut the template's leading FIM
//! token and leave the model with a malformed prompt. We clip the segments instead: the prefix
//! loses its oldest bytes and, only when the suffix alone would crowd the prefix out, the suffix
//! loses its far end. The template's own tokens always survive.

/// The last `max_bytes` bytes of `text`, moved forward to a char boundary.
pub fn clip_to_last_bytes(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The first `max_bytes` bytes of `text`, moved back to a char boundary.
pub fn clip_to_first_bytes(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[derive(Debug, PartialEq, Eq)]
pub struct ClippedSegments<'a> {
    pub prefix: &'a str,
    pub suffix: &'a str,
}

/// Clips `prefix` (keeping its end) and `suffix` (keeping its start) so that
/// `template_overhead + prefix.len() + suffix.len() <= max_input_length`.
///
/// The prefix matters most for completion, so it is guaranteed at least three quarters of the
/// space left after the template when it needs it; the suffix gets the rest.
pub fn clip_prefix_for_budget<'a>(
    prefix: &'a str,
    suffix: &'a str,
    template_overhead: usize,
    max_input_length: usize,
) -> ClippedSegments<'a> {
    let available = max_input_length.saturating_sub(template_overhead);
    if prefix.len() + suffix.len() <= available {
        return ClippedSegments { prefix, suffix };
    }
    let prefix_share = prefix.len().min(available - available / 4);
    let suffix_budget = suffix.len().min(available - prefix_share);
    let prefix_budget = available - suffix_budget;
    ClippedSegments {
        prefix: clip_to_last_bytes(prefix, prefix_budget),
        suffix: clip_to_first_bytes(suffix, suffix_budget),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_clipped_when_it_fits() {
        let c = clip_prefix_for_budget("abc", "def", 10, 16);
        assert_eq!(
            c,
            ClippedSegments {
                prefix: "abc",
                suffix: "def"
            }
        );
    }

    #[test]
    fn prefix_keeps_its_end_and_suffix_its_start() {
        let prefix = "p".repeat(100) + "END";
        let suffix = "START".to_string() + &"s".repeat(100);
        let c = clip_prefix_for_budget(&prefix, &suffix, 20, 100);
        assert!(c.prefix.ends_with("END"));
        assert!(c.suffix.starts_with("START"));
        assert!(20 + c.prefix.len() + c.suffix.len() <= 100);
        assert!(c.prefix.len() >= 60, "prefix got {}", c.prefix.len());
    }

    #[test]
    fn short_suffix_kept_whole() {
        let prefix = "x".repeat(1000);
        let c = clip_prefix_for_budget(&prefix, "\n", 30, 200);
        assert_eq!(c.suffix, "\n");
        assert_eq!(c.prefix.len(), 200 - 30 - 1);
    }

    #[test]
    fn short_prefix_leaves_room_for_suffix() {
        let suffix = "y".repeat(1000);
        let c = clip_prefix_for_budget("abc", &suffix, 0, 100);
        assert_eq!(c.prefix, "abc");
        assert_eq!(c.suffix.len(), 97);
    }

    #[test]
    fn respects_char_boundaries() {
        let prefix = "é".repeat(50);
        let suffix = "ü".repeat(50);
        let c = clip_prefix_for_budget(&prefix, &suffix, 0, 41);
        assert!(c.prefix.len() + c.suffix.len() <= 41);
        assert!(c.prefix.chars().all(|ch| ch == 'é'));
        assert!(c.suffix.chars().all(|ch| ch == 'ü'));
    }

    #[test]
    fn last_bytes_on_boundary() {
        assert_eq!(clip_to_last_bytes("aé", 1), "");
        assert_eq!(clip_to_last_bytes("aé", 2), "é");
        assert_eq!(clip_to_last_bytes("abc", 5), "abc");
    }
}
