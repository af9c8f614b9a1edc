#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::report::row::TapRow;

/// A served stream of `arm` for prompt `pair` at concurrency `c`: TTFT `ttft`, 20 ms between
/// tokens (p99 22, longest 25), 16 tokens, streamed event by event.
fn rec(pair: usize, arm: &str, c: u64, ttft: f64) -> BoardRec {
    BoardRec {
        pair_id: format!("p{c}-{pair}").into(),
        arm: Arc::from(arm),
        level: (Axis::Concurrency, c),
        outcome: Outcome::Ok,
        stream: true,
        finish: true,
        delivery: Some(Verdict::Streamed),
        output_tokens: Some(16),
        ttft_ms: Some(ttft),
        itl_p50_ms: Some(20.0),
        itl_p99_ms: Some(22.0),
        itl_max_ms: Some(25.0),
    }
}

/// `n` prompts at each level through `direct` and the arms `(name, added ms)`, with ±0.3 ms of
/// noise on every copy.
fn sweep(levels: &[u64], n: usize, arms: &[(&str, f64)]) -> Vec<BoardRec> {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut out = Vec::new();
    for &c in levels {
        for i in 0..n {
            let base = 30.0 + 5.0 * rng.f64();
            out.push(rec(i, "direct", c, base + 0.3 * rng.f64()));
            for (arm, add) in arms {
                out.push(rec(i, arm, c, base + add + 0.3 * rng.f64()));
            }
        }
    }
    out
}

fn board(recs: &[BoardRec], opts: &BoardOpts) -> Vec<BoardRow> {
    compute(recs, &[], opts).unwrap().unwrap()
}

fn row<'a>(rows: &'a [BoardRow], arm: &str) -> &'a BoardRow {
    rows.iter().find(|r| r.arm == arm).unwrap()
}

#[test]
fn three_gateways_read_their_added_ttft_sorted_by_it() {
    let arms = [("five", 5.0), ("zero", 0.0), ("one", 1.0)];
    let rows = board(&sweep(&[1, 4], 120, &arms), &BoardOpts::default());
    let names: Vec<&str> = rows.iter().map(|r| r.arm.as_str()).collect();
    assert_eq!(names, ["zero", "one", "five"]);
    for (arm, add) in arms {
        let r = row(&rows, arm);
        assert_eq!(r.baseline, "direct");
        assert_eq!(r.levels.len(), 2);
        let l = &r.levels[0];
        assert_eq!((l.pairs, l.label.as_str()), (120, "1"));
        assert_eq!(l.level, LevelValue::Count(1));
        let a = &l.added_ttft_ms;
        let [lo, hi] = a.p50_ci95.unwrap();
        assert!(lo <= add + 0.05 && add - 0.05 <= hi, "{arm}: [{lo}, {hi}]");
        assert!((a.p50.unwrap() - add).abs() < 0.3, "{arm}: {a:?}");
        // 120 pairs: a p99 has its interval (it needs 100).
        assert!(a.p99_ci95.is_some(), "{arm}");
        // Same rhythm on both copies: no added gap.
        assert_eq!(l.added_gap_ms.p50, Some(0.0));
        assert_eq!(l.added_gap_ms.p99, Some(0.0));
        assert_eq!(l.added_ttft_tap_ms, None);
        assert_eq!(l.delivery.streamed, 120);
        assert_eq!((l.errors, l.baseline_errors), (0, 0));
    }
}

#[test]
fn intervals_are_null_below_the_values_a_percentile_needs() {
    // 99 pairs: p50's interval, no p99's; 8 pairs: neither (a p50 needs 9).
    let rows = board(&sweep(&[1], 99, &[("gw", 2.0)]), &BoardOpts::default());
    let a = &rows[0].levels[0].added_ttft_ms;
    assert!(
        a.p50_ci95.is_some() && a.p99.is_some() && a.p99_ci95.is_none(),
        "{a:?}"
    );
    let rows = board(&sweep(&[1], 8, &[("gw", 2.0)]), &BoardOpts::default());
    let a = &rows[0].levels[0].added_ttft_ms;
    assert!(
        a.p50.is_some() && a.p50_ci95.is_none() && a.p99_ci95.is_none(),
        "{a:?}"
    );
    let json = serde_json::to_value(&rows[0]).unwrap();
    assert!(json["levels"][0]["added_ttft_ms"]["p50_ci95"].is_null());
    assert!(json["levels"][0]["added_ttft_tap_ms"].is_null());
    assert!(rows[0].summary.is_empty());
}

