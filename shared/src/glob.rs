//! Shell globs exactly as Go's `path/filepath.Match` reads them (on Linux).
//!
//! `configInterrupts` keys may be patterns over `configMap` keys: admission checks that a pattern
//! matches some key, and the operator picks the interrupt a config change calls for by matching the
//! patterns against the changed keys. Both use this one matcher so they cannot disagree (they once
//! did, on `[!a]`). Upstream calls `filepath.Match` in both places, so that is the reference:
//!
//! - `*` is any run of non-`/` bytes, `?` one character other than `/`;
//! - `[...]` is a class: `^` right after `[` negates, `a-z` is a range, `\` escapes. `!` is *not*
//!   negation (unlike POSIX shells): `[!a]` is the class {`!`, `a`};
//! - `\x` is a literal `x`;
//! - a malformed pattern (unclosed `[`, trailing `\`, `]` or `-` where a class member is due, ...) is
//!   an error, but only where matching reaches it: `filepath.Match("x*[", "abc")` is `false` without
//!   an error, because the name already failed on `x` (`path.Match` would report the error; we follow
//!   `filepath`).
//!
//! Callers treat an error as "matches nothing", as upstream does (it ignores the error); admission
//! still tells the user why.

/// The pattern is malformed (an unclosed `[`, a trailing `\`, an empty range...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("syntax error in pattern")]
pub struct BadPattern;

/// Whether `name` matches the shell pattern `pattern`, as `filepath.Match(pattern, name)`.
pub fn matches(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let mut pattern = pattern.as_bytes();
    let mut name = name.as_bytes();
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing `*` matches the rest of the name unless it has a `/`.
            return Ok(!name.contains(&b'/'));
        }
        // Match at the current position; the last chunk must also consume the whole name.
        match match_chunk(chunk, name)? {
            Some(t) if t.is_empty() || !pattern.is_empty() => {
                name = t;
                continue;
            }
            _ => {}
        }
        if star {
            // Let the star eat 1, 2, ... bytes, but never a `/`.
            let mut i = 0;
            while i < name.len() && name[i] != b'/' {
                // The last chunk must also consume the whole name.
                if let Some(t) = match_chunk(chunk, &name[i + 1..])?
                    && (!pattern.is_empty() || t.is_empty())
                {
                    name = t;
                    continue 'pattern;
                }
                i += 1;
            }
        }
        // No match. `filepath.Match` does not look at the rest of the pattern, so a syntax error
        // there goes unreported (`path.Match` would check it; upstream uses `filepath`).
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Whether all of `pattern` is well formed, wherever matching would reach (Go's `path.Match` check
/// of the rest of a pattern). For patterns given as configuration (the webhook's
/// `WEBHOOK_ALLOWED_IMAGES`): a malformed one must stop the program at startup, naming it, rather
/// than silently match nothing.
pub fn check(pattern: &str) -> Result<(), BadPattern> {
    let mut rest = pattern.as_bytes();
    while !rest.is_empty() {
        let (_, chunk, tail) = scan_chunk(rest);
        match_chunk(chunk, b"")?;
        rest = tail;
    }
    Ok(())
}

/// Splits off leading stars and the chunk up to the next star outside a class.
fn scan_chunk(mut pattern: &[u8]) -> (bool, &[u8], &[u8]) {
    let mut star = false;
    while let Some(rest) = pattern.strip_prefix(b"*") {
        pattern = rest;
        star = true;
    }
    let mut in_range = false;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            // Skip the escaped byte; a trailing `\` is reported by match_chunk.
            b'\\' if i + 1 < pattern.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &pattern[..i], &pattern[i..])
}

