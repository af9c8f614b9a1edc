//! The charts as drawn: the cases, read back from the SVG.

use super::*;

/// (x, y, text) of every `<text>` of a class, in order.
fn texts(svg: &str, class: &str) -> Vec<(f64, f64, String)> {
    let attr = |t: &str, name: &str| -> f64 {
        t.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    svg.split("<text")
        .skip(1)
        .filter(|t| t.contains(&format!("class=\"{class}\"")))
        .map(|t| {
            let body = t.split('>').nth(1).unwrap_or("");
            let body = body.split("</text").next().unwrap_or("");
            (attr(t, "x"), attr(t, "y"), body.to_string())
        })
        .collect()
}

fn line(name: &str, color: &'static str, dash: usize, ys: &[Option<f64>]) -> Series {
    Series {
        name: name.into(),
        style: Style { color, dash },
        ys: ys.to_vec(),
        ci: Vec::new(),
    }
}

fn ttft_slos() -> Vec<Threshold> {
    [
        ("interactive 500 ms", 500.0),
        ("strict 200 ms", 200.0),
        ("code completion 100 ms", 100.0),
        ("agents 1000 ms", 1000.0),
    ]
    .iter()
    .map(|(l, v)| (l.to_string(), *v))
    .collect()
}

/// The demo's TTFT p95 chart, as the issue saw it: data under 570 ms.
fn ttft_chart() -> Chart {
    Chart {
        title: "TTFT p95 vs concurrency".into(),
        y_label: "ms".into(),
        x_label: "concurrency".into(),
        xs: vec!["1".into(), "4".into(), "8".into()],
        series: vec![
            line(
                "balanced [direct]",
                COLORS[0],
                0,
                &[Some(90.0), Some(180.0), Some(370.0)],
            ),
            line(
                "balanced [gateway]",
                COLORS[0],
                1,
                &[Some(200.0), Some(300.0), Some(367.0)],
            ),
            line(
                "long [gateway]",
                COLORS[1],
                1,
                &[Some(210.0), Some(350.0), Some(567.0)],
            ),
        ],
        thresholds: ttft_slos(),
        ..Chart::default()
    }
}

#[test]
fn the_axis_fits_the_data_and_a_far_threshold_is_named_under_it() {
    let c = ttft_chart();
    let (axis, drawn, named) = c.fit();
    assert_eq!((axis.min, axis.max), (0.0, 600.0));
    assert!(567.0 / axis.max >= 0.4);
    let names = |v: &[&Threshold]| v.iter().map(|t| t.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&named), ["agents 1000 ms"]);
    assert_eq!(drawn.len(), 3);
    let svg = lines(ttft_chart());
    let note: Vec<String> = texts(&svg, "note").into_iter().map(|t| t.2).collect();
    assert_eq!(note, ["Above every value, off this axis: agents 1000 ms."]);
    let ticks: Vec<String> = texts(&svg, "tick").into_iter().map(|t| t.2).collect();
    assert_eq!(ticks, ["0", "100", "200", "300", "400", "500", "600"]);
}

#[test]
fn a_threshold_just_above_the_data_stretches_the_axis_to_show_it() {
    let mut c = ttft_chart();
    c.series.truncate(1); // max 370: interactive 500 is within 1.5 ×
    let (axis, drawn, _) = c.fit();
    assert!(axis.max >= 500.0 && 370.0 / axis.max >= 0.4, "{axis:?}");
    assert!(drawn.iter().any(|t| t.1 == 500.0));
}

#[test]
fn threshold_labels_never_touch_and_sit_right_of_the_plot() {
    // On a 0–2000 axis (data up to 1900), strict 200 and code completion 100 are 11 px apart.
    let mut c = ttft_chart();
    c.series[2].ys[2] = Some(1900.0);
    let svg = lines(c);
    let thr = texts(&svg, "thr");
    assert_eq!(thr.len(), 4);
    for (i, a) in thr.iter().enumerate() {
        for b in &thr[i + 1..] {
            assert!((a.1 - b.1).abs() >= 13.0, "{thr:?}");
        }
    }
    let ticks = texts(&svg, "tick");
    let plot_right = thr.iter().map(|t| t.0).fold(f64::MAX, f64::min) - 6.0;
    assert!(plot_right > ticks[0].0, "labels right of the plot");
}

