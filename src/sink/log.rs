//! The JSONL request log: a bounded queue drained by one writer thread, with size rotation.
//!
//! The data path only `try_send`s (see `Sink::write`); the writer never blocks it. Disk errors
//! are counted and reported once, and the writer keeps trying: traffic is never affected.
//! Records are written in batches (at most `BATCH_WAIT` after they end). On close, everything
//! queued is written and flushed before the writer exits.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::LogConfig;
use crate::meter::RequestRecord;

/// How long the writer lets records gather after the first of a batch arrives.
const BATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

/// What the writer is sent.
pub enum LogMsg {
    Record(Box<RequestRecord>),
    /// Write what is queued, flush, and stop.
    Close,
}

/// Counters the writer shares with the metrics.
#[derive(Default)]
pub struct LogCounters {
    pub written: AtomicU64,
    /// Records that could not be written (disk full, unwritable path, …).
    pub write_errors: AtomicU64,
}

/// Where records go: a file (rotated by size) or standard output (`log.path = "-"`: a
/// container's log pipeline picks them up; never rotated).
enum Out {
    File(File),
    Stdout(io::Stdout),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Out::File(f) => f.write(buf),
            Out::Stdout(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::File(f) => f.flush(),
            Out::Stdout(s) => s.flush(),
        }
    }
}

/// The path that means standard output.
pub const STDOUT: &str = "-";

struct Writer {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    file: Option<BufWriter<Out>>,
    size: u64,
    counters: Arc<LogCounters>,
    warned: bool,
    line: Vec<u8>,
}

/// Start the writer thread. Returns the queue's sender and the thread's handle.
pub fn spawn(
    cfg: &LogConfig,
    path: &Path,
    counters: Arc<LogCounters>,
) -> io::Result<(mpsc::Sender<LogMsg>, std::thread::JoinHandle<()>)> {
    let (tx, rx) = mpsc::channel(cfg.queue);
    let mut w = Writer {
        path: path.to_owned(),
        max_bytes: cfg.max_bytes,
        keep: cfg.keep,
        file: None,
        size: 0,
        counters,
        warned: false,
        line: Vec::with_capacity(1024),
    };
    // Open once up front so an unwritable path is reported at start (traffic still flows).
    w.ensure_open();
    let handle = std::thread::Builder::new()
        .name("tokentap-log".into())
        .spawn(move || w.run(rx))?;
    Ok((tx, handle))
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<LogMsg>) {
        let mut closing = false;
        while !closing {
            let Some(first) = rx.blocking_recv() else {
                break;
            };
            // Let a batch gather before writing: one wake-up and one write per batch, and the
            // writer's work never lands in the moment a request ends and the next one begins.
            if !matches!(first, LogMsg::Close) {
                std::thread::sleep(BATCH_WAIT);
            }
            let mut msg = Some(first);
            // Drain what is already queued, then flush once: records land promptly, in batches.
            while let Some(m) = msg.take() {
                match m {
                    LogMsg::Record(rec) => self.write(&rec),
                    LogMsg::Close => closing = true,
                }
                msg = rx.try_recv().ok();
            }
            self.flush();
        }
        self.flush();
    }

    fn fail(&mut self, what: &str, e: &io::Error) {
        self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
        if !self.warned {
            self.warned = true;
            tracing::error!(path = %self.path.display(), error = %e, "request log {what} failed; records are being lost (counted in {})", super::metrics::LOG_WRITE_ERRORS);
        }
        self.file = None;
    }

    fn to_stdout(&self) -> bool {
        self.path.as_os_str() == STDOUT
    }

    fn ensure_open(&mut self) -> bool {
        if self.file.is_some() {
            return true;
        }
        if self.to_stdout() {
            self.file = Some(BufWriter::with_capacity(
                64 * 1024,
                Out::Stdout(io::stdout()),
            ));
            return true;
        }
        match OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
        {
            Ok(f) => {
                self.size = f.metadata().map(|m| m.len()).unwrap_or(0);
                self.file = Some(BufWriter::with_capacity(64 * 1024, Out::File(f)));
                if self.warned {
                    tracing::info!(path = %self.path.display(), "request log writable again");
                    self.warned = false;
                }
                true
            }
            Err(e) => {
                self.fail("open", &e);
                false
            }
        }
    }

    fn write(&mut self, rec: &RequestRecord) {
        self.line.clear();
        // Writing into a Vec cannot fail but for a value that cannot be serialised: not a
        // record's (its floats are written as null when not finite).
        if serde_json::to_writer(&mut self.line, rec).is_err() {
            self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.line.push(b'\n');
        if !self.to_stdout() && self.size > 0 && self.size + self.line.len() as u64 > self.max_bytes
        {
            self.rotate();
        }
        if !self.ensure_open() {
            return;
        }
        let line = std::mem::take(&mut self.line);
        let res = match self.file.as_mut() {
            Some(f) => f.write_all(&line),
            None => Ok(()),
        };
        match res {
            Ok(()) => {
                self.size += line.len() as u64;
                self.counters.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.fail("write", &e),
        }
        self.line = line;
    }

    fn flush(&mut self) {
        if let Some(f) = self.file.as_mut() {
            if let Err(e) = f.flush() {
                self.fail("flush", &e);
            }
        }
    }

    /// `log` → `log.1` → … → `log.<keep>`; the oldest is removed.
    fn rotate(&mut self) {
        self.flush();
        self.file = None;
        let name = |i: u32| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{i}"));
            PathBuf::from(p)
        };
        if self.keep == 0 {
            let _ = std::fs::remove_file(&self.path);
        } else {
            let _ = std::fs::remove_file(name(self.keep));
            for i in (1..self.keep).rev() {
                let _ = std::fs::rename(name(i), name(i + 1));
            }
            if let Err(e) = std::fs::rename(&self.path, name(1)) {
                self.fail("rotate", &e);
            }
        }
        self.size = 0;
    }
}
