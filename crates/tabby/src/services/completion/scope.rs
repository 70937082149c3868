//! Where an editor would cut a completion, so that generation stops there instead of decoding
//! tokens the client throws away. tabby-agent keeps a single line when the cursor is mid-line
//! (the rest of the line is already in the suffix), and otherwise the lines of the cursor's
//! indentation scope: a later line indented less than the cursor's line ends the completion
//! (in brace languages that line is the closing brace, which the suffix already has). "Mid-line"
//! is tabby-agent's test: the rest of the line holds a word character.

/// The cut rule of one request, from its prefix and suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The cursor is mid-line: the completion ends at its first line break.
    Line,
    /// The cursor is at a line's end: the completion ends before a later non-blank line
    /// indented less than this (the cursor line's indentation, in columns).
    Block { indent: usize },
}

/// Columns of leading whitespace (a tab counts as 4, as editors show it by default).
fn indentation(line: &str) -> usize {
    line.chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .map(|c| if c == '\t' { 4 } else { 1 })
        .sum()
}

impl Scope {
    pub fn new(prefix: &str, suffix: &str) -> Self {
        // tabby-agent's test: the rest of the line holds a word character (a closing
        // bracket or a semicolon alone still lets the completion span lines).
        let rest_of_line = suffix.split('\n').next().unwrap_or_default();
        if rest_of_line
            .chars()
            .any(|c| c.is_alphanumeric() || c == '_')
        {
            return Scope::Line;
        }
        let cursor_line = prefix.rsplit('\n').next().unwrap_or_default();
        Scope::Block {
            indent: indentation(cursor_line),
        }
    }

    /// Bytes of `text` (the completion so far) to keep, once the cut point is known; `None`
    /// while generation should go on.
    pub fn cut(&self, text: &str) -> Option<usize> {
        match self {
            Scope::Line => text.find('\n'),
            Scope::Block { indent } => {
                // The completed lines after the first (which continues the cursor's line).
                let mut start = text.find('\n')? + 1;
                while let Some(end) = text[start..].find('\n').map(|i| start + i) {
                    let line = &text[start..end];
                    if !line.trim().is_empty() && indentation(line) < *indent {
                        return Some(start.saturating_sub(1));
                    }
                    start = end + 1;
                }
                // A line still being generated ends the scope as soon as its first
                // character shows it is indented less.
                let partial = &text[start..];
                let ended = partial.chars().any(|c| c != ' ' && c != '\t')
                    && indentation(partial) < *indent;
                ended.then(|| start.saturating_sub(1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mid_line_keeps_one_line() {
        let scope = Scope::new("    total = compute(", "rate)\n    return total\n");
        assert_eq!(scope, Scope::Line);
        assert_eq!(scope.cut("items, rate"), None);
        let text = "items, rate\n    print(total)\n";
        assert_eq!(&text[..scope.cut(text).unwrap()], "items, rate");
    }

    #[test]
    fn at_a_line_end_keeps_the_indentation_scope() {
        // Python: the body of the `for`, then a dedented line ends it.
        let scope = Scope::new(
            "def f(items):\n    for x in items:\n        ",
            "\n    return 1\n",
        );
        assert_eq!(scope, Scope::Block { indent: 8 });
        let text = "y = x * 2\n        print(y)\n\n    return y\n";
        assert_eq!(scope.cut("y = x * 2\n        print(y)\n"), None);
        assert_eq!(
            &text[..scope.cut(text).unwrap()],
            "y = x * 2\n        print(y)\n"
        );
        // Rust: a closing brace less indented than the cursor's line ends it.
        let scope = Scope::new("fn f() -> u32 {\n    let x = 1;\n    ", "\n}\n");
        let text = "x + 1\n}\n\nfn g() {}\n";
        assert_eq!(&text[..scope.cut(text).unwrap()], "x + 1");
        // A completion that opens a deeper block keeps it.
        let scope = Scope::new("def g():\n    ", "\n");
        assert_eq!(scope.cut("if ok:\n        run()\n    else:\n"), None);
        // The dedented line is known from its first character.
        let scope = Scope::new("def f(items):\n    for x in items:\n        ", "\n");
        assert_eq!(scope.cut("y = x\n    r"), Some(5));
        assert_eq!(scope.cut("y = x\n    "), None);
        // Tabs count as indentation too.
        let scope = Scope::new("fn f() {\n\t", "\n}\n");
        assert_eq!(scope, Scope::Block { indent: 4 });
    }

    #[test]
    fn closing_brackets_alone_are_a_line_end() {
        assert_eq!(Scope::new("    print(", ")\n"), Scope::Block { indent: 4 });
        assert_eq!(Scope::new("    f(", "));\n"), Scope::Block { indent: 4 });
        assert_eq!(Scope::new("    f(", "x)\n"), Scope::Line);
    }

    #[test]
    fn an_empty_suffix_or_a_blank_rest_of_line_is_a_line_end() {
        assert_eq!(Scope::new("x = ", ""), Scope::Block { indent: 0 });
        assert_eq!(Scope::new("x = 1", "   \n"), Scope::Block { indent: 0 });
    }
}
