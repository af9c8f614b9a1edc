//! Reload without a restart: SIGHUP, or `POST /reload` on the admin listener (only when
//! `admin.reload_token` is set, with that token as a bearer).
//!
//! The file is read and validated as `tokentap check` does; a bad one is refused with the same
//! error and the running config keeps serving. A good one becomes a new config generation
//! ([`Live::swap`]): routes, upstreams, aliases, experiment settings, limits, timeouts and the
//! listener's TLS certificate change for new requests, while requests in flight finish on the
//! generation they began on. Settings bound at start (the listen and admin addresses, the
//! listen backlog, TLS on or off, the log, `[otlp]`, `[clickhouse]`, the metric label caps) are
//! named as needing a restart, and keep their values.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::config::{Config, Overrides};
use crate::proxy::{Live, State};

/// What a reload did.
#[derive(Debug, Serialize)]
pub struct Outcome {
    /// `ok`, `restart_needed` (applied, but some settings wait for a restart) or `error`.
    pub result: &'static str,
    /// The generation serving new requests after this reload (1 = the config read at start).
    pub generation: u64,
    /// Settings that changed in the file but keep their running values until a restart.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restart_needed: Vec<&'static str>,
    /// Why the file was refused (`file: key: message`, as `tokentap check` says it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Outcome {
    pub fn applied(&self) -> bool {
        self.result != "error"
    }
}

/// Re-reads the config file serve started from, with the same command-line overrides.
pub struct Reloader {
    path: Option<PathBuf>,
    over: Overrides,
    live: Arc<Live>,
    /// One reload at a time (SIGHUP and POST /reload may race).
    busy: Mutex<()>,
}

impl Reloader {
    /// `path` is `None` when serve started from flags alone: there is nothing to re-read.
    pub fn new(path: Option<PathBuf>, over: Overrides, live: Arc<Live>) -> Reloader {
        Reloader {
            path,
            over,
            live,
            busy: Mutex::new(()),
        }
    }

    pub fn live(&self) -> &Arc<Live> {
        &self.live
    }

    /// Re-read, validate and apply the file; `cause` names what asked (for the log).
    pub fn reload(&self, cause: &str) -> Outcome {
        let _one = self
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let out = self.apply();
        let metrics = &self.live.shared.sink.metrics;
        metrics.reloaded(out.result);
        match &out.error {
            None => tracing::info!(
                cause,
                generation = out.generation,
                restart_needed = %out.restart_needed.join(", "),
                "config reloaded"
            ),
            Some(e) => {
                tracing::warn!(cause, error = %e, "config reload refused; the running config keeps serving")
            }
        }
        out
    }

    fn apply(&self) -> Outcome {
        let refused = |error: String| Outcome {
            result: "error",
            generation: self.live.number(),
            restart_needed: Vec::new(),
            error: Some(error),
        };
        let Some(path) = &self.path else {
            return refused(
                "tokentap was started without --config: there is no file to re-read".into(),
            );
        };
        let mut new = match Config::load(path, &self.over) {
            Ok(c) => c,
            Err(e) => return refused(e.to_string()),
        };
        let current = self.live.state();
        let restart_needed = bound_at_start(&current.config, &mut new);
        // The certificate is re-read (rotated certificates are picked up); TLS turned on or off
        // is a listener change and waits for a restart.
        let tls = match (self.live.tls(), &new.tls) {
            (Some(_), Some(files)) => match crate::tls::acceptor(files) {
                Ok(a) => Some(a),
                Err(e) => return refused(format!("{}: listen.tls_cert: {e}", new.source)),
            },
            (running, _) => running,
        };
        let state = match State::new(Arc::new(new), self.live.shared.clone(), Some(&current)) {
            Ok(s) => s,
            Err(e) => return refused(e.to_string()),
        };
        let generation = self.live.swap(state, tls);
        Outcome {
            result: if restart_needed.is_empty() {
                "ok"
            } else {
                "restart_needed"
            },
            generation,
            restart_needed,
            error: None,
        }
    }
}

