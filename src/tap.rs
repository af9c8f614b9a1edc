//! The gateway tap's join: a gateway's upstream is a tokentap route (`behind = "gateway"`), so
//! tokentap sees each request twice, outside the gateway and inside it, on one monotonic clock.
//! This joins the two.
//!
//! The outer request is registered as it is forwarded (its record id doubles as the token of
//! the `x-tokentap-join` header); the inner one looks for it by that header when the gateway
//! forwards it, else by the request's fingerprint (`openai::fingerprint`).
//!
//! A wrong join is worse than none, so a fingerprint joins only when exactly one outer request
//! could be the one: every outer request with that fingerprint that is in flight, or ended less
//! than a window ago unjoined, counts. When more than one does, the inner request is left
//! unjoined and every candidate is marked contested: none of them joins by fingerprint later.
//! Limit: requests that reach the gateway without passing tokentap's outer route can take a
//! fingerprint join that was not theirs; the header has no such limit.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::meter::{JoinBy, SharedTimes, Unjoined};

pub mod relay;

/// Outer requests waiting at most, per gateway route; beyond it new ones are not registered.
const MAX_WAITING: usize = 100_000;

/// What both sides of one joined request share.
pub struct Link {
    pub outer_id: u64,
    pub outer_t0: Instant,
    joined: OnceLock<Joined>,
    /// The inner side's first token, set by its meter the moment it is seen.
    pub inner_first_token: Arc<OnceLock<Instant>>,
    /// Every content event's arrival on the inner side, added by its meter as it reads them.
    pub inner_tokens: SharedTimes,
}

/// The inner side of a joined request.
#[derive(Debug, Clone, Copy)]
pub struct Joined {
    pub inner_id: u64,
    pub inner_t0: Instant,
    pub by: JoinBy,
}

impl Link {
    pub fn joined(&self) -> Option<&Joined> {
        self.joined.get()
    }
}

struct Entry {
    link: Arc<Link>,
    fp: Option<u64>,
    /// When the outer request ended unjoined (kept a window for the ambiguity rule).
    ended: Option<Instant>,
    contested: bool,
}

#[derive(Default)]
struct Table {
    by_id: HashMap<u64, Entry>,
    by_fp: HashMap<u64, Vec<u64>>,
    /// Outer requests that ended unjoined, oldest first.
    ended: VecDeque<(Instant, u64)>,
}

impl Table {
    fn remove(&mut self, id: u64) {
        let Some(e) = self.by_id.remove(&id) else {
            return;
        };
        if let Some(fp) = e.fp {
            if let Some(ids) = self.by_fp.get_mut(&fp) {
                ids.retain(|x| *x != id);
                if ids.is_empty() {
                    self.by_fp.remove(&fp);
                }
            }
        }
    }

    fn purge(&mut self, now: Instant, window: Duration) {
        while let Some(&(at, id)) = self.ended.front() {
            if now.saturating_duration_since(at) < window {
                break;
            }
            self.ended.pop_front();
            self.remove(id);
        }
    }
}

/// The join table of one gateway route, shared by the routes behind it.
pub struct Joiner {
    window: Duration,
    table: Mutex<Table>,
}

