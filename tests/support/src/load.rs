//! bench against `tokentap sim` in a test: the engine on an ephemeral port, a quiet config, a
//! run, and the records it wrote.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokentap::bench::{self, Bench, RunInfo};
use tokentap::meter::RequestRecord;
use tokentap::sim::{Pace, Profile, Sim};

/// A simulated engine on a thread and a runtime of its own, so its work never waits behind
/// the test's tasks (nor theirs behind it): a test of the client's clock measures the client.
/// Stopped when dropped.
pub struct SimApart {
    pub engine: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for SimApart {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A simulated engine with this profile on 127.0.0.1:0 (its model is `sim`).
pub fn sim_on(p: Profile) -> SimApart {
    apart(Err(p))
}

/// The paced mock (`sim --pace`) on 127.0.0.1:0, on its own thread (its model is `sim`).
pub fn sim_paced(p: Pace) -> SimApart {
    apart(Ok(p))
}

fn apart(p: Result<Pace, Profile>) -> SimApart {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the sim");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1:0");
            let sim: Sim = match p {
                Ok(pace) => Sim::start_paced(pace, "sim", 7, l, None, None).await,
                Err(profile) => Sim::start(profile, "sim", 7, l, None).await,
            }
            .expect("the sim starts");
            let _ = addr_tx.send(sim.engine);
            let _ = stopped.await;
        });
    });
    SimApart {
        engine: addr_rx.recv().expect("the sim's address"),
        stop: Some(stop),
        thread: Some(thread),
    }
}

/// bench aimed at the sim, quiet, without its calibration, writing to `out`.
pub fn bench_cfg(s: &SimApart, out: PathBuf) -> Bench {
    quiet_bench(format!("http://{}", s.engine), out)
}

/// bench of `target`, quiet, without its calibration, writing to `out`: a closed sweep at the
/// default levels until a test sets its load.
pub fn quiet_bench(target: String, out: PathBuf) -> Bench {
    let mut b = Bench::new(target, out);
    b.common.calibrate = false;
    b.common.quiet = true;
    b
}

/// bench through a proxy at `target`, as `quiet_bench`, scraping nothing: the proxy's log holds
/// bench's requests alone (no scrape of /metrics through it).
pub fn bench_through_proxy(target: String, out: PathBuf) -> Bench {
    let mut b = quiet_bench(target, out);
    b.common.scrape = tokentap::bench::Scraping::off();
    b
}

/// Run bench to its end.
pub async fn run_bench(c: &Bench) -> RunInfo {
    bench::run(c, Arc::new(AtomicBool::new(false)))
        .await
        .expect("bench runs")
}

/// The records a JSONL file holds.
pub fn read_records(path: &Path) -> Vec<RequestRecord> {
    std::fs::read_to_string(path)
        .expect("the records file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .collect()
}

/// The records a bench run wrote to `dir`.
pub fn bench_records(dir: &Path) -> Vec<RequestRecord> {
    read_records(&dir.join("requests.jsonl"))
}
