//! Prompts for `bench`: a ShareGPT file (`[{"id", "conversations": [{"from", "value"}]}]`, first
//! human turn = prompt) or synthetic prompts of given token lengths, sorted into the three
//! prompt-shape buckets and sampled with a seed. The chosen set is hashed (SHA-256) so a run
//! can prove which prompts it used: the same file and seed give the same hash.

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::tokens::estimate_tokens;

/// The bundled sample: written for tokentap (no downloaded data), ShareGPT-shaped.
pub const SAMPLE: &str = include_str!("../../data/sharegpt-sample.json");

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("{file}: {message}")]
    File { file: String, message: String },
    #[error("{file}: entry {index} (id {id:?}): {message}")]
    Entry {
        file: String,
        index: usize,
        id: String,
        message: String,
    },
}

/// One bucket's definition: which prompts go in, how many tokens come out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BucketSpec {
    pub name: &'static str,
    /// Inclusive lower and exclusive upper bound of estimated prompt tokens.
    pub input_min: u64,
    pub input_max: u64,
    pub output_tokens: u64,
}

/// Buckets of DESIGN.md: long→short (prefill), balanced, short→long (decode).
pub fn buckets(short_max: u64, long_min: u64, outputs: [u64; 3]) -> Vec<BucketSpec> {
    vec![
        BucketSpec {
            name: "long-short",
            input_min: long_min,
            input_max: u64::MAX,
            output_tokens: outputs[0],
        },
        BucketSpec {
            name: "balanced",
            input_min: short_max,
            input_max: long_min,
            output_tokens: outputs[1],
        },
        BucketSpec {
            name: "short-long",
            input_min: 0,
            input_max: short_max,
            output_tokens: outputs[2],
        },
    ]
}

#[derive(Debug, Clone)]
pub struct Prompt {
    pub id: String,
    pub text: String,
    /// The estimate used for bucketing (about four bytes per token).
    pub est_tokens: u64,
}

#[derive(Deserialize)]
struct Entry {
    id: Option<serde_json::Value>,
    conversations: Option<Vec<Turn>>,
}

#[derive(Deserialize)]
struct Turn {
    from: Option<String>,
    value: Option<String>,
}

/// An entry's turns as (from, value).
type Turns = Vec<(String, String)>;

/// A ShareGPT file's entries: each one's id and its turns, every turn checked for both fields.
/// A malformed entry is an error naming the file, the entry and its id.
fn entries(text: &str, file: &str) -> Result<Vec<(String, Turns)>, DatasetError> {
    let raw: Vec<serde_json::Value> =
        serde_json::from_str(text).map_err(|e| DatasetError::File {
            file: file.into(),
            message: format!("not a JSON array of conversations: {e}"),
        })?;
    let mut out = Vec::with_capacity(raw.len());
    for (index, raw) in raw.into_iter().enumerate() {
        let id_hint = raw
            .get("id")
            .map(|v| v.to_string().trim_matches('"').to_owned())
            .unwrap_or_default();
        let bad = |message: String| DatasetError::Entry {
            file: file.into(),
            index,
            id: id_hint.clone(),
            message,
        };
        let e: Entry = serde_json::from_value(raw).map_err(|e| bad(e.to_string()))?;
        let turns = e
            .conversations
            .ok_or_else(|| bad("missing \"conversations\"".into()))?;
        let mut checked = Vec::with_capacity(turns.len());
        for (t, turn) in turns.into_iter().enumerate() {
            let from = turn
                .from
                .ok_or_else(|| bad(format!("conversations[{t}] has no \"from\"")))?;
            let value = turn
                .value
                .ok_or_else(|| bad(format!("conversations[{t}] has no \"value\"")))?;
            checked.push((from, value));
        }
        let id = match e.id {
            Some(serde_json::Value::String(s)) => s,
            Some(v) => v.to_string(),
            None => format!("#{index}"),
        };
        out.push((id, checked));
    }
    Ok(out)
}

fn human(from: &str) -> bool {
    from == "human" || from == "user"
}

/// Parse a ShareGPT file. An entry that is malformed is an error naming it; an entry that simply
/// has no human turn is skipped (real ShareGPT dumps have those).
pub fn parse_sharegpt(text: &str, file: &str) -> Result<Vec<Prompt>, DatasetError> {
    Ok(entries(text, file)?
        .into_iter()
        .filter_map(|(id, turns)| {
            let (_, text) = turns.into_iter().find(|(from, _)| human(from))?;
            (!text.trim().is_empty()).then(|| Prompt {
                est_tokens: estimate_tokens(&text),
                id,
                text,
            })
        })
        .collect())
}