impl Joiner {
    pub fn new(window: Duration) -> Joiner {
        Joiner {
            window,
            table: Mutex::new(Table::default()),
        }
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// An outer request is being forwarded: wait for its inner one.
    pub fn open(
        &self,
        outer_id: u64,
        outer_t0: Instant,
        fp: Option<u64>,
    ) -> Result<Arc<Link>, Unjoined> {
        let mut t = self.table.lock().map_err(|_| Unjoined::Full)?;
        t.purge(crate::rxstamp::now(), self.window);
        if t.by_id.len() >= MAX_WAITING {
            return Err(Unjoined::Full);
        }
        let link = Arc::new(Link {
            outer_id,
            outer_t0,
            joined: OnceLock::new(),
            inner_first_token: Arc::new(OnceLock::new()),
            inner_tokens: SharedTimes::default(),
        });
        t.by_id.insert(
            outer_id,
            Entry {
                link: link.clone(),
                fp,
                ended: None,
                contested: false,
            },
        );
        if let Some(fp) = fp {
            t.by_fp.entry(fp).or_default().push(outer_id);
        }
        Ok(link)
    }

    /// The outer request ended: why it stayed unjoined, if it did.
    pub fn close(&self, link: &Link) -> Option<Unjoined> {
        let Ok(mut t) = self.table.lock() else {
            return link.joined().is_none().then_some(Unjoined::NoInner);
        };
        let now = crate::rxstamp::now();
        let contested = t.by_id.get(&link.outer_id).is_some_and(|e| e.contested);
        if link.joined().is_some() {
            t.remove(link.outer_id);
            return None;
        }
        if let Some(e) = t.by_id.get_mut(&link.outer_id) {
            e.ended = Some(now);
            t.ended.push_back((now, link.outer_id));
        }
        Some(if contested {
            Unjoined::Ambiguous
        } else {
            Unjoined::NoInner
        })
    }

    /// An inner request: join it to its outer one by `token` (the header) or by `fp`.
    pub fn join(
        &self,
        inner_id: u64,
        inner_t0: Instant,
        token: Option<u64>,
        fp: Option<u64>,
    ) -> Result<Arc<Link>, Unjoined> {
        let mut t = self.table.lock().map_err(|_| Unjoined::NoMatch)?;
        let now = crate::rxstamp::now();
        t.purge(now, self.window);
        let (id, by) = match (token, fp) {
            (Some(token), _) => (token, JoinBy::Header),
            (None, None) => return Err(Unjoined::Unreadable),
            (None, Some(fp)) => {
                let ids = t.by_fp.get(&fp).cloned().unwrap_or_default();
                match ids.as_slice() {
                    [] => return Err(Unjoined::NoMatch),
                    [one] => (*one, JoinBy::Fingerprint),
                    many => {
                        for id in many {
                            if let Some(e) = t.by_id.get_mut(id) {
                                e.contested = true;
                            }
                        }
                        return Err(Unjoined::Ambiguous);
                    }
                }
            }
        };
        let Some(e) = t.by_id.get(&id) else {
            return Err(Unjoined::NoMatch);
        };
        if by == JoinBy::Fingerprint && e.contested {
            return Err(Unjoined::Ambiguous);
        }
        if e.ended.is_some() || now.saturating_duration_since(e.link.outer_t0) > self.window {
            return Err(Unjoined::Late);
        }
        if inner_t0 < e.link.outer_t0 {
            return Err(Unjoined::ClockAnomaly);
        }
        let joined = Joined {
            inner_id,
            inner_t0,
            by,
        };
        if e.link.joined.set(joined).is_err() {
            return Err(Unjoined::Duplicate);
        }
        Ok(e.link.clone())
    }

    /// Outer requests registered and not yet forgotten (in flight, or ended unjoined within
    /// the window).
    pub fn waiting(&self) -> usize {
        self.table.lock().map_or(0, |t| t.by_id.len())
    }
}

/// The `x-tokentap-join` value of an outer request (its record id), and back.
pub fn token(outer_id: u64) -> String {
    crate::tags::join_token(outer_id)
}

pub fn parse_token(v: &[u8]) -> Option<u64> {
    crate::tags::parse_join(v)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests drive their own clock and environment
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[test]
    fn header_joins_exactly_and_once() {
        let j = Joiner::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let a = j.open(1, t0, Some(7)).unwrap();
        let b = j.open(2, t0, Some(7)).unwrap();
        // Same fingerprint, but the header says which.
        let l = j.join(20, at(5), Some(2), Some(7)).unwrap();
        assert_eq!(l.outer_id, 2);
        assert_eq!(b.joined().unwrap().inner_id, 20);
        assert!(a.joined().is_none());
        // A retry carrying the same header keeps the first join.
        assert_eq!(
            j.join(21, at(6), Some(2), None).err(),
            Some(Unjoined::Duplicate)
        );
        assert_eq!(
            j.join(22, at(6), Some(99), None).err(),
            Some(Unjoined::NoMatch)
        );
        assert_eq!(j.close(&b), None);
        assert_eq!(j.close(&a), Some(Unjoined::NoInner));
    }

    #[test]
    fn the_same_prompt_twice_is_never_joined_by_guess() {
        let j = Joiner::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let a = j.open(1, t0, Some(7)).unwrap();
        let b = j.open(2, t0, Some(7)).unwrap();
        assert_eq!(
            j.join(10, at(1), None, Some(7)).err(),
            Some(Unjoined::Ambiguous)
        );
        // a ends; b is now alone with that fingerprint, but contested: still no join.
        assert_eq!(j.close(&a), Some(Unjoined::Ambiguous));
        assert_eq!(
            j.join(11, at(2), None, Some(7)).err(),
            Some(Unjoined::Ambiguous)
        );
        assert_eq!(j.close(&b), Some(Unjoined::Ambiguous));
    }

    #[test]
    fn an_ended_unjoined_request_still_counts_for_a_window() {
        let j = Joiner::new(Duration::from_secs(60));
        let a = j.open(1, Instant::now(), Some(7)).unwrap();
        // a's client went away before the gateway forwarded it.
        assert_eq!(j.close(&a), Some(Unjoined::NoInner));
        let b = j.open(2, Instant::now(), Some(7)).unwrap();
        // a's late inner request must not be taken for b's.
        assert_eq!(
            j.join(10, at(1), None, Some(7)).err(),
            Some(Unjoined::Ambiguous)
        );
        assert!(b.joined().is_none());
    }

    #[test]
    fn a_unique_fingerprint_joins_and_anomalies_are_refused() {
        let j = Joiner::new(Duration::from_secs(60));
        let t0 = at(50);
        let a = j.open(1, t0, Some(7)).unwrap();
        // An inner request that started before its outer one.
        assert_eq!(
            j.join(10, Instant::now(), None, Some(7)).err(),
            Some(Unjoined::ClockAnomaly)
        );
        let l = j.join(11, at(60), None, Some(7)).unwrap();
        assert_eq!(l.joined().unwrap().by, JoinBy::Fingerprint);
        assert_eq!(
            j.join(12, at(61), None, Some(8)).err(),
            Some(Unjoined::NoMatch)
        );
        assert_eq!(
            j.join(13, at(61), None, None).err(),
            Some(Unjoined::Unreadable)
        );
        assert_eq!(j.close(&a), None);
        assert_eq!(j.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn tombstones_expire_after_the_window() {
        let j = Joiner::new(Duration::from_millis(100));
        let a = j.open(1, Instant::now(), Some(7)).unwrap();
        j.close(&a);
        assert_eq!(j.waiting(), 1);
        tokio::time::sleep(Duration::from_millis(150)).await;
        let b = j.open(2, Instant::now(), Some(7)).unwrap();
        assert_eq!(j.waiting(), 1);
        let l = j.join(10, Instant::now(), None, Some(7)).unwrap();
        assert_eq!(l.outer_id, 2);
        assert!(b.joined().is_some());
    }

    #[test]
    fn tokens_round_trip() {
        assert_eq!(
            parse_token(token(0xdead_beef).as_bytes()),
            Some(0xdead_beef)
        );
        assert_eq!(parse_token(b"xyz"), None);
    }
}
