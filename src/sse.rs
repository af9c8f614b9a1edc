//! Incremental Server-Sent Events splitter over arbitrary byte chunks.
//!
//! It only observes: the caller forwards the bytes itself, unchanged. Events may be split across
//! reads at any byte, several may share one read, lines may end in `\n`, `\r\n` or `\r`, and
//! comments (`: ping`) and non-`data` fields are skipped. Memory is bounded: an event whose data
//! (or any single line) exceeds `max_event` bytes is reported as [`SseItem::Oversize`] and its
//! bytes are dropped — never buffered without bound. Non-UTF-8 input is fine: nothing here decodes.

/// What the splitter reports, in stream order.
#[derive(Debug, PartialEq, Eq)]
pub enum SseItem<'a> {
    /// The `data` of one complete event (multi-line data joined by `\n`).
    Data(&'a [u8]),
    /// An event (or line) larger than the bound; skipped for measurement.
    Oversize,
}

/// Where the data of the event being assembled currently lives.
#[derive(Clone, Copy)]
enum Pending {
    None,
    /// A single data line that lies wholly inside the current chunk: no copy yet.
    Borrowed(usize, usize),
    /// Copied into `data`.
    Owned,
}

/// An incremental SSE splitter. Feed it every chunk of a body in order.
pub struct SseSplitter {
    /// Bytes of a line that began in an earlier chunk.
    line: Vec<u8>,
    /// Data of the event being assembled, when it could not stay borrowed.
    data: Vec<u8>,
    pending: Pending,
    /// The previous chunk ended in `\r`: a leading `\n` in the next one belongs to it.
    skip_lf: bool,
    /// The current line is over the bound: discard its bytes until its end.
    line_discard: bool,
    /// The current event is over the bound: report `Oversize` at its end.
    oversize: bool,
    max_event: usize,
}

impl SseSplitter {
    pub fn new(max_event: usize) -> Self {
        Self {
            line: Vec::new(),
            data: Vec::new(),
            pending: Pending::None,
            skip_lf: false,
            line_discard: false,
            oversize: false,
            max_event: max_event.max(16),
        }
    }

    /// Bytes held between chunks (for the memory bound's tests).
    pub fn buffered(&self) -> usize {
        self.line.capacity() + self.data.capacity()
    }

