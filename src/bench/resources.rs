//! Each arm's own CPU seconds and peak memory while the run lasts (`--arm-pid`, `--arm-cgroup`),
//! read from Linux's `/proc` and cgroup v2 files by a sampler task every 100 ms, off the request
//! path. A process is read with all its descendants alive at each reading.
//!
//! NB: a reading that cannot be made is an `error` in `run.json`, never a made-up number.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Mutex;

/// How often the sampler reads.
const EVERY: Duration = Duration::from_millis(100);

/// What an arm's resources are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watched {
    /// A process and its descendants.
    Pid(u32),
    /// A cgroup v2 directory (`cpu.stat`, `memory.peak` or `memory.current`).
    Cgroup(PathBuf),
}

/// One arm to read (`--arm-pid NAME=PID`, `--arm-cgroup NAME=PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub arm: String,
    pub what: Watched,
}

impl Watch {
    /// `NAME=VALUE` of `flag`: the arm's name and the pid or the cgroup's path.
    pub fn parse(flag: &str, s: &str) -> Result<Watch, String> {
        let Some((arm, v)) = s
            .split_once('=')
            .filter(|(a, v)| !a.is_empty() && !v.is_empty())
        else {
            return Err(format!(
                "{flag} {s:?}: NAME=VALUE, the arm's name and its {}",
                what(flag)
            ));
        };
        let what = match flag {
            "--arm-pid" => Watched::Pid(
                v.parse()
                    .ok()
                    .filter(|&p: &u32| p > 0)
                    .ok_or_else(|| format!("{flag} {s:?}: {v:?} is not a process id"))?,
            ),
            _ => Watched::Cgroup(PathBuf::from(v)),
        };
        Ok(Watch {
            arm: arm.to_owned(),
            what,
        })
    }
}

fn what(flag: &str) -> &'static str {
    match flag {
        "--arm-pid" => "process id",
        _ => "cgroup v2 directory",
    }
}

/// `run.json`'s `arm_resources[]`: one arm's readings over the run.
#[derive(Debug, Clone, Serialize)]
pub struct ArmResources {
    pub arm: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// CPU time (user + system) spent over the run, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<f64>,
    /// The largest resident set read: the process tree's summed `VmRSS` (largest sample), or
    /// the cgroup's `memory.peak` (else its largest `memory.current` sample).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// The tree's summed `VmHWM` at the end (a process only; its lifetime's peak, which may
    /// predate the run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hwm_bytes: Option<u64>,
    /// Readings taken.
    pub samples: u64,
    /// Why there are no figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One arm's readings so far.
#[derive(Debug, Default)]
struct Acc {
    /// Per process of the tree: its CPU ticks at its first reading (0 for one born after the
    /// start) and at its last.
    ticks: BTreeMap<u32, (u64, u64)>,
    /// A cgroup's `usage_usec` at the start and the last reading.
    usec: Option<(u64, u64)>,
    peak: u64,
    samples: u64,
    error: Option<String>,
}

/// The sampler: started before the first cell, finished after the last.
pub(crate) struct Sampler {
    watches: Vec<Watch>,
    accs: Arc<Mutex<Vec<Acc>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Read every watch now (the start), then every 100 ms on a task of its own.
    pub async fn start(watches: &[Watch]) -> Option<Sampler> {
        if watches.is_empty() {
            return None;
        }
        let mut accs: Vec<Acc> = watches.iter().map(|_| Acc::default()).collect();
        for (w, a) in watches.iter().zip(&mut accs) {
            read(w, a, true);
        }
        let accs = Arc::new(Mutex::new(accs));
        let (w, a) = (watches.to_vec(), accs.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                // Reading /proc is quick file I/O: a blocking task keeps it off the runtime's
                // request threads.
                let (w2, a2) = (w.clone(), a.clone());
                let _ = tokio::task::spawn_blocking(move || {
                    let mut g = a2.blocking_lock();
                    for (w, acc) in w2.iter().zip(g.iter_mut()) {
                        read(w, acc, false);
                    }
                })
                .await;
            }
        });
        Some(Sampler {
            watches: watches.to_vec(),
            accs,
            task,
        })
    }

    /// The last reading, and each arm's figures.
    pub async fn finish(self) -> Vec<ArmResources> {
        self.task.abort();
        let _ = self.task.await;
        let mut accs = self.accs.lock().await;
        self.watches
            .iter()
            .zip(accs.iter_mut())
            .map(|(w, a)| {
                read(w, a, false);
                figures(w, a)
            })
            .collect()
    }
}

