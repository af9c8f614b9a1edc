//! `tokentap bench`'s arguments read into the run's settings (`settings.rs`): each flag parsed
//! and checked, the load decided once from them (a replay, conversations, a search, an open or
//! a closed sweep) and given the settings it reads. Flags that ask for two loads at once are
//! refused; a flag only another load reads is checked for range and not used. The usage errors
//! found once every flag is read (`validate`) say `bench: ` first, as they did when the run
//! found them.

use super::args::Args;
use super::model::settings::{
    Bench, Closed, Common, Conversations, Experiment, Load, Open, OpenLoop, PromptSpec, Replay,
    Scraping, Search, SearchOver, CONCURRENCY,
};

/// The arguments as the run's settings, or the usage error to print.
pub(super) fn bench(a: Args) -> Result<Bench, String> {
    if a.concurrency.is_some() && !a.request_rate.is_empty() {
        return Err("--concurrency sets a closed loop's levels; with --request-rate (an open loop) the cap on requests in flight is --max-concurrency".into());
    }
    if a.max_error_rate.is_some() && a.until.is_some() {
        return Err("--max-error-rate with --until: a search's last level is meant to break (--until errors stops at the first level with errors)".into());
    }
    let p = Parsed::of(&a)?;
    let flags = ArmFlags {
        given: a.arms.is_some(),
        arms: a
            .arms
            .clone()
            .unwrap_or_else(|| vec!["direct".into(), "gateway".into()]),
        baseline: a.baseline.clone(),
        cache_salt: a.cache_salt,
        arm_pid: a.arm_pid.clone(),
        arm_cgroup: a.arm_cgroup.clone(),
    };
    let experiment = experiment(&flags, a.route_header.as_deref())?;
    validate(&a, &p, &experiment).map_err(|e| format!("bench: {e}"))?;
    let job_index = std::env::var(super::shard::JOB_INDEX).ok();
    let fleet = super::shard::Fleet::of(
        a.shard.as_deref(),
        a.start_at.as_deref(),
        a.cell_window.map(Into::into),
        a.run_id.as_deref(),
        job_index.as_deref(),
    )?;
    let mut common = common(&a, &p);
    common.clickhouse = a
        .clickhouse
        .clone()
        .map(|url| (url, a.clickhouse_table.clone()));
    let load = load(a, p, experiment);
    if let Some(shard) = fleet.shard {
        sharded(shard, &load)?;
        if common.requests < shard.of as usize {
            return Err(format!("--shard: --requests {} is below {} shards: each shard measures at least one request a cell", common.requests, shard.of));
        }
        common.out = common.out.join(shard.folder());
        if !shard.scrapes() {
            common.scrape.plan = super::scrape::ScrapePlan::Off;
        }
    }
    common.fleet = fleet;
    Ok(Bench { load, common })
}

/// A shard splits a closed sweep whose every level is at least N (one request in flight per
/// shard), or an open sweep.
fn sharded(shard: super::shard::Shard, load: &Load) -> Result<(), String> {
    let n = shard.of as usize;
    match load {
        Load::Closed(c) => match c.concurrency.iter().find(|c| **c < n) {
            Some(low) => Err(format!("--shard {}/{n}: concurrency {low} is below {n} shards: each shard keeps at least one request in flight", shard.index)),
            None => Ok(()),
        },
        Load::Open(_) => Ok(()),
        _ => Err("--shard splits a closed or open sweep (--concurrency, --request-rate), not a search, a replay or conversations".into()),
    }
}

