//! What the rule sets report: one [`FieldError`] per problem, collected per object in [`Findings`]
//! and answered as a [`Verdict`] in a stable order, and the field paths ([`Path`], [`child`],
//! [`item`]) and short lists the messages are written with.

use std::fmt;

/// One problem with one field. Display: "{path}: {message}".
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FieldError {
    /// Where the problem is, e.g. `spec.packages.foo.stageTimeout`.
    pub path: String,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl FieldError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The outcome of validating one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Every problem, sorted by path then message, without duplicates. Any error denies the request.
    pub errors: Vec<FieldError>,
    /// Things the user should know that do not block the request (AdmissionReview `warnings`).
    pub warnings: Vec<String>,
}

impl Verdict {
    /// True when there is no error (warnings do not deny).
    pub fn is_allowed(&self) -> bool {
        self.errors.is_empty()
    }

    /// Every error on its own line, "path: message", in order: the denial message.
    pub fn message(&self) -> String {
        self.errors
            .iter()
            .map(FieldError::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Collects the findings of one object; [`Findings::finish`] puts them in their stable order.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    errors: Vec<FieldError>,
    warnings: Vec<String>,
}

impl Findings {
    /// Records a problem with the field at `path`.
    pub(crate) fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError::new(path, message));
    }

    /// Records a non-blocking warning.
    pub(crate) fn warn(&mut self, message: impl Into<String>) {
        self.warnings.push(message.into());
    }

    /// Sorted (path, then message) and deduplicated, so the same object always gets the same answer.
    pub(crate) fn finish(mut self) -> Verdict {
        self.errors.sort();
        self.errors.dedup();
        self.warnings.sort();
        self.warnings.dedup();
        Verdict {
            errors: self.errors,
            warnings: self.warnings,
        }
    }
}

/// A field path that is only spelled out when a finding needs it, so that checking a valid object
/// builds no path strings. `Root("spec.packages").child("tools")` renders as [`child`] composes
/// (`spec.packages.tools`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Path<'a> {
    /// A path written out, e.g. `spec.packages`.
    Root(&'a str),
    /// The entry `key` of the map at the parent path.
    Child(&'a Path<'a>, &'a str),
}

impl<'a> Path<'a> {
    /// The entry `key` of the map at this path.
    pub(crate) fn child(&'a self, key: &'a str) -> Path<'a> {
        Path::Child(self, key)
    }

    /// The path as findings spell it.
    pub(crate) fn render(&self) -> String {
        match self {
            Path::Root(path) => (*path).to_owned(),
            Path::Child(parent, key) => child(&parent.render(), key),
        }
    }
}

impl From<&Path<'_>> for String {
    fn from(path: &Path<'_>) -> String {
        path.render()
    }
}

/// The path of a map entry: `parent.key` for plain keys, `parent[key]` (the Kubernetes notation) when
/// the key contains characters such as `.` or `*` that would make a dotted path ambiguous.
pub(crate) fn child(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        format!("{parent}.{key}")
    } else {
        format!("{parent}[{key}]")
    }
}

/// The path of a list item: `parent[i]`.
pub(crate) fn item(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// A short, readable list for messages: at most `max` items, then how many more.
pub(crate) fn short_list<S: AsRef<str>>(items: &[S], max: usize) -> String {
    let shown: Vec<&str> = items.iter().take(max).map(AsRef::as_ref).collect();
    let mut out = shown.join(", ");
    if items.len() > max {
        out.push_str(&format!(" and {} more", items.len() - max));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_are_sorted_and_deduplicated() {
        let mut f = Findings::default();
        f.error("spec.packages.b.version", "z");
        f.error("metadata.name", "too long");
        f.error("spec.packages.a.image", "y");
        f.error("spec.packages.a.image", "x");
        f.error("spec.packages.a.image", "x");
        f.warn("w2");
        f.warn("w1");
        f.warn("w1");
        let v = f.finish();
        assert!(!v.is_allowed());
        assert_eq!(
            v.message(),
            "metadata.name: too long\nspec.packages.a.image: x\nspec.packages.a.image: y\nspec.packages.b.version: z"
        );
        assert_eq!(v.warnings, vec!["w1".to_owned(), "w2".to_owned()]);
    }

    #[test]
    fn empty_verdict_allows() {
        let v = Findings::default().finish();
        assert!(v.is_allowed());
        assert_eq!(v.message(), "");
    }

    #[test]
    fn paths_quote_keys_that_are_not_plain() {
        assert_eq!(child("spec.packages", "foo"), "spec.packages.foo");
        assert_eq!(child("spec.packages", "Bad_Name"), "spec.packages.Bad_Name");
        assert_eq!(
            child("x.configInterrupts", "*.conf"),
            "x.configInterrupts[*.conf]"
        );
        assert_eq!(child("x", ""), "x[]");
        assert_eq!(item("spec.compartments", 1), "spec.compartments[1]");
    }

    #[test]
    fn lazy_paths_render_as_composed_ones() {
        let root = Path::Root("spec.packages");
        let package = root.child("tools");
        let entry = package.child("configInterrupts");
        assert_eq!(
            String::from(&entry.child("*.conf")),
            child(
                &child(&child("spec.packages", "tools"), "configInterrupts"),
                "*.conf"
            )
        );
        assert_eq!(
            entry.child("*.conf").render(),
            "spec.packages.tools.configInterrupts[*.conf]"
        );
        assert_eq!(root.render(), "spec.packages");
    }

    #[test]
    fn short_lists_say_how_many_more() {
        assert_eq!(short_list(&["a", "b"], 3), "a, b");
        assert_eq!(short_list(&["a", "b", "c", "d"], 2), "a, b and 2 more");
        assert_eq!(short_list::<&str>(&[], 2), "");
    }
}
