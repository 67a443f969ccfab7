//! Plain-text tables for people: a header line and one line per row, each
//! column as wide as its widest cell; or, for one record, its fields one a
//! line. Cells never carry control characters: a name holding a newline or
//! a terminal escape is shown escaped, and the columns stay aligned.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

/// Columns separated by this many spaces.
const GAP: usize = 2;

pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Self {
        Self {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len(), "a cell per column");
        self.rows.push(cells.iter().map(|c| clean(c)).collect());
    }

    /// The header and the rows, each line ending in a newline; the last
    /// column is not padded.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header = self.header.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            line(&mut out, row, &widths);
        }
        out
    }
}

fn line(out: &mut String, cells: &[String], widths: &[usize]) {
    let last = cells.len().saturating_sub(1);
    for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
        if i == last {
            out.push_str(cell);
        } else {
            let pad = width - cell.chars().count() + GAP;
            let _ = write!(out, "{cell}{:pad$}", "");
        }
    }
    out.push('\n');
}

/// One record's fields, a `name` and its value a line, the values aligned.
pub fn record(fields: &[(&str, String)]) -> String {
    let width = fields
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (name, value) in fields {
        let pad = width - name.chars().count() + GAP;
        let _ = writeln!(out, "{name}{:pad$}{}", "", clean(value));
    }
    out
}

/// A cell's text with each control character escaped (`\n`, `\u{1b}`).
fn clean(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A time as the API writes it (RFC 3339, UTC); `-` for none.
pub fn time(t: Option<&DateTime<Utc>>) -> String {
    t.map(crate::domain::time::format).unwrap_or_else(none)
}

/// A text, cut to `max` characters with an ellipsis; `-` for none or empty.
pub fn text(s: Option<&str>, max: usize) -> String {
    match s {
        None | Some("") => none(),
        Some(s) if s.chars().count() > max => {
            let cut: String = s.chars().take(max.saturating_sub(1)).collect();
            format!("{cut}…")
        }
        Some(s) => s.to_string(),
    }
}

pub fn none() -> String {
    "-".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_the_last_is_not_padded() {
        let mut t = Table::new(&["ID", "NAME", "STATE"]);
        t.row(vec!["a".into(), "orders".into(), "Scheduled".into()]);
        t.row(vec!["abcdef".into(), "x".into(), "-".into()]);
        assert_eq!(
            t.render(),
            "ID      NAME    STATE\n\
             a       orders  Scheduled\n\
             abcdef  x       -\n"
        );
    }

    #[test]
    fn an_empty_table_is_its_header() {
        assert_eq!(Table::new(&["ID", "NAME"]).render(), "ID  NAME\n");
    }

    #[test]
    fn control_characters_are_escaped_and_keep_the_columns_aligned() {
        let mut t = Table::new(&["NAME", "ENABLED"]);
        t.row(vec!["a\nb\u{1b}[31m".into(), "true".into()]);
        t.row(vec!["ünï".into(), "false".into()]);
        let out = t.render();
        assert_eq!(out.lines().count(), 3, "{out}");
        assert!(!out.contains('\u{1b}'), "{out}");
        assert_eq!(out.lines().nth(1).unwrap(), "a\\nb\\u{1b}[31m  true");
        // Columns align by characters, not bytes.
        let column = |line: &str, word: &str| line.chars().count() - word.chars().count();
        let (row1, row2) = (out.lines().nth(1).unwrap(), out.lines().nth(2).unwrap());
        assert_eq!(column(row1, "true"), column(row2, "false"));
        assert!(
            row2.starts_with("ünï ") && row2.ends_with(" false"),
            "{row2}"
        );
    }

    #[test]
    fn a_record_aligns_its_values() {
        assert_eq!(
            record(&[("id", "x".into()), ("state", "Cancelled".into())]),
            "id     x\nstate  Cancelled\n"
        );
    }

    #[test]
    fn long_texts_are_cut_with_an_ellipsis() {
        assert_eq!(text(Some("abcdef"), 4), "abc…");
        assert_eq!(text(Some("abcd"), 4), "abcd");
        assert_eq!(text(None, 4), "-");
    }
}
