//! The tested blocks of a docs page, in order. A page marks what the harness runs:
//!
//! - ```` ```yaml apply ````: `kubectl apply -f -` of the block; it must succeed;
//! - ```` ```yaml rejected ````: the same, and it must be refused (admission or validation);
//! - ```` ```sh test ````: the block in `bash -euo pipefail`; it must exit 0;
//! - ```` ```text expect ````: lines the previous block's output (stdout and stderr) must contain,
//!   in order, each within one output line; runs of spaces match any run of spaces and `...`
//!   matches anything (ages, uids, timestamps);
//! - `<!-- test: fate PACKAGE FATE [key=value ...] -->` (invisible when rendered): from here on, the
//!   stage pods of package PACKAGE play FATE on the example cluster's simulated nodes (`fail
//!   exit-code=3`, `hang`...; tests/README.md "Pod fates"), standing for what a real package's
//!   script would do there;
//! - `<!-- test: setup ... -->` (multi-line, invisible): shell run before the next block;
//! - `<!-- test: clock 2026-12-03T12:00:00Z -->` (invisible): from here on the operator's clock reads
//!   that instant and runs on from it (maintenance windows open and close on it); the page's end
//!   puts it back on the system clock.
//! - `<!-- test: operator MAX_DISRUPTED_NODES=2 [VAR=value ...] -->` (invisible): the operator is
//!   restarted with these settings added to its environment (as a chart value would set them);
//!   the page's end restarts it as it was.
//!
//! Every other fenced block is for reading only.

/// One thing the harness does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A shell block.
    Shell {
        /// Its text.
        code: String,
        /// Line of the fence.
        line: usize,
    },
    /// A manifest to apply.
    Apply {
        /// The YAML.
        yaml: String,
        /// Whether it must be refused.
        rejected: bool,
        /// Line of the fence.
        line: usize,
    },
    /// Expected output of the previous step.
    Expect {
        /// Patterns, one per line.
        patterns: Vec<String>,
        /// Line of the fence.
        line: usize,
    },
    /// The operator restarted with settings added to its environment.
    Operator {
        /// `VAR=value` pairs.
        settings: Vec<(String, String)>,
        /// Line of the directive.
        line: usize,
    },
    /// The operator's clock set to an instant.
    Clock {
        /// The instant (RFC 3339).
        at: String,
        /// Line of the directive.
        line: usize,
    },
    /// A pod fate for a package's stages.
    Fate {
        /// The package key.
        package: String,
        /// `fail`, `hang`... (`none` removes it).
        fate: String,
        /// Its parameters (`exit-code=3`).
        params: Vec<(String, String)>,
        /// Line of the directive.
        line: usize,
    },
}

/// The steps of a page, in order.
pub fn steps(markdown: &str) -> Vec<Step> {
    let mut out = Vec::new();
    let lines: Vec<&str> = markdown.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        if let Some(rest) = line.strip_prefix("<!-- test: fate ") {
            let rest = rest.trim_end().trim_end_matches("-->").trim();
            let mut words = rest.split_whitespace();
            if let (Some(package), Some(fate)) = (words.next(), words.next()) {
                let params = words
                    .filter_map(|w| w.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect();
                out.push(Step::Fate {
                    package: package.to_owned(),
                    fate: fate.to_owned(),
                    params,
                    line: i + 1,
                });
            }
            i += 1;
            continue;
        }
        if let Some(rest) = line.strip_prefix("<!-- test: operator ") {
            let settings = rest
                .trim_end()
                .trim_end_matches("-->")
                .split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            out.push(Step::Operator {
                settings,
                line: i + 1,
            });
            i += 1;
            continue;
        }
        if let Some(rest) = line.strip_prefix("<!-- test: clock ") {
            out.push(Step::Clock {
                at: rest.trim_end().trim_end_matches("-->").trim().to_owned(),
                line: i + 1,
            });
            i += 1;
            continue;
        }
        if line.starts_with("<!-- test: setup") {
            let start = i + 1;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim().starts_with("-->") {
                body.push(lines[i]);
                i += 1;
            }
            out.push(Step::Shell {
                code: body.join("\n"),
                line: start,
            });
            i += 1;
            continue;
        }
        if let Some(info) = line.strip_prefix("```") {
            let info = info.trim().to_owned();
            let start = i + 1;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                body.push(lines[i]);
                i += 1;
            }
            let text = body.join("\n");
            match info.as_str() {
                "sh test" => out.push(Step::Shell {
                    code: text,
                    line: start,
                }),
                "yaml apply" => out.push(Step::Apply {
                    yaml: text,
                    rejected: false,
                    line: start,
                }),
                "yaml rejected" => out.push(Step::Apply {
                    yaml: text,
                    rejected: true,
                    line: start,
                }),
                "text expect" => out.push(Step::Expect {
                    patterns: body
                        .iter()
                        .map(|l| l.trim())
                        .filter(|l| !l.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    line: start,
                }),
                _ => {}
            }
        }
        i += 1;
    }
    out
}

fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether one output line matches one pattern (spaces squeezed, `...` = anything).
pub fn line_matches(pattern: &str, line: &str) -> bool {
    let line = squeeze(line);
    let mut rest = line.as_str();
    let parts: Vec<String> = pattern.split("...").map(squeeze).collect();
    for (n, part) in parts.iter().enumerate() {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        match rest.find(part) {
            // The first fragment of a pattern not starting with `...` must start the line.
            Some(at) if n > 0 || at == 0 || pattern.starts_with("...") => {
                rest = &rest[at + part.len()..];
            }
            _ => return false,
        }
    }
    true
}

/// The patterns `output` fails to match in order (empty: it matches).
pub fn unmatched(patterns: &[String], output: &str) -> Vec<String> {
    let mut lines = output.lines();
    let mut missing = Vec::new();
    for p in patterns {
        if !lines.by_ref().any(|l| line_matches(p, l)) {
            missing.push(p.clone());
            lines = output.lines();
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_directives_become_steps() {
        let page = "intro\n```sh\nnot run\n```\n<!-- test: fate slow hang delay=2s -->\n```yaml apply\nkind: X\n```\n```sh test\nkubectl get nw\n```\n```text expect\nNAME   STATUS\ndemo   complete ...\n```\n<!-- test: setup\nkubectl label node a x=y\n-->\n```yaml rejected\nkind: Y\n```\n";
        let s = steps(page);
        assert_eq!(s.len(), 6, "{s:?}");
        assert!(matches!(&s[0], Step::Fate { package, fate, params, .. }
            if package == "slow" && fate == "hang" && params == &[("delay".to_owned(), "2s".to_owned())]));
        assert!(matches!(
            &s[1],
            Step::Apply {
                rejected: false,
                ..
            }
        ));
        assert!(matches!(&s[2], Step::Shell { code, .. } if code == "kubectl get nw"));
        assert!(matches!(&s[3], Step::Expect { patterns, .. } if patterns.len() == 2));
        assert!(matches!(&s[4], Step::Shell { code, .. } if code == "kubectl label node a x=y"));
        assert!(matches!(&s[5], Step::Apply { rejected: true, .. }));
        let operator = steps("<!-- test: operator MAX_DISRUPTED_NODES=1 LOG_LEVEL=info -->\n");
        assert_eq!(
            operator,
            [Step::Operator {
                settings: vec![
                    ("MAX_DISRUPTED_NODES".into(), "1".into()),
                    ("LOG_LEVEL".into(), "info".into())
                ],
                line: 1
            }]
        );
        let clock = steps("<!-- test: clock 2026-12-03T12:00:00Z -->\n");
        assert!(
            matches!(&clock[..], [Step::Clock { at, line: 1 }] if at == "2026-12-03T12:00:00Z"),
            "{clock:?}"
        );
    }

    #[test]
    fn expectations_match_in_order_with_wildcards() {
        let out = "NAME    STATUS     AGE\ndemo    complete   12s\nother   erroring   3m\n";
        let p = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(unmatched(&p(&["NAME STATUS", "demo complete ..."]), out).is_empty());
        assert!(unmatched(&p(&["...erroring"]), out).is_empty());
        assert_eq!(unmatched(&p(&["demo erroring"]), out), ["demo erroring"]);
        assert!(!line_matches("complete", "demo complete 12s"), "anchored");
        assert!(line_matches("... complete ...", "demo complete 12s"));
    }
}
