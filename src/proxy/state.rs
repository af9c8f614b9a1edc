//! A config generation's state ([`State`]), what outlives generations ([`Shared`]), and a place
//! under a cap shared by every generation ([`Slot`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::client;
use super::routes::Routes;
use crate::config::Config;
use crate::keys::KeyIdentity;
use crate::sink::Sink;

/// What outlives a config generation: the sink, the caps and counters that span reloads, the
/// shutdown flag.
pub struct Shared {
    pub sink: Arc<Sink>,
    /// Requests admitted under `limits.max_concurrent`, over every generation.
    pub admitted: Arc<AtomicUsize>,
    /// Shadow copies in flight (experiment mirror/paired), over every generation.
    pub shadows: Arc<AtomicUsize>,
    /// Experiment copies skipped because `max_shadow_in_flight` were already running.
    pub shadow_skipped: AtomicU64,
    /// Set when the shutdown grace period is over: streams dropped after this were cut by us.
    pub shutdown_cut: AtomicBool,
}

impl Shared {
    pub fn new(sink: Arc<Sink>) -> Shared {
        Shared {
            sink,
            admitted: Arc::default(),
            shadows: Arc::default(),
            shadow_skipped: AtomicU64::new(0),
            shutdown_cut: AtomicBool::new(false),
        }
    }
}

/// A place under a cap shared by every generation (so a reload that lowers the cap counts the
/// requests still running on the old config); given back when dropped.
pub struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A place, if fewer than `max` are taken.
    pub fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        if count.fetch_add(1, Ordering::AcqRel) >= max {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(count.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One config generation: everything its requests share. A reload makes a new one; requests
/// keep theirs until their record is made.
pub struct State {
    pub config: Arc<Config>,
    pub shared: Arc<Shared>,
    pub routes: Routes,
    /// Key fingerprints and aliases.
    pub keys: KeyIdentity,
    /// Arm choice and pair ids (seeded).
    pub rng: Mutex<fastrand::Rng>,
}

impl State {
    /// A generation of `config`; a reload passes the generation it replaces, whose same-named
    /// routes hand over their counters, live stats and gateway joiners.
    pub fn new(
        config: Arc<Config>,
        shared: Arc<Shared>,
        previous: Option<&State>,
    ) -> Result<State, client::ClientError> {
        Ok(State {
            routes: Routes::new(
                &config.routes,
                config.timeouts.connect,
                previous.map(|p| &p.routes),
            )?,
            keys: KeyIdentity::new(config.key_aliases.clone()),
            rng: Mutex::new(fastrand::Rng::with_seed(config.experiment.seed)),
            config,
            shared,
        })
    }

    pub fn sink(&self) -> &Sink {
        &self.shared.sink
    }
}
