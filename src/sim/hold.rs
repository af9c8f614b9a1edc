//! The hop's buffering (`--hop-buffer BYTES`, `--hop-flush-ms MS`): it holds the answer's bytes
//! until it has BYTES or the oldest held byte is MS old, then lets them go in one write, as a
//! buffering or compressing proxy does. It keeps its own truth, token by token: when each
//! content event came in and when it went out, for tests to check tokentap's figures against.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::meter::{Meter, SharedTimes};

/// How the hop holds an answer: until `bytes` are held, or the oldest is `flush_ms` old.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Hold {
    pub bytes: Option<usize>,
    pub flush_ms: Option<f64>,
}

impl Hold {
    pub fn is_on(&self) -> bool {
        self.bytes.is_some() || self.flush_ms.is_some()
    }
}

/// One held stream's truth: each content event's arrival at the hop and its release.
#[derive(Debug, Clone, Default)]
pub struct HeldStream {
    pub tokens: Vec<(Instant, Instant)>,
}

impl HeldStream {
    /// Each token's hold (ms), in order.
    pub fn holds_ms(&self) -> Vec<f64> {
        self.tokens
            .iter()
            .map(|(i, o)| crate::meter::duration_ms(o.saturating_duration_since(*i)))
            .collect()
    }
}

/// Every held stream so far, in the order they ended.
pub type Truth = Arc<Mutex<Vec<HeldStream>>>;

/// A body fed by the holding task.
pub struct Released(mpsc::Receiver<Bytes>);

impl Body for Released {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// Hold `body` as `hold` says; the returned body lets the bytes go.
pub fn hold<B>(body: B, hold: Hold, truth: Truth) -> Released
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Send,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(run(body, hold, truth, tx));
    Released(rx)
}

async fn run<B>(mut body: B, hold: Hold, truth: Truth, tx: mpsc::Sender<Bytes>)
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut meter = Meter::new(Instant::now());
    meter.expect_body(Some(b"text/event-stream"), 1 << 20, 1 << 20);
    let times = SharedTimes::default();
    meter.token_times = Some(times.clone());
    let mut held = BytesMut::new();
    let mut since: Option<Instant> = None;
    let mut out = HeldStream::default();
    let max_age = hold.flush_ms.map(|ms| Duration::from_secs_f64(ms / 1000.0));
    loop {
        let due = since.zip(max_age).map(|(s, a)| s + a);
        let frame = match due {
            Some(due) => match tokio::time::timeout_at(due, body.frame()).await {
                Ok(f) => f,
                Err(_) => {
                    if !release(&mut held, &mut since, &times, &mut out, &tx).await {
                        return;
                    }
                    continue;
                }
            },
            None => body.frame().await,
        };
        let Some(Ok(frame)) = frame else { break };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let now = Instant::now();
        meter.on_data(&data, now);
        held.extend_from_slice(&data);
        since.get_or_insert(now);
        if hold.bytes.is_some_and(|b| held.len() >= b)
            && !release(&mut held, &mut since, &times, &mut out, &tx).await
        {
            return;
        }
    }
    release(&mut held, &mut since, &times, &mut out, &tx).await;
    if let Ok(mut t) = truth.lock() {
        t.push(out);
    }
}

/// Let the held bytes go; false when the client is gone.
async fn release(
    held: &mut BytesMut,
    since: &mut Option<Instant>,
    times: &SharedTimes,
    out: &mut HeldStream,
    tx: &mpsc::Sender<Bytes>,
) -> bool {
    *since = None;
    if held.is_empty() {
        return true;
    }
    let now = Instant::now();
    if let Ok(t) = times.lock() {
        let done = out.tokens.len();
        out.tokens
            .extend(t.times.iter().skip(done).map(|arrived| (*arrived, now)));
    }
    tx.send(held.split().freeze()).await.is_ok()
}
