//! The offline readers: the report's fast line reader and the config loader.

use crate::config::{Config, Overrides};

/// The report's fast line reader against serde, on every line of the input: the same fields
/// (fresh, through a learned template, or as a log streams), or it leaves the line to serde.
pub fn report_line(data: &[u8]) {
    crate::report::fast_check::check_lines(data);
}

/// The config loader: never a panic, and every error names a key (`(top level)` for a file
/// that is not TOML, which then names its line).
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Err(e) = Config::from_toml(&text, "fuzz.toml", &Overrides::default()) {
        assert!(!e.key.trim().is_empty(), "no key: {e}");
        assert!(!e.message.trim().is_empty(), "no message: {e}");
        assert_eq!(e.file, "fuzz.toml");
    }
}
