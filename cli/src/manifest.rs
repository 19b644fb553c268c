//! Manifests given with `-f`: YAML or JSON, several documents, `List`s flattened, `-` for stdin.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::error::{CliError, Result};

/// One object of a manifest.
#[derive(Debug, Clone)]
pub struct Document {
    /// The file it came from, as shown in messages.
    pub file: String,
    /// Its document's number in the file, from 1.
    pub number: usize,
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// The object.
    pub value: Value,
}

impl Document {
    /// An error about this document.
    pub fn error(&self, what: impl std::fmt::Display) -> CliError {
        CliError::Invalid(format!("{}: document {}: {what}", self.file, self.number))
    }
}

/// Reads every object of the manifest at `path` (`-`: stdin).
pub fn read(path: &Path) -> Result<Vec<Document>> {
    let file = path.display().to_string();
    let text = if file == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|source| CliError::Read {
                path: "stdin".into(),
                source,
            })?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|source| CliError::Read {
            path: file.clone(),
            source,
        })?
    };
    let mut out = Vec::new();
    for (i, doc) in yaml_serde::Deserializer::from_str(&text).enumerate() {
        let value = <Value as serde::Deserialize>::deserialize(doc).map_err(|e| {
            CliError::Invalid(format!(
                "{file}: document {} is not YAML or JSON: {e}",
                i + 1
            ))
        })?;
        let items = match value.get("items").and_then(Value::as_array) {
            Some(items) => items.clone(),
            None if value.is_null() => Vec::new(),
            None => vec![value],
        };
        for value in items {
            let field = |f: &str| {
                value
                    .get(f)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            out.push(Document {
                file: file.clone(),
                number: i + 1,
                api_version: field("apiVersion"),
                kind: field("kind"),
                value,
            });
        }
    }
    Ok(out)
}
