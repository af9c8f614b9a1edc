//! Arrival processes for an open loop: when each request is due, seeded. Poisson (exponential
//! gaps, coefficient of variation 1), gamma with shape K (`--burstiness K`: CV 1/√K; K < 1 is
//! burstier than Poisson, K > 1 smoother, K = 1 is Poisson), or constant (CV 0), all with mean
//! gap 1/rate — vLLM's `bench serve` offers the same three.

use std::time::Duration;

/// `--arrival`.
#[derive(Debug, Clone, Copy, PartialEq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Process {
    Poisson,
    Gamma,
    Constant,
}

/// A process with its shape: what `run.json` records.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Arrivals {
    pub process: Process,
    /// The gamma shape K (1 for Poisson; unused for constant).
    pub burstiness: f64,
    pub seed: u64,
}

impl Arrivals {
    /// The due times of `n` requests at `rate` a second, from 0 (the first is due at once).
    pub fn offsets(&self, rate: f64, n: usize) -> Vec<Duration> {
        let mut rng = fastrand::Rng::with_seed(self.seed ^ rate.to_bits());
        let mut t = 0.0f64;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            if i > 0 {
                t += self.gap(&mut rng, rate);
            }
            out.push(Duration::from_secs_f64(t));
        }
        out
    }

    fn gap(&self, rng: &mut fastrand::Rng, rate: f64) -> f64 {
        let mean = 1.0 / rate;
        match self.process {
            Process::Constant => mean,
            Process::Poisson => mean * exponential(rng),
            // Shape K, scale mean / K: mean gap `mean`, CV 1/√K.
            Process::Gamma => mean * gamma(rng, self.burstiness) / self.burstiness,
        }
    }
}

/// Uniform in (0, 1].
fn unit(rng: &mut fastrand::Rng) -> f64 {
    1.0 - rng.f64()
}

fn exponential(rng: &mut fastrand::Rng) -> f64 {
    -unit(rng).ln()
}

/// A standard normal (Box–Muller).
fn normal(rng: &mut fastrand::Rng) -> f64 {
    (-2.0 * unit(rng).ln()).sqrt() * (std::f64::consts::TAU * rng.f64()).cos()
}

/// Gamma with shape `k` and scale 1 (Marsaglia and Tsang; for k < 1, boosted from k + 1).
fn gamma(rng: &mut fastrand::Rng, k: f64) -> f64 {
    if k < 1.0 {
        return gamma(rng, k + 1.0) * unit(rng).powf(1.0 / k);
    }
    let d = k - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = unit(rng);
        if u < 1.0 - 0.0331 * x.powi(4) || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
            return d * v;
        }
    }
}

/// Mean and coefficient of variation of consecutive gaps.
pub fn gap_stats(times: &[f64]) -> Option<(f64, f64)> {
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    if gaps.len() < 2 {
        return None;
    }
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean > 0.0).then(|| (mean, var.sqrt() / mean))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cv(process: Process, burstiness: f64) -> (f64, f64) {
        let a = Arrivals {
            process,
            burstiness,
            seed: 42,
        };
        let t: Vec<f64> = a
            .offsets(20.0, 20_000)
            .iter()
            .map(Duration::as_secs_f64)
            .collect();
        gap_stats(&t).unwrap_or((0.0, f64::NAN))
    }

    #[test]
    fn gaps_have_the_mean_and_spread_of_their_process() {
        let (mean, c) = cv(Process::Poisson, 1.0);
        assert!(
            (mean - 0.05).abs() < 0.002 && (c - 1.0).abs() < 0.03,
            "{mean} {c}"
        );
        let (_, c) = cv(Process::Constant, 1.0);
        assert!(c < 1e-6, "{c}");
        for k in [0.25, 0.5, 1.0, 2.0, 4.0] {
            let (mean, c) = cv(Process::Gamma, k);
            let want = 1.0 / f64::sqrt(k);
            assert!((mean - 0.05).abs() < 0.003, "k {k}: mean {mean}");
            assert!((c - want).abs() < 0.05 * want, "k {k}: cv {c}, want {want}");
        }
    }

    /// Over 200 seeds of 500 requests, the share whose gaps' CV is within 10 % of `want`.
    fn share_within(process: Process, burstiness: f64, want: f64) -> f64 {
        let inside = (0..200u64)
            .filter(|seed| {
                let a = Arrivals {
                    process,
                    burstiness,
                    seed: *seed,
                };
                let t: Vec<f64> = a
                    .offsets(125.0, 500)
                    .iter()
                    .map(Duration::as_secs_f64)
                    .collect();
                let (_, c) = gap_stats(&t).unwrap_or((0.0, f64::NAN));
                (c - want).abs() <= 0.1 * want
            })
            .count();
        inside as f64 / 200.0
    }

    #[test]
    fn five_hundred_requests_have_their_process_spread_for_nearly_every_seed() {
        // A sample CV of 500 exponential gaps has a standard deviation near 0.06: about 9 draws
        // in 10 land within 10 % of 1.
        assert!(share_within(Process::Poisson, 1.0, 1.0) >= 0.9);
        assert!(share_within(Process::Gamma, 4.0, 0.5) >= 0.9);
        assert!(share_within(Process::Gamma, 0.25, 2.0) >= 0.5);
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let a = Arrivals {
            process: Process::Poisson,
            burstiness: 1.0,
            seed: 7,
        };
        assert_eq!(a.offsets(3.0, 50), a.offsets(3.0, 50));
        assert_eq!(a.offsets(3.0, 1), vec![Duration::ZERO]);
    }
}
