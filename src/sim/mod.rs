//! `tokentap sim`: a simulated OpenAI-compatible engine (continuous-batching cost model) and an
//! optional simulated gateway hop in front of it. For demos, tests and dry runs — docs/bench.md and
//! every output say it is a simulation.

mod cache;
pub mod cli;
pub mod engine;
pub mod hold;
pub mod hop;
pub mod http;
mod metrics;
mod wire;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use cli::{cli, Args};
pub use engine::Profile;
pub use hold::{Hold, Truth};
pub use hop::HopDelay;

/// A running simulator: the engine's address and, when asked for, the hop's.
pub struct Sim {
    pub engine: SocketAddr,
    pub hop: Option<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn accept_loop<F, Fut, B>(listener: TcpListener, handler: F)
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<hyper::Response<B>, std::convert::Infallible>>
        + Send
        + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        let Ok((s, _)) = listener.accept().await else {
            continue;
        };
        let _ = s.set_nodelay(true);
        let h = handler.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(h);
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(s), svc)
                .await;
        });
    }
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
        let engine_addr = engine_listener.local_addr()?;
        let (jobs_tx, jobs_rx) = mpsc::channel(4096);
        let stats = Arc::new(engine::EngineStats::default());
        let mut tasks = vec![tokio::spawn(engine::run(
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
        });
        tasks.push(tokio::spawn(accept_loop(engine_listener, move |req| {
            let st = state.clone();
            async move { Ok::<_, std::convert::Infallible>(http::handle(st, req).await) }
        })));
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
            tasks.push(tokio::spawn(accept_loop(l, move |req| {
                h.clone().handle(req)
            })));
        }
        Ok(Sim {
            engine: engine_addr,
            hop: hop_addr,
            tasks,
        })
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
        self.tasks
            .push(tokio::spawn(accept_loop(listener, move |req| {
                h.clone().handle(req)
            })));
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
        self.tasks
            .push(tokio::spawn(accept_loop(listener, move |req| {
                h.clone().handle(req)
            })));
        self.hop = Some(addr);
        Ok(addr)
    }
}