/// A dataset file parsed by `parse` (its text and its name), or the bundled text.
fn read_with<T>(
    path: Option<&Path>,
    bundled: (&str, &str, &str),
    parse: fn(&str, &str) -> Result<T, DatasetError>,
) -> Result<(T, String), DatasetError> {
    let (text, name, described) = bundled;
    match path {
        None => Ok((parse(text, name)?, described.into())),
        Some(p) => {
            let file = p.display().to_string();
            let text = std::fs::read_to_string(p).map_err(|e| DatasetError::File {
                file: file.clone(),
                message: e.to_string(),
            })?;
            Ok((parse(&text, &file)?, file))
        }
    }
}

pub fn load(path: Option<&Path>) -> Result<(Vec<Prompt>, String), DatasetError> {
    let bundled = (
        SAMPLE,
        "bundled sample",
        "bundled sample (data/sharegpt-sample.json)",
    );
    read_with(path, bundled, parse_sharegpt)
}

/// The bundled conversations for `--multi-turn`: written for tokentap (no downloaded data),
/// ShareGPT-shaped, 3 to 6 human turns each.
pub const CONVERSATIONS: &str = include_str!("../../data/sharegpt-conversations.json");

/// A conversation: its id and its turns, each a human message and the reply the dataset has
/// for it (none after the last, when the dataset ends on a human turn).
#[derive(Debug, Clone)]
pub struct Conversation {
    pub id: String,
    pub turns: Vec<(String, Option<String>)>,
}

/// Parse a ShareGPT file into conversations: human turns paired with the reply that follows
/// (system turns and replies before the first human turn are left out). A malformed entry is
/// an error naming it; an entry without a human turn is skipped.
pub fn parse_conversations(text: &str, file: &str) -> Result<Vec<Conversation>, DatasetError> {
    let mut out = Vec::new();
    for (id, turns) in entries(text, file)? {
        let mut pairs: Vec<(String, Option<String>)> = Vec::new();
        for (from, value) in turns {
            match from.as_str() {
                f if human(f) && !value.trim().is_empty() => pairs.push((value, None)),
                "gpt" | "assistant" | "chatgpt" | "bard" | "bing" => {
                    if let Some(last) = pairs.last_mut().filter(|p| p.1.is_none()) {
                        last.1 = Some(value);
                    }
                }
                _ => {}
            }
        }
        if !pairs.is_empty() {
            out.push(Conversation { id, turns: pairs });
        }
    }
    Ok(out)
}

/// The conversations of `--dataset`, or the bundled ones.
pub fn load_conversations(
    path: Option<&Path>,
) -> Result<(Vec<Conversation>, String), DatasetError> {
    let bundled = (
        CONVERSATIONS,
        "bundled conversations",
        "bundled conversations (data/sharegpt-conversations.json)",
    );
    read_with(path, bundled, parse_conversations)
}

/// The conversations shuffled with `seed`, the first `n` kept (those with two turns or more
/// first: they are what `--multi-turn` is for).
pub fn choose_conversations(mut all: Vec<Conversation>, seed: u64, n: usize) -> Vec<Conversation> {
    let mut rng = fastrand::Rng::with_seed(seed);
    rng.shuffle(&mut all);
    all.sort_by_key(|c| c.turns.len() < 2);
    all.truncate(n.max(1));
    all
}

