//! A small reader of Prometheus' text exposition format (0.0.4): samples with their labels and
//! the `# TYPE` of each family. Lenient and bounded: a line it cannot read is counted and
//! skipped, never a panic; it never allocates more than the text it is given.

use std::collections::BTreeMap;

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// A family's declared type (`# TYPE name kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

/// What a page of metrics text says.
#[derive(Debug, Default)]
pub struct Page {
    pub samples: Vec<Sample>,
    /// Family name → declared type.
    pub types: BTreeMap<String, Kind>,
    /// Lines that were neither a comment, blank, nor a readable sample.
    pub bad_lines: usize,
}

impl Page {
    /// The declared kind of a sample's family (`_total`, `_bucket`, `_sum`, `_count` looked up
    /// under their family's name too); `Untyped` when none was declared.
    pub fn kind_of(&self, name: &str) -> Kind {
        if let Some(k) = self.types.get(name) {
            return *k;
        }
        for suffix in ["_total", "_bucket", "_sum", "_count"] {
            if let Some(family) = name.strip_suffix(suffix) {
                if let Some(k) = self.types.get(family) {
                    return *k;
                }
            }
        }
        Kind::Untyped
    }
}

/// Read a page of text exposition format.
pub fn parse(text: &str) -> Page {
    let mut page = Page::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let mut w = rest.split_whitespace();
            if w.next() == Some("TYPE") {
                if let (Some(name), Some(kind)) = (w.next(), w.next()) {
                    let kind = match kind {
                        "counter" => Kind::Counter,
                        "gauge" => Kind::Gauge,
                        "histogram" => Kind::Histogram,
                        "summary" => Kind::Summary,
                        _ => Kind::Untyped,
                    };
                    page.types.insert(name.to_owned(), kind);
                }
            }
            continue;
        }
        match sample(line) {
            Some(s) => page.samples.push(s),
            None => page.bad_lines += 1,
        }
    }
    page
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

fn sample(line: &str) -> Option<Sample> {
    let end = line
        .char_indices()
        .find(|&(i, c)| !is_name_char(c, i == 0))
        .map_or(line.len(), |(i, _)| i);
    if end == 0 {
        return None;
    }
    let name = &line[..end];
    let mut rest = &line[end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        let (l, after) = label_set(r)?;
        labels = l;
        rest = after;
    }
    let mut w = rest.split_whitespace();
    let value = number(w.next()?)?;
    // An optional timestamp (integer milliseconds); anything more is not a sample.
    if let Some(ts) = w.next() {
        ts.parse::<i64>().ok()?;
    }
    if w.next().is_some() {
        return None;
    }
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// `a="x",b="y"}` → the labels and what follows the brace.
fn label_set(mut r: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        r = r.trim_start();
        if let Some(after) = r.strip_prefix('}') {
            return Some((labels, after));
        }
        let end = r
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit())))
            .map_or(r.len(), |(i, _)| i);
        if end == 0 {
            return None;
        }
        let key = &r[..end];
        r = r[end..].trim_start().strip_prefix('=')?.trim_start();
        r = r.strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = r.char_indices();
        let close = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.to_owned(), value));
        r = r[close + 1..].trim_start();
        if let Some(after) = r.strip_prefix(',') {
            r = after;
        } else if !r.starts_with('}') {
            return None;
        }
    }
}

fn number(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse::<f64>().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_samples_labels_types_and_escapes() {
        let p = parse(concat!(
            "# HELP x_total a counter\n# TYPE x_total counter\n",
            "x_total{a=\"1\",b=\"q\\\"uote\\\\ \\n\",} 3.5 1700000000000\n",
            "# TYPE g gauge\ng 2e+09\nh{le=\"+Inf\"} +Inf\nn NaN\n",
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"tiny\"} 0.25\n",
        ));
        assert_eq!(p.bad_lines, 0);
        assert_eq!(p.samples.len(), 5);
        assert_eq!(p.samples[0].name, "x_total");
        assert_eq!(
            p.samples[0].labels,
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "q\"uote\\ \n".into())
            ]
        );
        assert_eq!(p.samples[0].value, 3.5);
        assert_eq!(p.kind_of("x_total"), Kind::Counter);
        assert_eq!(p.kind_of("g"), Kind::Gauge);
        assert_eq!(p.samples[1].value, 2e9);
        assert!(p.samples[2].value.is_infinite() && p.samples[3].value.is_nan());
        assert_eq!(p.samples[4].value, 0.25);
    }

    #[test]
    fn garbage_is_counted_never_a_panic() {
        let bad = [
            "{}",
            "x{",
            "x{a}",
            "x{a=}",
            "x{a=\"",
            "x{a=\"1\"",
            "x{a=\"1\"b=\"2\"} 1",
            "x 1 2 3",
            "x one",
            "x{a=\"\\",
            "1x 2",
            "é 1",
            "x{é=\"1\"} 1",
            "x{a=\"1\"}",
            "x 1 1.5",
        ];
        for b in bad {
            let p = parse(b);
            assert_eq!((p.samples.len(), p.bad_lines), (0, 1), "{b:?}");
        }
        // Random bytes, every prefix of a real line: no panic, whatever comes out.
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..2000 {
            let n = rng.usize(0..64);
            let bytes: Vec<u8> = (0..n)
                .map(|_| {
                    *rng.choice(b"a_:{}=\",\\ #\n01.eE+-InfNa\xc3\xa9")
                        .unwrap_or(&b'x')
                })
                .collect();
            let _ = parse(&String::from_utf8_lossy(&bytes));
        }
        let line = "vllm:x{a=\"1\",b=\"2\"} 3.0 17";
        for i in 0..=line.len() {
            let _ = parse(&line[..i]);
        }
    }

    #[test]
    fn the_captured_vllm_page_reads_whole() {
        let text = include_str!("../../../tests/fixtures/metrics/vllm-0.32.txt");
        let p = parse(text);
        assert_eq!(p.bad_lines, 0);
        assert!(p.samples.len() > 400, "{}", p.samples.len());
        assert_eq!(p.kind_of("vllm:num_preemptions_total"), Kind::Counter);
        assert_eq!(p.kind_of("vllm:kv_cache_usage_perc"), Kind::Gauge);
        let q = p
            .samples
            .iter()
            .find(|s| s.name == "vllm:prefix_cache_queries_total");
        assert_eq!(q.map(|s| s.value), Some(1426.0));
    }
}
