//! `tokentap sim`: a simulated OpenAI-compatible engine (continuous-batching cost model, or a
//! deterministic mock at a fixed pace, `--pace`) and an optional simulated gateway hop in front
//! of it. For demos, tests and dry runs — docs/bench.md and every output say it is a simulation.
//!
//! Stopped ([`Sim::stop`], or SIGTERM / Ctrl-C to `tokentap sim`), it does what vLLM does: it
//! takes no new connection, ends every answer in flight as aborted (`"finish_reason":"abort"`,
//! then `[DONE]`), lets each connection write that and close, and is gone.
// The process clock is this module's own: the sim is an engine: its clock paces tokens and dates answers, outside any record.
#![allow(clippy::disallowed_methods)]

mod cache;
pub mod cli;
pub mod engine;
pub mod hold;
pub mod hop;
pub mod http;
mod metrics;
pub mod pace;
mod pacer;
mod times;
mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

pub use cli::{cli, Args};
pub use engine::Profile;
pub use hold::{Hold, Truth};
pub use hop::HopDelay;
pub use pace::{LatenessSummary, Pace};

/// A running simulator: the engine's address and, when asked for, the hop's.
pub struct Sim {
    pub engine: SocketAddr,
    pub hop: Option<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
    /// The accept loops (engine, hops): each ends once its connections have, after a stop.
    servers: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
    /// `--pace`: the pace and how late the mock ran.
    paced: Option<Arc<pace::Paced>>,
}

/// What answers a request: the cost model, or a fixed pace (`--pace`).
enum Answers {
    Modelled(Profile),
    Paced(Pace),
}

impl Drop for Sim {
    fn drop(&mut self) {
        for t in self.tasks.iter().chain(&self.servers) {
            t.abort();
        }
    }
}

/// Serve connections until `stop` is set (or its sender is gone), then take no more and wait
/// for the open ones: each finishes the answer it is writing (the engine ends it aborted) and
/// closes; an idle keep-alive connection closes at once.
async fn accept_loop<F, Fut, B>(listener: TcpListener, handler: F, mut stop: watch::Receiver<bool>)
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<hyper::Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            a = listener.accept() => a,
        };
        let Ok((s, _)) = accepted else {
            // Out of file descriptors and the like: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        conns.spawn(serve_conn(s, handler.clone(), stop.clone()));
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// Serve one connection to its end; once `stop` is set, finish the answer in flight and close.
async fn serve_conn<F, Fut, B>(s: TcpStream, handler: F, mut stop: watch::Receiver<bool>)
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<hyper::Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = s.set_nodelay(true);
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(TokioIo::new(s), hyper::service::service_fn(handler));
    let mut conn = std::pin::pin!(conn);
    let mut stopping = std::pin::pin!(async move {
        let _ = stop.wait_for(|s| *s).await;
    });
    let mut draining = false;
    let _ = std::future::poll_fn(|cx| {
        if !draining && stopping.as_mut().poll(cx).is_ready() {
            draining = true;
            conn.as_mut().graceful_shutdown();
        }
        conn.as_mut().poll(cx)
    })
    .await;
}

impl Sim {
    /// Start the engine on `engine_listener`, and the hop in front of it on `hop` when given.
    pub async fn start(
        profile: Profile,
        model: &str,
        seed: u64,
        engine_listener: TcpListener,
        hop: Option<(TcpListener, HopDelay)>,
    ) -> std::io::Result<Sim> {
        Sim::start_via(profile, model, seed, engine_listener, hop, None).await
    }

    /// As `start`, with the hop relaying to `hop_upstream` instead of the engine (e.g. a
    /// tokentap route to the engine, for a gateway tap).
    pub async fn start_via(
        profile: Profile,
        model: &str,
        seed: u64,
        engine_listener: TcpListener,
        hop: Option<(TcpListener, HopDelay)>,
        hop_upstream: Option<::http::Uri>,
    ) -> std::io::Result<Sim> {
        let answers = Answers::Modelled(profile);
        Sim::launch(answers, model, seed, engine_listener, hop, hop_upstream).await
    }

    /// A deterministic mock (`sim --pace`): every answer at `pace`, whatever the load; the
    /// cost model is not asked. [`Sim::paced`] says how late it ran.
    pub async fn start_paced(
        pace: Pace,
        model: &str,
        seed: u64,
        engine_listener: TcpListener,
        hop: Option<(TcpListener, HopDelay)>,
        hop_upstream: Option<::http::Uri>,
    ) -> std::io::Result<Sim> {
        let answers = Answers::Paced(pace);
        Sim::launch(answers, model, seed, engine_listener, hop, hop_upstream).await
    }

