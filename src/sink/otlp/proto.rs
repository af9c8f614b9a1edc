//! The OTLP trace messages tokentap sends, encoded by hand in protobuf's wire format: field
//! numbers and types from opentelemetry-proto's `trace/v1/trace.proto`,
//! `common/v1/common.proto`, `resource/v1/resource.proto` and
//! `collector/trace/v1/trace_service.proto` (v1.x; these numbers are frozen by the spec's
//! stability guarantees). The opt-in `scripts/cluster-test.sh` parses the output with the
//! `opentelemetry-proto` package.

/// Wire types.
const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const I32: u8 = 5;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, I64);
    out.extend_from_slice(&v.to_le_bytes());
}

fn fixed32(out: &mut Vec<u8>, field: u32, v: u32) {
    key(out, field, I32);
    out.extend_from_slice(&v.to_le_bytes());
}

fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, VARINT);
    varint(out, v);
}

/// A nested message, written by `f` and length-prefixed.
fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    f(&mut inner);
    bytes(out, field, &inner);
}

/// An attribute's value (`AnyValue`).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    /// An array of strings (`ArrayValue`).
    Strs(Vec<String>),
}

fn any_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Str(s) => bytes(out, 1, s.as_bytes()),
        Value::Bool(b) => uint(out, 2, u64::from(*b)),
        Value::Int(i) => uint(out, 3, *i as u64),
        Value::Double(d) => fixed64(out, 4, d.to_bits()),
        Value::Strs(list) => message(out, 5, |a| {
            for s in list {
                message(a, 1, |v| bytes(v, 1, s.as_bytes()));
            }
        }),
    }
}

/// `KeyValue` as field `field` of the enclosing message.
fn attribute(out: &mut Vec<u8>, field: u32, k: &str, v: &Value) {
    message(out, field, |kv| {
        bytes(kv, 1, k.as_bytes());
        message(kv, 2, |a| any_value(a, v));
    });
}

pub type Attributes = Vec<(&'static str, Value)>;

/// `Span.SpanKind`.
pub const KIND_SERVER: u64 = 2;
/// `Status.StatusCode`.
pub const STATUS_ERROR: u64 = 2;

pub struct Event {
    pub time_unix_nano: u64,
    pub name: &'static str,
    pub attributes: Attributes,
}

pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub trace_state: Option<String>,
    pub parent_span_id: Option<[u8; 8]>,
    pub flags: u8,
    pub name: String,
    pub kind: u64,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub attributes: Attributes,
    pub events: Vec<Event>,
    /// `(code, message)`; `None` leaves the status unset (success).
    pub status: Option<(u64, String)>,
}

fn span(out: &mut Vec<u8>, s: &Span) {
    bytes(out, 1, &s.trace_id);
    bytes(out, 2, &s.span_id);
    if let Some(ts) = &s.trace_state {
        bytes(out, 3, ts.as_bytes());
    }
    if let Some(p) = &s.parent_span_id {
        bytes(out, 4, p);
    }
    bytes(out, 5, s.name.as_bytes());
    uint(out, 6, s.kind);
    fixed64(out, 7, s.start_time_unix_nano);
    fixed64(out, 8, s.end_time_unix_nano);
    for (k, v) in &s.attributes {
        attribute(out, 9, k, v);
    }
    for e in &s.events {
        message(out, 11, |m| {
            fixed64(m, 1, e.time_unix_nano);
            bytes(m, 2, e.name.as_bytes());
            for (k, v) in &e.attributes {
                attribute(m, 3, k, v);
            }
        });
    }
    if let Some((code, msg)) = &s.status {
        message(out, 15, |m| {
            if !msg.is_empty() {
                bytes(m, 2, msg.as_bytes());
            }
            uint(m, 3, *code);
        });
    }
    // Span.flags: the W3C trace flags in the low byte; bit 8 says whether the parent is remote,
    // bit 9 that it is (an incoming traceparent's span is always remote).
    let remote = if s.parent_span_id.is_some() {
        0x300
    } else {
        0x100
    };
    fixed32(out, 16, u32::from(s.flags) | remote);
}

/// An `ExportTraceServiceRequest` with one resource and one instrumentation scope.
pub fn export_request(resource: &Attributes, scope: (&str, &str), spans: &[Span]) -> Vec<u8> {
    let mut out = Vec::with_capacity(512 * spans.len() + 128);
    message(&mut out, 1, |rs| {
        message(rs, 1, |r| {
            for (k, v) in resource {
                attribute(r, 1, k, v);
            }
        });
        message(rs, 2, |ss| {
            message(ss, 1, |sc| {
                bytes(sc, 1, scope.0.as_bytes());
                bytes(sc, 2, scope.1.as_bytes());
            });
            for s in spans {
                message(ss, 2, |m| span(m, s));
            }
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known encodings from the protobuf documentation's examples.
    #[test]
    fn wire_format_matches_protobufs_examples() {
        let mut v = Vec::new();
        uint(&mut v, 1, 150);
        assert_eq!(v, [0x08, 0x96, 0x01]);
        let mut v = Vec::new();
        bytes(&mut v, 2, b"testing");
        assert_eq!(v, [0x12, 0x07, b't', b'e', b's', b't', b'i', b'n', b'g']);
        let mut v = Vec::new();
        uint(&mut v, 3, (-2i64) as u64);
        assert_eq!(v.len(), 11, "a negative int64 takes ten bytes of varint");
        let mut v = Vec::new();
        fixed64(&mut v, 7, 1);
        assert_eq!(v, [0x39, 1, 0, 0, 0, 0, 0, 0, 0]);
    }
}
