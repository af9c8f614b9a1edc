//! The proxy's stages as `src/proxy/stack.rs` names them: its comment lists every stage, in the
//! order of the `Stack` type, each with the file that holds the stage's type and its `Service`;
//! every service over the pipeline's requests (`Arrival`, `Routed`) in `src/proxy` is one of
//! them; and no other type in `src/` has a stage's name. So the comment, the type and the files
//! cannot drift apart again.

use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// A file of `src/proxy`, if there is one of that name.
fn proxy_file(name: &str) -> Option<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/proxy");
    std::fs::read_to_string(dir.join(name)).ok()
}

/// The stages the `text` block of `stack`'s module comment lists: (name, file), in order. A
/// stage's line starts at the block's margin with its name and then its file; the lines that
/// continue its description are indented.
fn listed(stack: &str) -> Vec<(String, String)> {
    let doc: Vec<&str> = stack
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let open = doc.iter().position(|l| l.trim() == "```text").unwrap();
    let close = open
        + 1
        + doc[open + 1..]
            .iter()
            .position(|l| l.trim() == "```")
            .unwrap();
    doc[open + 1..close]
        .iter()
        .filter(|l| !l.starts_with(' '))
        .map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next().unwrap().to_owned();
            let file = w.next().unwrap_or("").to_owned();
            (name, file)
        })
        .collect()
}

/// The stages of `pub type Stack = A<B<…<Z>>>;`, outermost first.
fn composed(stack: &str) -> Vec<String> {
    let at = stack.find("pub type Stack =").unwrap();
    let decl = &stack[at + "pub type Stack =".len()..];
    let decl = &decl[..decl.find(';').unwrap()];
    decl.split(['<', '>'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The types a file implements a pipeline `Service` for (over `Arrival` or `Routed`).
fn services(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if !l.starts_with("impl") {
            continue;
        }
        // An impl's head may run over lines (`where` clauses): up to its `{`.
        let mut head = l.to_owned();
        while !head.contains('{') {
            match lines.next() {
                Some(n) => head.push_str(n),
                None => break,
            }
        }
        let pipeline = ["Service<Arrival> for ", "Service<Routed> for "];
        for p in pipeline {
            if let Some(at) = head.find(p) {
                let ty: String = head[at + p.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push(ty);
            }
        }
    }
    out
}

/// What is wrong with `stack` (stack.rs's text) against `file(name)` (a proxy file's text).
fn wrong(stack: &str, file: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut bad = Vec::new();
    let stages = listed(stack);
    let names: Vec<String> = stages.iter().map(|(n, _)| n.clone()).collect();
    let types = composed(stack);
    if names != types {
        bad.push(format!(
            "stack.rs's comment lists {names:?}, its Stack type is {types:?}"
        ));
    }
    for (name, f) in &stages {
        let Some(text) = file(f) else {
            bad.push(format!("{name}: its file `{f}` is not in src/proxy"));
            continue;
        };
        let defines = [format!("pub struct {name}<"), format!("pub struct {name} ")];
        if !defines.iter().any(|d| text.contains(d.as_str())) {
            bad.push(format!("{name}: {f} does not define it"));
        }
        if !services(&text).contains(name) {
            bad.push(format!("{name}: {f} does not hold its Service"));
        }
    }
    bad
}

#[test]
fn the_pipeline_comment_lists_every_stage_in_order_with_its_file() {
    let stack = read("src/proxy/stack.rs");
    let bad = wrong(&stack, &proxy_file);
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(
        composed(&stack),
        [
            "RouteHeader",
            "Routing",
            "Admission",
            "Deadlines",
            "Forward"
        ]
    );
}

#[test]
fn a_stage_renamed_in_the_comment_alone_is_caught() {
    let stack = read("src/proxy/stack.rs");
    let drifted = stack.replacen(
        "//! Deadlines     deadlines.rs",
        "//! Timeouts      deadlines.rs",
        1,
    );
    assert_ne!(drifted, stack, "the test's edit no longer applies");
    let bad = wrong(&drifted, &proxy_file);
    assert!(bad.iter().any(|b| b.contains("Stack type")), "{bad:#?}");
    assert!(
        bad.iter()
            .any(|b| b.starts_with("Timeouts: deadlines.rs does not define it")),
        "{bad:#?}"
    );
    let moved = stack.replacen(
        "//! Admission     admission.rs",
        "//! Admission     routing.rs  ",
        1,
    );
    assert_ne!(moved, stack, "the test's edit no longer applies");
    let bad = wrong(&moved, &proxy_file);
    assert!(
        bad.iter().any(|b| b.starts_with("Admission: routing.rs")),
        "{bad:#?}"
    );
}

#[test]
fn every_pipeline_service_is_a_listed_stage() {
    let stack = read("src/proxy/stack.rs");
    let listed: Vec<(String, String)> = listed(&stack);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/proxy");
    let mut found = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".rs") {
            continue;
        }
        for ty in services(&std::fs::read_to_string(e.path()).unwrap()) {
            found.push((ty, name.clone()));
        }
    }
    found.sort();
    let mut want = listed.clone();
    want.sort();
    assert_eq!(
        found, want,
        "the pipeline's services (type, file) against stack.rs's comment"
    );
}

#[test]
fn no_other_type_has_a_stage_name() {
    let stack = read("src/proxy/stack.rs");
    let mut files = Vec::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    for (name, _) in listed(&stack) {
        let mut defined = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for kind in ["struct", "enum", "type", "trait"] {
                for end in ['<', ' ', ';', '('] {
                    if text.contains(&format!("{kind} {name}{end}")) {
                        defined.push(format!("{}: {kind}", f.display()));
                    }
                }
            }
        }
        assert_eq!(defined.len(), 1, "{name} is defined as: {defined:?}");
    }
}
