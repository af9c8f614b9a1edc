//! The house rules, checked: files a reader can hold, `main.rs` as clap glue, a README for users,
//! modules layered with no cycle (each top-level module uses only the ones listed before it),
//! the offline commands kept off the live path, no import cycle inside a folder, and functions a
//! reader can follow. Adding a module means placing it in `LAYERS`.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules of `src/`, leaves first: each may use only modules before it.
const LAYERS: &[&str] = &[
    "stats", "slo", "prom", "sse", "tokens", "openai", "keys", "headers", "tags", "rxstamp",
    "listen", "meter", "spread", "config", "route", "tap", "tls", "post", "export", "sink",
    "proxy", "server", "reload", "admin", "cli", "check", "serve", "sim", "report", "bench",
    "compare", "demo", "fuzzing",
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

/// The top-level names `text`'s crate paths use: `crate::x::…` and each item of a grouped
/// `crate::{x, y::z, …}` (nested groups included).
fn crate_uses(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + 7..];
        if let Some(group) = rest.strip_prefix('{') {
            // The group's items at depth 0, up to its closing brace.
            let (mut depth, mut start) = (0usize, 0usize);
            for (j, ch) in group.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.push(ident(&group[start..j]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident(&group[start..j]));
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident(rest));
        }
    }
    out.retain(|u| !u.is_empty());
    out
}

#[test]
fn grouped_crate_imports_are_seen() {
    let uses =
        crate_uses("use crate::{meter::{a, b}, sink,\n    proxy::x};\nlet _ = crate::stats::pct;");
    assert_eq!(uses, ["meter", "sink", "proxy", "stats"]);
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
            panic!("src/{first}: a top-level module missing from LAYERS in tests/suite/layout.rs");
        };
        let text = code_only(&std::fs::read_to_string(&f).unwrap());
        for used in crate_uses(&text) {
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

/// The top-level modules each top-level module's code names (`crate::x`; comments left out),
/// itself left out.
fn top_level_uses() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let src = root().join("src");
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str();
        let top = first.to_string_lossy().trim_end_matches(".rs").to_owned();
        let text = code_only(&std::fs::read_to_string(&f).unwrap());
        let entry = uses.entry(top.clone()).or_default();
        for used in crate_uses(&text) {
            if used != top && LAYERS.contains(&used.as_str()) {
                entry.insert(used);
            }
        }
    }
    uses
}

/// What a module never reaches, directly or through another module: the offline commands
/// never the live proxy's data path and sinks (report, bench, compare), nor the simulated
/// engine (bench and compare measure real ones); the meter (the record's definitions) never the
/// config or the sinks that carry its records; the sim (an engine stand-in) never what measures
/// it.
const NEVER_REACHES: &[(&str, &[&str])] = &[
    ("report", &["sink", "proxy"]),
    ("bench", &["sink", "proxy", "sim"]),
    ("compare", &["sink", "proxy", "sim", "server", "bench"]),
    ("meter", &["config", "sink"]),
    ("sim", &["proxy", "sink", "server", "report", "bench"]),
    // The batch exporter bench and the proxy's sinks share.
    ("export", &["sink", "proxy", "bench", "report", "server"]),
    // The SLO rule the report's verdicts and the proxy's per-request counts share: a leaf.
    (
        "slo",
        &[
            "report", "sink", "proxy", "config", "meter", "bench", "server", "stats",
        ],
    ),
];

#[test]
fn modules_never_reach_what_they_must_not() {
    let uses = top_level_uses();
    for (from, never) in NEVER_REACHES {
        // Breadth first from `from`, remembering how each module was reached.
        let mut via: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([from.to_string()]);
        while let Some(m) = queue.pop_front() {
            for u in uses.get(&m).into_iter().flatten() {
                if u != from && !via.contains_key(u) {
                    via.insert(u.clone(), m.clone());
                    queue.push_back(u.clone());
                }
            }
        }
        for n in *never {
            if via.contains_key(*n) {
                let mut path = vec![n.to_string()];
                while let Some(p) = via.get(path.last().unwrap()) {
                    path.push(p.clone());
                    if p == from {
                        break;
                    }
                }
                path.reverse();
                panic!("`{from}` reaches `{n}`: {}", path.join(" → "));
            }
        }
    }
}

