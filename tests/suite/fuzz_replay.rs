//! Every fuzz target's corpus (`fuzz/corpus/<target>/`) and regression inputs
//! (`fuzz/regressions/<target>/`) replayed through the same checks the fuzz targets call
//! (`tokentap::fuzzing`), on the stable toolchain: what the fuzzer found stays fixed.
#![allow(clippy::unwrap_used)]

use std::path::Path;

/// Run `check` on every file of `dir`; the files it fails on go to `failed`.
fn replay(dir: &Path, check: fn(&[u8]), failed: &mut Vec<String>) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let p = e.path();
        if !p.is_file() {
            continue;
        }
        let data = std::fs::read(&p).unwrap();
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            failed.push(p.display().to_string());
        }
        n += 1;
    }
    n
}

#[test]
fn every_corpus_and_regression_input_passes_its_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut failed = Vec::new();
    for (name, check) in tokentap::fuzzing::TARGETS {
        let seeds = replay(&root.join("corpus").join(name), *check, &mut failed);
        let found = replay(&root.join("regressions").join(name), *check, &mut failed);
        assert!(seeds > 0, "fuzz/corpus/{name}/ is empty");
        println!("{name}: {seeds} corpus inputs, {found} regressions");
    }
    assert!(failed.is_empty(), "failing their checks: {failed:#?}");
}

#[test]
fn every_target_has_its_fuzz_target_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
    for (name, _) in tokentap::fuzzing::TARGETS {
        let src = std::fs::read_to_string(root.join(format!("{name}.rs"))).unwrap();
        assert!(
            src.contains(&format!("tokentap::fuzzing::{name}(")),
            "fuzz/fuzz_targets/{name}.rs calls another check"
        );
    }
}