/// Matches one star-free chunk against the front of `s`: `Some(rest)` on a match, `None` otherwise.
/// Like Go, keeps scanning the chunk after a mismatch so that a syntax error is always reported.
fn match_chunk<'a>(mut chunk: &[u8], mut s: &'a [u8]) -> Result<Option<&'a [u8]>, BadPattern> {
    let mut failed = false;
    while let Some(&c) = chunk.first() {
        if !failed && s.is_empty() {
            failed = true;
        }
        match c {
            b'[' => {
                let mut r = 0u32;
                if !failed {
                    let (rune, n) = decode_rune(s);
                    r = rune;
                    s = &s[n..];
                }
                chunk = &chunk[1..];
                let negated = chunk.first() == Some(&b'^');
                if negated {
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if chunk.first() == Some(&b']') && ranges > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let (lo, rest) = get_esc(chunk)?;
                    chunk = rest;
                    let mut hi = lo;
                    if chunk.first() == Some(&b'-') {
                        let (h, rest) = get_esc(&chunk[1..])?;
                        hi = h;
                        chunk = rest;
                    }
                    if lo <= r && r <= hi {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            b'?' => {
                if !failed {
                    if s[0] == b'/' {
                        failed = true;
                    }
                    let (_, n) = decode_rune(s);
                    s = &s[n..];
                }
                chunk = &chunk[1..];
            }
            _ => {
                if c == b'\\' {
                    chunk = &chunk[1..];
                    if chunk.is_empty() {
                        return Err(BadPattern);
                    }
                }
                if !failed {
                    if chunk[0] != s[0] {
                        failed = true;
                    }
                    s = &s[1..];
                }
                chunk = &chunk[1..];
            }
        }
    }
    Ok(if failed { None } else { Some(s) })
}

/// One (possibly escaped) character of a class; the class must continue after it.
fn get_esc(mut chunk: &[u8]) -> Result<(u32, &[u8]), BadPattern> {
    match chunk.first() {
        None | Some(b'-') | Some(b']') => return Err(BadPattern),
        Some(b'\\') => {
            chunk = &chunk[1..];
            if chunk.is_empty() {
                return Err(BadPattern);
            }
        }
        Some(_) => {}
    }
    let (r, n) = decode_rune(chunk);
    if r == char::REPLACEMENT_CHARACTER as u32 && n == 1 {
        return Err(BadPattern);
    }
    let rest = &chunk[n..];
    if rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((r, rest))
}

/// Go's `utf8.DecodeRuneInString`: the first character and its width; invalid bytes decode as
/// U+FFFD of width 1. Needed because chunks are walked bytewise and may start mid-character.
fn decode_rune(b: &[u8]) -> (u32, usize) {
    const INVALID: (u32, usize) = (char::REPLACEMENT_CHARACTER as u32, 1);
    let width = match b.first() {
        None => return (char::REPLACEMENT_CHARACTER as u32, 0),
        Some(&c) if c < 0x80 => return (u32::from(c), 1),
        Some(0xC2..=0xDF) => 2,
        Some(0xE0..=0xEF) => 3,
        Some(0xF0..=0xF4) => 4,
        Some(_) => return INVALID,
    };
    b.get(..width)
        .and_then(|p| std::str::from_utf8(p).ok())
        .and_then(|s| s.chars().next())
        .map_or(INVALID, |c| (c as u32, width))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `(pattern, name, filepath.Match(pattern, name))`. The expected answers are Go's, printed by a
    /// program that calls `filepath.Match` on each row (go1.26.8 linux/amd64), not worked out by
    /// hand. The first rows are Go's own `filepath.Match` test table (its non-Windows rows).
    #[rustfmt::skip]
    const GO_ANSWERS: &[(&str, &str, Result<bool, BadPattern>)] = &[
        ("abc", "abc", Ok(true)),
        ("*", "abc", Ok(true)),
        ("*c", "abc", Ok(true)),
        ("a*", "a", Ok(true)),
        ("a*", "abc", Ok(true)),
        ("a*", "ab/c", Ok(false)),
        ("a*/b", "abc/b", Ok(true)),
        ("a*/b", "a/c/b", Ok(false)),
        ("a*b*c*d*e*/f", "axbxcxdxe/f", Ok(true)),
        ("a*b*c*d*e*/f", "axbxcxdxexxx/f", Ok(true)),
        ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", Ok(false)),
        ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", Ok(false)),
        ("a*b?c*x", "abxbbxdbxebxczzx", Ok(true)),
        ("a*b?c*x", "abxbbxdbxebxczzy", Ok(false)),
        ("ab[c]", "abc", Ok(true)),
        ("ab[b-d]", "abc", Ok(true)),
        ("ab[e-g]", "abc", Ok(false)),
        ("ab[^c]", "abc", Ok(false)),
        ("ab[^b-d]", "abc", Ok(false)),
        ("ab[^e-g]", "abc", Ok(true)),
        ("a\\*b", "a*b", Ok(true)),
        ("a\\*b", "ab", Ok(false)),
        ("a?b", "a☺b", Ok(true)),
        ("a[^a]b", "a☺b", Ok(true)),
        ("a???b", "a☺b", Ok(false)),
        ("a[^a][^a][^a]b", "a☺b", Ok(false)),
        ("[a-ζ]*", "α", Ok(true)),
        ("*[a-ζ]", "A", Ok(false)),
        ("a?b", "a/b", Ok(false)),
        ("a*b", "a/b", Ok(false)),
        ("[\\]a]", "]", Ok(true)),
        ("[\\-]", "-", Ok(true)),
        ("[x\\-]", "x", Ok(true)),
        ("[x\\-]", "-", Ok(true)),
        ("[x\\-]", "z", Ok(false)),
        ("[\\-x]", "x", Ok(true)),
        ("[\\-x]", "-", Ok(true)),
        ("[\\-x]", "a", Ok(false)),
        ("[]a]", "]", Err(BadPattern)),
        ("[-]", "-", Err(BadPattern)),
        ("[x-]", "x", Err(BadPattern)),
        ("[x-]", "-", Err(BadPattern)),
        ("[x-]", "z", Err(BadPattern)),
        ("[-x]", "x", Err(BadPattern)),
        ("[-x]", "-", Err(BadPattern)),
        ("[-x]", "a", Err(BadPattern)),
        ("\\", "a", Err(BadPattern)),
        ("[a-b-c]", "a", Err(BadPattern)),
        ("[", "a", Err(BadPattern)),
        ("[^", "a", Err(BadPattern)),
        ("[^bc", "a", Err(BadPattern)),
        ("a[", "a", Err(BadPattern)),
        ("a[", "ab", Err(BadPattern)),
        ("a[", "x", Err(BadPattern)),
        ("a/b[", "x", Err(BadPattern)),
        ("*x", "xxx", Ok(true)),
        // `!` is a literal in a class, `^` negates.
        ("[!a]*", "!x", Ok(true)),
        ("[!a]*", "ax", Ok(true)),
        ("[!a]*", "bx", Ok(false)),
        ("[!a]*", "!", Ok(true)),
        ("[!a]*", "", Ok(false)),
        ("[^a]*", "!x", Ok(true)),
        ("[^a]*", "ax", Ok(false)),
        ("[^a]*", "bx", Ok(true)),
        ("[!]", "!", Ok(true)),
        ("[!]", "a", Ok(false)),
        ("[^!]", "!", Ok(false)),
        ("[^!]", "a", Ok(true)),
        ("[^^]", "^", Ok(false)),
        ("[^^]", "a", Ok(true)),
        ("[^]", "^", Err(BadPattern)),
        ("[!a-c]x", "cx", Ok(true)),
        ("[!a-c]x", "dx", Ok(false)),
        // `]` escaped is a class member; right after `[` (or `[^`) it is malformed.
        ("[\\]]", "]", Ok(true)),
        ("[\\]]", "\\", Ok(false)),
        ("[\\]]", "a", Ok(false)),
        ("[]a]", "a", Err(BadPattern)),
        ("[]a]", "b", Err(BadPattern)),
        ("[]]", "]", Err(BadPattern)),
        ("[]", "]", Err(BadPattern)),
        ("[\\\\]", "\\", Ok(true)),
        // A `-` with no upper bound is malformed.
        ("[a-]", "a", Err(BadPattern)),
        ("[a-]", "-", Err(BadPattern)),
        ("[a-]", "b", Err(BadPattern)),
        // Config-key globs: `*` never crosses `/`.
        ("*.toml", "containerd.toml", Ok(true)),
        ("*.toml", ".toml", Ok(true)),
        ("*.toml", "containerd.toml.bak", Ok(false)),
        ("*.toml", "containerd.conf", Ok(false)),
        ("*.toml", "a/b.toml", Ok(false)),
        ("*", "", Ok(true)),
        ("", "", Ok(true)),
        ("", "a", Ok(false)),
        ("net-*-*.sh", "net-eth0-up.sh", Ok(true)),
        ("net-*-*.sh", "net-eth0.sh", Ok(false)),
        ("profile-?.conf", "profile-a.conf", Ok(true)),
        ("profile-?.conf", "profile-ab.conf", Ok(false)),
        // `?` is exactly one character (not a byte) other than `/`.
        ("?", "a", Ok(true)),
        ("?", "", Ok(false)),
        ("?", "ab", Ok(false)),
        ("?", "/", Ok(false)),
        ("?", "☺", Ok(true)),
        // Exact keys match only themselves.
        ("containerd.toml", "containerd.toml", Ok(true)),
        ("containerd.toml", "containerd.tom", Ok(false)),
        ("containerd.toml", "Containerd.toml", Ok(false)),
        ("containerd.toml", "containerd.toml2", Ok(false)),
        // A trailing `\` is malformed once matching reaches it.
        ("a\\", "a", Err(BadPattern)),
        ("a\\", "b", Err(BadPattern)),
        ("\\", "", Err(BadPattern)),
        ("*\\", "x", Err(BadPattern)),
        ("x*\\", "y", Ok(false)),
        ("\\*", "*", Ok(true)),
        ("\\*", "a", Ok(false)),
        // An unclosed `[` is malformed once matching reaches it.
        ("[a", "a", Err(BadPattern)),
        ("[ab", "a", Err(BadPattern)),
        ("[a-", "a", Err(BadPattern)),
        ("[a-z", "q", Err(BadPattern)),
        ("*[", "abc", Err(BadPattern)),
        ("a*[", "abc", Err(BadPattern)),
        ("x*[", "abc", Ok(false)),
        ("[*", "*", Err(BadPattern)),
        ("[a*", "a", Err(BadPattern)),
        // Unlike `path.Match`, a syntax error after the name already failed is not reported.
        ("b*[", "a", Ok(false)),
        ("a*b*[", "ax", Ok(false)),
        ("z[a-", "y", Err(BadPattern)),
    ];

    #[test]
    fn check_finds_errors_matching_would_not_reach() {
        for good in [
            "ghcr.io/acme/*",
            "*",
            "",
            "a[bc]d?",
            "reg:5000/x/*",
            r"a\*b",
            "[^a-z]*",
        ] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
        for bad in ["ghcr.io/[", "x*[", r"a\", "[]a]", "[a-]", "*[z-"] {
            assert_eq!(check(bad), Err(BadPattern), "{bad}");
        }
        // What makes `check` necessary: matching can stop before the error.
        assert_eq!(matches("x*[", "abc"), Ok(false));
    }

    #[test]
    fn agrees_with_go_filepath_match() {
        for (pattern, name, want) in GO_ANSWERS {
            assert_eq!(matches(pattern, name), *want, "{pattern:?} vs {name:?}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(p in "[-*?\\[\\]\\\\^a-c/☺]{0,12}", n in "[-a-c/☺*?\\[\\]]{0,12}") {
            let _ = matches(&p, &n);
        }

        #[test]
        fn a_literal_matches_itself(n in "[a-z0-9._-]{0,20}") {
            prop_assert_eq!(matches(&n, &n), Ok(true));
            prop_assert_eq!(matches("*", &n), Ok(true));
        }
    }
}