/// Rules two sides share, each in a leaf both may reach: the file names nothing of the crate
/// outside its own module (no `crate::`, no `super::super::`), so neither side's module comes
/// with it. `meter/ending.rs` is how a request ended, for the proxy's exchange and bench's
/// client alike.
const SHARED_LEAVES: &[&str] = &["meter/ending.rs"];

#[test]
fn shared_rules_stay_leaves() {
    for leaf in SHARED_LEAVES {
        let text = std::fs::read_to_string(root().join("src").join(leaf)).unwrap();
        let code = without_tests(&code_only(&text));
        let uses = crate_uses(&code);
        assert!(
            uses.is_empty(),
            "src/{leaf} is a shared leaf, yet names crate::{uses:?}"
        );
        assert!(
            !code.contains("super::super"),
            "src/{leaf} is a shared leaf, yet reaches past its own module"
        );
    }
}

/// `text` with its comments, string and character literals blanked (newlines kept), so braces
/// and paths in them are not read as code.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]))))
            && matches!(next, Some('"') | Some('#'))
        {
            // A raw string: r"…", r#"…"#, br"…".
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            out.push(' ');
            let mut k = j + 1;
            while k < c.len() {
                if c[k] == '"' && (0..hashes).all(|h| c.get(k + 1 + h) == Some(&'#')) {
                    k += 1 + hashes;
                    break;
                }
                k += 1;
            }
            for ch in &c[i + 1..k.min(c.len())] {
                blank(&mut out, *ch);
            }
            i = k;
        } else if c[i] == '"' {
            out.push('"');
            i += 1;
            while i < c.len() && c[i] != '"' {
                let n = if c[i] == '\\' { 2 } else { 1 };
                for ch in &c[i..(i + n).min(c.len())] {
                    blank(&mut out, *ch);
                }
                i += n;
            }
            out.push('"');
            i += 1;
        } else if c[i] == '\'' {
            // A character literal ('x', '\n', '\u{1F600}'), else a lifetime or a label.
            let end = if next == Some('\\') {
                (i + 2..c.len()).find(|&k| c[k] == '\'')
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    out.push_str(&" ".repeat(e - i + 1));
                    i = e + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Where the `{` at `open` closes (byte offsets into code without literals or comments).
fn closing(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, b) in code.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// `code` without its `#[cfg(test)]` modules (private or not: a test module may lend its
/// fixtures to another's tests).
fn without_tests(code: &str) -> String {
    let mut out = code.to_owned();
    while let Some(i) = out.find("#[cfg(test)]") {
        let rest = &out[i..];
        let after = rest["#[cfg(test)]".len()..].trim_start();
        let at_mod = ["mod ", "pub mod ", "pub(crate) mod ", "pub(super) mod "]
            .iter()
            .any(|m| after.starts_with(m));
        let end = match (at_mod, rest.find('{'), rest.find(';')) {
            (true, Some(o), semi) if semi.is_none_or(|s| o < s) => {
                closing(out.as_bytes(), i + o) + 1
            }
            _ => i + "#[cfg(test)]".len(),
        };
        let blanked: String = out[i..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(i..end, &blanked);
    }
    out
}

/// A file's module path: `src/report/html/page.rs` → `report::html::page`; `mod.rs`, `lib.rs`
/// and `main.rs` name their folder.
fn module_path(src: &Path, f: &Path) -> Vec<String> {
    let rel = f.strip_prefix(src).unwrap();
    let mut m: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = m.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !(stem == "mod" || (m.is_empty() && (stem == "lib" || stem == "main"))) {
        m.push(stem.to_owned());
    }
    m
}

/// The path at `i` (after `crate::`, `self::` or `super::`, resolved into `base`), with its
/// `{…}` groups expanded, into `out`; where it ends.
fn read_path(
    code: &[u8],
    mut i: usize,
    mut base: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    loop {
        while i < code.len() && code[i].is_ascii_whitespace() {
            i += 1;
        }
        if code.get(i) == Some(&b'{') {
            i += 1;
            loop {
                i = read_path(code, i, base.clone(), out);
                // Past `as x` and the like, to the item's end.
                let mut depth = 0;
                while i < code.len() {
                    match code[i] {
                        b'{' => depth += 1,
                        b'}' if depth == 0 => break,
                        b'}' => depth -= 1,
                        b',' if depth == 0 => break,
                        _ => {}
                    }
                    i += 1;
                }
                if i >= code.len() || code[i] == b'}' {
                    return i + 1;
                }
                i += 1;
            }
        }
        let start = i;
        while i < code.len() && ident(code[i]) {
            i += 1;
        }
        let seg = String::from_utf8_lossy(&code[start..i]).into_owned();
        match seg.as_str() {
            "" => {
                out.push(base);
                return i;
            }
            "super" => {
                base.pop();
            }
            "self" => {}
            _ => base.push(seg),
        }
        if code[i..].starts_with(b"::") {
            i += 2;
        } else {
            out.push(base);
            return i;
        }
    }
}

/// The module paths a file names (`crate::…`, `self::…`, `super::…`, groups expanded), tests
/// left out.
fn paths_named(text: &str, me: &[String]) -> Vec<Vec<String>> {
    let code = without_tests(&code_only(text));
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (kw, base) in [
        ("crate::", Vec::new()),
        ("self::", me.to_vec()),
        ("super::", me[..me.len().saturating_sub(1)].to_vec()),
    ] {
        for (i, _) in code.match_indices(kw) {
            let prev = i.checked_sub(1).map(|p| b[p]);
            if prev.is_some_and(|p| p.is_ascii_alphanumeric() || p == b'_' || p == b':') {
                continue;
            }
            read_path(b, i + kw.len(), base.clone(), &mut out);
        }
    }
    out
}

/// Import cycles between the files of one folder that are allowed, each `folder: a, b, …` (the
/// cycle's modules, sorted): none. An entry that no longer holds fails the test, so the list
/// can only shrink.
const KNOWN_FOLDER_CYCLES: &[&str] = &[];

#[test]
fn no_import_cycle_inside_a_folder() {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    let mut named = Vec::new();
    for f in &files {
        let me = module_path(&src, f);
        for d in 0..me.len() {
            children
                .entry(me[..d].to_vec())
                .or_default()
                .insert(me[d].clone());
        }
        named.push((
            me.clone(),
            paths_named(&std::fs::read_to_string(f).unwrap(), &me),
        ));
    }
    // folder → module → the sibling modules it names.
    let mut edges: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (me, paths) in &named {
        for d in 0..me.len() {
            let (folder, mine) = (&me[..d], &me[d]);
            for p in paths {
                if p.len() > d
                    && p[..d] == *folder
                    && p[d] != *mine
                    && children[folder].contains(&p[d])
                {
                    edges
                        .entry(folder.to_vec())
                        .or_default()
                        .entry(mine.clone())
                        .or_default()
                        .insert(p[d].clone());
                }
            }
        }
    }
    let mut found = BTreeSet::new();
    for (folder, graph) in &edges {
        let reach = |from: &String| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![from.clone()];
            while let Some(m) = stack.pop() {
                for n in graph.get(&m).into_iter().flatten() {
                    if seen.insert(n.clone()) {
                        stack.push(n.clone());
                    }
                }
            }
            seen
        };
        let reaches: BTreeMap<&String, BTreeSet<String>> =
            graph.keys().map(|m| (m, reach(m))).collect();
        for (m, r) in &reaches {
            let cycle: Vec<&str> = reaches
                .iter()
                .filter(|(n, rn)| r.contains(**n) && rn.contains(*m))
                .map(|(n, _)| n.as_str())
                .collect();
            if cycle.len() > 1 {
                found.insert(format!("src/{}: {}", folder.join("/"), cycle.join(", ")));
            }
        }
    }
    let known: BTreeSet<String> = KNOWN_FOLDER_CYCLES.iter().map(|s| s.to_string()).collect();
    let new: Vec<&String> = found.difference(&known).collect();
    let gone: Vec<&String> = known.difference(&found).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "import cycles inside a folder — new: {new:?}; listed in KNOWN_FOLDER_CYCLES but gone \
         (remove them): {gone:?}"
    );
}

/// Every `fn` with a body in `src/`, tests left out: (file: name, lines from `fn` to its
/// closing brace).
fn function_lengths() -> Vec<(String, usize)> {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let code = without_tests(&code_only(&std::fs::read_to_string(&f).unwrap()));
        let b = code.as_bytes();
        let line_of = |i: usize| b[..i].iter().filter(|&&c| c == b'\n').count();
        for (i, _) in code.match_indices("fn ") {
            if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
                continue;
            }
            let name: String = code[i + 3..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                continue; // a `fn(…)` type, or a macro's `fn $name`
            }
            // The body's `{`, unless a `;` ends a declaration first.
            let mut depth = 0i32;
            let mut open = None;
            for (k, c) in b.iter().enumerate().skip(i) {
                match c {
                    b'(' | b'[' => depth += 1,
                    b')' | b']' => depth -= 1,
                    b';' if depth == 0 => break,
                    b'{' if depth == 0 => {
                        open = Some(k);
                        break;
                    }
                    _ => {}
                }
            }
            let Some(open) = open else { continue };
            let lines = line_of(closing(b, open)) - line_of(i) + 1;
            let rel = f.strip_prefix(root()).unwrap().display().to_string();
            out.push((format!("{rel}: {name}"), lines));
        }
    }
    out
}

