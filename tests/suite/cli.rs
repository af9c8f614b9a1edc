//! The binary as a user runs it: `check` on good and bad configs, and the one-line quick start
//! `serve --upstream …` stopped by SIGTERM (exit 0, log flushed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use support::*;

/// Kills the child if the test fails before stopping it.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tokentap"))
}

/// The child's stderr, line by line, on a channel (read by a thread of its own).
fn stderr_lines(child: &mut KillOnDrop) -> std::sync::mpsc::Receiver<String> {
    let stderr = child.0.as_mut().unwrap().stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let _ = tx.send(line.unwrap_or_default());
        }
    });
    rx
}

/// SIGTERM the child and wait for it to exit; its exit status.
async fn sigterm(child: &mut KillOnDrop) -> std::process::ExitStatus {
    let mut owned = child.0.take().unwrap();
    let st = Command::new("kill")
        .args(["-TERM", &owned.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    tokio::task::spawn_blocking(move || owned.wait().unwrap())
        .await
        .unwrap()
}

#[test]
fn check_accepts_the_shipped_example_config() {
    let out = bin()
        .args([
            "check",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/tokentap.toml"),
        ])
        .env("VLLM_API_KEY", "x")
        .env("LITELLM_MASTER_KEY", "y")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[test]
fn check_names_file_key_and_problem_and_exits_64() {
    let dir = scratch("cli");
    let cases = [
        (
            "[[routes]]\nname='a'\nupstream='localhost:8000'\n",
            "routes[0].upstream",
        ),
        (
            "[[routes]]\nname='a'\nupstream='http://h:1'\n[timeouts]\nidle_ms=0\n",
            "timeouts.idle_ms",
        ),
        (
            "[[routes]]\nname='a'\nupstream='http://h:1'\nsurprise=1\n",
            "surprise",
        ),
        (
            "[listen]\naddr='nowhere'\n[[routes]]\nname='a'\nupstream='http://h:1'\n",
            "listen.addr",
        ),
        // An unknown key is named at its own line, not its table's.
        (
            "[[routes]]\nname='a'\nupstream='http://h:1'\n\n[limits]\nmax_concurrent = 5\nmax_concurent = 6\n",
            "limits.max_concurent: unknown field `max_concurent`",
        ),
        (
            "[[routes]]\nname='a'\nupstream='http://h:1'\n\n[limits]\nmax_concurrent = 5\nmax_concurent = 6\n",
            "(line 7)",
        ),
        // Types in words.
        (
            "[limits]\nmax_concurrent = \"many\"\n[[routes]]\nname='a'\nupstream='http://h:1'\n",
            "expected a whole number (0 or more) (line 2)",
        ),
        // A TOML syntax error: one line too.
        ("[limits\nmax_concurrent = 1\n", "invalid table header"),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        let f = dir.join(format!("bad{i}.toml"));
        std::fs::write(&f, text).unwrap();
        let out = bin().args(["check", "--config"]).arg(&f).output().unwrap();
        assert_eq!(out.status.code(), Some(64));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&f.display().to_string()) && err.contains(key),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    let out = bin()
        .args(["check", "--config", "/nonexistent/tokentap.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

/// A listener that cannot be bound is named: the proxy's or the admin's.
#[test]
fn serve_names_the_listener_it_could_not_bind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for (flags, which) in [
        (
            ["--listen", "127.0.0.1:0", "--admin", addr.as_str()],
            "admin.addr",
        ),
        (["--listen", addr.as_str(), "--admin", "off"], "listen.addr"),
    ] {
        let out = bin()
            .args(["serve", "--upstream", "http://127.0.0.1:9", "--log", "off"])
            .args(flags)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(which) && err.contains(&addr), "{err}");
    }
}

#[test]
fn fingerprint_prints_the_hash_not_the_key() {
    use std::io::Write;
    let mut child = bin()
        .arg("fingerprint")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"abc\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_start_serves_and_stops_cleanly_on_sigterm() {
    let up = Upstream::spawn(|_| {
        Script::chat_stream(Duration::from_millis(5), Duration::from_millis(1), 3, true)
    })
    .await;
    let dir = scratch("quick");
    let log = dir.join("q.jsonl");
    let child = bin()
        .args([
            "serve",
            "--upstream",
            &up.url(),
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--log",
        ])
        .arg(&log)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(Some(child));
    // The listen address is in the start-up line.
    let rx = stderr_lines(&mut child);
    let mut addr = None;
    let mut lines = Vec::new();
    while addr.is_none() {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("no start-up line from tokentap serve");
        if let Some(i) = line.find("listen=") {
            addr = Some(line[i + 7..].split_whitespace().next().unwrap().to_owned());
        }
        lines.push(line);
    }
    let url = format!("http://{}/v1/chat/completions", addr.unwrap());
    let secret = "sk-quickstart-secret";
    let got = send(
        &client(),
        "POST",
        &url,
        &[("authorization", &format!("Bearer {secret}"))],
        chat_body("m", true),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    let status = sigterm(&mut child).await;
    assert!(status.success(), "exit {status:?}");
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
        lines.push(l);
    }
    let recs = wait_records(&log, 1).await;
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].output_tokens, Some(3));
    assert_eq!(recs[0].route, "default", "the one route --upstream makes");
    let all = lines.join("\n");
    assert!(!all.contains(secret) && !std::fs::read_to_string(&log).unwrap().contains(secret));
}

/// `--log -`: records as JSON lines on stdout (where a cluster's log pipeline looks), every
/// diagnostic on stderr, nothing else on stdout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_go_to_stdout_with_log_dash() {
    let up = Upstream::spawn(|_| {
        Script::chat_stream(Duration::from_millis(5), Duration::from_millis(1), 3, true)
    })
    .await;
    let mut cmd = bin();
    cmd.args(["serve", "--upstream", &up.url(), "--listen", "127.0.0.1:0"])
        .args(["--admin", "off", "--log", "-"])
        .stdout(Stdio::piped());
    let (mut child, addr) = serve(cmd);
    let child_ref = child.0.as_mut().unwrap();
    let stdout = child_ref.stdout.take().unwrap();
    let out = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map(|l| l.unwrap_or_default())
            .collect::<Vec<_>>()
    });
    let url = format!("http://{addr}/v1/chat/completions");
    for _ in 0..2 {
        let got = send(&client(), "POST", &url, &[], chat_body("m", true))
            .await
            .unwrap();
        assert_eq!(got.status, 200);
    }
    let status = sigterm(&mut child).await;
    assert!(status.success(), "exit {status:?}");
    let lines = out.join().unwrap();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for l in &lines {
        let r: tokentap::meter::RequestRecord = serde_json::from_str(l).unwrap();
        assert_eq!(r.output_tokens, Some(3));
    }
}

