//! The fast path against serde: every line read the same or left to serde, fresh or through a
//! template learned from other lines.

/// A record as tokentap writes it.
const RECORD: &str = r#"{"ts":"2026-11-18T11:06:40.004425Z","id":"eb0354df4a45b34e","route":"default","experiment":null,"method":"POST","endpoint":"/v1/chat/completions","api":"chat","model":"meta-llama/Llama-3.1-8B-Instruct","upstream_model":null,"response_model":"meta-llama/Llama-3.1-8B-Instruct","key_id":"sha256:10d8850c48cfd084693dcce25719c5b5dd739535ae1a8a4bde61b7bb460f651f","stream":true,"status":200,"outcome":"ok","input_tokens":54,"output_tokens":22,"tokens_source":"usage","cached_tokens":null,"reasoning_tokens":null,"ttft_ms":18.874196172882993,"ttfo_ms":19.062938134611823,"tpot_ms":26.59388015896535,"e2e_ms":577.3456795111554,"itl_p50_ms":25.79606375419639,"itl_p99_ms":66.48470039741338,"itl_max_ms":159.56328095379212,"body_read_ms":0.10965748331999202,"upstream_headers_ms":5.662258851864897,"first_byte_ms":5.8510008135937275,"first_event_ms":6.039742775322558,"last_token_ms":577.2956795111554,"in_flight":35,"max_tokens":60,"request_bytes":416,"response_bytes":3300,"events":24,"content_events":22,"done":true,"bucket":"other","parse_errors":0,"oversize_events":0,"engine_queue_ms":null,"engine_ttft_ms":null,"engine_decode_ms":null,"gateway_overhead_ms":null,"upstream_sent_ms":0.35184547905112684,"ttft_split":{"proxy_ms":0.3,"upstream_headers_ms":5.662258851864897,"engine_queue_ms":null,"engine_prefill_ms":null,"outside_engine_ms":null},"request_id":"aiperf-7f3c2b","upstream_request_id":"chatcmpl-aiperf-7f3c2b","trace_id":"538c6a0cda7326c79e7eb00e4c9c9e35","span_id":"c1dfda7a5eb236f8","error":null}"#;

/// The fast path's reading of a line three ways: fresh, after a tokentap record taught it
/// another template, and a second time (its own template). All three must agree.
fn row(l: &[u8]) -> Option<super::Row<'_>> {
    let fresh = super::Fast::default().row(l);
    let mut taught = super::Fast::default();
    assert!(taught.row(RECORD.as_bytes()).is_some());
    let other = taught.row(l);
    let again = taught.row(l);
    let d = |r: &Option<super::Row<'_>>| format!("{r:?}");
    assert_eq!(d(&fresh), d(&other), "{}", String::from_utf8_lossy(l));
    assert_eq!(d(&fresh), d(&again), "{}", String::from_utf8_lossy(l));
    fresh
}

#[test]
fn every_field_and_no_other_key_is_recognised() {
    for (name, f) in super::FIELDS {
        assert_eq!(super::field(name).map(|g| g as u8), Some(f as u8));
        // One byte off, anywhere, or one byte more or less: not the field.
        for i in 0..name.len() {
            let mut k = name.to_vec();
            k[i] ^= 0x20;
            assert!(super::field(&k).is_none());
            assert!(super::field(&name[..i]).is_none());
        }
        assert!(super::field(&[name, b"x"].concat()).is_none());
    }
    for k in [
        &b""[..],
        b"id",
        b"methods",
        b"statu",
        b"upstream_model",
        b"tokens_source",
    ] {
        assert!(super::field(k).is_none());
    }
}

#[test]
fn the_fast_path_reads_what_serde_reads_or_defers() {
    let lines = [
        r#"{"ts":"t","outcome":"ok","e2e_ms":1.5,"x":{"a":[1,"}",{"b":null}]},"ttft_split":{"proxy_ms":0.25,"engine_queue_ms":null},"bucket":null}"#,
        r#"{"outcome":"timeout","e2e_ms":3e2,"key_id":"sha256:ab","in_flight":7,"concurrency":4}"#,
        r#"{"outcome":"ok","e2e_ms":2,"route":"esc\"aped"}"#,
        r#"{"outcome":"ok"}"#,
        r#"{"outcome":"ok","e2e_ms":1,"e2e_ms":2}"#,
        r#"{"outcome":"ok","e2e_ms":1,"input_tokens":1.0}"#,
        r#"{"outcome":"ok","e2e_ms":1} trailing"#,
        r#"{"outcome":"ok","e2e_ms":1,"experiment":{"arm":"gateway","pair_id":"p1"},"gateway_tap":{"side":"outer","peer":"x","join":"header","unjoined":null}}"#,
        r#"{"ttft_split":{"_":"ok","proxy_ms":1},"outcome":"ok","e2e_ms":12.5}"#,
        r#"{"outcome":"ok","e2e_ms":1,"request_id":"a\"}b\\c\u00e9","upstream_request_id":"chatcmpl-1"}"#,
    ];
    for l in lines {
        let fast = row(l.as_bytes());
        let slow = serde_json::from_str::<super::Row<'_>>(l);
        match (&fast, &slow) {
            (Some(f), Ok(s)) => assert_eq!(format!("{f:?}"), format!("{s:?}"), "{l}"),
            (Some(f), Err(e)) => panic!("{l}: fast read {f:?}, serde says {e}"),
            (None, _) => {}
        }
    }
    assert!(row(lines[0].as_bytes()).is_some());
    assert!(row(lines[1].as_bytes()).is_some());
    assert!(row(lines[2].as_bytes()).is_none(), "escapes defer");
    assert!(row(lines[3].as_bytes()).is_none(), "missing e2e_ms defers");
    assert!(
        row(lines[4].as_bytes()).is_none(),
        "a repeated field defers"
    );
    assert!(row(lines[7].as_bytes()).is_some());
    assert!(
        row(lines[8].as_bytes()).is_some(),
        "a split part it does not know is skipped"
    );
    assert!(
        row(lines[9].as_bytes()).is_some(),
        "a client's request id, escapes and all, is stepped over"
    );
}

