//! `[experiment]`: the gateway-hop A/B. Which two routes are the arms, which one authenticates,
//! how traffic is shared between them, and who may force an arm. Only checked here; the choice
//! per request is `route::arm`.

use std::collections::HashSet;

use http::header::HeaderName;

use super::raw::RawExperiment;
use super::routes::RouteConfig;
use super::{defaults, err, ConfigError};

/// How the two arms of the gateway-hop experiment share traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// Each request goes to one arm, chosen at random (weighted, seeded).
    Split,
    /// The client is served by the primary arm; a copy goes to the other arm at once.
    Mirror,
    /// Like mirror, but the copy is sent after the primary's response ended.
    Paired,
}

#[derive(Debug, Clone)]
pub struct ExperimentConfig {
    pub mode: Mode,
    /// Route indices (into `Config::routes`) of the two arms.
    pub arms: [usize; 2],
    /// The arm that authenticates (the gateway); the other is the direct arm.
    pub gateway: usize,
    /// The arm that serves the client in mirror/paired mode.
    pub primary: usize,
    pub weights: [f64; 2],
    pub seed: u64,
    /// Fraction of requests copied (mirror/paired).
    pub sample: f64,
    pub max_shadow_in_flight: usize,
    /// Add a per-request `cache_salt` (vLLM prefix-cache isolation) to experiment requests.
    pub cache_salt: bool,
    /// Header that forces an arm; always stripped before forwarding.
    pub route_header: HeaderName,
    pub allow_forcing: bool,
    /// Key ids (fingerprints or aliases) allowed on the direct arm without the gateway.
    pub direct_keys: HashSet<String>,
}

pub fn validate(
    e: RawExperiment,
    routes: &[RouteConfig],
    file: &str,
) -> Result<ExperimentConfig, ConfigError> {
    let mode = match e.mode.as_deref().unwrap_or(defaults::EXPERIMENT_MODE) {
        "off" => Mode::Off,
        "split" => Mode::Split,
        "mirror" => Mode::Mirror,
        "paired" => Mode::Paired,
        other => {
            return Err(err(
                file,
                "experiment.mode",
                format!("{other:?} is not one of off, split, mirror, paired"),
            ))
        }
    };
    let route_header_s = e
        .route_header
        .unwrap_or_else(|| defaults::ROUTE_HEADER.into());
    let route_header = HeaderName::from_bytes(route_header_s.as_bytes()).map_err(|_| {
        err(
            file,
            "experiment.route_header",
            format!("{route_header_s:?} is not a header name"),
        )
    })?;
    let idx = |name: &str, key: &str| -> Result<usize, ConfigError> {
        routes
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| err(file, key, format!("{name:?} is not a route name")))
    };
    let needs_arms = mode != Mode::Off || e.allow_forcing.unwrap_or(false);
    let arms = match (&e.arms, needs_arms) {
        (Some(a), _) if a.len() == 2 => [
            idx(&a[0], "experiment.arms[0]")?,
            idx(&a[1], "experiment.arms[1]")?,
        ],
        (Some(_), _) => {
            return Err(err(
                file,
                "experiment.arms",
                "exactly two route names, e.g. [\"direct\", \"gateway\"]",
            ))
        }
        (None, true) => {
            return Err(err(
                file,
                "experiment.arms",
                "required: the two routes to compare",
            ))
        }
        (None, false) => [0, 0],
    };
    if needs_arms && arms[0] == arms[1] {
        return Err(err(
            file,
            "experiment.arms",
            "the two arms must be different routes",
        ));
    }
    let gateway = match &e.gateway {
        Some(g) => {
            let i = idx(g, "experiment.gateway")?;
            if !arms.contains(&i) {
                return Err(err(
                    file,
                    "experiment.gateway",
                    format!("{g:?} is not one of the arms"),
                ));
            }
            i
        }
        // By convention the arm named "gateway"; else the second arm.
        None => arms
            .iter()
            .copied()
            .find(|&i| routes.get(i).is_some_and(|r| r.name == "gateway"))
            .unwrap_or(arms[1]),
    };
    let primary = match &e.primary {
        Some(p) => {
            let i = idx(p, "experiment.primary")?;
            if !arms.contains(&i) {
                return Err(err(
                    file,
                    "experiment.primary",
                    format!("{p:?} is not one of the arms"),
                ));
            }
            i
        }
        None => gateway,
    };
    let weights = match e.weights {
        None => defaults::WEIGHTS,
        Some(w)
            if w.len() == 2
                && w.iter().all(|x| x.is_finite() && *x >= 0.0)
                && w[0] + w[1] > 0.0 =>
        {
            [w[0], w[1]]
        }
        Some(_) => {
            return Err(err(
                file,
                "experiment.weights",
                "two non-negative numbers, not both 0",
            ))
        }
    };
    let sample = e.sample.unwrap_or(defaults::SAMPLE);
    if !(0.0..=1.0).contains(&sample) {
        return Err(err(
            file,
            "experiment.sample",
            format!("{sample} must be between 0 and 1"),
        ));
    }
    Ok(ExperimentConfig {
        mode,
        arms,
        gateway,
        primary,
        weights,
        seed: e.seed.unwrap_or(defaults::EXPERIMENT_SEED),
        sample,
        max_shadow_in_flight: e
            .max_shadow_in_flight
            .unwrap_or(defaults::MAX_SHADOW_IN_FLIGHT),
        cache_salt: e.cache_salt.unwrap_or(false),
        route_header,
        allow_forcing: e.allow_forcing.unwrap_or(false),
        direct_keys: e.direct_keys.into_iter().collect(),
    })
}
