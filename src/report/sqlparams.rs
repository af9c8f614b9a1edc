//! What the report's ClickHouse queries depend on: the table, the report's settings, and which
//! rows (`--since`, `--until`, `--run-id`).

/// What the queries depend on: the table and the report's settings.
#[derive(Debug, Clone)]
pub struct Params {
    /// `database.table`, both plain identifiers.
    pub table: String,
    pub top: usize,
    pub by_arm: bool,
    pub gateway: String,
    pub direct: String,
    pub goodput_ttft_ms: f64,
    pub goodput_tok_s: f64,
    /// `--since` / `--until`: only the rows whose `ts` falls in it.
    pub window: Option<super::model::Window>,
    /// `--run-id`: only the rows of this bench run (every shard of a distributed run).
    pub run_id: Option<String>,
}

impl Params {
    /// What the queries read `FROM`: the table, or its rows in the window and of the run.
    pub fn from(&self) -> String {
        let mut cond = self
            .window
            .as_ref()
            .map(|w| w.conditions())
            .unwrap_or_default();
        if let Some(id) = &self.run_id {
            cond.push(format!("run_id = '{id}'"));
        }
        // `*` leaves out the MATERIALIZED columns (`ts_us`, `date`); the queries read them too.
        match cond.is_empty() {
            true => self.table.clone(),
            false => format!(
                "(SELECT *, ts_us, date FROM {} WHERE {})",
                self.table,
                cond.join(" AND ")
            ),
        }
    }
}

/// A run id `--run-id` accepts: letters, digits, `.`, `_`, `-` and `:` (nothing to quote in SQL).
pub fn run_id_ok(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'))
}