    /// The paced mock's figures (`--pace`): its pace and how late its writes ran.
    pub fn paced(&self) -> Option<Arc<pace::Paced>> {
        self.paced.clone()
    }

    async fn launch(
        answers: Answers,
        model: &str,
        seed: u64,
        engine_listener: TcpListener,
        hop: Option<(TcpListener, HopDelay)>,
        hop_upstream: Option<::http::Uri>,
    ) -> std::io::Result<Sim> {
        let (profile, paced) = match answers {
            Answers::Modelled(p) => (p, None),
            Answers::Paced(pace) => (
                Profile {
                    name: format!("paced {pace}"),
                    ..Profile::instant()
                },
                Some(Arc::new(pace::Paced::start(pace)?)),
            ),
        };
        let engine_addr = engine_listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let (jobs_tx, jobs_rx) = mpsc::channel(4096);
        let stats = Arc::new(engine::EngineStats::default());
        let tasks = vec![tokio::spawn(engine::run(
            profile.clone(),
            jobs_rx,
            stats.clone(),
        ))];
        let state = Arc::new(http::SimState {
            cache: cache::PrefixCache::default(),
            profile,
            model: model.to_owned(),
            jobs: jobs_tx,
            stats,
            seed,
            counter: AtomicU64::new(0),
            stop: stopped.clone(),
            paced: paced.clone(),
        });
        let mut servers = vec![tokio::spawn(accept_loop(
            engine_listener,
            move |req| {
                let st = state.clone();
                async move { Ok::<_, std::convert::Infallible>(http::handle(st, req).await) }
            },
            stopped.clone(),
        ))];
        let mut hop_addr = None;
        if let Some((l, delay)) = hop {
            hop_addr = Some(l.local_addr()?);
            let engine_uri = match hop_upstream {
                Some(u) => u,
                None => format!("http://{engine_addr}")
                    .parse()
                    .map_err(std::io::Error::other)?,
            };
            let h = Arc::new(hop::Hop::new(engine_uri, delay, seed ^ 0x5eed));
            servers.push(tokio::spawn(accept_loop(
                l,
                move |req| h.clone().handle(req),
                stopped,
            )));
        }
        Ok(Sim {
            engine: engine_addr,
            hop: hop_addr,
            tasks,
            servers,
            stop,
            paced,
        })
    }

    /// Stop as vLLM stops on SIGTERM: no new connection; every answer in flight ends aborted
    /// (`"finish_reason":"abort"`, the usage chunk when asked, `[DONE]`) and its connection
    /// closes once that is written. Waits for that, at most `grace`; then what is left is cut.
    pub async fn stop(mut self, grace: Duration) {
        let _ = self.stop.send(true);
        let servers = std::mem::take(&mut self.servers);
        let all = async {
            for s in servers {
                let _ = s.await;
            }
        };
        let _ = tokio::time::timeout(grace, all).await;
    }

    /// Add a hop on `listener` that holds answers as `hold` says (a buffering proxy), relaying
    /// to `upstream`; its truth is what it held, token by token.
    pub fn start_holding_hop(
        &mut self,
        listener: TcpListener,
        delay: HopDelay,
        hold: Hold,
        upstream: ::http::Uri,
        seed: u64,
    ) -> std::io::Result<(SocketAddr, Truth)> {
        let addr = listener.local_addr()?;
        let h = Arc::new(hop::Hop::new(upstream, delay, seed ^ 0x5eed).holding(hold));
        let truth = h.truth.clone();
        self.servers.push(tokio::spawn(accept_loop(
            listener,
            move |req| h.clone().handle(req),
            self.stop.subscribe(),
        )));
        self.hop = Some(addr);
        Ok((addr, truth))
    }

    /// Add a hop on `listener` relaying to `upstream` (once that is known: a demo starts the
    /// proxy between the engine and the hop).
    pub fn start_hop(
        &mut self,
        listener: TcpListener,
        delay: HopDelay,
        upstream: ::http::Uri,
        seed: u64,
    ) -> std::io::Result<SocketAddr> {
        let addr = listener.local_addr()?;
        let h = Arc::new(hop::Hop::new(upstream, delay, seed ^ 0x5eed));
        self.servers.push(tokio::spawn(accept_loop(
            listener,
            move |req| h.clone().handle(req),
            self.stop.subscribe(),
        )));
        self.hop = Some(addr);
        Ok(addr)
    }
}