/// The settings every load shares.
fn common(a: &Args, p: &Parsed) -> Common {
    Common {
        target: a.target.clone(),
        out: a.out.clone(),
        force: a.force,
        model: a.model.clone(),
        api_key: std::env::var(&a.api_key_env)
            .ok()
            .filter(|k| !k.is_empty())
            .map(crate::keys::Secret::new),
        headers: Vec::new(),
        api: a.api.into(),
        seed: a.seed,
        fixed_output: a.fixed_output,
        stream: a.stream,
        calibrate: !a.no_calibrate,
        requests: a.requests,
        warmup: a.warmup,
        prompts: PromptSpec {
            dataset: a.dataset.clone(),
            synthetic: a.synthetic.clone(),
            short_max: a.short_max,
            long_min: a.long_min,
            outputs: p.outputs,
            prompts_per_bucket: a.prompts_per_bucket,
            buckets: a.buckets.clone(),
            shared_prefix: a.shared_prefix,
            prefix_groups: a.prefix_groups,
        },
        quiet: false,
        estimate: !a.no_estimate,
        progress_every: a.progress_every.into(),
        metrics_listen: a.metrics_listen.clone(),
        scrape: Scraping {
            plan: p.scrape.clone(),
            interval: a.scrape_interval.into(),
            metrics: a.scrape_metric.clone(),
        },
        hardware: crate::report::engine::Hardware {
            gpu: p.gpu.map(|g| g.name.to_owned()),
            peak_bandwidth_bytes_s: a
                .peak_bandwidth
                .map(|v| v * 1e9)
                .or(p.gpu.map(|g| g.bandwidth)),
            peak_flops: a.peak_flops.map(|v| v * 1e12).or(p.gpu.map(|g| g.flops)),
        },
        timeslice: a.timeslice.map(Into::into),
        max_error_rate: a.max_error_rate,
        fleet: Default::default(),
        clickhouse: None,
    }
}

/// The load the flags ask for, with the settings it reads: a replay, conversations, a search,
/// an open sweep, else a closed one. `validate` refused two at once.
fn load(a: Args, p: Parsed, experiment: Experiment) -> Load {
    let concurrency = a.concurrency.unwrap_or_else(|| CONCURRENCY.to_vec());
    let open = OpenLoop {
        rates: a.request_rate,
        arrivals: super::Arrivals {
            process: a.arrival,
            burstiness: p.burstiness,
            seed: a.seed,
        },
        max_concurrency: a.max_concurrency,
    };
    if !a.replay.is_empty() {
        return Load::Replay(Replay {
            files: a.replay,
            speed: a.speed,
            window: p.window,
            max_time: a.max_time.into(),
            max_concurrency: a.max_concurrency,
        });
    }
    if a.multi_turn {
        return Load::Conversations(Conversations {
            concurrency,
            think_time: a.think_time.into(),
            max_turns: a.max_turns,
        });
    }
    match p.until {
        Some(until) => Load::Search(Search {
            until,
            over: match open.rates.is_empty() {
                true => SearchOver::Concurrency(concurrency),
                false => SearchOver::Rate(open),
            },
            max_level: a.max_level,
            max_time: a.max_time.into(),
            knee_factor: p.slos.knee_factor,
            experiment,
        }),
        None if !open.rates.is_empty() => Load::Open(Open {
            rates: open,
            runs: a.runs,
            experiment,
        }),
        None => Load::Closed(Closed {
            concurrency,
            runs: a.runs,
            experiment,
        }),
    }
}

