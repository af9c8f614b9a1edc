//! The fast path against serde: every line read the same or left to serde, fresh or through a
//! template learned from other lines.

use super::super::fast_check::row;

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
        b"ids",
        b"request_id",
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
        r#"{"id":"00000000000000aa","outcome":"ok","e2e_ms":1,"join_id":"00000000000000bb","join_sent":true,"boot_id":"b-1"}"#,
        r#"{"id":"00000000000000aa","outcome":"ok","e2e_ms":1,"join_id":null,"join_sent":false,"boot_id":null}"#,
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

const KEYS: [&str; 37] = [
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
    "run",
    "scheduled_ms",
    "client_queue_ms",
    "client_lag_ms",
    "method",
    "trace_id",
    "id",
    "stream",
    "itl_max_ms",
    "finish_reason",
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
