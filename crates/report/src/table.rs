//! Text tables: columns sized to their contents, numbers right-aligned,
//! rendered as plain text for terminals or as Markdown for documents.

use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Plain,
    Markdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

pub struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns; a header starting with '>' is
    /// right-aligned (the '>' is not shown).
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers
                .iter()
                .map(|h| h.trim_start_matches('>').to_string())
                .collect(),
            align: headers
                .iter()
                .map(|h| {
                    if h.starts_with('>') {
                        Align::Right
                    } else {
                        Align::Left
                    }
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) -> &mut Table {
        self.rows.push(cells);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self, style: Style, indent: &str) -> String {
        let columns = self.headers.len();
        let min_width = if style == Style::Markdown { 3 } else { 0 };
        let mut widths: Vec<usize> = self
            .headers
            .iter()
            .map(|h| h.chars().count().max(min_width))
            .collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let mut text = String::from(indent);
            if style == Style::Markdown {
                text.push_str("| ");
            }
            for (i, (width, align)) in widths.iter().zip(&self.align).enumerate() {
                let cell = cells.get(i).map(String::as_str).unwrap_or("");
                let pad = width.saturating_sub(cell.chars().count());
                let padded = match align {
                    Align::Left => format!("{cell}{}", " ".repeat(pad)),
                    Align::Right => format!("{}{cell}", " ".repeat(pad)),
                };
                text.push_str(&padded);
                if i + 1 < columns {
                    text.push_str(if style == Style::Markdown {
                        " | "
                    } else {
                        "  "
                    });
                }
            }
            if style == Style::Markdown {
                text.push_str(" |");
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&self.headers, &mut out);
        if style == Style::Markdown {
            let rule: Vec<String> = widths
                .iter()
                .zip(&self.align)
                .map(|(w, a)| match a {
                    Align::Left => "-".repeat(*w),
                    Align::Right => format!("{}:", "-".repeat(w - 1)),
                })
                .collect();
            line(&rule, &mut out);
        }
        for row in &self.rows {
            line(row, &mut out);
        }
        out
    }
}

/// 12345678 -> "12,345,678": counts people compare at a glance.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An inclusive run of pages: `n` for a single page, `a-b` for a run.
pub fn page_run([first, last]: [u64; 2]) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

/// A section title: a Markdown level-3 heading, or a plain line after a
/// blank one.
pub fn heading(out: &mut String, style: Style, text: &str) {
    match style {
        Style::Markdown => {
            let _ = writeln!(out, "\n### {text}\n");
        }
        Style::Plain => {
            let _ = writeln!(out, "\n{text}");
        }
    }
}

pub fn percent(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_table_aligns_columns() {
        let mut t = Table::new(&["name", ">count"]);
        t.row(vec!["a".into(), "5".into()]);
        t.row(vec!["long".into(), "1234".into()]);
        assert_eq!(
            t.render(Style::Plain, ""),
            "name  count\na         5\nlong   1234\n"
        );
    }

    #[test]
    fn markdown_table_has_rule_row() {
        let mut t = Table::new(&["k", ">v"]);
        t.row(vec!["x".into(), "1".into()]);
        assert_eq!(
            t.render(Style::Markdown, ""),
            "| k   |   v |\n| --- | --: |\n| x   |   1 |\n"
        );
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(472273), "472,273");
        assert_eq!(thousands(12345678), "12,345,678");
    }
}
