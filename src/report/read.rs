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

/// Read records from files and folders (every `*.jsonl*` file below a folder, sorted) into
/// memory. Skipped lines are reported on `warn`, one line per reason.
pub fn load(
    paths: &[PathBuf],
    warn: &mut dyn FnMut(String),
) -> Result<Vec<RequestRecord>, ReportError> {
    let mut out = Vec::new();
    scan(paths, warn, &mut |line| {
        out.push(serde_json::from_slice::<RequestRecord>(line)?);
        Ok(())
    })?;
    Ok(out)
}

/// Stream records from files and folders into a report being read, line by line: only the
/// fields the report uses are parsed, and nothing of a line is kept but its figures.
/// `tap_only` records feed the gateway-tap section alone. Returns the records read.
pub fn stream(
    paths: &[PathBuf],
    warn: &mut dyn FnMut(String),
    acc: &mut super::Acc,
    tap_only: bool,
) -> Result<usize, ReportError> {
    let mut fast = super::fast::Fast::default();
    scan(paths, warn, &mut |line| {
        let row = match fast.row(line) {
            Some(r) => r,
            None => serde_json::from_slice::<super::row::Row<'_>>(line)?,
        };
        if tap_only {
            acc.add_tap_only(&row);
        } else {
            acc.add(&row);
        }
        Ok(())
    })
}

/// Every whole line of every file, in order, handed to `on_line`; lines it cannot read are
/// skipped and reported grouped by reason. No line read at all is an error. (`bench --replay`
/// reads its logs with it too.)
pub(crate) fn scan(
    paths: &[PathBuf],
    warn: &mut dyn FnMut(String),
    on_line: &mut dyn FnMut(&[u8]) -> Result<(), serde_json::Error>,
) -> Result<usize, ReportError> {
    use std::io::BufRead;
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
    let mut read = 0usize;
    // Reason → (lines, first file:line).
    let mut skipped: BTreeMap<String, (usize, String)> = BTreeMap::new();
    // A line that runs past the end of the reader's buffer is put together here.
    let mut carry: Vec<u8> = Vec::new();
    for f in files {
        let mut input = open(&f)?;
        let mut n = 0usize;
        carry.clear();
        let mut line = |line: &[u8], n: &mut usize| {
            *n += 1;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let why = if line.trim_ascii().is_empty() {
                Some("empty line".to_owned())
            } else {
                match on_line(line) {
                    Ok(()) => {
                        read += 1;
                        None
                    }
                    Err(e) => Some(reason(line, &e)),
                }
            };
            if let Some(why) = why {
                let e = skipped
                    .entry(why)
                    .or_insert_with(|| (0, format!("{}:{n}", f.display())));
                e.0 += 1;
            }
        };
        loop {
            let chunk = match input.fill_buf() {
                Ok([]) => break,
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if is_gz(&f) => {
                    // Still being written, or damaged: what came out before is kept, and the
                    // cut line is dropped.
                    warn(format!(
                        "{}: the compressed data ends early or is damaged ({e}); read up to there",
                        f.display()
                    ));
                    break;
                }
                Err(source) => {
                    return Err(ReportError::Io {
                        path: f.display().to_string(),
                        source,
                    })
                }
            };
            let len = chunk.len();
            let mut start = 0;
            for end in memchr::memchr_iter(b'\n', chunk) {
                if carry.is_empty() {
                    line(&chunk[start..end], &mut n);
                } else {
                    carry.extend_from_slice(&chunk[start..end]);
                    line(&carry, &mut n);
                    carry.clear();
                }
                start = end + 1;
            }
            carry.extend_from_slice(&chunk[start..]);
            input.consume(len);
        }
        // What follows the last newline is still being written: not read, not a warning.
    }
    for (why, (n, first)) in &skipped {
        let lines = if *n == 1 { "line" } else { "lines" };
        warn(format!(
            "{} {lines} skipped: {why}; first at {first}",
            grouped(*n)
        ));
    }
    if read == 0 {
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
    Ok(read)
}

fn is_gz(f: &Path) -> bool {
    f.extension().is_some_and(|e| e == "gz")
}

/// A file's lines, decompressed when its name ends in `.gz` (every gzip member in turn).
fn open(f: &Path) -> Result<Box<dyn std::io::BufRead>, ReportError> {
    let file = std::fs::File::open(f).map_err(|source| ReportError::Io {
        path: f.display().to_string(),
        source,
    })?;
    const BUF: usize = 1 << 17;
    Ok(if is_gz(f) {
        Box::new(std::io::BufReader::with_capacity(
            BUF,
            flate2::bufread::MultiGzDecoder::new(Aligned::new(file, BUF)),
        ))
    } else {
        Box::new(Aligned::new(file, BUF))
    })
}

/// A buffered reader whose buffer starts on a page boundary. The kernel's copy of a read into
/// a buffer that does not start on a cache line is several times slower (`rep movsb` on x86),
/// and a buffer from the allocator starts 16 bytes past one: reading a 1.33 GB log from the
/// page cache took 0.77 s of system time into such a buffer and 0.13 s into an aligned one.
/// For a cached log that copy is nearly all the time the report spends in the kernel.
struct Aligned<R> {
    inner: R,
    raw: Vec<u8>,
    /// Where the aligned buffer starts in `raw`.
    start: usize,
    pos: usize,
    filled: usize,
}

const PAGE: usize = 4096;

impl<R: std::io::Read> Aligned<R> {
    fn new(inner: R, capacity: usize) -> Self {
        let raw = vec![0u8; capacity + PAGE];
        let start = (PAGE - raw.as_ptr() as usize % PAGE) % PAGE;
        Self {
            inner,
            raw,
            start,
            pos: 0,
            filled: 0,
        }
    }
}

impl<R: std::io::Read> std::io::Read for Aligned<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = {
            let have = std::io::BufRead::fill_buf(self)?;
            let n = have.len().min(out.len());
            out[..n].copy_from_slice(&have[..n]);
            n
        };
        std::io::BufRead::consume(self, n);
        Ok(n)
    }
}

impl<R: std::io::Read> std::io::BufRead for Aligned<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.pos >= self.filled {
            let end = self.raw.len() - PAGE + self.start;
            self.filled = self.inner.read(&mut self.raw[self.start..end])?;
            self.pos = 0;
        }
        Ok(&self.raw[self.start + self.pos..self.start + self.filled])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.filled);
    }
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

    #[test]
    fn the_read_buffer_starts_on_a_page_and_loses_nothing() {
        use std::io::{BufRead, Read};
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut r = super::Aligned::new(&data[..], 4096 + 7);
        let first = r.fill_buf().unwrap();
        assert_eq!(first.as_ptr() as usize % 4096, 0);
        assert_eq!(first.len(), 4096 + 7);
        r.consume(100);
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, data[100..]);
    }
}
