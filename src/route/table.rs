//! The route table: which configured route a request goes to, by path prefix (longest first, on
//! a segment boundary). Upstreams come only from the config — the Host header and absolute-form
//! URIs never choose one.

use crate::config::RouteConfig;

pub struct RouteTable {
    /// (prefix, route index), longest prefix first.
    by_prefix: Vec<(String, usize)>,
}

impl RouteTable {
    pub fn new(routes: &[RouteConfig]) -> Self {
        let mut by_prefix: Vec<(String, usize)> = routes
            .iter()
            .enumerate()
            .map(|(i, r)| (r.path_prefix.clone(), i))
            .collect();
        by_prefix.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        Self { by_prefix }
    }

    /// The route for `path`, and the path to send upstream (prefix stripped, never empty).
    pub fn pick<'p>(&self, path: &'p str) -> Option<(usize, &'p str)> {
        for (prefix, idx) in &self.by_prefix {
            if prefix == "/" {
                return Some((*idx, path));
            }
            if let Some(rest) = path.strip_prefix(prefix.as_str()) {
                if rest.is_empty() {
                    return Some((*idx, "/"));
                }
                if rest.starts_with('/') {
                    return Some((*idx, rest));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides};

    #[test]
    fn longest_prefix_on_segment_boundary() {
        let c = Config::from_toml(
            "[[routes]]\nname='direct'\nupstream='http://a:1'\n\
             [[routes]]\nname='gw'\nupstream='http://b:1'\npath_prefix='/gateway'\n",
            "t",
            &Overrides::default(),
        )
        .unwrap();
        let t = RouteTable::new(&c.routes);
        assert_eq!(t.pick("/v1/models"), Some((0, "/v1/models")));
        assert_eq!(t.pick("/gateway/v1/models"), Some((1, "/v1/models")));
        assert_eq!(t.pick("/gateway"), Some((1, "/")));
        assert_eq!(t.pick("/gatewayx/v1"), Some((0, "/gatewayx/v1")));
        let only_gw = RouteTable::new(&c.routes[1..]);
        assert_eq!(only_gw.pick("/v1/models"), None);
    }
}
