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
    let mode = mode(e.mode.as_deref(), file)?;
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
    let needs_arms = mode != Mode::Off || e.allow_forcing.unwrap_or(false);
    let arms = arms(e.arms.as_deref(), needs_arms, routes, file)?;
    let gateway = match &e.gateway {
        Some(g) => one_of(&arms, g, "experiment.gateway", routes, file)?,
        // By convention the arm named "gateway"; else the second arm.
        None => arms
            .iter()
            .copied()
            .find(|&i| routes.get(i).is_some_and(|r| r.name == "gateway"))
            .unwrap_or(arms[1]),
    };
    let primary = match &e.primary {
        Some(p) => one_of(&arms, p, "experiment.primary", routes, file)?,
        None => gateway,
    };
    let weights = weights(e.weights.as_deref(), file)?;
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

/// `experiment.mode`, `off` when absent.
fn mode(mode: Option<&str>, file: &str) -> Result<Mode, ConfigError> {
    match mode.unwrap_or(defaults::EXPERIMENT_MODE) {
        "off" => Ok(Mode::Off),
        "split" => Ok(Mode::Split),
        "mirror" => Ok(Mode::Mirror),
        "paired" => Ok(Mode::Paired),
        other => Err(err(
            file,
            "experiment.mode",
            format!("{other:?} is not one of off, split, mirror, paired"),
        )),
    }
}

/// The index of the route called `name`; an error at `key` if there is none.
fn route_index(
    routes: &[RouteConfig],
    name: &str,
    key: &str,
    file: &str,
) -> Result<usize, ConfigError> {
    routes
        .iter()
        .position(|r| r.name == name)
        .ok_or_else(|| err(file, key, format!("{name:?} is not a route name")))
}

/// `experiment.arms`: two different routes, required when the experiment is on or an arm may
/// be forced; `[0, 0]` when neither and absent.
fn arms(
    names: Option<&[String]>,
    needs_arms: bool,
    routes: &[RouteConfig],
    file: &str,
) -> Result<[usize; 2], ConfigError> {
    let arms = match (names, needs_arms) {
        (Some([a, b]), _) => [
            route_index(routes, a, "experiment.arms[0]", file)?,
            route_index(routes, b, "experiment.arms[1]", file)?,
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
    Ok(arms)
}

/// The index of the route `name` given at `key`, which must be one of the arms.
fn one_of(
    arms: &[usize; 2],
    name: &str,
    key: &str,
    routes: &[RouteConfig],
    file: &str,
) -> Result<usize, ConfigError> {
    let i = route_index(routes, name, key, file)?;
    if !arms.contains(&i) {
        return Err(err(file, key, format!("{name:?} is not one of the arms")));
    }
    Ok(i)
}

/// `experiment.weights`: two non-negative numbers, not both 0; the default when absent.
fn weights(w: Option<&[f64]>, file: &str) -> Result<[f64; 2], ConfigError> {
    match w {
        None => Ok(defaults::WEIGHTS),
        Some(&[a, b]) if a.is_finite() && a >= 0.0 && b.is_finite() && b >= 0.0 && a + b > 0.0 => {
            Ok([a, b])
        }
        Some(_) => Err(err(
            file,
            "experiment.weights",
            "two non-negative numbers, not both 0",
        )),
    }
}