#[test]
fn a_buffering_gateway_and_errors_are_counted_and_named() {
    let mut recs = sweep(&[1], 40, &[("nginx", 3.0)]);
    for r in recs.iter_mut().filter(|r| &*r.arm == "nginx") {
        r.delivery = Some(Verdict::Buffered);
    }
    // Three of nginx's copies failed, one of direct's.
    let mut failed = 0;
    for r in recs.iter_mut().filter(|r| &*r.arm == "nginx").take(3) {
        r.outcome = Outcome::Timeout;
        failed += 1;
    }
    recs.iter_mut()
        .rev()
        .find(|r| &*r.arm == "direct")
        .unwrap()
        .outcome = Outcome::UpstreamError;
    let mut rows = board(&recs, &BoardOpts::default());
    let l = &rows[0].levels[0];
    assert_eq!(failed, 3);
    assert_eq!((l.errors, l.baseline_errors), (3, 1));
    assert_eq!((l.requests, l.baseline_requests), (40, 40));
    assert_eq!(l.pairs, 36);
    assert_eq!(l.delivery.buffered, 40);
    assert_eq!(l.baseline_delivery.streamed, 40);
    rows[0].summary = crate::report::answers::board_summary(&rows[0]);
    let s = &rows[0].summary;
    assert!(
        s.contains("buffered 40 of 40 streams (direct: 0 of 40)"),
        "{s}"
    );
    assert!(
        s.contains("left 3 of 40 requests unserved (direct: 1 of 40)"),
        "{s}"
    );
    // Failures at 40 streams a level: nothing sustained.
    assert_eq!(rows[0].sustained_streams, None);
    assert!(rows[0]
        .sustained_reason
        .as_deref()
        .unwrap()
        .contains("C=1: 3 of 40 streams not served"));
}

#[test]
fn sustained_streams_stop_below_the_first_level_with_a_long_silence() {
    let mut recs = sweep(&[1, 2, 4, 8], 30, &[("calm", 0.5), ("stall", 0.5)]);
    // The pace is the baseline's median gap at C=1: 20 ms; a 45 ms gap at C=4 is over 2 ×.
    let stall = recs
        .iter_mut()
        .find(|r| &*r.arm == "stall" && r.level.1 == 4)
        .unwrap();
    stall.itl_max_ms = Some(45.0);
    let rows = board(&recs, &BoardOpts::default());
    let (calm, stall) = (row(&rows, "calm"), row(&rows, "stall"));
    assert_eq!(calm.pace_ms, Some(20.0));
    assert_eq!(calm.pace_from, PaceFrom::BaselineItl);
    assert_eq!(calm.sustained_streams, Some(LevelValue::Count(8)));
    assert_eq!(calm.sustained_reason, None);
    assert_eq!(stall.sustained_streams, Some(LevelValue::Count(2)));
    let why = stall.sustained_reason.as_deref().unwrap();
    assert!(
        why.starts_with("C=4: 1 of 30 streams with a gap over 40.0 ms"),
        "{why}"
    );
    assert_eq!(stall.baseline_sustained_streams, Some(LevelValue::Count(8)));
    // A pace of 10 ms given: every 25 ms gap is a silence, at the lowest level already.
    let opts = BoardOpts {
        pace_gap_ms: Some(10.0),
        ..BoardOpts::default()
    };
    let rows = board(&recs, &opts);
    assert_eq!(rows[0].pace_from, PaceFrom::Flag);
    assert_eq!(rows[0].sustained_streams, None);
    assert!(rows[0]
        .sustained_reason
        .as_deref()
        .unwrap()
        .starts_with("C=1: 30 of 30"));
    // A first token later than the baseline copy's is added TTFT, not a stall: a hop that
    // holds every first token 45 ms (over 2 × the pace) but keeps the rhythm is sustained. A
    // stream shorter than its baseline copy is not.
    let mut late = sweep(&[1, 2], 30, &[("slow", 45.0), ("short", 0.0)]);
    for r in late
        .iter_mut()
        .filter(|r| &*r.arm == "short" && r.level.1 == 2)
    {
        r.output_tokens = Some(12);
    }
    let rows = board(&late, &BoardOpts::default());
    let slow = row(&rows, "slow");
    assert_eq!(
        slow.sustained_streams,
        Some(LevelValue::Count(2)),
        "{:?}",
        slow.sustained_reason
    );
    let short = row(&rows, "short");
    assert_eq!(short.sustained_streams, Some(LevelValue::Count(1)));
    assert!(short
        .sustained_reason
        .as_deref()
        .unwrap()
        .contains("output token count"));
}