/// Start `tokentap serve --config` and return it with its listen address.
fn serve_config(config: &std::path::Path) -> (KillOnDrop, String) {
    let mut cmd = bin();
    cmd.args(["serve", "--config"])
        .arg(config)
        .stdout(Stdio::null());
    serve(cmd)
}

/// Start a `tokentap serve` command (its stderr is taken here) and return it with its listen
/// address, read from its start-up line.
fn serve(mut cmd: Command) -> (KillOnDrop, String) {
    let child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let mut child = KillOnDrop(Some(child));
    let stderr = child.0.as_mut().unwrap().stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("no start-up line").unwrap();
        if let Some(i) = line.find("listen=") {
            break line[i + 7..].split_whitespace().next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

/// Every line of the log and its rotations, in order; asserts each is a whole record.
fn log_lines(log: &std::path::Path) -> usize {
    let mut n = 0;
    for suffix in ["", ".1", ".2", ".3"] {
        let p = std::path::PathBuf::from(format!("{}{suffix}", log.display()));
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{}: a cut line",
            p.display()
        );
        for l in text.lines() {
            serde_json::from_str::<tokentap::meter::RequestRecord>(l)
                .unwrap_or_else(|e| panic!("{}: not a whole record ({e}): {l}", p.display()));
            n += 1;
        }
    }
    n
}

/// kill -9 under load: the log holds only whole lines, and what a crash loses is bounded by what
/// had not been flushed; a restart appends to the same log and keeps rotating it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_leaves_whole_lines_and_a_restart_appends() {
    let up = Upstream::spawn(|_| {
        Script::chat_stream(Duration::from_millis(1), Duration::from_millis(0), 3, true)
    })
    .await;
    let dir = scratch("crash");
    let log = dir.join("c.jsonl");
    let config = dir.join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\naddr = \"127.0.0.1:0\"\n[admin]\naddr = \"off\"\n[log]\npath = \"{}\"\nmax_bytes = 524288\nkeep = 3\n[[routes]]\nname = \"r\"\nupstream = \"{}\"\n",
            log.display(),
            up.url()
        ),
    )
    .unwrap();
    let (mut child, addr) = serve_config(&config);
    let url = format!("http://{addr}/v1/chat/completions");
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let deadline = std::time::Instant::now() + Duration::from_millis(800);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (url, done) = (url.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let c = client();
            while std::time::Instant::now() < deadline {
                if let Ok(g) = send(&c, "POST", &url, &[], chat_body("m", true)).await {
                    if g.status == 200 {
                        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    // SIGKILL while the clients are still sending.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut c = child.0.take().unwrap();
    c.kill().unwrap();
    c.wait().unwrap();
    for t in tasks {
        let _ = t.await;
    }
    let served = done.load(std::sync::atomic::Ordering::Relaxed);
    let written = log_lines(&log);
    eprintln!(
        "kill -9 under load: {served} requests answered, {written} records on disk, {} lost",
        served.saturating_sub(written)
    );
    assert!(written > 0 && written <= served, "{written} of {served}");
    // Restart on the same log: it appends (and keeps rotating at 512 KiB).
    let (mut child, addr) = serve_config(&config);
    let url = format!("http://{addr}/v1/chat/completions");
    for _ in 0..3 {
        let g = send(&client(), "POST", &url, &[], chat_body("m", true))
            .await
            .unwrap();
        assert_eq!(g.status, 200);
    }
    sigterm(&mut child).await;
    assert_eq!(log_lines(&log), written + 3);
}

/// SIGHUP re-reads the file: new requests take the new upstream; a moved listener is named as
/// needing a restart (the old address keeps serving); a bad file is refused, logged, and the
/// running config keeps serving. The process never stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_config_file() {
    let a =
        Upstream::spawn(|_| Script::chat_stream(Duration::from_millis(1), Duration::ZERO, 2, true))
            .await;
    let b =
        Upstream::spawn(|_| Script::chat_stream(Duration::from_millis(1), Duration::ZERO, 2, true))
            .await;
    let dir = scratch("sighup");
    let config = dir.join("h.toml");
    let file = |listen: &str, upstream: &str| {
        format!(
            "[listen]\naddr = \"{listen}\"\n[admin]\naddr = \"127.0.0.1:0\"\n[log]\npath = \"off\"\n[[routes]]\nname = \"r\"\nupstream = \"{upstream}\"\n"
        )
    };
    std::fs::write(&config, file("127.0.0.1:0", &a.url())).unwrap();
    let child = bin()
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(Some(child));
    let pid = child.0.as_ref().unwrap().id().to_string();
    let rx = stderr_lines(&mut child);
    let next = |needle: &str| loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("tokentap never logged {needle:?}"));
        if line.contains(needle) {
            return line;
        }
    };
    let start = next("listen=");
    let field = |line: &str, k: &str| {
        let i = line.find(k).unwrap() + k.len();
        line[i..].split_whitespace().next().unwrap().to_owned()
    };
    let url = format!("http://{}/v1/chat/completions", field(&start, "listen="));
    let admin = field(&start, "admin=");
    let chat = || async {
        send(&client(), "POST", &url, &[], chat_body("m", true))
            .await
            .unwrap()
            .status
    };
    let hup = || {
        assert!(Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success())
    };

    assert_eq!(chat().await, 200);
    std::fs::write(&config, file("127.0.0.1:1", &b.url())).unwrap();
    hup();
    let line = next("config reloaded");
    assert!(
        line.contains("generation=2") && line.contains("listen.addr"),
        "{line}"
    );
    assert_eq!(chat().await, 200, "the old listener stopped serving");
    assert_eq!((a.requests().len(), b.requests().len()), (1, 1));

    std::fs::write(&config, "[[routes]]\nname = 'r'\nupstream = 'ftp://x'\n").unwrap();
    hup();
    let line = next("config reload refused");
    assert!(line.contains("routes[0].upstream"), "{line}");
    assert_eq!(chat().await, 200);
    assert_eq!(b.requests().len(), 2);

    let m = send(
        &client(),
        "GET",
        &format!("http://{admin}/metrics"),
        &[],
        Vec::new(),
    )
    .await
    .unwrap();
    let m = String::from_utf8(m.body).unwrap();
    for want in [
        "tokentap_config_reloads_total{result=\"restart_needed\"} 1",
        "tokentap_config_reloads_total{result=\"error\"} 1",
        "tokentap_config_last_reload_successful 0",
    ] {
        assert!(m.contains(want), "{want} not in\n{m}");
    }
    // `tokentap health`, the container's HEALTHCHECK, against the same admin listener.
    for args in [
        vec!["health", "--admin", &admin],
        vec!["health", "--admin", &admin, "--ready"],
    ] {
        let out = bin().args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let out = bin().args(["health", "--admin", &dead]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/healthz"));
    assert!(
        child.0.as_mut().unwrap().try_wait().unwrap().is_none(),
        "SIGHUP stopped tokentap"
    );
}
