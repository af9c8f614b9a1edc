//! A paced answer (`sim --pace`): the cost model is not asked. Token k goes out at the request's
//! arrival + FIRST + k × GAP, woken by the pacer's thread, in the same wire format as every
//! answer of the sim (role chunk with the first token, `finish_reason` on the last, the usage
//! chunk when asked, the end marker). Its body writes each token when its connection polls it
//! after the instant, and measures how late that was; the stream's own lateness goes out in an
//! SSE comment before the end marker (`: tokentap-sim lateness writes=… mean_us=… max_us=…`), a
//! whole answer's in the `x-tokentap-sim-lateness` header.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{header, HeaderValue, Response, StatusCode};
use serde_json::Value;

use super::{json_response, prompt_tokens, GenRequest, SimBody, SimState, WORDS};
use crate::openai::Api;
use crate::sim::engine::EngineStats;
use crate::sim::pace::{Pace, Paced, StreamLateness};
use crate::sim::pacer::Tick;
use crate::sim::times::EngineTimes;
use crate::sim::wire::{Counts, Wire, ABORT};

/// The header a whole (non-streaming) paced answer carries its lateness in.
pub const LATENESS_HEADER: &str = "x-tokentap-sim-lateness";

/// The tokens of one answer and how it ends: the pace's count, or fewer when the request's
/// `max_tokens` (`max_completion_tokens`, `max_output_tokens`) asks for fewer — then it ends
/// `length`, else `stop`. `ignore_eos` and `min_tokens` never make it longer than the pace.
fn tokens(pace: &Pace, r: &GenRequest) -> (u32, &'static str) {
    let max = r
        .max_completion_tokens
        .or(r.max_tokens)
        .or(r.max_output_tokens)
        .map(|m| u32::try_from(m.max(1)).unwrap_or(u32::MAX));
    match max {
        Some(m) if m < pace.tokens => (m, "length"),
        _ => (pace.tokens, "stop"),
    }
}

/// Each delta's text: the sim's words, or exactly `bytes` ASCII bytes cut from them.
enum Words {
    Sim(fastrand::Rng),
    Fixed { bytes: usize, at: usize },
}

/// The sim's words run together: what fixed-size deltas are cut from (ASCII).
fn text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| WORDS.concat())
}

impl Words {
    fn next(&mut self) -> String {
        match self {
            Words::Sim(rng) => WORDS[rng.usize(..WORDS.len())].to_owned(),
            Words::Fixed { bytes, at } => {
                let t = text().as_bytes();
                let mut out = String::with_capacity(*bytes);
                while out.len() < *bytes {
                    let take = (*bytes - out.len()).min(t.len() - *at);
                    out.push_str(&text()[*at..*at + take]);
                    *at = (*at + take) % t.len();
                }
                out
            }
        }
    }
}

/// Counts the answer as running while it lives, and as ended when it goes (however it ends).
struct InFlight {
    stats: Arc<EngineStats>,
    paced: Arc<Paced>,
}

impl InFlight {
    fn new(stats: Arc<EngineStats>, paced: Arc<Paced>) -> InFlight {
        stats.running.fetch_add(1, Relaxed);
        InFlight { stats, paced }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.stats.running.fetch_sub(1, Relaxed);
        self.paced.late.answered();
    }
}

