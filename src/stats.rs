//! Statistics shared by every command: nearest-rank percentiles and bootstrap intervals.
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