/// The settings bound when serve started that differ in `new` (by config key); each is put
/// back to its running value, so the new generation says what is really in effect.
fn bound_at_start(old: &Config, new: &mut Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    let mut keep = |key: &'static str, differs: bool| {
        if differs {
            changed.push(key);
        }
        differs
    };
    if keep("listen.addr", old.listen != new.listen) {
        new.listen = old.listen;
    }
    if keep("listen.backlog", old.backlog != new.backlog) {
        new.backlog = old.backlog;
    }
    if keep("listen.tls_cert", old.tls.is_some() != new.tls.is_some()) {
        new.tls.clone_from(&old.tls);
    }
    if keep("admin.addr", old.admin != new.admin) {
        new.admin = old.admin;
    }
    let (ol, nl) = (&old.log, &new.log);
    let log = [
        keep("log.path", ol.path != nl.path),
        keep("log.max_bytes", ol.max_bytes != nl.max_bytes),
        keep("log.keep", ol.keep != nl.keep),
        keep("log.queue", ol.queue != nl.queue),
    ];
    if log.contains(&true) {
        new.log = old.log.clone();
    }
    if keep("otlp", old.otlp != new.otlp) {
        new.otlp.clone_from(&old.otlp);
    }
    if keep("clickhouse", old.clickhouse != new.clickhouse) {
        new.clickhouse.clone_from(&old.clickhouse);
    }
    // The histograms' bucket edges and the SLO counts are set up at start.
    if keep("slo", old.slo != new.slo) {
        new.slo = old.slo.clone();
    }
    let (ol, nl) = (old.limits, &mut new.limits);
    if keep(
        "limits.max_key_labels",
        ol.max_key_labels != nl.max_key_labels,
    ) {
        nl.max_key_labels = ol.max_key_labels;
    }
    if keep(
        "limits.max_model_labels",
        ol.max_model_labels != nl.max_model_labels,
    ) {
        nl.max_model_labels = ol.max_model_labels;
    }
    changed
}

/// Reload on every SIGHUP until the process ends. The handler is installed here, before the
/// returned future first runs, so a SIGHUP right after start reloads instead of killing.
pub fn on_sighup(reloader: Arc<Reloader>) -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let hup = {
        use tokio::signal::unix::{signal, SignalKind};
        signal(SignalKind::hangup())
            .map_err(
                |e| tracing::warn!(error = %e, "cannot listen for SIGHUP: reload by signal is off"),
            )
            .ok()
    };
    async move {
        #[cfg(unix)]
        if let Some(mut hup) = hup {
            while hup.recv().await.is_some() {
                let r = reloader.clone();
                let _ = tokio::task::spawn_blocking(move || r.reload("SIGHUP")).await;
            }
        }
        #[cfg(not(unix))]
        let _ = reloader;
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::bound_at_start;
    use crate::config::{Config, Overrides};

    fn config(extra: &str) -> Config {
        Config::from_toml(
            &format!("[[routes]]\nname='r'\nupstream='http://h:1'\n{extra}"),
            "t.toml",
            &Overrides::default(),
        )
        .unwrap()
    }

    /// A changed collector token is a change (compared, never printed), and the running
    /// settings are put back.
    #[test]
    fn settings_bound_at_start_are_named_and_kept() {
        let otlp = |token: &str| {
            format!(
                "[otlp]\nendpoint='http://c:4318'\nheaders={{authorization='Bearer {token}'}}\n"
            )
        };
        let old = config(&otlp("one"));
        let mut same = config(&otlp("one"));
        assert!(bound_at_start(&old, &mut same).is_empty());
        let mut new = config(&format!("{}[listen]\naddr='127.0.0.1:1'\n", otlp("two")));
        assert_eq!(bound_at_start(&old, &mut new), ["listen.addr", "otlp"]);
        assert_eq!(new.listen, old.listen);
        assert!(
            new.otlp == old.otlp,
            "the running exporter's settings are kept"
        );
    }
}
