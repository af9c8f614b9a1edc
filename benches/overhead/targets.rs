//! The targets: direct, tokentap, nginx, HAProxy and the reference proxies, started as
//! processes on free loopback ports, pinned, and read from `/proc` (CPU time, RSS).

use super::*;

pub(crate) struct Proxy {
    pub(crate) name: &'static str,
    pub(crate) addr: SocketAddr,
    pub(crate) child: Option<Child>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            // TERM first: nginx's and HAProxy's masters stop their workers on it; a KILL would
            // orphan them.
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            for _ in 0..50 {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A process and its direct children (found by parent pid in /proc).
pub(crate) fn family(pid: u32) -> Vec<u32> {
    let mut v = vec![pid];
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|x| x.1.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u32>().ok());
            if ppid == Some(pid) {
                v.push(p);
            }
        }
    }
    v
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(cmd))
        .find(|p| p.is_file())
        .or_else(|| {
            ["/usr/sbin", "/sbin"]
                .iter()
                .map(|d| Path::new(d).join(cmd))
                .find(|p| p.is_file())
        })
}

pub(crate) fn spawn(cmd: &Path, args: &[String]) -> Child {
    let mut c = match std::env::var("OVERHEAD_PROXY_CPU") {
        Ok(cpu) => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpu).arg(cmd);
            c
        }
        Err(_) => Command::new(cmd),
    };
    c.args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn proxy")
}

pub(crate) async fn wait_up(addr: SocketAddr) {
    for _ in 0..200 {
        if TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{addr} never came up");
}

/// The tokentap under test: `OVERHEAD_TOKENTAP` (scripts/overhead.sh sets it to a copy of
/// `cargo build --release`), else the binary cargo built for this bench. That one is not the
/// release build: a bench build unifies the dev-dependencies' features into tokentap's, and
/// tokio's `test-util` (the unit tests' paused clock) puts a lock in every read of the runtime's
/// clock.
pub(crate) fn tokentap_bin() -> PathBuf {
    std::env::var_os("OVERHEAD_TOKENTAP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tokentap")))
}

/// A tokentap in front of `up`, logging to `dir` (unless OVERHEAD_TOKENTAP_LOG=off).
pub(crate) fn start_tokentap(
    name: &'static str,
    tt: PathBuf,
    up: SocketAddr,
    dir: &Path,
    log_name: &str,
) -> Proxy {
    start_served(name, tt, &[], up, dir, log_name)
}

/// `bin` run as `bin <pre…> serve --upstream … --listen … --admin off --log …`: tokentap, or
/// this bench binary as a reference proxy (which ignores the last two).
pub(crate) fn start_served(
    name: &'static str,
    bin: PathBuf,
    pre: &[&str],
    up: SocketAddr,
    dir: &Path,
    log_name: &str,
) -> Proxy {
    let port = free_port();
    let log = match std::env::var("OVERHEAD_TOKENTAP_LOG") {
        Ok(v) if v == "off" => v,
        _ => dir.join(log_name).display().to_string(),
    };
    let args: Vec<String> = pre
        .iter()
        .chain(&[
            "serve",
            "--upstream",
            &format!("http://{up}"),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin",
            "off",
            "--log",
        ])
        .map(|s| s.to_string())
        .chain(std::iter::once(log))
        .collect();
    Proxy {
        name,
        addr: format!("127.0.0.1:{port}").parse().unwrap(),
        child: Some(spawn(&bin, &args)),
    }
}

