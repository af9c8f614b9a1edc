//! A compressed response body (`Content-Encoding` gzip, deflate, br or zstd) decoded for
//! measurement only: the client gets the upstream's bytes untouched; the meter reads a decoded
//! copy, read by read, with each read's arrival instant.
//!
//! NB: decoding is bounded. One read may decode to at most [`MAX_DECODED_PER_READ`] bytes plus
//! [`MAX_RATIO`] times its own size; past that (a decompression bomb) decoding stops for the
//! rest of the body, and nothing is ever buffered beyond one read's output.

use std::io::{self, Write};

/// Decoded bytes one read may give beyond `MAX_RATIO` × its size.
pub const MAX_DECODED_PER_READ: usize = 1 << 20;
/// Decoded bytes one read may give per byte read (SSE compresses about 10 to 30 times).
pub const MAX_RATIO: usize = 100;

/// The codings tokentap decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Gzip,
    Deflate,
    Br,
    Zstd,
}

impl Coding {
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
            Coding::Br => "br",
            Coding::Zstd => "zstd",
        }
    }
}

/// What a `Content-Encoding` header says: nothing to decode, a coding tokentap decodes, or one
/// it does not (kept, bounded, for the record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Known(Coding),
    Unknown(String),
}

impl Encoding {
    /// Parse a `Content-Encoding` value. Several codings in a row (`gzip, br`) are not decoded.
    pub fn parse(value: &[u8]) -> Self {
        let text = String::from_utf8_lossy(value).trim().to_ascii_lowercase();
        match text.as_str() {
            "" | "identity" => Encoding::Identity,
            "gzip" | "x-gzip" => Encoding::Known(Coding::Gzip),
            "deflate" => Encoding::Known(Coding::Deflate),
            "br" => Encoding::Known(Coding::Br),
            "zstd" => Encoding::Known(Coding::Zstd),
            _ => Encoding::Unknown(text.chars().take(32).collect()),
        }
    }
}

/// Why decoding stopped: the record says it, the measurement ends there.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("{0} body: decoded over the bound ({1} bytes from one read of {2}); measurement stopped there")]
    Bomb(&'static str, usize, usize),
    #[error("{0} body: corrupt ({1}); measurement stopped there")]
    Corrupt(&'static str, String),
}

/// Where a decoder writes: one read's output, refused past its room.
#[derive(Default)]
struct Sink {
    buf: Vec<u8>,
    room: usize,
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.room {
            return Err(io::Error::other(BOMB));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The largest zstd window decoded (2^23 bytes).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

const BOMB: &str = "decoded output over its bound";

/// A decoder writing into a [`Sink`].
trait Stream: Write + Send {
    fn sink(&mut self) -> &mut Sink;
}

impl Stream for flate2::write::GzDecoder<Sink> {
    fn sink(&mut self) -> &mut Sink {
        self.get_mut()
    }
}
impl Stream for flate2::write::ZlibDecoder<Sink> {
    fn sink(&mut self) -> &mut Sink {
        self.get_mut()
    }
}
impl Stream for flate2::write::DeflateDecoder<Sink> {
    fn sink(&mut self) -> &mut Sink {
        self.get_mut()
    }
}
impl Stream for brotli_decompressor::DecompressorWriter<Sink> {
    fn sink(&mut self) -> &mut Sink {
        self.get_mut()
    }
}
impl Stream for zstd::stream::write::Decoder<'static, Sink> {
    fn sink(&mut self) -> &mut Sink {
        self.get_mut()
    }
}

enum Inner {
    Ready(Box<dyn Stream>),
    /// `deflate` is zlib-wrapped by the RFC, raw from some servers: told by its first two
    /// bytes, held until they came.
    Sniffing(Vec<u8>),
}

/// A streaming decoder of one response body.
pub struct Decoder {
    coding: Coding,
    inner: Inner,
    /// Decoded bytes so far.
    pub decoded: u64,
}

impl Decoder {
    pub fn new(coding: Coding) -> Result<Self, DecodeError> {
        let inner = match coding {
            Coding::Gzip => Inner::Ready(Box::new(flate2::write::GzDecoder::new(Sink::default()))),
            Coding::Deflate => Inner::Sniffing(Vec::new()),
            Coding::Br => Inner::Ready(Box::new(brotli_decompressor::DecompressorWriter::new(
                Sink::default(),
                4096,
            ))),
            Coding::Zstd => {
                let corrupt = |e: io::Error| DecodeError::Corrupt("zstd", e.to_string());
                let mut d = zstd::stream::write::Decoder::new(Sink::default()).map_err(corrupt)?;
                // NB: a frame may ask for a window of up to 2^31 bytes; 8 MiB is plenty for a
                // compressed event stream, and bounds what an upstream can make tokentap hold.
                d.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(corrupt)?;
                Inner::Ready(Box::new(d))
            }
        };
        Ok(Self {
            coding,
            inner,
            decoded: 0,
        })
    }

    pub fn coding(&self) -> Coding {
        self.coding
    }

    /// Decode one read; `out` gets what it decodes to (cleared first).
    pub fn feed(&mut self, read: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
        out.clear();
        let name = self.coding.as_str();
        let held: Vec<u8>;
        let input = match &mut self.inner {
            Inner::Ready(_) => read,
            Inner::Sniffing(head) => {
                head.extend_from_slice(read);
                if head.len() < 2 {
                    return Ok(());
                }
                held = std::mem::take(head);
                let s: Box<dyn Stream> = if is_zlib(held[0], held[1]) {
                    Box::new(flate2::write::ZlibDecoder::new(Sink::default()))
                } else {
                    Box::new(flate2::write::DeflateDecoder::new(Sink::default()))
                };
                self.inner = Inner::Ready(s);
                &held
            }
        };
        let Inner::Ready(s) = &mut self.inner else {
            return Ok(());
        };
        let room = MAX_DECODED_PER_READ + MAX_RATIO * input.len();
        s.sink().room = room;
        let r = s.write_all(input).and_then(|()| s.flush());
        std::mem::swap(out, &mut s.sink().buf);
        r.map_err(|e| {
            if e.to_string() == BOMB {
                DecodeError::Bomb(name, room, input.len())
            } else {
                DecodeError::Corrupt(name, e.to_string())
            }
        })?;
        self.decoded += out.len() as u64;
        Ok(())
    }
}

/// A zlib header: compression method 8 and a header checksum that divides by 31.
fn is_zlib(cmf: u8, flg: u8) -> bool {
    cmf & 0x0f == 8 && (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0
}