use proptest::prelude::*;

/// A JSON value as text, of the kinds records and other tools' lines hold.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        any::<u32>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| f.to_string()),
        (0u64..1000, -5i32..5).prop_map(|(m, e)| format!("{m}e{e}")),
        Just("-0.0".to_owned()),
        Just("1.5e-7".to_owned()),
        Just("007".to_owned()),
        Just("-0".to_owned()),
        Just("2.5E+3".to_owned()),
        Just("1e400".to_owned()),
        Just("123456789012345678901234".to_owned()),
        Just("0.12345678901234567890123".to_owned()),
        Just("1.".to_owned()),
        Just("\"ctl\u{1}char\"".to_owned()),
        Just(r#""bad \q escape""#.to_owned()),
        Just(r#""bad \u12g4 hex""#.to_owned()),
        Just(r#""good \u00e9 \/ \n""#.to_owned()),
        Just("\"non-ascii é ✓\"".to_owned()),
        Just("[1,]".to_owned()),
        Just(r#"{"a":1,}"#.to_owned()),
        Just("{,}".to_owned()),
        Just(r#"{"a" 1}"#.to_owned()),
        Just(r#"{"a":}"#.to_owned()),
        Just("[[[]]".to_owned()),
        Just("nul".to_owned()),
        Just("truex".to_owned()),
        "[a-z_ ]{0,12}".prop_map(|s| format!("\"{s}\"")),
        Just(r#""esc\"aped\\ \u00e9""#.to_owned()),
        Just("\"ok\"".to_owned()),
        Just("\"outer\"".to_owned()),
        Just("\"chat\"".to_owned()),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(","))),
            proptest::collection::vec(("[a-z_]{1,8}", inner), 0..4).prop_map(|v| {
                let fields: Vec<String> =
                    v.into_iter().map(|(k, x)| format!("\"{k}\":{x}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

const KEYS: [&str; 34] = [
    "outc\\u006fme",
    "ké",
    "k\u{1}",
    "ts",
    "route",
    "experiment",
    "api",
    "key_id",
    "outcome",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "ttft_ms",
    "ttfo_ms",
    "tpot_ms",
    "e2e_ms",
    "upstream_headers_ms",
    "in_flight",
    "bucket",
    "gateway_overhead_ms",
    "concurrency",
    "ttft_split",
    "gateway_tap",
    "request_rate",
    "turn",
    "scheduled_ms",
    "client_queue_ms",
    "client_lag_ms",
    "method",
    "trace_id",
    "id",
    "stream",
    "x",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]
    /// Whatever the line, the fast path reads it as serde does, or leaves it to serde.
    #[test]
    fn the_fast_path_never_reads_a_line_differently(
        fields in proptest::collection::vec((0..KEYS.len(), value(), 0u8..3), 0..14),
        required in any::<bool>(),
    ) {
        let mut parts: Vec<String> = fields
            .iter()
            .map(|(k, v, ws)| {
                let pad = " ".repeat(usize::from(*ws));
                format!("{pad}\"{}\"{pad}:{pad}{v}{pad}", KEYS[*k])
            })
            .collect();
        if required {
            parts.push("\"outcome\":\"ok\"".into());
            parts.push("\"e2e_ms\":12.5".into());
        }
        let line = format!("{{{}}}", parts.join(","));
        let fast = row(line.as_bytes());
        let slow = serde_json::from_str::<super::Row<'_>>(&line);
        // Without escapes and numbers of more than 19 digits, there is nothing the fast
        // path leaves to serde: it reads every line serde reads.
        let long = line
            .split(|c: char| !c.is_ascii_digit() && c != '.')
            .any(|n| n.bytes().filter(u8::is_ascii_digit).count() > 19);
        if slow.is_ok() && !line.contains('\\') && !long {
            prop_assert!(fast.is_some(), "deferred a plain line serde reads: {}", line);
        }
        if let Some(f) = fast {
            match slow {
                Ok(s) => prop_assert_eq!(format!("{f:?}"), format!("{s:?}"), "{}", line),
                Err(e) => prop_assert!(false, "fast read {:?}, serde says {} of {}", f, e, line),
            }
        }
    }
}
