//! A light English stemmer for search words: the plural and `-ed`/`-ing` steps of Porter's
//! algorithm (1a, 1b) and its final-`e` step (5a), so that "attaches"/"attach",
//! "encoding"/"encode", "opened"/"open" and "raised"/"raise" meet on one word. Only plain ASCII
//! words of four letters or more change; identifiers with `_` or digits are left alone.

/// The stem of a lower-cased word.
pub fn stem(word: &str) -> String {
    if word.len() < 4 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return word.to_string();
    }
    let mut w: Vec<u8> = word.as_bytes().to_vec();
    step_1a(&mut w);
    step_1b(&mut w);
    step_5a(&mut w);
    String::from_utf8(w).unwrap_or_else(|_| word.to_string())
}

fn is_consonant(w: &[u8], i: usize) -> bool {
    match w[i] {
        b'a' | b'e' | b'i' | b'o' | b'u' => false,
        b'y' => i == 0 || !is_consonant(w, i - 1),
        _ => true,
    }
}

/// Porter's m: the number of vowel-consonant sequences in `w`.
fn measure(w: &[u8]) -> usize {
    let mut m = 0;
    let mut previous_vowel = false;
    for i in 0..w.len() {
        let consonant = is_consonant(w, i);
        if consonant && previous_vowel {
            m += 1;
        }
        previous_vowel = !consonant;
    }
    m
}

fn has_vowel(w: &[u8]) -> bool {
    (0..w.len()).any(|i| !is_consonant(w, i))
}

/// Ends consonant-vowel-consonant, the last not w, x or y ("hop", not "snow").
fn ends_cvc(w: &[u8]) -> bool {
    let n = w.len();
    n >= 3
        && is_consonant(w, n - 3)
        && !is_consonant(w, n - 2)
        && is_consonant(w, n - 1)
        && !matches!(w[n - 1], b'w' | b'x' | b'y')
}

fn step_1a(w: &mut Vec<u8>) {
    if w.ends_with(b"sses") || w.ends_with(b"ies") {
        w.truncate(w.len() - 2);
    } else if w.ends_with(b"s") && !w.ends_with(b"ss") && !w.ends_with(b"us") {
        w.pop();
    }
}

fn step_1b(w: &mut Vec<u8>) {
    if w.ends_with(b"eed") {
        if measure(&w[..w.len() - 3]) > 0 {
            w.pop();
        }
        return;
    }
    let suffix = if w.ends_with(b"ed") {
        2
    } else if w.ends_with(b"ing") {
        3
    } else {
        return;
    };
    if !has_vowel(&w[..w.len() - suffix]) {
        return;
    }
    w.truncate(w.len() - suffix);
    if w.ends_with(b"at") || w.ends_with(b"bl") || w.ends_with(b"iz") {
        w.push(b'e');
    } else if w.len() >= 2
        && w[w.len() - 1] == w[w.len() - 2]
        && is_consonant(w, w.len() - 1)
        && !matches!(w[w.len() - 1], b'l' | b's' | b'z')
    {
        w.pop();
    } else if measure(w) == 1 && ends_cvc(w) {
        w.push(b'e');
    }
}

fn step_5a(w: &mut Vec<u8>) {
    if !w.ends_with(b"e") {
        return;
    }
    let stem = &w[..w.len() - 1];
    let m = measure(stem);
    if m > 1 || (m == 1 && !ends_cvc(stem)) {
        w.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::stem;

    #[test]
    fn inflections_meet() {
        for (a, b) in [
            ("attaches", "attach"),
            ("encoding", "encode"),
            ("opened", "open"),
            ("raised", "raise"),
            ("creates", "creating"),
            ("parsing", "parse"),
            ("arguments", "argument"),
            ("hopping", "hop"),
            ("files", "file"),
        ] {
            assert_eq!(stem(a), stem(b), "{a} / {b}");
        }
    }

    #[test]
    fn leaves_short_words_identifiers_and_non_ascii_alone() {
        for word in [
            "is",
            "was",
            "parse_config",
            "utf8",
            "größe",
            "class",
            "status",
        ] {
            assert_eq!(stem(word), word);
        }
        assert_eq!(stem("caresses"), "caress");
        assert_eq!(stem("ponies"), "poni");
        assert_eq!(stem("agreed"), stem("agree"));
    }
}
