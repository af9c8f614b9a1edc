//! What a run is expected to take, decided once before the load: the cells it will measure and
//! how long each should take, or a search's bound; and the line that says so. The probes that
//! make it are in `estimate.rs`, the ETA that corrects it in `progress.rs`.

/// A cell the run will measure and how long it should take (warm-up included).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cell {
    /// As the cell's progress lines name it (`long-short C=4`).
    pub label: String,
    /// Its concurrency or rate: cells at one level are corrected together.
    pub level: f64,
    /// Warm-up and measured requests.
    pub requests: usize,
    pub est_s: f64,
}

/// The run's estimate, decided once before the load.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Estimate {
    /// The cells are known in advance (a sweep, rates, conversations, a replay).
    Cells {
        cells: Vec<Cell>,
        /// Whether the figures rest on a measurement (else they only weigh cells).
        calibrated: bool,
        basis: String,
    },
    /// A search: its levels depend on what they measure; it takes at most this long, and
    /// about `pace_s` if its levels keep the probes' pace.
    AtMost {
        bound_s: f64,
        pace_s: Option<f64>,
        basis: String,
    },
}

impl Estimate {
    /// The line printed before the load.
    pub fn line(&self) -> String {
        match self {
            Estimate::Cells {
                calibrated: false,
                basis,
                ..
            } => format!("estimate: none yet ({basis}); an ETA follows the first cell"),
            Estimate::Cells { cells, basis, .. } => format!(
                "estimate: about {} ({} cell{}, {} requests with warm-up; {basis})",
                about(cells.iter().map(|c| c.est_s).sum()),
                cells.len(),
                if cells.len() == 1 { "" } else { "s" },
                cells.iter().map(|c| c.requests).sum::<usize>(),
            ),
            Estimate::AtMost { bound_s, basis, .. } => {
                format!("estimate: at most {} ({basis})", about(*bound_s))
            }
        }
    }
}

/// A duration as the estimate line says it: `45 s`, `12 min`, `2 h 05 min`.
pub(crate) fn about(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..=89 => format!("{s} s"),
        90..=5399 => format!("{} min", (s + 30) / 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600 + 30) / 60),
    }
}