#[test]
fn from_a_thousand_streams_a_level_allows_one_in_a_thousand_failures() {
    let mut recs = sweep(&[1], 1000, &[("gw", 0.5)]);
    for r in recs.iter_mut().filter(|r| &*r.arm == "gw").take(1) {
        r.outcome = Outcome::Timeout;
    }
    let rows = board(&recs, &BoardOpts::default());
    assert_eq!(rows[0].sustained_streams, Some(LevelValue::Count(1)));
    for r in recs.iter_mut().filter(|r| &*r.arm == "gw").take(2) {
        r.outcome = Outcome::Timeout;
    }
    let rows = board(&recs, &BoardOpts::default());
    assert_eq!(rows[0].sustained_streams, None);
}

#[test]
fn the_baseline_is_the_flag_s_then_run_json_s_then_direct_else_not_judged() {
    let recs = sweep(&[1], 10, &[("a", 1.0), ("b", 2.0)]);
    let rows = board(&recs, &BoardOpts::default());
    assert!(rows.iter().all(|r| r.baseline == "direct") && rows.len() == 2);
    let flag = BoardOpts {
        flag_baseline: Some("a".into()),
        ..BoardOpts::default()
    };
    let rows = board(&recs, &flag);
    assert!(rows.iter().all(|r| r.baseline == "a"));
    // Against a (+1 ms), direct reads −1 ms and b +1 ms: direct first.
    assert_eq!(
        rows.iter().map(|r| r.arm.as_str()).collect::<Vec<_>>(),
        ["direct", "b"]
    );
    // The flag wins over run.json's; without the flag, run.json's is the baseline.
    let run = BoardOpts {
        run_baseline: Some("b".into()),
        ..flag
    };
    assert!(board(&recs, &run).iter().all(|r| r.baseline == "a"));
    let run = BoardOpts {
        flag_baseline: None,
        ..run
    };
    assert!(board(&recs, &run).iter().all(|r| r.baseline == "b"));
    // No arm named direct and none named: not judged, never a guess.
    let renamed: Vec<BoardRec> = recs
        .iter()
        .cloned()
        .map(|mut r| {
            if &*r.arm == "direct" {
                r.arm = Arc::from("origin");
            }
            r
        })
        .collect();
    let why = compute(&renamed, &[], &BoardOpts::default())
        .unwrap()
        .unwrap_err();
    assert!(why.starts_with("not judged: no baseline arm"), "{why}");
    let named = BoardOpts {
        flag_baseline: Some("nope".into()),
        ..BoardOpts::default()
    };
    let why = compute(&renamed, &[], &named).unwrap().unwrap_err();
    assert!(
        why.contains("nope (--board-baseline) has no record"),
        "{why}"
    );
    // One arm: no board at all.
    let one: Vec<BoardRec> = recs.into_iter().filter(|r| &*r.arm == "a").collect();
    assert!(compute(&one, &[], &BoardOpts::default()).is_none());
}

#[test]
fn the_tap_and_the_resources_join_their_arm() {
    let recs = sweep(&[1], 20, &[("gw", 3.0), ("other", 1.0)]);
    let tap: Vec<TapRec> = (0..20)
        .map(|i| TapRec {
            tap: TapRow {
                side: TapSide::Outer,
                peer: true,
                join: None,
                unjoined: None,
                admission_ms: None,
                relay_ms: None,
                ttft_ms: Some(2.5 + f64::from(i) * 0.01),
                relay_max_ms: None,
                relay_verdict: None,
            },
            route: Arc::from("gw"),
            bucket: Arc::from("b"),
            concurrency: Some(1),
            in_flight: 1,
            gateway_overhead_ms: None,
            across: None,
        })
        .collect();
    let opts = BoardOpts {
        resources: vec![
            ArmResources {
                arm: "gw".into(),
                cpu_s: Some(1.5),
                peak_rss_bytes: Some(50 << 20),
                error: None,
            },
            ArmResources {
                arm: "other".into(),
                error: Some("pid 4242: no such process".into()),
                ..ArmResources::default()
            },
        ],
        ..BoardOpts::default()
    };
    let rows = compute(&recs, &tap, &opts).unwrap().unwrap();
    let gw = row(&rows, "gw");
    let t = gw.levels[0].added_ttft_tap_ms.as_ref().unwrap();
    assert_eq!((t.n, t.p50), (20, Some(2.5 + 9.0 * 0.01)));
    assert!(t.p50_ci95.is_some() && t.p99_ci95.is_none());
    assert_eq!((gw.cpu_s, gw.peak_rss_bytes), (Some(1.5), Some(50 << 20)));
    let other = row(&rows, "other");
    assert_eq!(other.levels[0].added_ttft_tap_ms, None);
    assert_eq!(
        (other.cpu_s, other.resource_error.as_deref()),
        (None, Some("pid 4242: no such process"))
    );
    let json = serde_json::to_value(other).unwrap();
    assert!(json["peak_rss_bytes"].is_null() && json["resource_error"].is_string());
    assert_eq!(serde_json::to_value(gw).unwrap()["sustained_streams"], 1);
}
