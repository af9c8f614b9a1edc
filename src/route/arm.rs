//! The experiment's arm choice, as a pure function: (config, the route the path picked, the
//! forced-arm header, the key's id, a random draw) → which route serves the request, what its
//! record says of the experiment, and whether a copy goes to the other arm — or a refusal.
//!
//! NB: the baseline (direct) arm is never a way around a gateway's authentication: it is chosen
//! (forced or split) only for a key in `direct_keys`; a copy goes there only once the gateway
//! accepted the original (decided by the caller when the primary answered).

use crate::config::{Config, Mode};
use crate::meter::Experiment;

/// The random numbers one request may use: a uniform draw in [0, 1) and a pair id.
#[derive(Debug, Clone, Copy)]
pub struct Draw {
    pub unit: f64,
    pub pair: u64,
}

/// What serves a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// Index into `Config::routes` of the route that serves the client.
    pub route: usize,
    /// The record's `experiment` (arm and pair id), for experiment traffic.
    pub experiment: Option<Experiment>,
    /// Send a copy to this arm (route index) under this pair id.
    pub copy: Option<(usize, String)>,
}

/// Why a request may not have the arm it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The forced-arm header names no experiment arm.
    UnknownArm,
    /// The key may not force the baseline (direct) arm (not in `direct_keys`).
    ForcedDirect,
}

/// Whether the choice for a request on `route` depends on its key (so the key must be
/// fingerprinted up front rather than with the record).
pub fn needs_key(cfg: &Config, route: usize, forced: bool) -> bool {
    forced || in_experiment(cfg, route)
}

fn in_experiment(cfg: &Config, route: usize) -> bool {
    let e = &cfg.experiment;
    e.mode != Mode::Off && e.arms.contains(&route)
}

fn arm(cfg: &Config, route: usize, pair_id: Option<String>) -> Option<Experiment> {
    Some(Experiment {
        arm: cfg.routes.get(route)?.name.clone(),
        pair_id,
    })
}

/// Choose for a request that the path sent to `route`. `forced` is the route header's value
/// (always taken off the request before this); `draw` is called at most once, only when the
/// choice is random.
pub fn choose(
    cfg: &Config,
    route: usize,
    forced: Option<&[u8]>,
    key_id: Option<&str>,
    draw: impl FnOnce() -> Draw,
) -> Result<Choice, Refusal> {
    let e = &cfg.experiment;
    let direct_ok = key_id.is_some_and(|k| e.direct_keys.contains(k));
    let plain = Choice {
        route,
        experiment: None,
        copy: None,
    };
    if let (Some(name), true) = (forced, e.allow_forcing) {
        let Some(i) = e
            .arms
            .iter()
            .copied()
            .find(|&i| cfg.routes.get(i).is_some_and(|r| r.name.as_bytes() == name))
        else {
            return Err(Refusal::UnknownArm);
        };
        if i == e.baseline && !direct_ok {
            return Err(Refusal::ForcedDirect);
        }
        return Ok(Choice {
            route: i,
            experiment: arm(cfg, i, None),
            copy: None,
        });
    }
    if !in_experiment(cfg, route) {
        return Ok(plain);
    }
    let d = draw();
    Ok(match e.mode {
        Mode::Off => plain,
        Mode::Split => {
            let chosen = split(&e.arms, &e.weights, e.baseline, direct_ok, d.unit);
            Choice {
                route: chosen,
                experiment: arm(cfg, chosen, None),
                copy: None,
            }
        }
        Mode::Mirror | Mode::Paired => {
            let pair = (d.unit < e.sample).then(|| format!("{:016x}", d.pair));
            // NB: mirror and paired have exactly two arms (config::experiment).
            let other = e
                .arms
                .iter()
                .copied()
                .find(|&a| a != e.primary)
                .unwrap_or(e.primary);
            Choice {
                route: e.primary,
                experiment: arm(cfg, e.primary, pair.clone()),
                copy: pair.map(|p| (other, p)),
            }
        }
    })
}

