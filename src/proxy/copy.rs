//! The experiment's copy: the same request to the other arm, read to its end, measured,
//! discarded. Mirror sends it once the primary answered with success, paired once the primary's
//! response ended well. It begins as the routing stage begins every request
//! (`routing::Opening`), with the primary's request id and pair, and is sent by `send` like the
//! primary.
//!
//! NB: bounded: over `max_shadow_in_flight` a copy is skipped and counted, never queued; it runs
//! on its own task, and the client's response never waits for it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http_body_util::BodyExt;

use super::due::Due;
use super::routing::Opening;
use super::send::{send, Outgoing};
use super::state::{Slot, State};
use crate::meter::{Experiment, Stamp};

/// A copy to send: the request, its arm and pair, and its `cache_salt`.
pub struct Copy {
    pub arm: usize,
    pub pair: String,
    pub salt: Option<String>,
    pub req: Outgoing,
}

/// Makes and sends the experiment's copies of one config generation's requests.
#[derive(Clone)]
pub struct Copier {
    state: Arc<State>,
}

impl Copier {
    pub fn new(state: Arc<State>) -> Copier {
        Copier { state }
    }

    /// The `cache_salt` of the request of pair `pair` to the arm named `arm`, when
    /// `experiment.cache_salt` is on.
    pub fn salt(&self, pair: &str, arm: &str) -> Option<String> {
        let exp = &self.state.config.experiment;
        exp.cache_salt.then(|| format!("{pair}-{arm}"))
    }

    /// The copy of `req` for route `arm` under `pair`.
    pub fn plan(&self, arm: usize, pair: String, req: &Outgoing) -> Copy {
        Copy {
            salt: self.salt(&pair, &self.state.routes.get(arm).name),
            arm,
            pair,
            req: Outgoing {
                method: req.method.clone(),
                path_and_query: req.path_and_query.clone(),
                headers: req.headers.clone(),
                body: req.body.clone(),
            },
        }
    }

    /// Whether the copy waits for the primary's response to end well (paired), rather than
    /// for its successful head (mirror).
    pub fn paired(&self) -> bool {
        self.state.config.experiment.mode == crate::config::Mode::Paired
    }

    /// Send `copy` on its own task, if a place under `max_shadow_in_flight` is free.
    pub fn spawn(&self, copy: Copy) {
        let state = &self.state;
        let max = state.config.experiment.max_shadow_in_flight;
        let Some(slot) = Slot::take(&state.shared.shadows, max) else {
            state.shared.shadow_skipped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let req = copy.req;
            let endpoint = req.path_and_query.split('?').next().unwrap_or("");
            let t0 = crate::rxstamp::now();
            let o = Opening::new(t0, Stamp::now(), &req.method, endpoint, &req.headers);
            let route = state.routes.get(copy.arm).clone();
            let experiment = Experiment {
                arm: route.name.clone(),
                pair_id: Some(copy.pair),
            };
            // The copy carries the primary's request id (the client's, or the one made for it).
            let request_id = super::ids::read(&req.headers, &state.config.request_id.headers);
            let due = Due::new(t0, &state.config.timeouts);
            let mut ex = o.copy_of(experiment, request_id).begin(state, route);
            ex.hold(slot);
            let resp = send(ex, req, copy.salt, due).await;
            let mut body = resp.into_body();
            while let Some(frame) = body.frame().await {
                if frame.is_err() {
                    break;
                }
            }
        });
    }
}
