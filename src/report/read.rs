//! Reading records: every `*.jsonl*` file below the paths given (but bench's `scrape.jsonl`), line
//! by line. Lenient: a field the schema gained later (or the report does not need) may be missing
//! and takes its default; a line that is not a record is skipped and counted, and the skips are
//! reported grouped by reason with the first place each was seen. A last line without its newline
//! (a log being written) is not read and not warned about. No readable record at all is an error.
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

/// bench's raw scrape samples (`scrape.jsonl`): beside the records in a bench folder, not
/// records themselves, so a folder's reading leaves them out.
pub const SCRAPE_FILE: &str = "scrape.jsonl";

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
/// `tap_only` records feed the gateway-tap section alone; a record outside `window` (`--since`,
/// `--until`) feeds nothing and is counted there. Returns the records read.
pub fn stream(
    paths: &[PathBuf],
    warn: &mut dyn FnMut(String),
    acc: &mut super::Acc,
    tap_only: bool,
    mut window: Option<&mut super::model::Window>,
) -> Result<usize, ReportError> {
    let mut fast = super::fast::Fast::default();
    scan(paths, warn, &mut |line| {
        let row = match fast.row(line) {
            Some(r) => r,
            None => serde_json::from_slice::<super::row::Row<'_>>(line)?,
        };
        if let Some(w) = window.as_deref_mut() {
            if !w.holds(row.ts.as_str()) {
                w.outside += 1;
                return Ok(());
            }
        }
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
        let file = std::fs::File::open(&f).map_err(|source| ReportError::Io {
            path: f.display().to_string(),
            source,
        })?;
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
        let done = chunks(file, is_gz(&f), &mut |chunk| {
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
        });
        match done {
            Ok(()) => {}
            // Still being written, or damaged: what came out before is kept, and the cut line
            // is dropped.
            Err(e) if is_gz(&f) => warn(format!(
                "{}: the compressed data ends early or is damaged ({e}); read up to there",
                f.display()
            )),
            Err(source) => {
                return Err(ReportError::Io {
                    path: f.display().to_string(),
                    source,
                })
            }
        }
        // What follows the last newline is still being written: not read, not a warning.
    }
    tally(&skipped, read, &names, warn)
}

/// The skipped lines said once per reason; no line read at all is an error.
fn tally(
    skipped: &BTreeMap<String, (usize, String)>,
    read: usize,
    names: &dyn Fn() -> String,
    warn: &mut dyn FnMut(String),
) -> Result<usize, ReportError> {
    for (why, (n, first)) in skipped {
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

/// Bytes handed over at a time; how many decompressed chunks may wait to be parsed.
const CHUNK: usize = 1 << 18;
const AHEAD: usize = 2;

/// A file's bytes (decompressed, every gzip member in turn, when `gz`), handed to `each` in
/// chunks. An error ends the file: what came before it has been handed over.
///
/// A plain file is read on this thread. A compressed one is decompressed on a thread of its
/// own, so decompression overlaps with parsing on a second core: on 1 M records (1.33 GB, 213
/// MB gzipped) that took the report from 4.7 s to 3.1 s, for 0.7 s more CPU. A reader thread for
/// plain files as well cost more CPU (the parser reads what another core wrote) than the
/// kernel's copy it moved away saved in time, so it has none.
fn chunks(file: std::fs::File, gz: bool, each: &mut dyn FnMut(&[u8])) -> std::io::Result<()> {
    if !gz {
        let mut input = file;
        let mut block = Block::new(CHUNK);
        loop {
            let end = block.fill(&mut input);
            each(block.bytes());
            match end {
                None => {}
                Some(end) => return end,
            }
        }
    }
    std::thread::scope(|s| {
        let (full, filled) = std::sync::mpsc::sync_channel::<std::io::Result<Block>>(AHEAD);
        let (free, emptied) = std::sync::mpsc::channel::<Block>();
        // Each block comes back once parsed: AHEAD + 2 go round.
        for _ in 0..AHEAD + 2 {
            let _ = free.send(Block::new(CHUNK));
        }
        s.spawn(move || {
            let mut input = flate2::bufread::MultiGzDecoder::new(Aligned::new(file, 1 << 17));
            // A closed channel: the parser stopped early, and so does this thread.
            while let Ok(mut block) = emptied.recv() {
                let end = block.fill(&mut input);
                if !block.bytes().is_empty() && full.send(Ok(block)).is_err() {
                    return;
                }
                match end {
                    None => {}
                    Some(Ok(())) => return,
                    Some(Err(e)) => {
                        let _ = full.send(Err(e));
                        return;
                    }
                }
            }
        });
        for block in filled {
            let block = block?;
            each(block.bytes());
            let _ = free.send(block);
        }
        Ok(())
    })
}

/// A buffer that starts on a page boundary. The kernel's copy of a read into a buffer that
/// does not start on a cache line is several times slower (`rep movsb` on x86), and a buffer
/// from the allocator starts 16 bytes past one: reading a 1.33 GB log from the page cache took
/// 0.77 s of system time into such a buffer and 0.13 s into an aligned one. For a cached log
/// that copy is nearly all the time the report spends in the kernel.
struct Block {
    raw: Vec<u8>,
    /// Where the aligned buffer starts in `raw`.
    start: usize,
    /// Bytes in it.
    len: usize,
}

const PAGE: usize = 4096;

impl Block {
    fn new(capacity: usize) -> Block {
        let raw = vec![0u8; capacity + PAGE];
        let start = (PAGE - raw.as_ptr() as usize % PAGE) % PAGE;
        Block { raw, start, len: 0 }
    }

    fn bytes(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }

    /// Empty it, then read into it until it is at least half full (a decoder hands out a
    /// little at a time). `None`: there is more; `Some`: the input ended, or failed.
    fn fill(&mut self, input: &mut dyn std::io::Read) -> Option<std::io::Result<()>> {
        let cap = self.raw.len() - PAGE;
        self.len = 0;
        while self.len < cap / 2 {
            match input.read(&mut self.raw[self.start + self.len..self.start + cap]) {
                Ok(0) => return Some(Ok(())),
                Ok(n) => self.len += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }
}

/// A buffered reader over a [`Block`]: the compressed side of a `.gz` log.
struct Aligned<R> {
    inner: R,
    block: Block,
    pos: usize,
}

impl<R: std::io::Read> Aligned<R> {
    fn new(inner: R, capacity: usize) -> Self {
        Self {
            inner,
            block: Block::new(capacity),
            pos: 0,
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
        if self.pos >= self.block.len {
            self.pos = 0;
            self.block.len = 0;
            let cap = self.block.raw.len() - PAGE;
            let start = self.block.start;
            self.block.len = self.inner.read(&mut self.block.raw[start..start + cap])?;
        }
        Ok(&self.block.bytes()[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.block.len);
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
            .is_some_and(|n| n.contains(".jsonl") && !n.starts_with(SCRAPE_FILE))
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

    /// Lines across chunk boundaries (one longer than a chunk), plain and gzipped, and a last
    /// line still being written: every whole line once, in order.
    #[test]
    fn lines_cross_chunks_whole_and_in_order() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("tokentap-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut want: Vec<Vec<u8>> = (0..40_000u32)
            .map(|i| {
                format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(i as usize % 97)).into_bytes()
            })
            .collect();
        want.insert(20_000, vec![b'y'; super::CHUNK + 1000]);
        let mut text: Vec<u8> = want.join(&b"\n"[..]);
        text.extend_from_slice(b"\n{\"cut");
        let plain = dir.join("a.jsonl");
        std::fs::write(&plain, &text).unwrap();
        let gz = dir.join("b.jsonl.gz");
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&text).unwrap();
        std::fs::write(&gz, e.finish().unwrap()).unwrap();
        for path in [plain, gz] {
            let mut got: Vec<Vec<u8>> = Vec::new();
            let read = super::scan(
                std::slice::from_ref(&path),
                &mut |w| panic!("{w}"),
                &mut |l| {
                    got.push(l.to_vec());
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(read, want.len(), "{}", path.display());
            assert!(got == want, "{}: lines differ", path.display());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
