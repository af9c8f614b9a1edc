//! The keep-alive pool of one route: idle connections, newest first, closed after
//! `IDLE_TIMEOUT`; one the upstream closed while pooled is noticed and never used.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::io::Io;

/// Pooled connections idle longer than this are closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Most idle connections kept per route.
const MAX_IDLE: usize = 1024;

struct Idle {
    io: Io,
    since: Instant,
}

#[derive(Default)]
pub(super) struct Pool {
    idle: Mutex<VecDeque<Idle>>,
}

impl Pool {
    /// A pooled connection that is still open, newest first.
    pub(super) fn checkout(&self) -> Option<Io> {
        let mut idle = self.idle.lock().ok()?;
        while let Some(c) = idle.pop_back() {
            if c.since.elapsed() < IDLE_TIMEOUT && !c.io.conn.is_stale() {
                return Some(c.io);
            }
        }
        None
    }

    /// Back to the pool after a response read to its end; the oldest expire first.
    pub(super) fn put(&self, mut io: Io) {
        if !io.filled().is_empty() {
            return; // bytes after the response: the connection is not in a known state
        }
        io.park();
        io.got = 0;
        io.want_stamps = true;
        io.arrival = None;
        let Ok(mut idle) = self.idle.lock() else {
            return;
        };
        while idle
            .front()
            .is_some_and(|c| c.since.elapsed() >= IDLE_TIMEOUT)
        {
            idle.pop_front();
        }
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle {
                io,
                since: crate::rxstamp::now(),
            });
        }
    }

    /// Close pooled connections that expired or that the upstream closed (so they do not sit in
    /// CLOSE_WAIT until the next checkout). Returns how many are left.
    pub(super) fn prune(&self) -> usize {
        let Ok(mut idle) = self.idle.lock() else {
            return 0;
        };
        idle.retain(|c| c.since.elapsed() < IDLE_TIMEOUT && !c.io.conn.is_stale());
        idle.len()
    }
}
