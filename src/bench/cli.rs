//! `tokentap bench` on the command line: its arguments (`args.rs`, read into the run's
//! settings by `flags.rs`), Ctrl-C keeps what was measured, the run's verdict as the exit status.

use super::args::Args;
use crate::cli::Exit;

/// Run the sweep the arguments describe; the exit status is the run's verdict (docs/report.md
/// "Exit statuses"): 0 measured, 1 a cell served nothing or failed above --max-error-rate, 3
/// nothing (or not every planned cell) measured.
pub fn cli(a: Args) -> Exit {
    let cfg = match super::flags::bench(a) {
        Ok(cfg) => cfg,
        Err(e) => return Exit::Usage(e),
    };
    let rt = match crate::cli::runtime() {
        Ok(rt) => rt,
        Err(e) => return e,
    };
    rt.block_on(async move {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        tokio::spawn(async move {
            crate::cli::shutdown_signal().await;
            eprintln!("\ntokentap bench: stopping; keeping what was measured");
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        // NB: on `block_on`'s own thread, not spawned on a worker: the requests are made there
        // and their connections read on the runtime's workers, so on one core the operating
        // system interleaves the two. Spawned beside the connections (one thread), bench took
        // about 40 % less CPU a request but read first tokens behind its own sends: a
        // thousand streams' second round measured TTFT p50 15.7 ms against 1.5 ms.
        match super::run(&cfg, stop).await {
            Ok(info) => verdict_exit(&info.verdict),
            Err(super::BenchError::Usage(e)) => Exit::Usage(format!("bench: {e}")),
            Err(e) => Exit::Failed(format!("bench: {e}")),
        }
    })
}

/// The run's verdict as the exit status, its reasons on stderr.
fn verdict_exit(v: &super::verdict::RunVerdict) -> Exit {
    use super::verdict::Status;
    let word = match v.status {
        Status::Ok => return Exit::Ok,
        Status::Failed => "failed",
        Status::NotJudged => "not judged",
    };
    for r in &v.reasons {
        eprintln!("tokentap bench: {word}: {r}");
    }
    match v.status {
        Status::Failed => Exit::No,
        _ => Exit::NotJudged,
    }
}
