//! The live routes: each configured route is one value holding its config, its upstream client
//! and its counters; requests hold an `Arc` of theirs until their record is made. Requests no
//! route matched are counted on the `unrouted` pseudo-route, which has no upstream.
//!
//! A reload makes new routes with new clients; a route that keeps its name keeps its in-flight
//! count, its `/stats` and its gateway joiner (so a tap joins across the reload).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::client::{self, ClientError, UpstreamClient};
use crate::config::{RouteConfig, UNROUTED};
use crate::route::RouteTable;
use crate::sink::stats::LiveStats;
use crate::tap::Joiner;

/// A route's part in a gateway tap.
pub enum Tap {
    /// The gateway's own route: its requests wait in the joiner for their inner side.
    Outer(Arc<Joiner>),
    /// A route behind the gateway: its requests are joined to their outer side.
    Inner(Arc<Joiner>),
}

/// A configured route's upstream: its config and its pooled client.
pub struct Target {
    pub config: RouteConfig,
    pub client: UpstreamClient,
}

pub struct Route {
    pub name: String,
    /// `None` for `unrouted`.
    pub target: Option<Target>,
    /// Requests admitted on this route whose record is not yet made (over every generation).
    pub in_flight: Arc<AtomicU64>,
    /// `/stats` percentiles since start.
    pub stats: Arc<LiveStats>,
    pub tap: Option<Tap>,
}

impl Route {
    /// Admit one request: the in-flight count including it.
    pub fn admit(&self) -> u64 {
        self.in_flight.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The request's record is queued: it leaves the count.
    pub fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::Release);
    }

    /// Connections opened to the upstream since start (0 for `unrouted`).
    pub fn opened(&self) -> u64 {
        self.target.as_ref().map_or(0, |t| t.client.opened())
    }
}

/// Every route of a config, the prefix table over them, and `unrouted`.
pub struct Routes {
    table: RouteTable,
    configured: Vec<Arc<Route>>,
    unrouted: Arc<Route>,
}

impl Routes {
    pub fn new(
        routes: &[RouteConfig],
        connect_timeout: Duration,
        previous: Option<&Routes>,
    ) -> Result<Routes, ClientError> {
        let before = |name: &str| previous.and_then(|p| p.iter().find(|r| r.name == name));
        // One joiner per gateway route, shared with the routes behind it; the one the gateway
        // had before a reload is kept when its window is the same.
        let mut joiners: std::collections::HashMap<&str, Arc<Joiner>> = Default::default();
        for r in routes {
            if let Some(b) = &r.behind {
                let j = joiners
                    .entry(b.gateway.as_str())
                    .or_insert_with(|| Arc::new(Joiner::new(b.window)));
                if b.window > j.window() {
                    *j = Arc::new(Joiner::new(b.window));
                }
            }
        }
        for (gateway, j) in joiners.iter_mut() {
            if let Some(Tap::Outer(old)) = before(gateway).and_then(|r| r.tap.as_ref()) {
                if old.window() == j.window() {
                    *j = old.clone();
                }
            }
        }
        let counters = |name: &str| match before(name) {
            Some(r) => (r.in_flight.clone(), r.stats.clone()),
            None => (Arc::default(), Arc::default()),
        };
        let configured = routes
            .iter()
            .map(|r| {
                let tap = match &r.behind {
                    Some(b) => joiners.get(b.gateway.as_str()).cloned().map(Tap::Inner),
                    None => joiners.get(r.name.as_str()).cloned().map(Tap::Outer),
                };
                let (in_flight, stats) = counters(&r.name);
                Ok(Arc::new(Route {
                    tap,
                    name: r.name.clone(),
                    target: Some(Target {
                        config: r.clone(),
                        client: client::build(r, connect_timeout)?,
                    }),
                    in_flight,
                    stats,
                }))
            })
            .collect::<Result<Vec<_>, ClientError>>()?;
        let (in_flight, stats) = counters(UNROUTED);
        Ok(Routes {
            table: RouteTable::new(routes),
            configured,
            unrouted: Arc::new(Route {
                name: UNROUTED.to_owned(),
                target: None,
                in_flight,
                stats,
                tap: None,
            }),
        })
    }

    /// The route for a path (its index in the config), and the path to send upstream.
    pub fn pick<'p>(&self, path: &'p str) -> Option<(usize, &'p str)> {
        self.table.pick(path)
    }

    /// The route at a config index; `unrouted` for an index out of range.
    pub fn get(&self, index: usize) -> &Arc<Route> {
        self.configured.get(index).unwrap_or(&self.unrouted)
    }

    pub fn unrouted(&self) -> &Arc<Route> {
        &self.unrouted
    }

    /// Every route, `unrouted` last.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.configured
            .iter()
            .chain(std::iter::once(&self.unrouted))
    }

    /// Requests admitted whose record is not yet made, over all routes.
    pub fn in_flight(&self) -> u64 {
        self.iter()
            .map(|r| r.in_flight.load(Ordering::Acquire))
            .sum()
    }
}
