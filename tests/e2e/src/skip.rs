//! Skipping a test that cannot run here, only when skipping was asked for.
//!
//! A test that prints "skipped" and returns passes while checking nothing, so on a machine that
//! lacks what it needs (kwok's pod fates on an external cluster, root for the real node, ...) it
//! must fail unless whoever runs the suites said that skipping is fine: `NODEWRIGHT_ALLOW_SKIP`
//! names the tests that may skip (comma-separated; a name matches a test whose name starts with
//! it), or `all`. Each skip is printed and, when `NODEWRIGHT_SKIP_LOG` names a file, appended to
//! it, so `tests/run-all.sh` prints how many tests skipped and why.

use std::io::Write;

/// Tests that may skip: comma-separated test names (prefixes), or `all`.
pub const ENV_ALLOW_SKIP: &str = "NODEWRIGHT_ALLOW_SKIP";
/// File every skip is appended to (one line each), for the run's summary.
pub const ENV_SKIP_LOG: &str = "NODEWRIGHT_SKIP_LOG";

/// Whether `allowed` (the variable's value) lets `test` skip.
fn allows(allowed: &str, test: &str) -> bool {
    allowed.split(',').map(str::trim).any(|entry| {
        entry.eq_ignore_ascii_case("all") || (!entry.is_empty() && test.starts_with(entry))
    })
}

/// `test` cannot run here because of `why`: returns `true` (the caller returns at once) when
/// skipping was asked for, after saying so; otherwise panics with `why` and the way to skip.
pub fn skip(test: &str, why: &str) -> bool {
    let allowed = std::env::var(ENV_ALLOW_SKIP).unwrap_or_default();
    if !allows(&allowed, test) {
        panic!(
            "{test} cannot run here: {why}. It fails rather than pass without checking anything; \
             set {ENV_ALLOW_SKIP}={test} (or all) to skip it on purpose"
        );
    }
    let line = format!("SKIPPED {test}: {why}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os(ENV_SKIP_LOG) {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = appended {
            eprintln!(
                "could not record the skip in {}: {e}",
                path.to_string_lossy()
            );
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::allows;

    #[test]
    fn only_named_tests_or_all_may_skip() {
        assert!(!allows("", "real_node"));
        assert!(allows("all", "real_node"));
        assert!(allows("ALL", "anything"));
        assert!(allows("chaos, real_node", "real_node"));
        assert!(allows("real_node", "real_node_reboot"));
        assert!(!allows("real_node", "rotation_load"));
        assert!(!allows(",", "rotation_load"));
    }
}