/// Split's pick for a draw `unit` in [0, 1): an arm by weight; without `direct_ok`, only the
/// arms other than the baseline, by their weights (equally when those are all 0).
fn split(arms: &[usize], weights: &[f64], baseline: usize, direct_ok: bool, unit: f64) -> usize {
    // The arms this key may draw, walked twice rather than collected: no allocation per request.
    let open = || {
        arms.iter()
            .copied()
            .zip(weights.iter().copied())
            .filter(move |&(a, _)| direct_ok || a != baseline)
    };
    let (count, total) = open().fold((0usize, 0.0), |(n, t), (_, w)| (n + 1, t + w));
    let equal = total <= 0.0;
    let total = if equal { count as f64 } else { total };
    let mut at = unit * total;
    for (a, w) in open() {
        let w = if equal { 1.0 } else { w };
        if at < w {
            return a;
        }
        at -= w;
    }
    // A draw at the top end (rounding): the last open arm with weight.
    open()
        .rfind(|&(_, w)| equal || w > 0.0)
        .map_or(baseline, |(a, _)| a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;

    fn cfg(experiment: &str) -> Config {
        Config::from_toml(
            &format!(
                "[[routes]]\nname='direct'\nupstream='http://a:1'\n\
                 [[routes]]\nname='gateway'\nupstream='http://b:1'\npath_prefix='/gateway'\n\
                 [[routes]]\nname='other'\nupstream='http://c:1'\npath_prefix='/other'\n\
                 [keys.aliases]\n'sha256:abababababababababababababababababababababababababababababababab'='team-direct'\n[experiment]\narms=['direct','gateway']\ndirect_keys=['team-direct']\n{experiment}"
            ),
            "t",
            &Overrides::default(),
        )
        .unwrap()
    }

    const DIRECT: usize = 0;
    const GATEWAY: usize = 1;
    const OTHER: usize = 2;

    fn draw(unit: f64) -> impl FnOnce() -> Draw {
        move || Draw { unit, pair: 0xab }
    }

    fn never() -> impl FnOnce() -> Draw {
        || panic!("no random draw for this request")
    }

    fn arm_of(c: &Choice) -> (&str, Option<&str>) {
        let e = c.experiment.as_ref().unwrap();
        (e.arm.as_str(), e.pair_id.as_deref())
    }

    #[test]
    fn off_routes_by_path_and_draws_nothing() {
        let c = cfg("mode='off'\n");
        for r in [DIRECT, GATEWAY, OTHER] {
            let got = choose(&c, r, None, Some("team-direct"), never()).unwrap();
            assert_eq!((got.route, got.experiment, got.copy), (r, None, None));
        }
        assert!(!needs_key(&c, DIRECT, false));
        assert!(needs_key(&c, DIRECT, true));
    }

    #[test]
    fn split_sends_only_direct_keys_to_the_direct_arm() {
        let c = cfg("mode='split'\nweights=[1.0, 1.0]\n");
        assert!(needs_key(&c, GATEWAY, false) && !needs_key(&c, OTHER, false));
        // A draw below the direct arm's weight picks it — for a direct key only.
        let got = choose(&c, GATEWAY, None, Some("team-direct"), draw(0.1)).unwrap();
        assert_eq!((got.route, arm_of(&got)), (DIRECT, ("direct", None)));
        let got = choose(&c, DIRECT, None, Some("sha256:someone"), draw(0.1)).unwrap();
        assert_eq!((got.route, arm_of(&got)), (GATEWAY, ("gateway", None)));
        let got = choose(&c, DIRECT, None, None, draw(0.1)).unwrap();
        assert_eq!(got.route, GATEWAY);
        let got = choose(&c, DIRECT, None, Some("team-direct"), draw(0.9)).unwrap();
        assert_eq!((got.route, got.copy), (GATEWAY, None));
        // A route outside the experiment is left alone.
        let got = choose(&c, OTHER, None, None, never()).unwrap();
        assert_eq!((got.route, got.experiment), (OTHER, None));
    }

    #[test]
    fn mirror_and_paired_serve_the_primary_and_copy_a_sample() {
        for mode in ["mirror", "paired"] {
            let c = cfg(&format!("mode='{mode}'\nsample=0.5\n"));
            let got = choose(&c, DIRECT, None, None, draw(0.2)).unwrap();
            assert_eq!(
                got.route, GATEWAY,
                "{mode}: the primary defaults to the gateway"
            );
            assert_eq!(arm_of(&got), ("gateway", Some("00000000000000ab")));
            assert_eq!(got.copy, Some((DIRECT, "00000000000000ab".into())));
            // Outside the sample: served by the primary, no pair, no copy.
            let got = choose(&c, GATEWAY, None, None, draw(0.7)).unwrap();
            assert_eq!(
                (got.route, arm_of(&got), &got.copy),
                (GATEWAY, ("gateway", None), &None)
            );
        }
        let c = cfg("mode='mirror'\nprimary='direct'\n");
        let got = choose(&c, GATEWAY, None, None, draw(0.0)).unwrap();
        assert_eq!((got.route, got.copy.map(|c| c.0)), (DIRECT, Some(GATEWAY)));
    }

    #[test]
    fn forcing_picks_an_arm_or_refuses() {
        let c = cfg("mode='split'\nallow_forcing=true\n");
        let got = choose(&c, DIRECT, Some(b"gateway"), None, never()).unwrap();
        assert_eq!((got.route, arm_of(&got)), (GATEWAY, ("gateway", None)));
        let got = choose(&c, GATEWAY, Some(b"direct"), Some("team-direct"), never()).unwrap();
        assert_eq!((got.route, arm_of(&got)), (DIRECT, ("direct", None)));
        assert_eq!(
            choose(&c, GATEWAY, Some(b"direct"), Some("sha256:x"), never()),
            Err(Refusal::ForcedDirect)
        );
        assert_eq!(
            choose(&c, GATEWAY, Some(b"direct"), None, never()),
            Err(Refusal::ForcedDirect)
        );
        assert_eq!(
            choose(&c, DIRECT, Some(b"other"), None, never()),
            Err(Refusal::UnknownArm)
        );
        assert_eq!(
            choose(&c, DIRECT, Some(b"gate"), None, never()),
            Err(Refusal::UnknownArm)
        );
    }

    #[test]
    fn the_header_is_ignored_when_forcing_is_off() {
        let c = cfg("mode='off'\n");
        let got = choose(&c, DIRECT, Some(b"gateway"), None, never()).unwrap();
        assert_eq!((got.route, got.experiment), (DIRECT, None));
        let c = cfg("mode='split'\n");
        let got = choose(&c, GATEWAY, Some(b"direct"), Some("team-direct"), draw(0.9)).unwrap();
        assert_eq!(got.route, GATEWAY, "split, not the header, decided");
    }

    /// Four routes, three arms: the baseline `direct` and two gateways.
    fn three(experiment: &str) -> Config {
        Config::from_toml(
            &format!(
                "[[routes]]\nname='direct'\nupstream='http://a:1'\n\
                 [[routes]]\nname='nginx'\nupstream='http://b:1'\npath_prefix='/nginx'\n\
                 [[routes]]\nname='litellm'\nupstream='http://c:1'\npath_prefix='/litellm'\n\
                 [[routes]]\nname='other'\nupstream='http://d:1'\npath_prefix='/other'\n\
                 [keys.aliases]\n'sha256:abababababababababababababababababababababababababababababababab'='team-direct'\n[experiment]\narms=['nginx','direct','litellm']\ndirect_keys=['team-direct']\n{experiment}"
            ),
            "t",
            &Overrides::default(),
        )
        .unwrap()
    }

    #[test]
    fn split_over_three_arms_spreads_by_weight_and_keeps_others_off_the_baseline() {
        let c = three("mode='split'\nweights=[1.0, 2.0, 1.0]\n");
        assert_eq!(c.experiment.baseline, DIRECT, "the arm named direct");
        let (n, l) = (1, 2);
        let mut seen = [[0usize; 3]; 2];
        for k in 0..400 {
            let u = (k as f64 + 0.5) / 400.0;
            for (who, key) in [(0, "team-direct"), (1, "sha256:someone")] {
                let got = choose(&c, n, None, Some(key), draw(u)).unwrap();
                assert_eq!(arm_of(&got).0, c.routes[got.route].name);
                seen[who][got.route] += 1;
            }
        }
        // A direct key: 1 : 2 : 1 over nginx, direct, litellm.
        assert_eq!(seen[0], [200, 100, 100]);
        // Everyone else: never the baseline, 1 : 1 over nginx and litellm.
        assert_eq!(seen[1][DIRECT], 0);
        assert_eq!((seen[1][n], seen[1][l]), (200, 200));
        // A route outside the experiment is left alone.
        let got = choose(&c, 3, None, None, never()).unwrap();
        assert_eq!((got.route, got.experiment), (3, None));
    }

    #[test]
    fn any_of_three_arms_can_be_forced_and_the_baseline_only_by_direct_keys() {
        let c = three("allow_forcing=true\n");
        for (name, route) in [("nginx", 1), ("litellm", 2)] {
            let got = choose(&c, DIRECT, Some(name.as_bytes()), None, never()).unwrap();
            assert_eq!((got.route, arm_of(&got)), (route, (name, None)));
        }
        assert_eq!(
            choose(&c, 1, Some(b"direct"), Some("sha256:x"), never()),
            Err(Refusal::ForcedDirect)
        );
        let got = choose(&c, 1, Some(b"direct"), Some("team-direct"), never()).unwrap();
        assert_eq!(got.route, DIRECT);
        assert_eq!(
            choose(&c, 1, Some(b"other"), None, never()),
            Err(Refusal::UnknownArm)
        );
        // Another baseline: then it is the guarded arm, and direct may be forced by anyone.
        let c = three("allow_forcing=true\nbaseline='litellm'\n");
        assert_eq!(
            choose(&c, 1, Some(b"litellm"), None, never()),
            Err(Refusal::ForcedDirect)
        );
        assert_eq!(
            choose(&c, 1, Some(b"direct"), None, never()).unwrap().route,
            DIRECT
        );
    }
}
