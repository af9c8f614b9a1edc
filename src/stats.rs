//! Statistics shared by every command: nearest-rank percentiles, bootstrap intervals, and the
//! spread of a few values (mean, sd, CV, t-interval; Welch for a difference).
//!
//! One definition everywhere (the meter's ITL summary, bench's tables, the report, the overhead
//! bench): the p-th percentile of n sorted values is the value at rank ⌈p·n⌉ (1-based, clamped
//! to 1..n). No interpolation, so merging inputs never changes a percentile's meaning.

/// Resamples behind every bootstrap interval.
const RESAMPLES: usize = 2000;

/// The 0-based index of the nearest-rank `q` percentile among `len` sorted values (`len > 0`).
pub fn rank(len: usize, q: f64) -> usize {
    ((q * len as f64).ceil() as usize).clamp(1, len.max(1)) - 1
}

/// Nearest-rank percentile of sorted values; `None` when there are none.
pub fn pct(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[rank(sorted.len(), q)])
}

/// The finite values, sorted.
pub fn sorted(values: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Values every percentile's interval needs: the fewest for which the distribution-free 95 %
/// interval of a median, order statistics x(2)…x(n−1), covers (1 − 2(n+1)/2ⁿ ≥ 0.95 from
/// n = 9). With 8 it needs the sample's extremes, which no bootstrap resample passes, so its
/// interval is short.
pub const MIN_INTERVAL_VALUES: usize = 9;

/// Values a percentile's bootstrap interval needs (a side, when two are compared):
/// [`MIN_INTERVAL_VALUES`], and at least one value beyond the percentile (a percentile at the
/// sample's maximum has no covering bootstrap interval): p50 9, p95 20, p99 100. `compare` and
/// the report's gateway board give no interval below it.
pub fn interval_needs(q: f64) -> usize {
    MIN_INTERVAL_VALUES.max((1.0 / (1.0 - q) - 1e-9).ceil() as usize)
}

/// Bootstrap 95 % interval of a statistic of `v`, seeded: the same data give the same interval.
/// `stat` is handed each resample sorted.
pub fn bootstrap(v: &[f64], seed: u64, stat: impl Fn(&[f64]) -> Option<f64>) -> Option<[f64; 2]> {
    if v.len() < 2 {
        return None;
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut stats = Vec::with_capacity(RESAMPLES);
    let mut sample = vec![0.0; v.len()];
    for _ in 0..RESAMPLES {
        for s in sample.iter_mut() {
            *s = v[rng.usize(..v.len())];
        }
        sample.sort_by(f64::total_cmp);
        if let Some(x) = stat(&sample) {
            stats.push(x);
        }
    }
    interval(stats)
}

/// Bootstrap 95 % interval of `pct(a, q) − pct(b, q)` for two independent samples (each sorted).
pub fn bootstrap_diff(a: &[f64], b: &[f64], q: f64, seed: u64) -> Option<[f64; 2]> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut stats = Vec::with_capacity(RESAMPLES);
    let (mut ra, mut rb) = (vec![0.0; a.len()], vec![0.0; b.len()]);
    for _ in 0..RESAMPLES {
        for (dst, src) in [(&mut ra, a), (&mut rb, b)] {
            for s in dst.iter_mut() {
                *s = src[rng.usize(..src.len())];
            }
            dst.sort_by(f64::total_cmp);
        }
        if let (Some(x), Some(y)) = (pct(&ra, q), pct(&rb, q)) {
            stats.push(x - y);
        }
    }
    interval(stats)
}

/// Student's t quantile 0.975 at `df` degrees of freedom: exact to three decimals up to 30 (a
/// fractional df is rounded down, which widens the interval), then z + (z³ + z) ÷ 4df.
pub fn t975(df: f64) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    let d = df.floor().max(1.0);
    match T.get(d as usize - 1) {
        Some(t) => *t,
        None => {
            let z = 1.959_964;
            z + (z * z * z + z) / (4.0 * d)
        }
    }
}

/// Mean, sample standard deviation (n − 1), coefficient of variation (sd ÷ mean) and the 95 %
/// t-interval of the mean (mean ± t(n−1) · sd ÷ √n) of a few values, e.g. one per run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Spread {
    pub n: usize,
    pub mean: f64,
    /// None with fewer than two values.
    pub sd: Option<f64>,
    /// None with fewer than two values or a mean of 0.
    pub cv: Option<f64>,
    pub ci95: Option<[f64; 2]>,
}

/// The spread of the finite values of `v`; `None` when there are none.
pub fn spread(v: &[f64]) -> Option<Spread> {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let n = v.len();
    if n == 0 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / n as f64;
    let sd = (n >= 2)
        .then(|| (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64).sqrt());
    let ci95 = sd.map(|sd| {
        let h = t975((n - 1) as f64) * sd / (n as f64).sqrt();
        [mean - h, mean + h]
    });
    Some(Spread {
        n,
        mean,
        sd,
        cv: sd.filter(|_| mean != 0.0).map(|sd| sd / mean.abs()),
        ci95,
    })
}

