//! `[slo]`: the SLO thresholds the proxy counts every request against
//! (`tokentap_slo_requests_total`), with the same keys as `report --slo FILE`. Each TTFT
//! threshold and tok/s floor also becomes a bucket edge of the TTFT and TPOT histograms, so a
//! count at it, summed over replicas, is exact.

use super::{err, ConfigError};
use crate::slo::Slos;

/// The section, or the write-up's thresholds; a threshold that is not a positive number names
/// its key.
pub fn validate(raw: Option<Slos>, file: &str) -> Result<Slos, ConfigError> {
    let slos = raw.unwrap_or_default();
    if let Some((key, v)) = slos.invalid() {
        return Err(err(
            file,
            format!("slo.{key}"),
            format!("{v} is not a positive number"),
        ));
    }
    Ok(slos)
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overrides};

    fn load(text: &str) -> Result<Config, crate::config::ConfigError> {
        let routes = "[[routes]]\nname='v'\nupstream='http://127.0.0.1:8000/v1/'\n";
        Config::from_toml(&format!("{routes}{text}"), "t.toml", &Overrides::default())
    }

    #[test]
    fn the_section_is_read_and_checked() {
        let c = load("").unwrap();
        assert_eq!(c.slo.ttft_interactive_ms, 500.0);
        let c = load("[slo]\nttft_interactive_ms = 300\ngoodput_tok_s = 20\n").unwrap();
        assert_eq!(c.slo.ttft_interactive_ms, 300.0);
        assert_eq!(c.slo.goodput_tok_s, 20.0);
        assert_eq!(c.slo.ttft_strict_ms, 200.0);
        let e = load("[slo]\nttft_strict_ms = 0\n").unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.key.as_str()),
            ("t.toml", "slo.ttft_strict_ms")
        );
        assert!(e.message.contains("not a positive number"), "{e}");
        let e = load("[slo]\nttft_p95_ms = 300\n").unwrap_err();
        assert!(e.key.starts_with("slo"), "{e}");
        assert!(e.to_string().contains("ttft_p95_ms"), "{e}");
    }
}