/// Values in range, and no two loads asked for at once.
fn validate(a: &Args, p: &Parsed, experiment: &Experiment) -> Result<(), String> {
    let usage = |m: &str| Err(m.to_owned());
    if a.concurrency
        .as_ref()
        .is_some_and(|c| c.is_empty() || c.contains(&0))
    {
        return usage("--concurrency needs positive levels, e.g. 1,2,4,8");
    }
    if a.requests == 0 {
        return usage("--requests must be at least 1");
    }
    if a.request_rate.iter().any(|r| !r.is_finite() || *r <= 0.0) {
        return usage("--request-rate needs positive rates (requests a second), e.g. 1,2,4");
    }
    if !(p.burstiness.is_finite() && p.burstiness > 0.0) {
        return usage("--burstiness must be a positive number (the gamma shape; 1 is Poisson)");
    }
    if a.max_concurrency == Some(0) {
        return usage("--max-concurrency must be at least 1");
    }
    if !(a.speed.is_finite() && a.speed > 0.0) {
        return usage("--speed must be a positive number (2 replays twice as fast)");
    }
    if a.max_level.is_some_and(|m| !(m.is_finite() && m > 0.0)) {
        return usage("--max-level must be positive");
    }
    if a.prefix_groups == 0 {
        return usage("--prefix-groups must be at least 1");
    }
    if a.timeslice.is_some_and(|t| t.is_zero()) {
        return usage("--timeslice must be positive");
    }
    if a.scrape_interval.is_zero() {
        return usage("--scrape-interval must be positive");
    }
    if a.progress_every.is_zero() {
        return usage("--progress-every must be positive");
    }
    if a.runs == 0 {
        return usage("--runs must be at least 1");
    }
    if a.runs > 1 && (!a.replay.is_empty() || a.multi_turn || p.until.is_some()) {
        return usage(
            "--runs repeats a sweep of cells (buckets × --concurrency or --request-rate); not --replay, --multi-turn or --until",
        );
    }
    if a.max_turns == 0 {
        return usage("--max-turns must be at least 1");
    }
    exclusive(a, p, experiment)?;
    for b in &a.buckets {
        if !["long-short", "balanced", "short-long"].contains(&b.as_str()) {
            return Err(format!(
                "--buckets: unknown bucket {b:?} (long-short, balanced, short-long)"
            ));
        }
    }
    Ok(())
}

/// A replay, conversations and an open-loop or searched load are separate runs; only a sweep
/// or a search alternates experiment arms.
fn exclusive(a: &Args, p: &Parsed, experiment: &Experiment) -> Result<(), String> {
    let usage = |m: &str| Err(m.to_owned());
    let modes = [
        !a.replay.is_empty(),
        a.multi_turn,
        p.until.is_some() || !a.request_rate.is_empty(),
    ];
    if modes.iter().filter(|m| **m).count() > 1 {
        return usage(
            "--replay, --multi-turn and an open-loop or searched load are separate runs: choose one",
        );
    }
    if a.multi_turn && !experiment.arms.is_empty() {
        return usage("--multi-turn does not alternate experiment arms (--route-header)");
    }
    if !a.replay.is_empty() && !experiment.arms.is_empty() {
        return usage("--replay does not alternate experiment arms (--route-header)");
    }
    Ok(())
}

/// What the arguments say that needs reading: each parsed and checked, a usage error naming its
/// flag.
struct Parsed {
    outputs: [u64; 3],
    slos: crate::report::Slos,
    until: Option<super::Until>,
    window: Option<super::stage::replay::Window>,
    burstiness: f64,
    scrape: super::scrape::ScrapePlan,
    gpu: Option<super::gpu::Gpu>,
}

impl Parsed {
    fn of(a: &Args) -> Result<Parsed, String> {
        let outputs = match a.outputs.as_slice() {
            [x, y, z] => [*x, *y, *z],
            _ => {
                return Err("--outputs takes three numbers: long-short,balanced,short-long".into())
            }
        };
        let slos = match &a.slo {
            Some(p) => crate::report::Slos::load(p).map_err(|e| e.to_string())?,
            None => crate::report::Slos::default(),
        };
        let until = a.until.as_deref().map(|u| super::Until::parse(u, &slos));
        let window = a.window.as_deref().map(super::stage::replay::Window::parse);
        let (until, window) = (until.transpose()?, window.transpose()?);
        let burstiness = match (a.arrival, a.burstiness) {
            (super::Process::Gamma, b) => b.unwrap_or(1.0),
            (_, None) => 1.0,
            (p, Some(_)) => {
                return Err(format!(
                    "--burstiness is the gamma shape: it goes with --arrival gamma, not {}",
                    match p {
                        super::Process::Constant => "constant",
                        _ => "poisson (which is gamma with K = 1)",
                    }
                ))
            }
        };
        let scrape = super::scrape::ScrapePlan::from_args(&a.scrape)?;
        let gpu = a.gpu.as_deref().map(super::gpu::lookup).transpose()?;
        for (flag, v) in [
            ("--peak-bandwidth", a.peak_bandwidth),
            ("--peak-flops", a.peak_flops),
        ] {
            if v.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                return Err(format!("{flag} must be positive"));
            }
        }
        Ok(Parsed {
            outputs,
            slos,
            until,
            window,
            burstiness,
            scrape,
            gpu,
        })
    }
}

