//! `listen.backlog` (or `serve --backlog`): the proxy listener's accept queue, checked here; the
//! socket itself is made by `crate::listen`.

use super::{err, ConfigError};
use crate::listen::MAX_BACKLOG;

/// The backlog asked for: the flag's value over the file's; `None` (neither given) means the
/// system's maximum, read when the listener is bound.
pub(super) fn backlog(
    file: &str,
    from_file: Option<u64>,
    from_flag: Option<u64>,
) -> Result<Option<u32>, ConfigError> {
    const KEY: &str = "listen.backlog";
    let Some(n) = from_flag.or(from_file) else {
        return Ok(None);
    };
    match u32::try_from(n) {
        Ok(0) => Err(err(file, KEY, "must be at least 1")),
        Ok(n) if n <= MAX_BACKLOG => Ok(Some(n)),
        _ => Err(err(
            file,
            KEY,
            format!("{n} is larger than listen(2) takes ({MAX_BACKLOG}); leave it unset for the system's maximum"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, Overrides};

    const ROUTE: &str = "[[routes]]\nname='a'\nupstream='http://127.0.0.1:9'\n";

    fn load(listen: &str, flag: Option<u64>) -> Result<Config, ConfigError> {
        let over = Overrides {
            backlog: flag,
            ..Overrides::default()
        };
        Config::from_toml(&format!("[listen]\n{listen}\n{ROUTE}"), "t.toml", &over)
    }

    #[test]
    fn unset_it_is_the_systems_maximum_and_the_flag_wins_over_the_file() {
        assert_eq!(load("", None).unwrap().backlog, None);
        assert_eq!(load("backlog = 300", None).unwrap().backlog, Some(300));
        assert_eq!(
            load("backlog = 300", Some(5000)).unwrap().backlog,
            Some(5000)
        );
        assert_eq!(
            load("", Some(2_147_483_647)).unwrap().backlog,
            Some(i32::MAX as u32)
        );
    }

    #[test]
    fn a_bad_backlog_names_the_file_and_the_key() {
        for (text, flag, says) in [
            ("backlog = 0", None, "must be at least 1"),
            ("", Some(0), "must be at least 1"),
            ("backlog = 2147483648", None, "larger than listen(2) takes"),
            ("backlog = -1", None, "-1"),
            ("backlog = 'max'", None, "max"),
        ] {
            let e = load(text, flag).unwrap_err().to_string();
            assert!(e.starts_with("t.toml: listen.backlog: "), "{text}: {e}");
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
