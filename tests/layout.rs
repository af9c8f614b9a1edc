//! The house rules, checked: files a reader can hold, `main.rs` as clap glue, a README for users,
//! and modules layered with no cycle (each top-level module uses only the ones listed before
//! it). Adding a module means placing it in `LAYERS`.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules of `src/`, leaves first: each may use only modules before it.
const LAYERS: &[&str] = &[
    "stats", "sse", "openai", "keys", "headers", "tags", "meter", "spread", "config", "route",
    "tap", "tls", "sink", "proxy", "server", "reload", "admin", "cli", "check", "serve", "sim",
    "report", "bench", "compare", "demo", "fuzzing",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).unwrap().lines().count()
}

#[test]
fn files_a_reader_can_hold() {
    let mut files = Vec::new();
    for d in ["src", "benches"] {
        rust_files(&root().join(d), &mut files);
    }
    let mut sizes: Vec<usize> = Vec::new();
    for f in &files {
        let n = lines(f);
        assert!(n <= 600, "{}: {n} lines (at most 600)", f.display());
        sizes.push(n);
    }
    sizes.sort_unstable();
    let median = sizes[sizes.len() / 2];
    assert!(median < 300, "median file length {median} (under 300)");
    let main = lines(&root().join("src/main.rs"));
    assert!(
        main < 200,
        "src/main.rs: {main} lines (clap glue only, under 200)"
    );
    let readme = lines(&root().join("README.md"));
    assert!(readme <= 350, "README.md: {readme} lines (at most 350)");
}

#[test]
fn modules_are_layered_without_a_cycle() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let rank: BTreeMap<&str, usize> = LAYERS.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let src = root().join("src");
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = first.trim_end_matches(".rs").to_owned();
        if top == "main" || top == "lib" {
            continue;
        }
        let Some(&mine) = rank.get(top.as_str()) else {
            panic!("src/{first}: a top-level module missing from LAYERS in tests/layout.rs");
        };
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, _) in text.match_indices("crate::") {
            let used: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if used == top {
                continue;
            }
            let Some(&theirs) = rank.get(used.as_str()) else {
                continue; // an item of the crate root, e.g. a macro
            };
            assert!(
                theirs < mine,
                "{} uses crate::{used}, which is above `{top}` in the layers",
                f.display()
            );
        }
    }
}