#[test]
fn empty_groups_series_and_their_keys_are_left_out() {
    let c = Chart {
        xs: vec!["other C1".into(), "unknown C1".into(), "other C2".into()],
        series: vec![
            line("p50", PCT_COLORS[0], 0, &[Some(90.0), None, Some(95.0)]),
            line("none", COLORS[3], 0, &[None, None, None]),
        ],
        legend: vec![
            Key {
                label: "p50".into(),
                style: Style {
                    color: PCT_COLORS[0],
                    dash: 0,
                },
                line: false,
            },
            Key {
                label: "none".into(),
                style: Style {
                    color: COLORS[3],
                    dash: 0,
                },
                line: false,
            },
        ],
        ..Chart::default()
    }
    .pruned();
    assert_eq!(c.xs, ["other C1", "other C2"]);
    assert_eq!(c.series.len(), 1);
    assert_eq!(c.series[0].ys, [Some(90.0), Some(95.0)]);
    assert_eq!(c.legend.len(), 1);
    let svg = bars(c);
    assert!(!svg.contains("unknown") && !svg.contains(">none<"));
    assert_eq!(svg.matches("<rect class=\"data\"").count(), 2);
}

#[test]
fn differences_carry_whiskers_and_may_go_below_zero() {
    let c = Chart {
        xs: vec!["C=1".into(), "C=4".into()],
        series: vec![Series {
            name: "A/B paired median".into(),
            style: Style {
                color: COLORS[4],
                dash: 0,
            },
            ys: vec![Some(3.0), Some(120.0)],
            ci: vec![Some([-8.0, 11.0]), Some([82.0, 199.0])],
        }],
        ..Chart::default()
    };
    let (axis, _, _) = c.fit();
    assert!(axis.min < 0.0 && axis.max >= 199.0, "{axis:?}");
    let svg = bars(c);
    assert_eq!(svg.matches("class=\"data ci\"").count(), 2);
    // The zero line is drawn where the bars start.
    assert!(svg.contains("class=\"zero\""));
}

#[test]
fn one_colour_per_bucket_one_dash_and_marker_per_arm() {
    let svg = lines(ttft_chart());
    // balanced [direct] and balanced [gateway]: one colour, a solid and a dashed line, a dot
    // and a hollow square.
    let polylines: Vec<&str> = svg.split("<polyline").skip(1).collect();
    assert_eq!(polylines.len(), 3);
    assert!(polylines[0].contains(COLORS[0]) && polylines[0].contains("stroke-dasharray=\"\""));
    assert!(polylines[1].contains(COLORS[0]) && polylines[1].contains("stroke-dasharray=\"7,4\""));
    assert_eq!(svg.matches("<circle class=\"data\"").count(), 3);
    assert_eq!(svg.matches("<rect class=\"data\"").count(), 6);
}

#[test]
fn long_cell_names_go_under_their_levels_or_upright_never_slanted() {
    // The demo's 18 cells: three buckets × two arms × three levels.
    let mut names = Vec::new();
    for b in ["balanced", "long-short", "short-long"] {
        for a in ["direct", "gateway"] {
            names.push(format!("{b} [{a}]"));
        }
    }
    let (mut xs, mut groups, mut ys) = (Vec::new(), Vec::new(), Vec::new());
    for n in &names {
        for l in ["1", "4", "8"] {
            xs.push(l.to_string());
            groups.push(n.clone());
            ys.push(Some(100.0));
        }
    }
    let c = Chart {
        xs,
        groups,
        series: vec![line("p50", PCT_COLORS[0], 0, &ys)],
        ..Chart::default()
    };
    let svg = bars(c.clone());
    assert_eq!(texts(&svg, "xl").len(), 18);
    let g: Vec<String> = texts(&svg, "xg").into_iter().map(|t| t.2).collect();
    let wrapped: Vec<String> = names
        .iter()
        .flat_map(|n| n.split(' ').map(str::to_string))
        .collect();
    assert_eq!(g, wrapped, "each name wrapped under its run of levels");
    assert!(!svg.contains("rotate(-55"));
    // 40 groups of three cells no longer fit across: upright labels, and a wider chart.
    let mut many = c;
    for k in 0..40 {
        many.xs.push(format!("C{k}"));
        many.groups
            .push(format!("a-very-long-bucket-name-{k} [gateway]"));
        many.series[0].ys.push(Some(1.0));
    }
    let svg = bars(many);
    assert!(svg.contains("rotate(-90") && texts(&svg, "xg").is_empty());
}
