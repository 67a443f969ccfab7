//! Just enough Markdown to read the docs' headings, sections and tables.

use std::path::Path;

/// A file of the repository, by its path from the root.
pub fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The lines outside fenced code blocks, with their headings' levels
/// (0 for a line that is not a heading).
fn lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push((0, line));
            continue;
        }
        let level = line.bytes().take_while(|b| *b == b'#').count();
        let heading = !fenced && level > 0 && line[level..].starts_with(' ');
        out.push((if heading { level } else { 0 }, line));
    }
    out
}

/// The section under the heading whose title is `title`, up to the next
/// heading of its level or above.
pub fn section(text: &str, title: &str) -> String {
    let lines = lines(text);
    let start = lines
        .iter()
        .position(|(level, line)| *level > 0 && line[*level..].trim() == title)
        .unwrap_or_else(|| panic!("no heading `{title}`"));
    let level = lines[start].0;
    lines[start + 1..]
        .iter()
        .take_while(|(l, _)| *l == 0 || *l > level)
        .map(|(_, line)| *line)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The rows (header and separator left out) of the first table in the
/// section `title` whose header's first cell is `first`; cells trimmed,
/// `\|` read as `|`.
pub fn rows_under(text: &str, title: &str, first: &str) -> Vec<Vec<String>> {
    let section = section(text, title);
    let mut tables: Vec<Vec<Vec<String>>> = Vec::new();
    let mut current: Option<Vec<Vec<String>>> = None;
    for line in section.lines() {
        let line = line.trim();
        if line.starts_with('|') {
            let cells = line
                .replace("\\|", "\u{1}")
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().replace('\u{1}', "|"))
                .collect();
            current.get_or_insert_with(Vec::new).push(cells);
        } else if let Some(table) = current.take() {
            tables.push(table);
        }
    }
    tables.extend(current);
    let table = tables
        .into_iter()
        .find(|t| t.first().is_some_and(|h| h[0] == first))
        .unwrap_or_else(|| panic!("no table starting `| {first} |` under `{title}`"));
    assert!(
        table.get(1).is_some_and(|sep| sep[0].starts_with("---")),
        "a table's second line separates header and rows"
    );
    table.into_iter().skip(2).collect()
}

/// The anchors of the headings, as GitHub makes them: lower case, without
/// punctuation, spaces turned to hyphens, a repeated one numbered.
pub fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (level, line) in lines(text) {
        if level == 0 {
            continue;
        }
        let slug: String = line[level..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let repeats = out
            .iter()
            .filter(|a| {
                **a == slug
                    || a.strip_prefix(slug.as_str())
                        .and_then(|r| r.strip_prefix('-'))
                        .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .count();
        out.push(if repeats == 0 {
            slug
        } else {
            format!("{slug}-{repeats}")
        });
    }
    out
}

#[test]
fn anchors_are_githubs() {
    let text = "# Dispatch\n\n```sh\n# not a heading\n```\n## Bulk redrive, cancel and replay\n\
                ## Walkthrough: a first delivery, from a fresh shell\n## Notes\n## Notes\n";
    assert_eq!(
        anchors(text),
        [
            "dispatch",
            "bulk-redrive-cancel-and-replay",
            "walkthrough-a-first-delivery-from-a-fresh-shell",
            "notes",
            "notes-1"
        ]
    );
}
