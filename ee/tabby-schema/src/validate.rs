//! Field checks shared by the settings inputs (SMTP, LDAP): a server's host and port, and
//! free text that is sent on to another server.

/// A host name or an IP address (IPv6 in brackets or bare), without scheme, port or path,
/// and nothing an option parser could take for an option.
pub(crate) fn is_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && !host.starts_with(['-', '.'])
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
}

pub(crate) fn is_port(port: i32) -> bool {
    (1..=65535).contains(&port)
}

/// At most `max` bytes and no control characters (no line breaks into a protocol).
pub(crate) fn is_plain(value: &str, max: usize) -> bool {
    value.len() <= max && !value.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_ports_and_text() {
        for ok in ["smtp.example.com", "10.0.0.5", "[::1]", "::1"] {
            assert!(is_host(ok), "{ok}");
        }
        for bad in [
            "",
            "smtp://x",
            "a b",
            "-oProxyCommand=x",
            ".x",
            "x\r\nRCPT TO:<y>",
        ] {
            assert!(!is_host(bad), "{bad:?}");
        }
        assert!(is_port(1) && is_port(65535) && !is_port(0) && !is_port(65536));
        assert!(is_plain("cn=tabby,dc=x", 1024));
        assert!(!is_plain("a\nb", 1024) && !is_plain("abc", 2));
    }
}
