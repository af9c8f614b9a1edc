//! Hashing and interning for the report's groups: FxHash for small keys, a cheaper hash for
//! names (a key id's ends), and the names seen, each kept once and numbered.

use std::collections::HashMap;
use std::sync::Arc;

/// Not a name (no arm, no key).
pub(super) const NONE: u32 = u32::MAX;

/// FxHash (rustc's): a multiply and a rotate per word. The report's maps are keyed by short
/// strings and small tuples from local files; SipHash's flood resistance buys nothing here and
/// costs a third of a record's time.
#[derive(Default, Clone, Copy)]
pub(super) struct Fx(u64);

impl Fx {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(super) type Map<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fx>>;

/// Fx over a string's length and its first and last eight bytes only: names are looked up
/// once or twice a record, and a key id is 71 bytes whose ends differ (hex of a hash).
#[derive(Default, Clone, Copy)]
struct Ends(Fx);

impl std::hash::Hasher for Ends {
    fn write(&mut self, bytes: &[u8]) {
        if bytes.len() <= 16 {
            return self.0.write(bytes);
        }
        let n = bytes.len();
        self.0.add(n as u64);
        self.0.write(&bytes[..8]);
        self.0.write(&bytes[n - 8..]);
    }
    fn write_u8(&mut self, v: u8) {
        self.0.add(u64::from(v));
    }
    fn finish(&self) -> u64 {
        self.0.finish()
    }
}

/// Strings seen in records, each kept once.
#[derive(Debug, Default)]
pub(super) struct Names {
    ids: HashMap<Box<str>, u32, std::hash::BuildHasherDefault<Ends>>,
    list: Vec<Arc<str>>,
}

impl Names {
    pub(super) fn id(&mut self, s: &str) -> u32 {
        if let Some(i) = self.ids.get(s) {
            return *i;
        }
        let i = self.list.len() as u32;
        self.ids.insert(s.into(), i);
        self.list.push(s.into());
        i
    }
    /// The name, shared (for the rows the hop and tap sections keep).
    pub(super) fn arc(&self, i: u32) -> Arc<str> {
        self.list
            .get(i as usize)
            .cloned()
            .unwrap_or_else(|| "".into())
    }
    pub(super) fn name(&self, i: u32) -> Option<String> {
        (i != NONE).then(|| self.arc(i).to_string())
    }
}
