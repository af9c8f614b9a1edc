//! A distributed bench run read as one (docs/bench.md "One run from many processes"): each
//! shard's folder holds a `run.json` with its `run_id`, `shard` and `shards`. Records of every
//! shard merge into one run; percentiles are then exact over the union, and each cell's level
//! is already the fleet's (every shard records the cell's whole level). A set of folders that is
//! not one whole run (shards of different runs, a shard missing or given twice) is refused,
//! naming what is wrong, unless `--allow-partial`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::model::Distributed;

/// What a `run.json` says of its shard.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ShardFile {
    run_id: Option<String>,
    shard: Option<u32>,
    shards: Option<u32>,
}

/// One shard's `run.json`: (run id, shard, of).
type Shard = (String, u32, u32);

fn read(f: &Path) -> Option<Shard> {
    let text = std::fs::read_to_string(f).ok()?;
    let s: ShardFile = serde_json::from_str(&text).ok()?;
    match (s.run_id, s.shard, s.shards) {
        (Some(id), Some(i), Some(n)) if n > 1 => Some((id, i, n)),
        _ => None,
    }
}

/// What is wrong with a set of shard files, if anything.
fn fault(found: &[(Shard, PathBuf)]) -> Option<String> {
    let mut runs: BTreeMap<&str, Vec<(u32, u32, &Path)>> = BTreeMap::new();
    for ((id, i, n), f) in found {
        runs.entry(id).or_default().push((*i, *n, f));
    }
    if runs.len() > 1 {
        let each: Vec<String> = runs
            .iter()
            .map(|(id, v)| {
                let list: Vec<String> = v.iter().map(|(i, n, _)| format!("{i}/{n}")).collect();
                format!("{id} (shards {})", list.join(", "))
            })
            .collect();
        return Some(format!("shards of different runs: {}", each.join("; ")));
    }
    let (id, v) = runs.into_iter().next()?;
    let n = v[0].1;
    if let Some((i, m, f)) = v.iter().find(|s| s.1 != n) {
        return Some(format!(
            "run {id}: {} says shard {i} of {m}, another of {n}",
            f.display()
        ));
    }
    let mut seen: BTreeMap<u32, &Path> = BTreeMap::new();
    for (i, _, f) in &v {
        if let Some(first) = seen.insert(*i, f) {
            return Some(format!(
                "run {id}: shard {i} of {n} given twice ({} and {})",
                first.display(),
                f.display()
            ));
        }
    }
    let missing: Vec<String> = (1..=n)
        .filter(|i| !seen.contains_key(i))
        .map(|i| i.to_string())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "run {id}: shard {} of {n} missing (read {} of {n})",
            missing.join(", "),
            seen.len()
        )
    })
}

/// The distributed run below `paths`, if their `run.json` files say there is one. Err: why the
/// set is not one whole run (then the report stops unless `allow_partial`).
pub fn check(paths: &[PathBuf], allow_partial: bool) -> Result<Option<Distributed>, String> {
    let found: Vec<(Shard, PathBuf)> = super::engine::run_json_paths(paths)
        .into_iter()
        .filter_map(|f| read(&f).map(|s| (s, f)))
        .collect();
    whole(found, allow_partial)
}

/// The run the shards make up, or why they are not one whole run.
fn whole(found: Vec<(Shard, PathBuf)>, allow_partial: bool) -> Result<Option<Distributed>, String> {
    let Some(((id, _, n), _)) = found.first() else {
        return Ok(None);
    };
    let (id, n) = (id.clone(), *n);
    let partial = fault(&found);
    if let Some(why) = &partial {
        if !allow_partial {
            return Err(format!(
                "{why}; give every shard's folder (or their parent), or --allow-partial to \
                 report what is there"
            ));
        }
    }
    let mut present: Vec<u32> = found.iter().map(|((_, i, _), _)| *i).collect();
    present.sort_unstable();
    present.dedup();
    Ok(Some(Distributed {
        run_id: id,
        shards: n,
        present,
        partial,
    }))
}

/// A row of the `shards` query: (shard, N, records).
pub(super) fn row(r: &super::answer::Row) -> (u32, u32, usize) {
    let n = |k| super::answer::int(r, k).and_then(|v| u32::try_from(v).ok());
    let records = super::answer::count(r, "records");
    (n("shard").unwrap_or(0), n("shards").unwrap_or(0), records)
}

/// The distributed run of `report --clickhouse --run-id ID`, from its rows' (shard, N,
/// records): a run without shard numbers is one process's.
pub fn of_rows(
    id: &str,
    rows: &[(u32, u32, usize)],
    allow_partial: bool,
) -> Result<Option<Distributed>, String> {
    let found: Vec<(Shard, PathBuf)> = rows
        .iter()
        .filter(|(i, n, _)| *i > 0 && *n > 1)
        .map(|(i, n, _)| ((id.to_owned(), *i, *n), PathBuf::from(format!("shard {i}"))))
        .collect();
    whole(found, allow_partial)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, i: u32, n: u32) -> (Shard, PathBuf) {
        (
            (id.into(), i, n),
            PathBuf::from(format!("{id}/shard-{i}-of-{n}/run.json")),
        )
    }

    #[test]
    fn a_whole_run_passes_and_every_fault_is_named() {
        let whole: Vec<_> = (1..=4).map(|i| shard("r1", i, 4)).collect();
        assert_eq!(fault(&whole), None);
        let missing: Vec<_> = [1, 2, 4].iter().map(|i| shard("r1", *i, 4)).collect();
        assert_eq!(
            fault(&missing).as_deref(),
            Some("run r1: shard 3 of 4 missing (read 3 of 4)")
        );
        let mixed = vec![shard("r1", 1, 2), shard("r2", 2, 2)];
        assert_eq!(
            fault(&mixed).as_deref(),
            Some("shards of different runs: r1 (shards 1/2); r2 (shards 2/2)")
        );
        let twice = vec![shard("r1", 1, 2), shard("r1", 1, 2), shard("r1", 2, 2)];
        assert!(fault(&twice).unwrap().contains("shard 1 of 2 given twice"));
        let odd = vec![shard("r1", 1, 2), shard("r1", 2, 3)];
        assert!(fault(&odd).unwrap().contains("another of 2"));
    }
}
