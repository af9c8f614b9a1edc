//! Reading records: every `*.jsonl*` file below the paths given, line by line. Lenient: a field
//! the schema gained later (or the report does not need) may be missing and takes its default;
//! a line that is not a record is skipped and counted, and the skips are reported grouped by
//! reason with the first place each was seen. A last line without its newline (a log being
//! written) is not read and not warned about. No readable record at all is an error.
//!
//! A file whose name ends in `.gz` (a log rotated and compressed by logrotate or a log shipper)
//! is decompressed as it is read, every gzip member of it in turn. A compressed file cut short
//! (still being written) is read up to its last whole line, with a warning that names it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ReportError;
use crate::meter::RequestRecord;

/// Why a line was skipped: serde's message without its position, or a kind of garbage.
fn reason(line: &[u8], e: &serde_json::Error) -> String {
    if !line.trim_ascii_start().starts_with(b"{") {
        return "not a JSON object".into();
    }
    let m = e.to_string();
    match m.find(" at line ") {
        Some(i) => m[..i].to_owned(),
        None => m,
    }
}

/// Read records from files and folders (every `*.jsonl*` file below a folder, sorted). Skipped
/// lines are reported on `warn`, one line per reason.
pub fn load(
    paths: &[PathBuf],
    warn: &mut dyn FnMut(String),
) -> Result<Vec<RequestRecord>, ReportError> {
    let mut files = Vec::new();
    for p in paths {
        collect(p, &mut files)?;
    }
    files.sort();
    let names = || {
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if files.is_empty() {
        return Err(ReportError::Empty(names()));
    }
    let mut out = Vec::new();
    // Reason → (lines, first file:line).
    let mut skipped: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for f in files {
        let bytes = read_file(&f, warn)?;
        // Whole lines only: what follows the last newline is still being written.
        let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
            continue;
        };
        for (i, line) in bytes[..end].split(|b| *b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let why = if line.trim_ascii().is_empty() {
                Some("empty line".to_owned())
            } else {
                match serde_json::from_slice::<RequestRecord>(line) {
                    Ok(r) => {
                        out.push(r);
                        None
                    }
                    Err(e) => Some(reason(line, &e)),
                }
            };
            if let Some(why) = why {
                let e = skipped
                    .entry(why)
                    .or_insert_with(|| (0, format!("{}:{}", f.display(), i + 1)));
                e.0 += 1;
            }
        }
    }
    for (why, (n, first)) in &skipped {
        let lines = if *n == 1 { "line" } else { "lines" };
        warn(format!(
            "{} {lines} skipped: {why}; first at {first}",
            grouped(*n)
        ));
    }
    if out.is_empty() {
        let total: usize = skipped.values().map(|v| v.0).sum();
        return Err(ReportError::NoRecords {
            paths: names(),
            skipped: if total == 0 {
                String::new()
            } else {
                format!(" ({} lines skipped: see the warnings)", grouped(total))
            },
        });
    }
    Ok(out)
}

/// A file's bytes, decompressed when its name ends in `.gz`.
fn read_file(f: &Path, warn: &mut dyn FnMut(String)) -> Result<Vec<u8>, ReportError> {
    use std::io::Read;
    let io = |source| ReportError::Io {
        path: f.display().to_string(),
        source,
    };
    let raw = std::fs::read(f).map_err(io)?;
    if f.extension().is_none_or(|e| e != "gz") {
        return Ok(raw);
    }
    // JSONL compresses about 5-10x; the guess only saves reallocations.
    let mut out = Vec::with_capacity(raw.len().saturating_mul(6).min(1 << 30));
    let mut gz = flate2::read::MultiGzDecoder::new(&raw[..]);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match gz.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => {
                // Still being written, or damaged: what came out before is kept (the caller
                // drops a cut last line).
                warn(format!(
                    "{}: the compressed data ends early or is damaged ({e}); read up to there",
                    f.display()
                ));
                break;
            }
        }
    }
    Ok(out)
}

/// `37112` → `37,112`.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn collect(p: &Path, files: &mut Vec<PathBuf>) -> Result<(), ReportError> {
    let meta = std::fs::metadata(p).map_err(|source| ReportError::Io {
        path: p.display().to_string(),
        source,
    })?;
    if meta.is_file() {
        files.push(p.to_owned());
        return Ok(());
    }
    let rd = std::fs::read_dir(p).map_err(|source| ReportError::Io {
        path: p.display().to_string(),
        source,
    })?;
    for e in rd.flatten() {
        let path = e.path();
        if path.is_dir() {
            collect(&path, files)?;
        } else if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains(".jsonl"))
        {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(super::grouped(7), "7");
        assert_eq!(super::grouped(37_112), "37,112");
        assert_eq!(super::grouped(1_000_000), "1,000,000");
    }
}