/// One reading of `w` into `a`; `first` sets the start.
fn read(w: &Watch, a: &mut Acc, first: bool) {
    if a.error.is_some() {
        return;
    }
    let r = match &w.what {
        Watched::Pid(pid) => read_tree(*pid, a, first),
        Watched::Cgroup(dir) => read_cgroup(dir, a, first),
    };
    match r {
        Ok(()) => a.samples += 1,
        // A later reading that fails (the process gone) keeps what was read; a first one is
        // the entry's error.
        Err(e) if first || a.samples == 0 => a.error = Some(e),
        Err(_) => {}
    }
}

fn read_tree(root: u32, a: &mut Acc, first: bool) -> Result<(), String> {
    let procs = processes().map_err(|e| format!("/proc: {e}"))?;
    let tree = descendants(root, &procs);
    if tree.is_empty() {
        return Err(format!("pid {root}: no such process"));
    }
    let mut rss = 0;
    for (pid, ticks) in tree {
        let e = a
            .ticks
            .entry(pid)
            .or_insert((if first { ticks } else { 0 }, ticks));
        e.1 = ticks;
        rss += status_kb(pid, "VmRSS:").unwrap_or(0) * 1024;
    }
    a.peak = a.peak.max(rss);
    Ok(())
}

fn read_cgroup(dir: &Path, a: &mut Acc, first: bool) -> Result<(), String> {
    let stat = std::fs::read_to_string(dir.join("cpu.stat"))
        .map_err(|e| format!("{}: {e}", dir.join("cpu.stat").display()))?;
    let usec = stat
        .lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| format!("{}: no usage_usec", dir.join("cpu.stat").display()))?;
    a.usec = Some(match (a.usec, first) {
        (Some((s, _)), false) => (s, usec),
        _ => (usec, usec),
    });
    let current = std::fs::read_to_string(dir.join("memory.current"))
        .map_err(|e| format!("{}: {e}", dir.join("memory.current").display()))?;
    if let Ok(m) = current.trim().parse::<u64>() {
        a.peak = a.peak.max(m);
    }
    Ok(())
}

/// Every process's parent and CPU ticks (utime + stime), from `/proc/*/stat`.
fn processes() -> std::io::Result<BTreeMap<u32, (u32, u64)>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // A process may end between the listing and the read.
        if let Some(v) = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .as_deref()
            .and_then(parse_stat)
        {
            out.insert(pid, v);
        }
    }
    Ok(out)
}

/// `/proc/PID/stat`'s parent (field 4) and utime + stime (fields 14, 15), read after the
/// command's closing parenthesis (the command may hold spaces and parentheses).
fn parse_stat(s: &str) -> Option<(u32, u64)> {
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime + stime))
}

/// `root` and its descendants in `procs`, each with its ticks; empty when `root` is not there.
fn descendants(root: u32, procs: &BTreeMap<u32, (u32, u64)>) -> Vec<(u32, u64)> {
    let Some(&(_, t)) = procs.get(&root) else {
        return Vec::new();
    };
    let mut out = vec![(root, t)];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i].0;
        out.extend(
            procs
                .iter()
                .filter(|(_, &(pp, _))| pp == parent)
                .map(|(&p, &(_, t))| (p, t)),
        );
        i += 1;
    }
    out
}

/// A `kB` field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`).
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The clock ticks a second of `/proc/PID/stat`'s times (`getconf CLK_TCK`).
fn ticks_per_s() -> f64 {
    #[cfg(target_os = "linux")]
    if let Ok(Some(t)) = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        if t > 0 {
            return t as f64;
        }
    }
    100.0
}

