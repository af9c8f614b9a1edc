//! `[experiment]`: the gateway-hop A/B. Which routes are the arms (two, or more for traffic bench
//! drives: forced or `split`), which one is the baseline (the direct arm, guarded), how traffic
//! is shared between them, and who may force an arm. Only checked here; the choice per request
//! is `route::arm`.

use std::collections::HashSet;

use http::header::HeaderName;

use super::raw::RawExperiment;
use super::routes::RouteConfig;
use super::{defaults, err, ConfigError};

/// How the arms of the gateway-hop experiment share traffic.
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
    /// Route indices (into `Config::routes`) of the arms, in the order given: two, or more
    /// (`off` with forcing, or `split`); `[0, 0]` when the experiment has none.
    pub arms: Vec<usize>,
    /// The baseline arm: the direct arm, which only `direct_keys` may use (forced or split) and
    /// which receives a copy only once a gateway accepted the original.
    pub baseline: usize,
    /// The gateway arm of two; with more, the first arm that is not the baseline.
    pub gateway: usize,
    /// The arm that serves the client in mirror/paired mode.
    pub primary: usize,
    /// One weight per arm (split), in the order of `arms`.
    pub weights: Vec<f64>,
    pub seed: u64,
    /// Fraction of requests copied (mirror/paired).
    pub sample: f64,
    pub max_shadow_in_flight: usize,
    /// Add a per-request `cache_salt` (vLLM prefix-cache isolation) to experiment requests.
    pub cache_salt: bool,
    /// Header that forces an arm; always stripped before forwarding.
    pub route_header: HeaderName,
    pub allow_forcing: bool,
    /// Key ids (fingerprints or aliases) allowed on the baseline (direct) arm.
    pub direct_keys: HashSet<String>,
}

/// Why mirror and paired keep two arms (the error's text).
const TWO_FOR_COPIES: &str = "mirror and paired copy a request to one other arm: give exactly two arms, or use split or forced arms (bench --arms) for more";

