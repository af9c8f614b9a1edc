//! A simulated gateway hop: a forwarding listener that holds each request for a known admission
//! delay (`MS±JITTER`, uniform, seeded) and then relays it to the engine, streaming the answer
//! back untouched. It gives gateway-hop experiments a ground truth, and claims it as LiteLLM
//! claims its own overhead: each response carries `x-litellm-overhead-duration-ms`, how long
//! that request was held (the drawn delay, rounded up to the timer's tick). It forwards every request header, as a gateway configured to
//! forward client headers does.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::hold::{hold, Hold, Released, Truth};

/// The hop's delay: `ms` ± `jitter_ms`, uniform.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HopDelay {
    pub ms: f64,
    pub jitter_ms: f64,
}

impl std::str::FromStr for HopDelay {
    type Err = String;
    /// `100`, `100±10` or `100+-10` (milliseconds).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().trim_end_matches("ms");
        let (a, b) = match s.split_once('±').or_else(|| s.split_once("+-")) {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let num = |t: &str| {
            t.trim()
                .trim_end_matches("ms")
                .parse::<f64>()
                .map_err(|_| format!("{s:?} is not MS[±JITTER]"))
        };
        let ms = num(a)?;
        let jitter_ms = b.map(num).transpose()?.unwrap_or(0.0);
        if !(ms >= 0.0 && jitter_ms >= 0.0 && jitter_ms <= ms) {
            return Err(format!("{s:?}: need 0 ≤ JITTER ≤ MS"));
        }
        Ok(HopDelay { ms, jitter_ms })
    }
}

pub struct Hop {
    pub engine: Uri,
    pub delay: HopDelay,
    pub rng: Mutex<fastrand::Rng>,
    pub client: Client<HttpConnector, Full<Bytes>>,
    /// How it holds answers (off by default), and what it held.
    pub hold: Hold,
    pub truth: Truth,
}

pub type HopBody = Either<Either<Incoming, Released>, Full<Bytes>>;

impl Hop {
    pub fn new(engine: Uri, delay: HopDelay, seed: u64) -> Hop {
        let mut c = HttpConnector::new();
        c.set_nodelay(true);
        Hop {
            engine,
            delay,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            client: Client::builder(TokioExecutor::new()).build(c),
            hold: Hold::default(),
            truth: Truth::default(),
        }
    }

    /// Hold answers as `hold` says (`--hop-buffer`, `--hop-flush-ms`).
    pub fn holding(mut self, hold: Hold) -> Hop {
        self.hold = hold;
        self
    }

    fn next_delay(&self) -> Duration {
        let u = self.rng.lock().map(|mut r| r.f64()).unwrap_or(0.5);
        Duration::from_secs_f64(
            (self.delay.ms + self.delay.jitter_ms * (2.0 * u - 1.0)).max(0.0) / 1000.0,
        )
    }

    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<HopBody>, Infallible> {
        let bad = |m: &str| {
            let mut r = Response::new(Either::Right(Full::new(Bytes::from(format!("{{\"error\":{{\"message\":\"{m}\",\"type\":\"hop_error\",\"param\":null,\"code\":\"502\"}}}}")))));
            *r.status_mut() = StatusCode::BAD_GATEWAY;
            Ok(r)
        };
        let (mut parts, body) = req.into_parts();
        let Ok(body) = body.collect().await else {
            return bad("request body");
        };
        // The claim is the hold as it happened (the timer rounds up to its tick), not as drawn.
        let held = tokio::time::Instant::now();
        let delay = self.next_delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let delay = held.elapsed();
        let pq = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let Ok(uri) =
            format!("{}{}", self.engine.to_string().trim_end_matches('/'), pq).parse::<Uri>()
        else {
            return bad("bad path");
        };
        parts.uri = uri;
        parts.headers.remove(http::header::HOST);
        parts.headers.remove(http::header::CONTENT_LENGTH);
        let req = Request::from_parts(parts, Full::new(body.to_bytes()));
        match self.client.request(req).await {
            Ok(mut resp) => {
                let claim = format!("{:.3}", delay.as_secs_f64() * 1000.0);
                if let Ok(v) = http::HeaderValue::from_str(&claim) {
                    resp.headers_mut()
                        .insert("x-litellm-overhead-duration-ms", v);
                }
                if self.hold.is_on() {
                    resp.headers_mut().remove(http::header::CONTENT_LENGTH);
                    let truth = self.truth.clone();
                    return Ok(resp.map(|b| Either::Left(Either::Right(hold(b, self.hold, truth)))));
                }
                Ok(resp.map(|b| Either::Left(Either::Left(b))))
            }
            Err(_) => bad("engine unreachable"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hop_specs() {
        assert_eq!(
            "100±10".parse::<HopDelay>(),
            Ok(HopDelay {
                ms: 100.0,
                jitter_ms: 10.0
            })
        );
        assert_eq!(
            "100+-10".parse::<HopDelay>(),
            Ok(HopDelay {
                ms: 100.0,
                jitter_ms: 10.0
            })
        );
        assert_eq!(
            "0".parse::<HopDelay>(),
            Ok(HopDelay {
                ms: 0.0,
                jitter_ms: 0.0
            })
        );
        assert!("10±20".parse::<HopDelay>().is_err());
        assert!("abc".parse::<HopDelay>().is_err());
    }
}
