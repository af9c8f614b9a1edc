//! Where a chart's labels go so that none touches another: a text width estimate, words
//! wrapped to a width, items flowed into rows, and labels spread apart along one axis. Pure:
//! never draws.

/// The width of `s` in a sans-serif font of `px` pixels, from the widest average of the fonts a
/// reader's browser picks (DejaVu Sans, Debian's default, is about 0.6 em a character): an
/// estimate on the generous side, so labels placed with it do not touch.
pub fn text_width(s: &str, px: f64) -> f64 {
    s.chars().count() as f64 * px * 0.62
}

/// `s` broken at spaces into lines no wider than `max` pixels (a word wider than that is a
/// line of its own).
pub fn wrap(s: &str, px: f64, max: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in s.split_whitespace() {
        match lines.last_mut() {
            Some(line) if text_width(&format!("{line} {word}"), px) <= max => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// Items of these widths flowed left to right into rows no wider than `max`, `sep` apart:
/// each item's row and x offset.
pub fn flow(widths: &[f64], sep: f64, max: f64) -> Vec<(usize, f64)> {
    let (mut row, mut x) = (0, 0.0);
    widths
        .iter()
        .map(|w| {
            if x > 0.0 && x + w > max {
                row += 1;
                x = 0.0;
            }
            let at = (row, x);
            x += w + sep;
            at
        })
        .collect()
}

/// Positions along one axis for labels that want to be at `wanted`, at least `gap` apart and
/// within `lo..=hi` when they fit there (`n − 1` gaps no more than `hi − lo`); each as near its
/// wish as that allows, in the same order. A label with room stays where it wants to be.
pub fn spread(wanted: &[f64], gap: f64, lo: f64, hi: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..wanted.len()).collect();
    order.sort_by(|a, b| wanted[*a].total_cmp(&wanted[*b]));
    let mut pos: Vec<f64> = order.iter().map(|i| wanted[*i].clamp(lo, hi)).collect();
    // Down from the top, then up from the bottom; if they still do not fit, from the top again
    // (they then run past `hi`, never into each other).
    for i in 1..pos.len() {
        pos[i] = pos[i].max(pos[i - 1] + gap);
    }
    if let Some(last) = pos.last_mut() {
        *last = last.min(hi);
    }
    for i in (0..pos.len().saturating_sub(1)).rev() {
        pos[i] = pos[i].min(pos[i + 1] - gap);
    }
    if pos.first().is_some_and(|p| *p < lo) {
        pos[0] = lo;
        for i in 1..pos.len() {
            pos[i] = pos[i].max(pos[i - 1] + gap);
        }
    }
    let mut out = vec![0.0; wanted.len()];
    for (p, i) in pos.into_iter().zip(order) {
        out[i] = p;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_s_threshold_labels_no_longer_collide() {
        // strict 200 ms and code completion 100 ms were 9 px apart on a 0–2000 axis.
        let ys = spread(&[120.0, 129.0, 40.0], 13.0, 30.0, 240.0);
        assert_eq!(ys[2], 40.0, "a label with room stays");
        assert!((ys[1] - ys[0]).abs() >= 13.0, "{ys:?}");
        assert!(
            ys[0] <= 120.0 && ys[1] >= 129.0,
            "they part around their lines: {ys:?}"
        );
    }

    #[test]
    fn labels_at_an_edge_are_pushed_inside() {
        let ys = spread(&[240.0, 239.0, 238.0], 13.0, 30.0, 240.0);
        let mut s = ys.clone();
        s.sort_by(f64::total_cmp);
        assert_eq!(s, vec![214.0, 227.0, 240.0]);
        assert_eq!(ys[2], 214.0, "the order is kept");
    }

    /// Random wishes: gaps always kept, inside the range whenever they fit, order kept.
    #[test]
    fn spread_keeps_gaps_bounds_and_order() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..5_000 {
            let n = 1 + (next() * 8.0) as usize;
            let wanted: Vec<f64> = (0..n).map(|_| next() * 300.0 - 20.0).collect();
            let (gap, lo, hi) = (12.0, 0.0, 260.0);
            let ys = spread(&wanted, gap, lo, hi);
            let mut pairs: Vec<(f64, f64)> = wanted.iter().copied().zip(ys.clone()).collect();
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            for w in pairs.windows(2) {
                assert!(w[1].1 - w[0].1 >= gap - 1e-9, "{wanted:?} → {ys:?}");
            }
            if (n - 1) as f64 * gap <= hi - lo {
                assert!(
                    ys.iter().all(|y| (lo..=hi).contains(y)),
                    "{wanted:?} → {ys:?}"
                );
            }
        }
    }

    #[test]
    fn wrap_and_flow() {
        assert_eq!(
            wrap("balanced [gateway]", 10.0, 60.0),
            ["balanced", "[gateway]"]
        );
        assert_eq!(wrap("a b c", 10.0, 100.0), ["a b c"]);
        assert!(wrap("", 10.0, 100.0).is_empty());
        let at = flow(&[100.0, 100.0, 100.0], 10.0, 215.0);
        assert_eq!(at, vec![(0, 0.0), (0, 110.0), (1, 0.0)]);
        // An item wider than the row still gets a row of its own.
        assert_eq!(flow(&[300.0, 10.0], 10.0, 200.0), vec![(0, 0.0), (1, 0.0)]);
    }
}
