//! Shell globs exactly as Go's `path/filepath.Match` reads them (on Linux).
//!
//! `configInterrupts` keys may be patterns over `configMap` keys, and the operator decides which
//! interrupt a config change needs with the same matcher, so admission must agree with it byte for
//! byte: `*` is any run of non-`/` bytes, `?` one character other than `/`, `[...]` a class (`^`
//! negates, `a-z` ranges, `\` escapes), `\x` a literal `x`. A malformed pattern is an error, which the
//! rules treat as "matches nothing" (upstream ignores the error) while still telling the user why.

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
        // No match; Go still reports a syntax error anywhere in the rest of the pattern.
        while !pattern.is_empty() {
            let (_, chunk, rest) = scan_chunk(pattern);
            pattern = rest;
            match_chunk(chunk, b"")?;
        }
        return Ok(false);
    }
    Ok(name.is_empty())
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

    /// Go's own `filepath.Match` test table (the non-Windows rows).
    #[test]
    fn go_match_table() {
        let ok = |b| Ok::<bool, BadPattern>(b);
        let cases: &[(&str, &str, Result<bool, BadPattern>)] = &[
            ("abc", "abc", ok(true)),
            ("*", "abc", ok(true)),
            ("*c", "abc", ok(true)),
            ("a*", "a", ok(true)),
            ("a*", "abc", ok(true)),
            ("a*", "ab/c", ok(false)),
            ("a*/b", "abc/b", ok(true)),
            ("a*/b", "a/c/b", ok(false)),
            ("a*b*c*d*e*/f", "axbxcxdxe/f", ok(true)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/f", ok(true)),
            ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", ok(false)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", ok(false)),
            ("a*b?c*x", "abxbbxdbxebxczzx", ok(true)),
            ("a*b?c*x", "abxbbxdbxebxczzy", ok(false)),
            ("ab[c]", "abc", ok(true)),
            ("ab[b-d]", "abc", ok(true)),
            ("ab[e-g]", "abc", ok(false)),
            ("ab[^c]", "abc", ok(false)),
            ("ab[^b-d]", "abc", ok(false)),
            ("ab[^e-g]", "abc", ok(true)),
            ("a\\*b", "a*b", ok(true)),
            ("a\\*b", "ab", ok(false)),
            ("a?b", "a☺b", ok(true)),
            ("a[^a]b", "a☺b", ok(true)),
            ("a???b", "a☺b", ok(false)),
            ("a[^a][^a][^a]b", "a☺b", ok(false)),
            ("[a-ζ]*", "α", ok(true)),
            ("*[a-ζ]", "A", ok(false)),
            ("a?b", "a/b", ok(false)),
            ("a*b", "a/b", ok(false)),
            ("[\\]a]", "]", ok(true)),
            ("[\\-]", "-", ok(true)),
            ("[x\\-]", "x", ok(true)),
            ("[x\\-]", "-", ok(true)),
            ("[x\\-]", "z", ok(false)),
            ("[\\-x]", "x", ok(true)),
            ("[\\-x]", "-", ok(true)),
            ("[\\-x]", "a", ok(false)),
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
            ("*x", "xxx", ok(true)),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(matches(pattern, name), *want, "{pattern:?} vs {name:?}");
        }
    }

    #[test]
    fn config_key_globs() {
        assert_eq!(matches("*.conf", "sysctl.conf"), Ok(true));
        assert_eq!(matches("*.conf", "notes.txt"), Ok(false));
        assert_eq!(matches("*.conf", "a.conf.bak"), Ok(false));
        assert_eq!(matches("profile-?.conf", "profile-a.conf"), Ok(true));
        assert_eq!(matches("[ab]*", "b.sh"), Ok(true));
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