/// Functions over 100 lines allowed today, each at its length now: none may grow, and an entry
/// whose function is 100 lines or fewer (or gone) fails the test, so the list only shrinks.
/// The rule it shrinks towards: at most 5 functions over 100 lines, none over 150.
const LONG_FUNCTIONS: &[(&str, usize)] = &[];

#[test]
fn functions_a_reader_can_follow() {
    let all = function_lengths();
    let long: Vec<&(String, usize)> = all.iter().filter(|(_, n)| *n > 100).collect();
    let mut wrong = Vec::new();
    for (name, max) in LONG_FUNCTIONS {
        let now: Vec<usize> = all
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, l)| *l)
            .collect();
        match now.iter().max() {
            None => wrong.push(format!("{name}: gone; remove it from LONG_FUNCTIONS")),
            Some(&l) if l <= 100 => wrong.push(format!(
                "{name}: {l} lines now; remove it from LONG_FUNCTIONS"
            )),
            Some(&l) if l > *max => wrong.push(format!("{name}: {l} lines, {max} allowed")),
            Some(_) => {}
        }
    }
    let listed = |n: &String| LONG_FUNCTIONS.iter().any(|(l, _)| l == n);
    let unlisted: Vec<&&(String, usize)> = long.iter().filter(|(n, _)| !listed(n)).collect();
    for (name, l) in &unlisted {
        if *l > 150 || long.len() > 5 {
            wrong.push(format!(
                "{name}: {l} lines (at most 5 functions over 100, none over 150)"
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// Output goes through `cli::out` (`outln!`), which ends quietly on a closed stdout
/// (`report … | head`); `print!` and `println!` panic there.
#[test]
fn output_goes_through_one_door() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut bad = Vec::new();
    for f in &files {
        if f.ends_with("src/cli.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for m in ["println!(", "print!("] {
                let hit = code.match_indices(m).any(|(at, _)| {
                    let before = code[..at].chars().last();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if hit {
                    bad.push(format!("{}:{}", f.display(), i + 1));
                }
            }
        }
    }
    assert!(bad.is_empty(), "print!/println! outside cli.rs: {bad:?}");
}

/// Every file of a test binary's folder is one of its modules (a file left out would silently
/// never run), and CONTRIBUTING.md's test list names every test file.
#[test]
fn every_test_file_runs_and_is_described() {
    let contributing = std::fs::read_to_string(root().join("CONTRIBUTING.md")).unwrap();
    for bin in ["suite", "environment", "memory"] {
        let dir = root().join("tests").join(bin);
        let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(module) = name.strip_suffix(".rs").filter(|m| *m != "main") else {
                continue;
            };
            assert!(
                main.lines().any(|l| l.trim() == format!("mod {module};")),
                "tests/{bin}/{name} is not a module of tests/{bin}/main.rs: it never runs"
            );
            assert!(
                contributing.contains(&format!("tests/{bin}/{name}")),
                "CONTRIBUTING.md's test list does not name tests/{bin}/{name}"
            );
        }
    }
}