pub fn validate(
    e: RawExperiment,
    routes: &[RouteConfig],
    ctx: &super::admit::Context<'_>,
    file: &str,
) -> Result<ExperimentConfig, ConfigError> {
    let mode = mode(e.mode.as_deref(), file)?;
    // Fingerprints or aliases, as the records write them; never a key (nor quoted back).
    let direct_keys =
        super::admit::key_ids(&e.direct_keys, "experiment.direct_keys", ctx, file, false)?;
    let route_header_s = e
        .route_header
        .clone()
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
    if matches!(mode, Mode::Mirror | Mode::Paired) && arms.len() > 2 {
        return Err(err(
            file,
            "experiment.arms",
            format!(
                "{} arms with mode {:?}: {TWO_FOR_COPIES}",
                arms.len(),
                mode_name(mode)
            ),
        ));
    }
    let (baseline, gateway) = roles(&e, &arms, routes, file)?;
    let primary = match &e.primary {
        Some(p) => one_of(&arms, p, "experiment.primary", routes, file)?,
        None => gateway,
    };
    let weights = weights(e.weights.as_deref(), arms.len(), file)?;
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
        baseline,
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
        direct_keys: direct_keys.into_iter().collect(),
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

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Off => "off",
        Mode::Split => "split",
        Mode::Mirror => "mirror",
        Mode::Paired => "paired",
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

/// `experiment.arms`: two or more different routes, required when the experiment is on or an
/// arm may be forced; `[0, 0]` when neither and absent.
fn arms(
    names: Option<&[String]>,
    needs_arms: bool,
    routes: &[RouteConfig],
    file: &str,
) -> Result<Vec<usize>, ConfigError> {
    let names = match (names, needs_arms) {
        (Some(n), _) => n,
        (None, true) => {
            return Err(err(
                file,
                "experiment.arms",
                "required: the routes to compare (two or more)",
            ))
        }
        (None, false) => return Ok(vec![0, 0]),
    };
    if names.len() < 2 {
        return Err(err(
            file,
            "experiment.arms",
            "two or more route names, e.g. [\"direct\", \"gateway\"]",
        ));
    }
    let mut arms = Vec::with_capacity(names.len());
    for (k, name) in names.iter().enumerate() {
        let i = route_index(routes, name, &format!("experiment.arms[{k}]"), file)?;
        if needs_arms && arms.contains(&i) {
            return Err(err(
                file,
                "experiment.arms",
                match names.len() {
                    2 => "the two arms must be different routes".to_owned(),
                    _ => format!("{name:?} is given twice: the arms must be different routes"),
                },
            ));
        }
        arms.push(i);
    }
    Ok(arms)
}

/// The baseline arm and the (first) gateway arm. `baseline` names it; else, with two arms,
/// the one `gateway` does not name; else the arm named `direct`; else, of two arms one named
/// `gateway`, the other; else the first arm.
fn roles(
    e: &RawExperiment,
    arms: &[usize],
    routes: &[RouteConfig],
    file: &str,
) -> Result<(usize, usize), ConfigError> {
    let named = |n: &str| {
        arms.iter()
            .copied()
            .find(|&i| routes.get(i).is_some_and(|r| r.name == n))
    };
    let first = arms.first().copied().unwrap_or(0);
    let gateway = match &e.gateway {
        Some(_) if arms.len() > 2 => {
            return Err(err(
                file,
                "experiment.gateway",
                format!(
                    "names the gateway of two arms; with {} arms every arm but the baseline is a gateway: name the baseline with experiment.baseline",
                    arms.len()
                ),
            ))
        }
        Some(g) => Some(one_of(arms, g, "experiment.gateway", routes, file)?),
        None => None,
    };
    let other = |of: usize| arms.iter().copied().find(|&i| i != of);
    let baseline = match (&e.baseline, gateway) {
        (Some(b), _) => one_of(arms, b, "experiment.baseline", routes, file)?,
        (None, Some(g)) => other(g).unwrap_or(first),
        (None, None) => named("direct")
            .or_else(|| named("gateway").filter(|_| arms.len() == 2).and_then(other))
            .unwrap_or(first),
    };
    let gateway = gateway.or_else(|| other(baseline)).unwrap_or(first);
    if arms.len() >= 2 && arms[0] != arms[1] && gateway == baseline {
        return Err(err(
            file,
            "experiment.baseline",
            "the baseline is the direct arm: it cannot be experiment.gateway too",
        ));
    }
    Ok((baseline, gateway))
}

/// The index of the route `name` given at `key`, which must be one of the arms.
fn one_of(
    arms: &[usize],
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

/// `experiment.weights`: one non-negative number per arm, not all 0; equal when absent.
fn weights(w: Option<&[f64]>, n: usize, file: &str) -> Result<Vec<f64>, ConfigError> {
    match w {
        None if n == 2 => Ok(defaults::WEIGHTS.to_vec()),
        None => Ok(vec![1.0 / n as f64; n]),
        Some(w)
            if w.len() == n
                && w.iter().all(|x| x.is_finite() && *x >= 0.0)
                && w.iter().sum::<f64>() > 0.0 =>
        {
            Ok(w.to_vec())
        }
        Some(w) => Err(err(
            file,
            "experiment.weights",
            format!(
                "{} non-negative numbers, one per arm, not all 0 (given {})",
                n,
                w.len()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, Mode, Overrides};

    fn load(experiment: &str) -> Result<Config, ConfigError> {
        let mut t = String::new();
        for name in ["direct", "gateway", "nginx", "litellm"] {
            t.push_str(&format!(
                "[[routes]]\nname='{name}'\nupstream='http://{name}:1'\npath_prefix='/{name}'\n"
            ));
        }
        Config::from_toml(
            &format!("{t}[experiment]\n{experiment}"),
            "t.toml",
            &Overrides::default(),
        )
    }

    fn error(experiment: &str) -> String {
        load(experiment).unwrap_err().to_string()
    }

    #[test]
    fn two_arm_configs_keep_their_meaning() {
        let c = load("mode='paired'\narms=['direct','gateway']\n")
            .unwrap()
            .experiment;
        assert_eq!(
            (c.arms, c.baseline, c.gateway, c.primary),
            (vec![0, 1], 0, 1, 1)
        );
        assert_eq!(c.weights, [0.5, 0.5]);
        // Gateway first: still the gateway, the other arm the baseline.
        let c = load("mode='split'\narms=['gateway','nginx']\n")
            .unwrap()
            .experiment;
        assert_eq!((c.baseline, c.gateway), (2, 1));
        // Neither named: the first is the baseline, the second the gateway.
        let c = load("mode='split'\narms=['nginx','litellm']\n")
            .unwrap()
            .experiment;
        assert_eq!((c.baseline, c.gateway), (2, 3));
        // `gateway` names the gateway; the other arm is the baseline.
        let c = load("mode='mirror'\narms=['direct','gateway']\ngateway='direct'\n")
            .unwrap()
            .experiment;
        assert_eq!((c.baseline, c.gateway, c.primary), (1, 0, 0));
    }

    #[test]
    fn many_arms_for_split_and_forcing() {
        let c = load("mode='split'\narms=['nginx','direct','litellm']\nweights=[1,2,3]\n")
            .unwrap()
            .experiment;
        assert_eq!(
            (c.mode, c.arms.clone(), c.baseline, c.gateway),
            (Mode::Split, vec![2, 0, 3], 0, 2)
        );
        assert_eq!(c.weights, [1.0, 2.0, 3.0]);
        let c = load("allow_forcing=true\narms=['nginx','litellm','gateway']\n")
            .unwrap()
            .experiment;
        assert_eq!(
            (c.baseline, c.weights.len()),
            (2, 3),
            "no direct: the first arm"
        );
        let c = load("allow_forcing=true\narms=['direct','nginx','litellm']\nbaseline='nginx'\n")
            .unwrap()
            .experiment;
        assert_eq!((c.baseline, c.gateway), (2, 0));
    }

    #[test]
    fn direct_keys_are_fingerprints_or_aliases_never_keys() {
        let fp = format!("sha256:{}", "0a".repeat(32));
        let c = load(&format!(
            "arms=['direct','gateway']\ndirect_keys=['{fp}']\n"
        ))
        .unwrap()
        .experiment;
        assert!(c.direct_keys.contains(&fp));
        for bad in ["sk-live-123456", "sha256:…", "nonsense"] {
            let e = error(&format!(
                "arms=['direct','gateway']\ndirect_keys=['{bad}']\n"
            ));
            assert!(
                e.starts_with(
                    "t.toml: experiment.direct_keys[0]: the value is neither sha256:<64 hex>"
                ) && !e.contains(bad),
                "{e}"
            );
        }
    }

    #[test]
    fn mirror_and_paired_refuse_more_than_two_arms() {
        for mode in ["mirror", "paired"] {
            let e = error(&format!(
                "mode='{mode}'\narms=['direct','nginx','litellm']\n"
            ));
            assert!(
                e.starts_with("t.toml: experiment.arms: 3 arms with mode \"")
                    && e.contains("mirror and paired copy a request to one other arm: give exactly two arms, or use split or forced arms (bench --arms) for more"),
                "{e}"
            );
        }
    }

    #[test]
    fn bad_arms_are_named() {
        let e = error("mode='split'\narms=['direct']\n");
        assert!(
            e.starts_with("t.toml: experiment.arms: two or more route names"),
            "{e}"
        );
        let e = error("mode='split'\narms=['direct','nginx','direct']\n");
        assert!(
            e.contains("experiment.arms: \"direct\" is given twice"),
            "{e}"
        );
        let e = error("mode='split'\narms=['direct','direct']\n");
        assert!(
            e.contains("experiment.arms: the two arms must be different routes"),
            "{e}"
        );
        let e = error("mode='split'\narms=['direct','nginx','haproxy']\n");
        assert!(
            e.contains("experiment.arms[2]: \"haproxy\" is not a route name"),
            "{e}"
        );
        let e = error("mode='split'\n");
        assert!(e.contains("experiment.arms: required"), "{e}");
    }

    #[test]
    fn bad_baseline_gateway_and_weights_are_named() {
        let e = error("mode='split'\narms=['direct','nginx','litellm']\nbaseline='gateway'\n");
        assert!(
            e.contains("t.toml: experiment.baseline: \"gateway\" is not one of the arms"),
            "{e}"
        );
        let e = error("mode='split'\narms=['direct','nginx','litellm']\ngateway='nginx'\n");
        assert!(
            e.contains("t.toml: experiment.gateway: names the gateway of two arms; with 3 arms"),
            "{e}"
        );
        let e = error(
            "mode='split'\narms=['direct','gateway']\ngateway='gateway'\nbaseline='gateway'\n",
        );
        assert!(
            e.contains("t.toml: experiment.baseline: the baseline is the direct arm"),
            "{e}"
        );
        let e = error("mode='split'\narms=['direct','nginx','litellm']\nweights=[1,1]\n");
        assert!(e.contains("t.toml: experiment.weights: 3 non-negative numbers, one per arm, not all 0 (given 2)"), "{e}");
        let e = error("mode='split'\narms=['direct','nginx','litellm']\nweights=[0,0,0]\n");
        assert!(e.contains("experiment.weights"), "{e}");
    }
}