/// The arm flags checked against `--arms`: two or more distinct names with `--route-header`;
/// `--baseline`, `--arm-pid` and `--arm-cgroup` name one of them.
fn experiment(a: &ArmFlags, route_header: Option<&str>) -> Result<Experiment, String> {
    let arms: Vec<(String, String)> = match route_header {
        Some(_) => a.arms.iter().map(|n| (n.clone(), String::new())).collect(),
        None => Vec::new(),
    };
    let names: Vec<&str> = arms.iter().map(|a| a.0.as_str()).collect();
    if a.given && route_header.is_none() {
        return Err(
            "--arms names the routes --route-header chooses between: give --route-header too (tokentap's experiment.route_header, e.g. x-tokentap-route)".into(),
        );
    }
    if route_header.is_some() {
        let mut distinct = names.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if names.len() < 2 || distinct.len() != names.len() || names.iter().any(|n| n.is_empty()) {
            return Err(format!(
                "--arms takes two or more distinct route names (given {:?})",
                a.arms.join(",")
            ));
        }
    }
    let one_of = |flag: &str, name: &str| -> Result<(), String> {
        match (names.contains(&name), route_header.is_some()) {
            (true, _) => Ok(()),
            (false, true) => Err(format!(
                "{flag}: {name:?} is not one of --arms ({})",
                names.join(",")
            )),
            (false, false) => Err(format!(
                "{flag} names one of --arms, which go with --route-header"
            )),
        }
    };
    if let Some(b) = &a.baseline {
        one_of("--baseline", b)?;
    }
    if a.cache_salt && route_header.is_none() {
        return Err(
            "--cache-salt salts each arm's copy: it goes with --route-header and --arms".into(),
        );
    }
    let mut watch = Vec::new();
    for (flag, values) in [("--arm-pid", &a.arm_pid), ("--arm-cgroup", &a.arm_cgroup)] {
        for v in values {
            let w = super::resources::Watch::parse(flag, v)?;
            one_of(flag, &w.arm)?;
            if watch
                .iter()
                .any(|x: &super::resources::Watch| x.arm == w.arm)
            {
                return Err(format!(
                    "{flag}: arm {:?} is watched twice (one pid or cgroup an arm)",
                    w.arm
                ));
            }
            watch.push(w);
        }
    }
    Ok(Experiment {
        arms: arms.clone(),
        baseline: a.baseline.clone(),
        cache_salt: a.cache_salt,
        watch,
        route_header: route_header.map(str::to_owned),
    })
}