/// SHA-256 over the chosen conversations, in order: each id and every turn's text.
pub fn conversations_sha256(convs: &[Conversation]) -> String {
    let mut h = Sha256::new();
    for c in convs {
        h.update(c.id.as_bytes());
        h.update([0]);
        for (human, reply) in &c.turns {
            h.update(human.as_bytes());
            h.update([0]);
            h.update(reply.as_deref().unwrap_or("").as_bytes());
            h.update([0]);
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Synthetic prompts of about `tokens` tokens each (padded text, like the write-up's gateway
/// test), `count` per length.
pub fn synthetic(lengths: &[u64], count: usize) -> Vec<Prompt> {
    const PAD: &str = "Measure the latency of this request carefully and report it. ";
    let mut out = Vec::new();
    for &t in lengths {
        for i in 0..count {
            let mut text = format!("[{t}/{i}] ");
            while estimate_tokens(&text) < t {
                text.push_str(PAD);
            }
            text.truncate((t * 4) as usize);
            out.push(Prompt {
                id: format!("synthetic-{t}-{i}"),
                est_tokens: estimate_tokens(&text),
                text,
            });
        }
    }
    out
}

/// The prompts chosen for one bucket.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub spec: BucketSpec,
    pub prompts: Vec<Prompt>,
}

/// Why no prompt falls in `spec`: its range, and the buckets of `all` the prompts fall in.
pub fn why_empty(spec: &BucketSpec, all: &[BucketSpec], prompts: &[Prompt]) -> String {
    let range = |s: &BucketSpec| match s.input_max {
        u64::MAX => format!("{} or more", s.input_min),
        max => format!("{} to {}", s.input_min, max),
    };
    let fall: Vec<String> = all
        .iter()
        .filter_map(|b| {
            let t: Vec<u64> = prompts
                .iter()
                .map(|p| p.est_tokens)
                .filter(|t| *t >= b.input_min && *t < b.input_max)
                .collect();
            let (lo, hi) = (t.iter().min()?, t.iter().max()?);
            let at = if lo == hi {
                format!("{lo}")
            } else {
                format!("{lo} to {hi}")
            };
            Some(format!("{} of them in {} ({at} tokens)", t.len(), b.name))
        })
        .collect();
    let fall = match fall.is_empty() {
        true => "the dataset has none".to_owned(),
        false => fall.join(", "),
    };
    format!(
        "bucket {}: no prompt falls in it ({} takes {} estimated prompt tokens; of {} prompts, {fall}; --short-max and --long-min move the bounds)",
        spec.name,
        spec.name,
        range(spec),
        prompts.len()
    )
}

/// Sort into buckets, shuffle each with `seed`, keep up to `per_bucket`.
pub fn choose(all: &[Prompt], specs: &[BucketSpec], seed: u64, per_bucket: usize) -> Vec<Chosen> {
    specs
        .iter()
        .map(|spec| {
            let mut ps: Vec<Prompt> = all
                .iter()
                .filter(|p| p.est_tokens >= spec.input_min && p.est_tokens < spec.input_max)
                .cloned()
                .collect();
            let mut rng = fastrand::Rng::with_seed(seed);
            rng.shuffle(&mut ps);
            ps.truncate(per_bucket);
            Chosen {
                spec: spec.clone(),
                prompts: ps,
            }
        })
        .collect()
}

/// SHA-256 over the chosen set, in order: bucket name, output tokens, each prompt id and text.
pub fn prompt_set_sha256(chosen: &[Chosen]) -> String {
    let mut h = Sha256::new();
    for c in chosen {
        h.update(c.spec.name.as_bytes());
        h.update([0]);
        h.update(c.spec.output_tokens.to_le_bytes());
        for p in &c.prompts {
            h.update(p.id.as_bytes());
            h.update([0]);
            h.update(p.text.as_bytes());
            h.update([0]);
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_fills_every_bucket_and_hash_is_stable() {
        let (all, _) = load(None).unwrap();
        let specs = buckets(200, 700, [64, 256, 512]);
        let a = choose(&all, &specs, 42, 50);
        assert!(
            a.iter().all(|c| c.prompts.len() >= 5),
            "{:?}",
            a.iter().map(|c| c.prompts.len()).collect::<Vec<_>>()
        );
        assert_eq!(
            prompt_set_sha256(&a),
            prompt_set_sha256(&choose(&all, &specs, 42, 50))
        );
        assert_ne!(
            prompt_set_sha256(&a),
            prompt_set_sha256(&choose(&all, &specs, 43, 50))
        );
    }

    #[test]
    fn bad_entries_are_named() {
        let e = parse_sharegpt(r#"[{"id":"a","conversations":[{"from":"human","value":"hi"}]},{"id":"b7","conversations":[{"value":"x"}]}]"#, "f.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f.json") && e.contains("entry 1") && e.contains("b7") && e.contains("from"),
            "{e}"
        );
        let e = parse_sharegpt("{}", "f.json").unwrap_err().to_string();
        assert!(e.contains("f.json"), "{e}");
        // No human turn: skipped, not an error.
        assert!(parse_sharegpt(
            r#"[{"id":"c","conversations":[{"from":"gpt","value":"x"}]}]"#,
            "f"
        )
        .unwrap()
        .is_empty());
    }

    #[test]
    fn synthetic_lengths() {
        let p = synthetic(&[1019, 558, 127], 2);
        assert_eq!(p.len(), 6);
        assert_eq!(p[0].est_tokens, 1019);
        assert_eq!(p[5].est_tokens, 127);
    }
}

#[cfg(test)]
mod conversation_tests {
    use super::*;

    #[test]
    fn turns_pair_each_human_message_with_its_reply() {
        let c = parse_conversations(
            r#"[{"id":"a","conversations":[{"from":"system","value":"s"},{"from":"gpt","value":"early"},
                {"from":"human","value":"one"},{"from":"gpt","value":"r1"},{"from":"human","value":"two"}]},
               {"id":"b","conversations":[{"from":"gpt","value":"only a reply"}]}]"#,
            "f",
        )
        .unwrap();
        assert_eq!(c.len(), 1, "an entry without a human turn is skipped");
        assert_eq!(
            c[0].turns,
            vec![("one".into(), Some("r1".into())), ("two".into(), None)]
        );
        let (all, _) = load_conversations(None).unwrap();
        assert_eq!(all.len(), 24);
        assert!(all
            .iter()
            .all(|c| (3..=6).contains(&c.turns.len()) && c.turns.iter().all(|t| t.1.is_some())));
        let e = parse_conversations(
            r#"[{"id":"x","conversations":[{"from":"human"}]}]"#,
            "g.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("g.json") && e.contains("value"), "{e}");
    }
}