    /// Feed one chunk; `on_item` is called for every event completed by it.
    pub fn feed(&mut self, chunk: &[u8], on_item: &mut impl FnMut(SseItem<'_>)) {
        let len = chunk.len();
        let mut i = 0;
        if self.skip_lf && len > 0 {
            if chunk[0] == b'\n' {
                i = 1;
            }
            self.skip_lf = false;
        }
        while i < len {
            // An event's closing blank line is found here without a search (one per event).
            let found = if matches!(chunk[i], b'\n' | b'\r') {
                Some(0)
            } else {
                memchr::memchr2(b'\n', b'\r', &chunk[i..])
            };
            match found {
                None => {
                    self.carry_partial(&chunk[i..]);
                    break;
                }
                Some(off) => {
                    let end = i + off;
                    if self.line.is_empty() && !self.line_discard {
                        if end - i > self.max_event {
                            // NB: the bound a line carried across reads meets in
                            // `carry_partial`, so where reads split cannot change the events.
                            self.oversize = true;
                        } else {
                            self.on_line(chunk, Some((i, end)), on_item);
                        }
                    } else {
                        self.carry_partial(&chunk[i..end]);
                        self.on_line(chunk, None, on_item);
                    }
                    i = end + 1;
                    if chunk[end] == b'\r' {
                        if i < len {
                            if chunk[i] == b'\n' {
                                i += 1;
                            }
                        } else {
                            self.skip_lf = true;
                        }
                    }
                }
            }
        }
        // Data still borrowed from this chunk must be copied before the chunk goes away.
        if let Pending::Borrowed(s, e) = self.pending {
            self.data.clear();
            self.data.extend_from_slice(&chunk[s..e]);
            self.pending = Pending::Owned;
        }
    }

    /// Keep the start of a line that continues in a later chunk, within the bound.
    fn carry_partial(&mut self, bytes: &[u8]) {
        if self.line_discard {
            return;
        }
        if self.line.len() + bytes.len() > self.max_event {
            self.line = Vec::new();
            self.line_discard = true;
            self.oversize = true;
            return;
        }
        self.line.extend_from_slice(bytes);
    }

    /// One complete line: `span` into `chunk`, or (when `None`) the carried `self.line`.
    fn on_line(
        &mut self,
        chunk: &[u8],
        span: Option<(usize, usize)>,
        on_item: &mut impl FnMut(SseItem<'_>),
    ) {
        if self.line_discard {
            // The over-long line is over; its event is already marked oversize.
            self.line_discard = false;
            self.line.clear();
            return;
        }
        match span {
            Some((s, e)) => self.line_in(chunk, &chunk[s..e], Some(s), on_item),
            None => {
                let mut carried = std::mem::take(&mut self.line);
                self.line_in(chunk, &carried, None, on_item);
                // Give the carried buffer's allocation back for the next partial line.
                carried.clear();
                self.line = carried;
            }
        }
    }

    /// One complete line's bytes; `base` is its offset in `chunk` when it lies there.
    fn line_in(
        &mut self,
        chunk: &[u8],
        line: &[u8],
        base: Option<usize>,
        on_item: &mut impl FnMut(SseItem<'_>),
    ) {
        if line.is_empty() {
            self.dispatch(chunk, on_item);
            return;
        }
        if line[0] == b':' {
            return;
        }
        // `data:` (nearly every line of a stream) without a search for the colon.
        let (name, value_off) = if line.starts_with(b"data:") {
            (&line[..4], if line.get(5) == Some(&b' ') { 6 } else { 5 })
        } else {
            match memchr::memchr(b':', line) {
                Some(c) => {
                    let v = if line.get(c + 1) == Some(&b' ') {
                        c + 2
                    } else {
                        c + 1
                    };
                    (&line[..c], v)
                }
                None => (line, line.len()),
            }
        };
        if name == b"data" {
            let value = &line[value_off..];
            self.push_data(chunk, value, base.map(|s| (s + value_off, s + line.len())));
        }
    }

    /// Append one `data` line's value; `borrowed` is its span in the current chunk, if any.
    fn push_data(&mut self, chunk: &[u8], value: &[u8], borrowed: Option<(usize, usize)>) {
        if self.oversize {
            return;
        }
        match (self.pending, borrowed) {
            (Pending::None, Some((s, e))) => self.pending = Pending::Borrowed(s, e),
            (Pending::None, None) => {
                self.data.clear();
                self.data.extend_from_slice(value);
                self.pending = Pending::Owned;
            }
            (Pending::Borrowed(s, e), _) => {
                // A second data line: copy the first out of the chunk, then join.
                self.data.clear();
                self.data.extend_from_slice(&chunk[s..e]);
                self.data.push(b'\n');
                self.data.extend_from_slice(value);
                self.pending = Pending::Owned;
            }
            (Pending::Owned, _) => {
                self.data.push(b'\n');
                self.data.extend_from_slice(value);
            }
        }
        let size = match self.pending {
            Pending::Borrowed(s, e) => e - s,
            _ => self.data.len(),
        };
        if size > self.max_event {
            self.oversize = true;
            self.data = Vec::new();
            self.pending = Pending::None;
        }
    }

    fn dispatch(&mut self, chunk: &[u8], on_item: &mut impl FnMut(SseItem<'_>)) {
        if self.oversize {
            on_item(SseItem::Oversize);
        } else {
            match self.pending {
                Pending::None => {}
                Pending::Borrowed(s, e) => on_item(SseItem::Data(&chunk[s..e])),
                Pending::Owned => on_item(SseItem::Data(&self.data)),
            }
        }
        self.oversize = false;
        self.pending = Pending::None;
        self.data.clear();
        if self.data.capacity() > 64 * 1024 {
            self.data = Vec::new();
        }
    }
}
