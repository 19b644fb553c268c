//! Node patterns, as upstream's plugin reads them: a pattern with any of `. * + ? ^ $ { } [ ] | ( )
//! \` is a regular expression matched against the whole node name; anything else is an exact name.
//! Every pattern must match a node, so a typo never silently narrows what a command acts on.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use regex::Regex;

use crate::error::{CliError, Result};

/// Characters that make a pattern a regular expression.
const SPECIAL: &[char] = &[
    '.', '*', '+', '?', '^', '$', '{', '}', '[', ']', '|', '(', ')', '\\',
];

#[derive(Debug, Clone)]
enum Pattern {
    Exact(String),
    Regex(String, Regex),
}

impl Pattern {
    fn text(&self) -> &str {
        match self {
            Pattern::Exact(s) | Pattern::Regex(s, _) => s,
        }
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Exact(s) => s == name,
            Pattern::Regex(_, r) => r.is_match(name),
        }
    }
}

/// Compiled node patterns.
#[derive(Debug, Clone)]
pub struct NodePatterns(Vec<Pattern>);

impl NodePatterns {
    /// Compiles `patterns` (an invalid regular expression is a usage error).
    pub fn parse(patterns: &[String]) -> Result<Self> {
        patterns
            .iter()
            .map(|p| {
                if p.contains(SPECIAL) {
                    Regex::new(&format!("^(?:{p})$"))
                        .map(|r| Pattern::Regex(p.clone(), r))
                        .map_err(|e| {
                            CliError::Usage(format!(
                                "node pattern {p:?} is not a valid regular expression: {e}"
                            ))
                        })
                } else {
                    Ok(Pattern::Exact(p.clone()))
                }
            })
            .collect::<Result<Vec<_>>>()
            .map(NodePatterns)
    }

    /// No pattern given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `name` matches a pattern (every name, with no pattern).
    pub fn matches(&self, name: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|p| p.matches(name))
    }

    /// The nodes matching (each once, in the given order); an error naming every pattern that
    /// matches no node.
    pub fn select<'a>(&self, nodes: &'a [Node]) -> Result<Vec<&'a Node>> {
        let unmatched: Vec<&str> = self
            .0
            .iter()
            .filter(|p| !nodes.iter().any(|n| p.matches(&n.name_any())))
            .map(Pattern::text)
            .collect();
        if !unmatched.is_empty() {
            return Err(CliError::NotFound(format!(
                "no node matches {}: list the nodes with `kubectl get nodes`; nothing was written",
                unmatched
                    .iter()
                    .map(|p| format!("{p:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(nodes
            .iter()
            .filter(|n| self.matches(&n.name_any()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n
    }

    #[test]
    fn exact_names_and_anchored_regular_expressions() {
        let nodes = [node("gpu-1"), node("gpu-10"), node("cpu-1")];
        let p = NodePatterns::parse(&["gpu-1".into()]).expect("patterns");
        let names = |v: Vec<&Node>| v.iter().map(|n| n.name_any()).collect::<Vec<_>>();
        assert_eq!(names(p.select(&nodes).expect("match")), ["gpu-1"]);
        let p = NodePatterns::parse(&["gpu-.*".into(), "gpu-1.".into()]).expect("patterns");
        assert_eq!(names(p.select(&nodes).expect("match")), ["gpu-1", "gpu-10"]);
        // Anchored: "pu-1" is no substring match.
        let p = NodePatterns::parse(&["pu-1.*".into()]).expect("patterns");
        assert!(p.select(&nodes).is_err());
    }

    #[test]
    fn a_pattern_matching_nothing_is_named_and_a_bad_regex_is_a_usage_error() {
        let nodes = [node("a")];
        let p = NodePatterns::parse(&["a".into(), "typo".into()]).expect("patterns");
        let e = p
            .select(&nodes)
            .expect_err("typo matches nothing")
            .to_string();
        assert!(e.contains("\"typo\"") && !e.contains("\"a\""), "{e}");
        assert!(matches!(
            NodePatterns::parse(&["(".into()]),
            Err(CliError::Usage(_))
        ));
    }
}