/// Answer a checked request at the pace; `arrived` is when its head came in.
pub(super) async fn answer(
    state: Arc<SimState>,
    paced: Arc<Paced>,
    r: GenRequest,
    api: Api,
    arrived: Instant,
) -> Response<SimBody> {
    let (n, stop_reason) = tokens(&paced.pace, &r);
    let counts = Counts {
        prompt: prompt_tokens(&r),
        cached: 0,
        output: n,
        reasoning: 0,
    };
    let k = state.counter.fetch_add(1, Relaxed);
    let mut rng = fastrand::Rng::with_seed(
        state.seed ^ r.seed.unwrap_or(k).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    let prefix = match api {
        Api::Chat => "chatcmpl",
        Api::Completions => "cmpl",
        Api::Responses => "resp",
        _ => "msg",
    };
    let id = format!("{prefix}-{:016x}", rng.u64(..));
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let words = match paced.pace.delta_bytes {
        Some(bytes) => Words::Fixed {
            bytes,
            at: rng.usize(..text().len()),
        },
        None => Words::Sim(rng),
    };
    let include_usage = r
        .stream_options
        .as_ref()
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut stop = state.stop.clone();
    let body = PacedBody {
        wire: Wire::new(api, id, created, state.model.clone()),
        tick: paced.pacer.at(arrived + paced.pace.due(0)),
        times: EngineTimes::new(tokio::time::Instant::from_std(arrived)),
        arrived,
        next: 0,
        counts,
        stop_reason,
        include_usage,
        words,
        mine: StreamLateness::default(),
        pending: None,
        stop: Box::pin(async move {
            let _ = stop.wait_for(|s| *s).await;
        }),
        done: false,
        in_flight: InFlight::new(state.stats.clone(), paced.clone()),
        paced,
    };
    if r.stream.unwrap_or(false) {
        body.stream()
    } else {
        body.whole().await
    }
}

/// One paced answer, written token by token as its connection polls it.
pub struct PacedBody {
    wire: Wire,
    /// The next token's instant.
    tick: Tick,
    times: EngineTimes,
    arrived: Instant,
    /// The next token's index; also the tokens written so far.
    next: u32,
    counts: Counts,
    stop_reason: &'static str,
    include_usage: bool,
    words: Words,
    /// This answer's own lateness.
    mine: StreamLateness,
    /// What goes out before the first token (Responses', Messages' opening events).
    pending: Option<Bytes>,
    /// The sim's stop: once it is set, the answer ends aborted at once.
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    done: bool,
    in_flight: InFlight,
    paced: Arc<Paced>,
}

impl PacedBody {
    /// Headers at once, then the tokens at their instants.
    fn stream(mut self) -> Response<SimBody> {
        let start: Vec<Bytes> = self.wire.start(&self.counts);
        if !start.is_empty() {
            self.pending = Some(start.concat().into());
        }
        let mut resp = Response::new(SimBody::Paced(Box::new(self)));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        resp
    }

    /// Not streamed: the whole body at the last token's instant (aborted at the sim's stop,
    /// with the tokens due by then), its lateness in a header.
    async fn whole(mut self) -> Response<SimBody> {
        let last = self.counts.output - 1;
        self.tick.reset(self.arrived + self.paced.pace.due(last));
        let finished = tokio::select! {
            biased;
            _ = self.stop.as_mut() => None,
            late = &mut self.tick => Some(late),
        };
        let made = match finished {
            Some(late) => {
                self.late(late);
                self.counts.output
            }
            None => self
                .paced
                .pace
                .due_by(self.arrived.elapsed(), self.counts.output),
        };
        // Its engine times are the schedule's.
        for k in 0..made {
            let first = (k == 0).then(|| tokio::time::Instant::from_std(self.arrived));
            let due = self.arrived + self.paced.pace.due(k);
            self.times.token(first, tokio::time::Instant::from_std(due));
            let word = self.words.next();
            let _ = self.wire.token(k, &word, false, Value::Null);
        }
        let (counts, stop) = match finished {
            Some(_) => (self.counts, self.stop_reason),
            None => (self.cut(made), ABORT),
        };
        if finished.is_some() {
            self.in_flight.stats.finished.fetch_add(1, Relaxed);
        }
        let metrics = self.times.metrics(counts.output);
        let mut r = json_response(StatusCode::OK, &self.wire.body(&counts, stop, metrics));
        if let Ok(v) = HeaderValue::from_str(&self.mine.fields()) {
            r.headers_mut().insert(LATENESS_HEADER, v);
        }
        r
    }

    /// One paced write, `late` after its instant: in the sim's figures and this answer's.
    fn late(&mut self, late: Duration) {
        self.paced.late.record(late);
        self.mine.record(late);
    }

    /// The counts of an answer stopped after `made` tokens.
    fn cut(&self, made: u32) -> Counts {
        Counts {
            output: made,
            ..self.counts
        }
    }

    /// This answer's lateness, as an SSE comment.
    fn comment(&self) -> Bytes {
        Bytes::from(format!(
            ": tokentap-sim lateness {}\n\n",
            self.mine.fields()
        ))
    }

    /// The next token's write (with the end, after the last); `late` is how late it is.
    fn token(&mut self, late: Duration) -> Bytes {
        self.late(late);
        let k = self.next;
        self.next += 1;
        let first = (k == 0).then(|| tokio::time::Instant::from_std(self.arrived));
        self.times.token(first, tokio::time::Instant::now());
        let last = self.next == self.counts.output;
        let finish = match last {
            true => Value::from(self.stop_reason),
            false => Value::Null,
        };
        let word = self.words.next();
        let mut out = BytesMut::new();
        for b in self.wire.token(k, &word, false, finish) {
            out.extend_from_slice(&b);
        }
        if last {
            self.done = true;
            self.in_flight.stats.finished.fetch_add(1, Relaxed);
            out.extend_from_slice(&self.comment());
            let metrics = self.times.metrics(self.counts.output);
            let (counts, stop) = (self.counts, self.stop_reason);
            for b in self.wire.end(&counts, stop, self.include_usage, metrics) {
                out.extend_from_slice(&b);
            }
        } else {
            let at = self.arrived + self.paced.pace.due(self.next);
            self.tick.reset(at);
        }
        out.freeze()
    }

    /// The sim was stopped: the end of an aborted answer, after the tokens written.
    fn abort(&mut self) -> Bytes {
        self.done = true;
        let cut = self.cut(self.next);
        let mut out = BytesMut::from(&self.comment()[..]);
        let metrics = self.times.metrics(cut.output);
        for b in self.wire.abort(&cut, self.include_usage, metrics) {
            out.extend_from_slice(&b);
        }
        out.freeze()
    }

    /// The body's next frame: the opening events, then each token once its instant has passed.
    pub fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(b) = self.pending.take() {
            return Poll::Ready(Some(b));
        }
        if self.done {
            return Poll::Ready(None);
        }
        if self.stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(self.abort()));
        }
        match Pin::new(&mut self.tick).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(late) => Poll::Ready(Some(self.token(late))),
        }
    }

    pub fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_deltas_have_their_bytes_and_max_tokens_can_only_shorten() {
        let mut w = Words::Fixed { bytes: 16, at: 5 };
        for _ in 0..50 {
            let d = w.next();
            assert_eq!(d.len(), 16);
            assert!(d.is_ascii());
        }
        let mut big = Words::Fixed { bytes: 1000, at: 0 };
        assert_eq!(big.next().len(), 1000);
        let pace: Pace = "1,1,10".parse().unwrap_or_else(|e| panic!("{e}"));
        let r = |max: Option<u64>| GenRequest {
            max_tokens: max,
            ignore_eos: Some(true),
            min_tokens: Some(50),
            ..GenRequest::default()
        };
        assert_eq!(tokens(&pace, &r(None)), (10, "stop"));
        assert_eq!(tokens(&pace, &r(Some(4))), (4, "length"));
        assert_eq!(tokens(&pace, &r(Some(10))), (10, "stop"));
        assert_eq!(tokens(&pace, &r(Some(500))), (10, "stop"));
        assert_eq!(tokens(&pace, &r(Some(0))), (1, "length"));
    }
}
