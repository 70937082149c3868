//! Which files are worth indexing, and why the others are skipped.

use std::fmt;

/// Files larger than this are skipped without being read as text.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    UnknownLanguage,
    Binary,
    TooLarge,
    MaxLineTooLong,
    AvgLineTooLong,
    LowAlphanumeric,
    TooManyLines,
    TooManyDigits,
    Unchanged,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkipReason::UnknownLanguage => "unknown language",
            SkipReason::Binary => "binary",
            SkipReason::TooLarge => "over 1 MiB",
            SkipReason::MaxLineTooLong => "a line over 300 chars",
            SkipReason::AvgLineTooLong => "average line over 150 chars",
            SkipReason::LowAlphanumeric => "under 25% alphanumeric",
            SkipReason::TooManyLines => "over 100k lines",
            SkipReason::TooManyDigits => "over 50% digits",
            SkipReason::Unchanged => "unchanged since last run",
        })
    }
}

/// Whether `bytes` look like a binary file: a NUL in the first 8 KiB, as git judges.
pub fn looks_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(8192)].contains(&0)
}

/// Decodes `bytes` as text, or says why the file is not indexable text.
pub fn as_text(bytes: &[u8]) -> Result<&str, SkipReason> {
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(SkipReason::TooLarge);
    }
    if looks_binary(bytes) {
        return Err(SkipReason::Binary);
    }
    std::str::from_utf8(bytes).map_err(|_| SkipReason::Binary)
}

/// Upstream's quality filters, with the reason a file fails them.
pub fn quality_check(text: &str) -> Result<(), SkipReason> {
    let mut lines = 0usize;
    let mut max_line = 0usize;
    for line in text.lines() {
        lines += 1;
        max_line = max_line.max(line.chars().count());
    }
    if lines > 100_000 {
        return Err(SkipReason::TooManyLines);
    }
    if max_line > 300 {
        return Err(SkipReason::MaxLineTooLong);
    }
    let chars = text.chars().count();
    if lines > 0 && chars as f32 / lines as f32 > 150.0 {
        return Err(SkipReason::AvgLineTooLong);
    }
    if chars > 0 {
        let alnum = text.chars().filter(|c| c.is_alphanumeric()).count();
        if (alnum as f32) / (chars as f32) < 0.25 {
            return Err(SkipReason::LowAlphanumeric);
        }
        let digits = text.chars().filter(|c| c.is_ascii_digit()).count();
        if (digits as f32) / (chars as f32) > 0.5 {
            return Err(SkipReason::TooManyDigits);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons() {
        assert_eq!(quality_check("def f():\n    return 1\n"), Ok(()));
        assert_eq!(
            quality_check(&"x".repeat(301)),
            Err(SkipReason::MaxLineTooLong)
        );
        let avg = (0..10)
            .map(|_| "y".repeat(200))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(quality_check(&avg), Err(SkipReason::AvgLineTooLong));
        assert_eq!(
            quality_check("{}[]();;;;;;;;;;;;;;;;;;;;;a\n"),
            Err(SkipReason::LowAlphanumeric)
        );
        assert_eq!(
            quality_check("1234567890 1234567890 ab\n"),
            Err(SkipReason::TooManyDigits)
        );
        assert_eq!(
            quality_check(&"a\n".repeat(100_001)),
            Err(SkipReason::TooManyLines)
        );
        assert_eq!(as_text(b"ab\0cd"), Err(SkipReason::Binary));
        assert_eq!(as_text(&[0xff, 0xfe]), Err(SkipReason::Binary));
        assert_eq!(
            as_text(&vec![b'a'; 2 * 1024 * 1024]),
            Err(SkipReason::TooLarge)
        );
    }
}
