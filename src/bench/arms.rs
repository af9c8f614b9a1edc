//! The experiment's arms in bench: the order in which a prompt group's copies go through them (a
//! balanced Latin square, Williams' design: ABBA for two arms), whole groups of copies, and what
//! `run.json` says of the arms.
//!
//! NB: pure functions; the copies of group k share its prompt and pair id (`cell::Load`).

use serde::Serialize;

/// `run.json`'s `experiment`: the arms, the baseline, the order they were visited in.
#[derive(Debug, Serialize)]
pub struct ExperimentInfo {
    pub baseline: String,
    pub arms: Vec<String>,
    /// `balanced-latin-square` (Williams' design; with two arms, ABBA).
    pub order: &'static str,
    /// The request header that chose the arm (absent when arms are path prefixes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route_header: Option<String>,
    /// Each group's copies with a `cache_salt` of `<pair_id>-<arm>` (`--cache-salt`).
    pub cache_salt: bool,
}

/// The groups after which every arm has gone first (and, for an even count, followed every other
/// arm) equally often: N for an even number of arms, 2N for an odd one (the square, then its
/// mirror).
pub fn period(n: usize) -> usize {
    if n % 2 == 0 {
        n
    } else {
        2 * n
    }
}

/// The arms (indices into the arm list) of group `k`'s copies, in the order they are sent.
/// Williams' row r: its first row is 0, 1, N−1, 2, N−2, …, row r adds r to each (mod N). An even
/// N cycles through its N rows; an odd N alternates row ⌊k/2⌋ and its mirror. Two arms: A B, B A,
/// A B, … (ABBA).
pub fn order(n: usize, k: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let first = (0..n).map(|j| match j {
        0 => 0,
        j if j % 2 == 1 => j.div_ceil(2),
        j => n - j / 2,
    });
    let row = |r: usize| first.clone().map(move |a| (a + r) % n);
    if n % 2 == 0 {
        row(k % n).collect()
    } else {
        let mut v: Vec<usize> = row((k / 2) % n).collect();
        if k % 2 == 1 {
            v.reverse();
        }
        v
    }
}

/// The baseline of `arms`: `named` if given, else `direct` if it is an arm, else the first.
pub fn baseline(arms: &[String], named: Option<&str>) -> String {
    named
        .map(str::to_owned)
        .or_else(|| arms.iter().find(|a| *a == "direct").cloned())
        .or_else(|| arms.first().cloned())
        .unwrap_or_default()
}

/// `x` copies rounded up to whole groups of `n` (one copy per arm).
pub fn whole_groups(x: usize, n: usize) -> usize {
    match n {
        0 | 1 => x,
        n => x.div_ceil(n) * n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_arms_are_abba() {
        let seq: Vec<usize> = (0..4).flat_map(|k| order(2, k)).collect();
        assert_eq!(seq, [0, 1, 1, 0, 0, 1, 1, 0]);
        assert_eq!(period(2), 2);
    }

    /// Over one period every arm is in every place equally often, and (Williams) every ordered
    /// pair of neighbours appears equally often.
    #[test]
    fn every_arm_takes_every_place_and_follows_every_other_equally() {
        for n in 2..=7 {
            let p = period(n);
            let rows: Vec<Vec<usize>> = (0..p).map(|k| order(n, k)).collect();
            for r in &rows {
                let mut s = r.clone();
                s.sort_unstable();
                assert_eq!(s, (0..n).collect::<Vec<_>>(), "n={n}: a permutation");
            }
            for place in 0..n {
                let mut at = vec![0; n];
                for r in &rows {
                    at[r[place]] += 1;
                }
                assert!(
                    at.iter().all(|&c| c == p / n),
                    "n={n} place {place}: {at:?}"
                );
            }
            let mut next = vec![vec![0; n]; n];
            for r in &rows {
                for w in r.windows(2) {
                    next[w[0]][w[1]] += 1;
                }
            }
            let want = p * (n - 1) / (n * (n - 1));
            for (a, row) in next.iter().enumerate() {
                for (b, &c) in row.iter().enumerate() {
                    if a != b {
                        assert_eq!(c, want, "n={n}: {a} then {b}");
                    }
                }
            }
            // The next period repeats the first.
            assert_eq!(order(n, p), order(n, 0));
        }
    }

    #[test]
    fn copies_round_up_to_whole_groups() {
        assert_eq!(whole_groups(30, 4), 32);
        assert_eq!(whole_groups(40, 2), 40);
        assert_eq!(whole_groups(5, 2), 6);
        assert_eq!(whole_groups(0, 3), 0);
        assert_eq!(whole_groups(7, 0), 7);
    }
}