/// Welch's 95 % interval of mean(a) − mean(b) (unequal variances, Welch–Satterthwaite degrees
/// of freedom); `None` unless each side has two values or more.
pub fn welch(a: &[f64], b: &[f64]) -> Option<[f64; 2]> {
    let (sa, sb) = (spread(a)?, spread(b)?);
    // Products, not powi: powi's rounding may differ between builds, these never do.
    let sq = |x: f64| x * x;
    let (va, vb) = (sq(sa.sd?) / sa.n as f64, sq(sb.sd?) / sb.n as f64);
    let d = sa.mean - sb.mean;
    let se2 = va + vb;
    if se2 == 0.0 {
        return Some([d, d]);
    }
    let df = sq(se2) / (sq(va) / (sa.n - 1) as f64 + sq(vb) / (sb.n - 1) as f64);
    let h = t975(df) * se2.sqrt();
    Some([d - h, d + h])
}

fn interval(stats: Vec<f64>) -> Option<[f64; 2]> {
    let s = sorted(stats);
    Some([pct(&s, 0.025)?, pct(&s, 0.975)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_definition() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(pct(&v, 0.5), Some(5.0));
        assert_eq!(pct(&v, 0.95), Some(10.0));
        assert_eq!(pct(&v, 0.0), Some(1.0));
        assert_eq!(pct(&v, 1.0), Some(10.0));
        assert_eq!(pct(&[], 0.5), None);
        assert_eq!(rank(1, 0.99), 0);
        assert_eq!(sorted([3.0, f64::NAN, 1.0]), vec![1.0, 3.0]);
    }

    #[test]
    fn spread_is_mean_sample_sd_cv_and_a_t_interval() {
        // 2, 4, 6: mean 4, sd 2 (n − 1), cv 0.5, t(2) = 4.303: 4 ± 4.303 · 2 ÷ √3.
        let s = spread(&[2.0, 4.0, 6.0]).unwrap();
        assert_eq!((s.n, s.mean, s.sd, s.cv), (3, 4.0, Some(2.0), Some(0.5)));
        let h = 4.303 * 2.0 / 3f64.sqrt();
        let [lo, hi] = s.ci95.unwrap();
        assert!((lo - (4.0 - h)).abs() < 1e-12 && (hi - (4.0 + h)).abs() < 1e-12);
        let one = spread(&[5.0, f64::NAN]).unwrap();
        assert_eq!((one.n, one.sd, one.cv, one.ci95), (1, None, None, None));
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[0.0, 0.0]).unwrap().cv, None);
        assert_eq!(t975(1.0), 12.706);
        assert_eq!(t975(4.7), 2.776);
        assert!((t975(1000.0) - 1.962).abs() < 0.001);
    }

    #[test]
    fn welch_interval_of_a_difference_of_means() {
        // Equal sizes and variances: df = 2(n − 1) = 4, se = √(2 · 4 ÷ 3).
        let w = welch(&[12.0, 14.0, 16.0], &[2.0, 4.0, 6.0]).unwrap();
        let h = 2.776 * (8.0f64 / 3.0).sqrt();
        assert!((w[0] - (10.0 - h)).abs() < 1e-9 && (w[1] - (10.0 + h)).abs() < 1e-9);
        // Unequal variances: df by Welch–Satterthwaite, below n_a + n_b − 2.
        let (a, b) = ([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0]);
        let (va, vb) = (1.6667 / 4.0, 100.0 / 3.0);
        let df: f64 = (va + vb) * (va + vb) / (va * va / 3.0 + vb * vb / 2.0);
        assert!(df < 3.0);
        let w = welch(&a, &b).unwrap();
        assert!(
            (w[1] - w[0] - 2.0 * t975(df) * (va + vb).sqrt()).abs() < 0.01,
            "{w:?}"
        );
        assert_eq!(welch(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(welch(&[1.0, 1.0], &[0.0, 0.0]), Some([1.0, 1.0]));
    }

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_statistic() {
        let v: Vec<f64> = (0..200).map(|i| f64::from(i % 17)).collect();
        let a = bootstrap(&v, 7, |s| pct(s, 0.5)).unwrap();
        assert_eq!(a, bootstrap(&v, 7, |s| pct(s, 0.5)).unwrap());
        let m = pct(&sorted(v.clone()), 0.5).unwrap();
        assert!(a[0] <= m && m <= a[1], "{a:?} {m}");
        let d = bootstrap_diff(&sorted(v.iter().map(|x| x + 10.0)), &sorted(v), 0.5, 3).unwrap();
        assert!(d[0] <= 10.0 && 10.0 <= d[1], "{d:?}");
    }
}