/// The flags about the arms, read after the rest of the config.
struct ArmFlags {
    /// Whether `--arms` was given (without it, `direct,gateway`).
    given: bool,
    arms: Vec<String>,
    baseline: Option<String>,
    cache_salt: bool,
    arm_pid: Vec<String>,
    arm_cgroup: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        a: Args,
    }

    fn settings(args: &[&str]) -> Result<Bench, String> {
        let mut all = vec!["bench", "--target", "http://127.0.0.1:1", "--out", "unused"];
        all.extend_from_slice(args);
        bench(Cmd::try_parse_from(all).map_err(|e| e.to_string())?.a)
    }

    #[test]
    fn each_load_gets_the_settings_it_reads() {
        let b = settings(&["--concurrency", "1,3", "--runs", "2"]).unwrap();
        assert!(matches!(&b.load, Load::Closed(c) if c.concurrency == [1, 3] && c.runs == 2));
        let b = settings(&["--request-rate", "1,2", "--max-concurrency", "4"]).unwrap();
        assert!(
            matches!(&b.load, Load::Open(o) if o.rates.rates == [1.0, 2.0] && o.rates.max_concurrency == Some(4))
        );
        let b = settings(&["--until", "errors", "--request-rate", "4,2"]).unwrap();
        assert!(
            matches!(&b.load, Load::Search(s) if matches!(&s.over, SearchOver::Rate(o) if o.rates == [4.0, 2.0]))
        );
        let b = settings(&["--multi-turn", "--max-turns", "3"]).unwrap();
        assert!(matches!(&b.load, Load::Conversations(t) if t.max_turns == 3));
        let b = settings(&["--replay", "x.jsonl", "--speed", "2"]).unwrap();
        assert!(matches!(&b.load, Load::Replay(r) if r.speed == 2.0));
        let b = settings(&["--route-header", "x-route"]).unwrap();
        assert_eq!(b.experiment().map(|e| e.arms.len()), Some(2));
    }

    #[test]
    fn answers_are_streamed_unless_asked_otherwise() {
        assert!(settings(&[]).unwrap().common.stream);
        assert!(!settings(&["--stream", "false"]).unwrap().common.stream);
        assert!(settings(&["--stream", "true"]).unwrap().common.stream);
        assert!(settings(&["--stream", "maybe"]).is_err());
    }

    #[test]
    fn knobs_of_two_loads_are_refused_with_what_to_do() {
        let e = settings(&["--multi-turn", "--request-rate", "1"]).unwrap_err();
        assert!(e.ends_with("separate runs: choose one"), "{e}");
        let e = settings(&["--replay", "x.jsonl", "--route-header", "x-route"]).unwrap_err();
        assert_eq!(
            e,
            "bench: --replay does not alternate experiment arms (--route-header)"
        );
        let e = settings(&["--runs", "3", "--until", "errors"]).unwrap_err();
        assert!(e.starts_with("bench: --runs repeats a sweep"), "{e}");
        let e = settings(&["--runs", "0", "--multi-turn"]).unwrap_err();
        assert_eq!(e, "bench: --runs must be at least 1");
        let e = settings(&["--max-turns", "0"]).unwrap_err();
        assert_eq!(e, "bench: --max-turns must be at least 1");
    }

    #[test]
    fn a_shard_takes_its_folder_and_its_scrape_and_is_refused_what_it_cannot_split() {
        let at = ["--start-at", "2026-12-05T10:00:00Z", "--cell-window", "60s"];
        let with = |extra: &[&str]| {
            let mut v = vec!["--concurrency", "4,8"];
            v.extend_from_slice(&at);
            v.extend_from_slice(extra);
            settings(&v)
        };
        let b = with(&["--shard", "2/4"]).unwrap();
        assert_eq!(b.common.out, std::path::Path::new("unused/shard-2-of-4"));
        assert_eq!(b.common.scrape.plan, crate::bench::scrape::ScrapePlan::Off);
        assert_eq!(b.common.fleet.run_id.as_deref(), Some("r20261205T100000Z"));
        let b = with(&["--shard", "1/4", "--run-id", "nightly-7"]).unwrap();
        assert_ne!(b.common.scrape.plan, crate::bench::scrape::ScrapePlan::Off);
        assert_eq!(b.common.fleet.run_id.as_deref(), Some("nightly-7"));
        let e = settings(&["--shard", "1/2"]).unwrap_err();
        assert!(
            e.starts_with("--shard needs --start-at and --cell-window"),
            "{e}"
        );
        let e = with(&["--shard", "1/8"]).unwrap_err();
        assert!(e.contains("concurrency 4 is below 8 shards"), "{e}");
        let e = with(&["--shard", "1/2", "--requests", "1"]).unwrap_err();
        assert!(e.contains("--requests 1 is below 2 shards"), "{e}");
        let mut v = vec!["--multi-turn", "--shard", "1/2"];
        v.extend_from_slice(&at);
        let e = settings(&v).unwrap_err();
        assert!(
            e.starts_with("--shard splits a closed or open sweep"),
            "{e}"
        );
        let e = with(&["--shard", "1/2", "--run-id", "a b"]).unwrap_err();
        assert!(e.starts_with("--run-id"), "{e}");
    }
}
