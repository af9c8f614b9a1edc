//! Rendering comparisons: terminal table, Markdown, JSON (stable keys) or HTML, with the
//! report's table writers.

use super::tables::{lines, rows};
use super::Comparison;
use crate::report::view::grid::{md_table, text_table};
use crate::report::Format;

/// Render every comparison (BASE against each NEW) in one format.
pub fn render(all: &[Comparison], f: Format) -> String {
    match f {
        Format::Json => {
            let v = serde_json::json!({ "comparisons": all });
            serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
        }
        Format::Html => super::html::html(all),
        Format::Table | Format::Md => {
            let md = f == Format::Md;
            let mut s = String::new();
            for c in all {
                s += &if md {
                    format!("# tokentap compare: {} → {}\n\n", c.base, c.new)
                } else {
                    format!("tokentap compare: {} → {}\n\n", c.base, c.new)
                };
                for (title, ls) in lines(c) {
                    if md {
                        s += &format!("## {title}\n\n");
                        for l in ls {
                            s += &format!("- {}\n", l.replace('|', "\\|"));
                        }
                    } else {
                        s += &format!("{title}:\n");
                        for l in ls {
                            s += &format!("  {l}\n");
                        }
                    }
                    s.push('\n');
                }
                let (h, r) = rows(c);
                if md {
                    s += "## Per cell: NEW − BASE\n\n";
                    s += &md_table(&h, &r);
                } else {
                    s += "Per cell: NEW − BASE\n";
                    s += &text_table(&h, &r);
                }
                s.push('\n');
            }
            s
        }
    }
}
