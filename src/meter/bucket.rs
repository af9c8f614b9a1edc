//! Prompt-shape buckets of live traffic, by observed token counts (`[buckets]` in the config).

/// Prompt-shape thresholds, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buckets {
    pub short_input_max: u64,
    pub long_input_min: u64,
    pub short_output_max: u64,
    pub long_output_min: u64,
}

impl Default for Buckets {
    /// The defaults of `[buckets]` (documented in `config/tokentap.toml`).
    fn default() -> Self {
        Self {
            short_input_max: 300,
            long_input_min: 900,
            short_output_max: 128,
            long_output_min: 384,
        }
    }
}

impl Buckets {
    /// `long-short`, `short-long`, `balanced` or `other`; `None` when a count is unknown.
    pub fn of(&self, input: Option<u64>, output: Option<u64>) -> Option<&'static str> {
        let (i, o) = (input?, output?);
        Some(if i >= self.long_input_min && o <= self.short_output_max {
            "long-short"
        } else if i <= self.short_input_max && o >= self.long_output_min {
            "short-long"
        } else if i > self.short_input_max
            && i < self.long_input_min
            && o > self.short_output_max
            && o < self.long_output_min
        {
            "balanced"
        } else {
            "other"
        })
    }
}