/// An arm's figures from its readings.
fn figures(w: &Watch, a: &Acc) -> ArmResources {
    let mut r = ArmResources {
        arm: w.arm.clone(),
        pid: None,
        cgroup: None,
        cpu_s: None,
        peak_rss_bytes: None,
        hwm_bytes: None,
        samples: a.samples,
        error: a.error.clone(),
    };
    match &w.what {
        Watched::Pid(p) => r.pid = Some(*p),
        Watched::Cgroup(d) => r.cgroup = Some(d.display().to_string()),
    }
    if r.error.is_some() {
        return r;
    }
    match &w.what {
        Watched::Pid(_) => {
            let ticks: u64 = a.ticks.values().map(|(s, e)| e.saturating_sub(*s)).sum();
            r.cpu_s = Some(ticks as f64 / ticks_per_s());
            r.peak_rss_bytes = Some(a.peak);
            r.hwm_bytes = Some(
                a.ticks
                    .keys()
                    .filter_map(|&p| status_kb(p, "VmHWM:"))
                    .sum::<u64>()
                    * 1024,
            );
        }
        Watched::Cgroup(dir) => {
            r.cpu_s = a.usec.map(|(s, e)| e.saturating_sub(s) as f64 / 1e6);
            let peak = std::fs::read_to_string(dir.join("memory.peak"))
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok());
            r.peak_rss_bytes = Some(peak.unwrap_or(a.peak));
        }
    }
    r
}

/// The summary's line for an arm.
pub fn line(r: &ArmResources) -> String {
    let of = match (&r.pid, &r.cgroup) {
        (Some(p), _) => format!("pid {p}"),
        (_, Some(c)) => format!("cgroup {c}"),
        _ => String::new(),
    };
    match (&r.error, r.cpu_s, r.peak_rss_bytes) {
        (Some(e), _, _) => format!("arm {} ({of}): not read: {e}", r.arm),
        (None, Some(cpu), Some(peak)) => format!(
            "arm {} ({of}): {cpu:.2} CPU s, peak RSS {:.1} MiB{} ({} readings)",
            r.arm,
            peak as f64 / 1048576.0,
            r.hwm_bytes
                .map(|h| format!(", VmHWM {:.1} MiB", h as f64 / 1048576.0))
                .unwrap_or_default(),
            r.samples
        ),
        _ => format!("arm {} ({of}): not read", r.arm),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_awkward_commands() {
        let s =
            "4242 (my (odd) cmd) S 17 4242 4242 0 -1 4194560 500 0 0 0 250 31 0 0 20 0 4 0 123 0 0";
        assert_eq!(parse_stat(s), Some((17, 281)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_tree_is_its_root_and_every_descendant() {
        let procs: BTreeMap<u32, (u32, u64)> = [
            (1, (0, 5)),
            (10, (1, 7)),
            (11, (10, 3)),
            (12, (11, 2)),
            (20, (1, 9)),
        ]
        .into();
        let mut t = descendants(10, &procs);
        t.sort_unstable();
        assert_eq!(t, [(10, 7), (11, 3), (12, 2)]);
        assert!(descendants(99, &procs).is_empty());
    }

    #[test]
    fn flags_name_an_arm_and_a_value() {
        assert_eq!(
            Watch::parse("--arm-pid", "nginx=123"),
            Ok(Watch {
                arm: "nginx".into(),
                what: Watched::Pid(123)
            })
        );
        assert!(Watch::parse("--arm-pid", "nginx=abc").is_err());
        assert!(Watch::parse("--arm-pid", "nginx").is_err());
        assert!(Watch::parse("--arm-pid", "=5").is_err());
        assert_eq!(
            Watch::parse("--arm-cgroup", "a=/sys/fs/cgroup/x").map(|w| w.what),
            Ok(Watched::Cgroup("/sys/fs/cgroup/x".into()))
        );
    }

    #[tokio::test]
    async fn this_process_reads_and_a_missing_one_is_an_error() {
        let me = std::process::id();
        let s = Sampler::start(&[
            Watch {
                arm: "me".into(),
                what: Watched::Pid(me),
            },
            Watch {
                arm: "gone".into(),
                what: Watched::Pid(u32::MAX - 1),
            },
            Watch {
                arm: "nocg".into(),
                what: Watched::Cgroup("/nonexistent/cgroup".into()),
            },
        ])
        .await
        .unwrap();
        let v = s.finish().await;
        if cfg!(target_os = "linux") {
            assert!(v[0].error.is_none(), "{:?}", v[0]);
            assert!(v[0].peak_rss_bytes.unwrap() > 0 && v[0].cpu_s.unwrap() >= 0.0);
            assert!(v[0].samples >= 2);
        }
        assert!(v[1].error.as_deref().unwrap().contains("no such process"));
        assert!(v[1].cpu_s.is_none() && v[1].peak_rss_bytes.is_none());
        assert!(v[2].error.as_deref().unwrap().contains("cpu.stat"));
        assert!(line(&v[1]).contains("not read"));
    }
}
