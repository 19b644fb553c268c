//! Printing a command's result in the format asked for: the same value as a table (`table`,
//! `wide`) or as one JSON or YAML document, so a script can parse what a user reads.

use std::io::Write;

use serde::Serialize;

use crate::args::Format;
use crate::error::{CliError, Result};

/// A result that can be shown as a table.
pub trait Render: Serialize {
    /// The text of `table` (`wide`: with the wide columns).
    fn table(&self, wide: bool) -> String;
}

/// Prints `value` to stdout in `format`.
pub fn print<R: Render>(format: Format, value: &R) -> Result<()> {
    let text = match format {
        Format::Table => value.table(false),
        Format::Wide => value.table(true),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(value)
                .map_err(|e| CliError::Invalid(format!("cannot encode the output: {e}")))?;
            s.push('\n');
            s
        }
        Format::Yaml => yaml_serde::to_string(value)
            .map_err(|e| CliError::Invalid(format!("cannot encode the output: {e}")))?,
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Columns aligned as kubectl aligns them (three spaces between columns, no trailing blanks).
#[derive(Debug, Clone, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headers.
    pub fn new<S: AsRef<str>>(headers: &[S]) -> Self {
        Table {
            rows: vec![headers.iter().map(|h| h.as_ref().to_owned()).collect()],
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether it has rows besides the headers.
    pub fn is_empty(&self) -> bool {
        self.rows.len() <= 1
    }

    /// The text, one line per row.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if i + 1 < row.len() {
                    let pad = widths.get(i).copied().unwrap_or(0) - cell.chars().count() + 3;
                    line.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `-` for an empty cell.
pub fn or_dash(s: impl Into<String>) -> String {
    let s = s.into();
    if s.is_empty() { "-".to_owned() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_lines_have_no_trailing_blanks() {
        let mut t = Table::new(&["NODE", "STATUS"]);
        t.row(vec!["a-long-node".into(), "complete".into()]);
        t.row(vec!["b".into(), String::new()]);
        assert_eq!(
            t.render(),
            "NODE          STATUS\na-long-node   complete\nb\n"
        );
        assert!(!t.is_empty());
        assert_eq!(or_dash(""), "-");
    }
}
