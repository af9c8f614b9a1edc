//! `${NAME}` in string values, replaced from the environment (secrets stay out of files);
//! `$$` is a literal `$`. An unset variable is an error naming the key, never a silent "".

use super::{err, ConfigError};

/// Expand `${NAME}` from the environment; `$$` is a literal `$`.
pub fn expand_env(s: &str, file: &str, key: &str) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body
                .find('}')
                .ok_or_else(|| err(file, key, "unterminated ${…} (write $$ for a literal $)"))?;
            let name = &body[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(err(
                    file,
                    key,
                    format!("invalid environment variable name {name:?}"),
                ));
            }
            let val = std::env::var(name)
                .map_err(|_| err(file, key, format!("environment variable {name} is not set")))?;
            out.push_str(&val);
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}
