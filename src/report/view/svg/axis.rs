//! A chart's value axis: fitted to the data (zero included, a round step, the data filling most
//! of the height) and its tick labels, every one with the same number of decimals. Pure: never
//! draws.

/// A fitted axis: from `min` to `max` in steps of `step`, labelled with `decimals` decimals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Axis {
    pub min: f64,
    pub max: f64,
    pub step: f64,
    pub decimals: usize,
}

/// At most this many steps across the data before the step grows.
const STEPS: f64 = 6.0;

impl Axis {
    /// The axis for values in `lo..=hi`, zero included (the report's quantities are durations,
    /// rates and differences: bars and lines rise from 0). The step is 1, 2, 2.5 or 5 × 10^k,
    /// the smallest giving at most six steps across the data, so the axis ends less than a
    /// step beyond it: the data spans more than 60 % of the axis (more than 75 % when it does
    /// not cross zero).
    pub fn fit(lo: f64, hi: f64) -> Axis {
        let (lo, hi) = (lo.min(0.0), hi.max(0.0));
        let range = hi - lo;
        if !range.is_finite() || range <= 0.0 {
            return Axis {
                min: 0.0,
                max: 1.0,
                step: 0.25,
                decimals: 2,
            };
        }
        let raw = range / STEPS;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|s| *s >= raw * (1.0 - 1e-9))
            .unwrap_or(10.0 * mag);
        // A hair of tolerance, so 400 on a step of 100 ends the axis at 400, not 500.
        let min = (lo / step + 1e-9).floor() * step;
        let max = (hi / step - 1e-9).ceil() * step;
        Axis {
            min,
            max,
            step,
            decimals: decimals(step),
        }
    }

    /// The tick values, `min` to `max`.
    pub fn ticks(&self) -> Vec<f64> {
        let n = ((self.max - self.min) / self.step).round() as usize;
        (0..=n).map(|i| self.min + self.step * i as f64).collect()
    }

    /// A value as this axis labels it: always `decimals` decimals, and never `-0`.
    pub fn label(&self, v: f64) -> String {
        let s = format!("{v:.*}", self.decimals);
        match s.strip_prefix('-') {
            Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
            _ => s,
        }
    }

    /// Where `v` sits, 0 at `min` and 1 at `max`.
    pub fn frac(&self, v: f64) -> f64 {
        (v - self.min) / (self.max - self.min)
    }
}

/// The decimals a step (m × 10^k) needs to be written exactly: 0 for 100 and 25, 1 for 0.5
/// and 2.5, 2 for 0.25.
fn decimals(step: f64) -> usize {
    let k = (step.log10() + 1e-9).floor();
    let m = step / 10f64.powf(k);
    let extra = if (m - 2.5).abs() < 1e-6 { 1.0 } else { 0.0 };
    (extra - k).max(0.0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The share of the axis the data (with zero) covers.
    fn span(a: &Axis, lo: f64, hi: f64) -> f64 {
        (hi.max(0.0) - lo.min(0.0)) / (a.max - a.min)
    }

    #[test]
    fn the_issue_s_ttft_chart_fits_its_data() {
        // TTFT p95 up to 567 ms: 0–600 in steps of 100, not 0–2000.
        let a = Axis::fit(0.0, 567.0);
        assert_eq!((a.min, a.max, a.step, a.decimals), (0.0, 600.0, 100.0, 0));
        assert_eq!(
            a.ticks(),
            vec![0.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0]
        );
        let a = Axis::fit(0.0, 4.7);
        assert_eq!((a.max, a.step), (5.0, 1.0));
        let a = Axis::fit(0.0, 34.6);
        assert_eq!((a.max, a.step), (40.0, 10.0));
        // A round maximum ends the axis there.
        assert_eq!(Axis::fit(0.0, 400.0).max, 400.0);
    }

    #[test]
    fn differences_below_zero_get_a_negative_axis() {
        let a = Axis::fit(-12.0, 160.0);
        assert!(a.min < 0.0 && a.min >= -a.step && a.max >= 160.0);
        assert!(a.ticks().contains(&0.0));
        assert_eq!(a.label(0.0), "0");
    }

    #[test]
    fn nothing_to_fit_gives_a_unit_axis() {
        for (lo, hi) in [(0.0, 0.0), (f64::NAN, f64::NAN), (0.0, f64::INFINITY)] {
            let a = Axis::fit(lo, hi);
            assert_eq!((a.min, a.max), (0.0, 1.0), "{lo} {hi}");
        }
    }

    #[test]
    fn labels_share_their_decimals_and_are_never_minus_zero() {
        let a = Axis::fit(0.0, 1.0);
        assert_eq!(a.step, 0.2);
        let labels: Vec<String> = a.ticks().iter().map(|v| a.label(*v)).collect();
        assert_eq!(labels, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        let a = Axis::fit(0.0, 1.4);
        let labels: Vec<String> = a.ticks().iter().map(|v| a.label(*v)).collect();
        assert_eq!(
            labels,
            ["0.00", "0.25", "0.50", "0.75", "1.00", "1.25", "1.50"]
        );
        assert_eq!(a.label(-0.0001), "0.00");
    }

    /// Over many ranges, large and small, positive and crossing zero: round steps, 3 to 8 of
    /// them, the data over 60 % of the axis (over 75 % from zero), labels distinct, of one
    /// width in decimals, and read back as the ticks.
    #[test]
    fn every_fit_is_round_tight_and_consistently_labelled() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for i in 0..20_000 {
            let scale = 10f64.powf(next() * 12.0 - 6.0);
            let hi = next() * scale;
            let lo = if i % 3 == 0 {
                -next() * hi
            } else {
                next() * hi
            };
            let a = Axis::fit(lo, hi);
            let steps = (a.max - a.min) / a.step;
            assert!(
                (3.0 - 1e-6..=8.0 + 1e-6).contains(&steps),
                "{lo} {hi}: {a:?}"
            );
            let mantissa = a.step / 10f64.powf(a.step.log10().floor());
            assert!(
                [1.0, 2.0, 2.5, 5.0]
                    .iter()
                    .any(|m| (m - mantissa).abs() < 1e-6),
                "{a:?}"
            );
            assert!(a.min <= lo.min(0.0) && a.max >= hi, "{lo} {hi}: {a:?}");
            let floor = if lo < 0.0 { 0.6 } else { 0.75 };
            assert!(span(&a, lo, hi) > floor, "{lo} {hi}: {a:?}");
            let labels: Vec<String> = a.ticks().iter().map(|v| a.label(*v)).collect();
            let decimals = |s: &String| s.split('.').nth(1).map_or(0, str::len);
            assert!(
                labels.iter().all(|l| decimals(l) == a.decimals),
                "{labels:?}"
            );
            let mut dedup = labels.clone();
            dedup.dedup();
            assert_eq!(dedup, labels);
            for (l, t) in labels.iter().zip(a.ticks()) {
                let back: f64 = l.parse().unwrap_or(f64::NAN);
                assert!((back - t).abs() <= a.step * 1e-6, "{l} vs {t}");
            }
        }
    }
}