pub(crate) async fn start_proxies(up: SocketAddr, dir: &Path) -> Vec<Proxy> {
    let mut v = Vec::new();
    let only =
        std::env::var("OVERHEAD_PROXIES").unwrap_or_else(|_| "tokentap,nginx,haproxy".into());
    v.push(start_tokentap(
        "tokentap",
        tokentap_bin(),
        up,
        dir,
        "tokentap.jsonl",
    ));
    // A second tokentap build, for an A/B of two builds in one run (same order, same load).
    if let Some(b) = std::env::var_os("OVERHEAD_TOKENTAP_B") {
        v.push(start_tokentap(
            "tokentap-b",
            PathBuf::from(b),
            up,
            dir,
            "tokentap-b.jsonl",
        ));
    }
    if let Some(nginx) = which("nginx").filter(|_| only.contains("nginx")) {
        let port = free_port();
        let d = dir.display();
        let conf = format!(
            "worker_processes 1; daemon off; error_log {d}/nginx.err warn; pid {d}/nginx.pid;\n\
             events {{ worker_connections 19500; }}\n\
             http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
               upstream up {{ server {up}; keepalive 1024; }}\n\
               server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; proxy_request_buffering off; }} }} }}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let args = vec![
            "-c".into(),
            dir.join("nginx.conf").display().to_string(),
            "-p".into(),
            dir.display().to_string(),
        ];
        v.push(Proxy {
            name: "nginx",
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            child: Some(spawn(&nginx, &args)),
        });
    }
    if let Some(haproxy) = which("haproxy").filter(|_| only.contains("haproxy")) {
        let port = free_port();
        let conf = format!(
            "global\n  maxconn 9500\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n\
             frontend f\n  bind 127.0.0.1:{port}\n  option http-no-delay\n  default_backend b\nbackend b\n  option http-no-delay\n  server s1 {up}\n"
        );
        std::fs::write(dir.join("haproxy.cfg"), conf).unwrap();
        let args = vec![
            "-db".into(),
            "-f".into(),
            dir.join("haproxy.cfg").display().to_string(),
        ];
        v.push(Proxy {
            name: "haproxy",
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            child: Some(spawn(&haproxy, &args)),
        });
    }
    // The reference proxies, only when named in OVERHEAD_PROXIES: this binary, re-run.
    for name in baseline::NAMES {
        if !only.split(',').any(|p| p.trim() == name) {
            continue;
        }
        let exe = std::env::current_exe().unwrap();
        v.push(start_served(
            name,
            exe,
            &[baseline::FLAG, name],
            up,
            dir,
            "unused.jsonl",
        ));
    }
    for p in &v {
        wait_up(p.addr).await;
    }
    v
}

/// CPU seconds used so far (utime + stime) by a process and its children.
pub(crate) fn cpu_s(pid: u32) -> f64 {
    // The process and its children: nginx's and HAProxy's work happens in workers.
    let one = |p: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let after = stat
            .rsplit_once(')')
            .map(|x| x.1.to_owned())
            .unwrap_or_default();
        let f: Vec<&str> = after.split_whitespace().collect();
        let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
            + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        ticks / 100.0
    };
    family(pid).into_iter().map(one).sum()
}

/// CPU time so far of every thread of these processes, in ns (the scheduler's own count, not
/// 10 ms ticks: a paced cell uses only tens of milliseconds of a proxy's CPU).
pub(crate) fn cpu_ns(procs: &[u32]) -> u64 {
    let mut sum = 0;
    for p in procs {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let stat = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            sum += stat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    sum
}

/// The core the load generator and the upstream run on, when the bench is pinned to one.
pub(crate) fn own_core() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    list.parse().ok()
}

/// (all, idle, irq + softirq) ticks of one core (or of the machine) from /proc/stat.
pub(crate) fn core_ticks(core: Option<usize>) -> (u64, u64, u64) {
    let name = core.map_or_else(|| "cpu".to_owned(), |c| format!("cpu{c}"));
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
    else {
        return (0, 0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal …
    (v.iter().take(8).sum(), at(3) + at(4), at(5) + at(6))
}

/// How busy the load generator's core was between two readings: (busy %, irq + softirq %).
pub(crate) fn busy_pct(before: (u64, u64, u64), after: (u64, u64, u64)) -> (f64, f64) {
    let all = after.0.saturating_sub(before.0).max(1) as f64;
    let idle = after.1.saturating_sub(before.1) as f64;
    let irq = after.2.saturating_sub(before.2) as f64;
    (100.0 * (all - idle) / all, 100.0 * irq / all)
}

/// Resident memory of a process and its children (nginx and HAProxy may fork), in KiB.
pub(crate) fn rss_kb(pid: u32) -> u64 {
    family(pid)
        .into_iter()
        .map(|p| tokentap_test_support::rss_kb(Some(p)))
        .sum()
}
