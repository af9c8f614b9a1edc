//! `tokentap check`: validate a config file and say what it would serve, like `nginx -t`.

use std::path::PathBuf;

use crate::config::{Config, ConfigError, Overrides};

#[derive(clap::Args)]
pub struct Args {
    /// TOML config file to validate (see config/tokentap.toml); nothing is bound or started.
    #[arg(long, short)]
    pub config: PathBuf,
}

/// The one-line summary of a valid config, or its first error.
pub fn run(a: &Args) -> Result<String, ConfigError> {
    let c = Config::load(&a.config, &Overrides::default())?;
    Ok(format!(
        "{}: ok — listen {}, admin {}, {} route(s): {}",
        a.config.display(),
        c.listen,
        c.admin
            .map(|a| a.to_string())
            .unwrap_or_else(|| "off".into()),
        c.routes.len(),
        c.routes
            .iter()
            .map(|r| format!(
                "{} → {}{}",
                r.name,
                r.upstream.to_string().trim_end_matches('/'),
                r.base_path
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
