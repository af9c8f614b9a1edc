#!/usr/bin/env bash
# Opt-in: the HTML report's charts laid out by a real browser (Debian's headless `chromium`,
# installed here if missing) and checked as a reader meets them. Two reports are made: the
# demo's (`tokentap demo`: bench arms × levels × buckets, the A/B hop and the tap) and a live
# log's (`tokentap sim` behind `tokentap serve`, then streamed chats with usage, a model list, a
# 404 and a malformed body). A script injected into a copy of each page reads every chart's
# boxes (getBoundingClientRect) and writes them into the DOM, which `chromium --dump-dom`
# prints; Python checks, per chart:
#   - no two text elements overlap (title, ticks, axis names, x labels, threshold labels,
#     legend, note);
#   - no text lies inside the plot area (legend and threshold labels are outside the data) or
#     outside the chart;
#   - the data (points, lines, bars, intervals, with the zero line they rise from) spans at
#     least 40 % of the plot's height;
#   - every x category has data (no empty bar groups);
#   - the gateway chart (a difference) has a 95 % interval at every category.
# It exits non-zero on the first report with a failure, after printing every chart's checks.
#   scripts/report-layout-test.sh              # build (debug), make both reports, check them
#   scripts/report-layout-test.sh FILE.html…   # check these pages only
# Output: $OUT (default target/report-layout)/{demo.html,live.html}
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-target/report-layout}
mkdir -p "$OUT"
if ! command -v chromium >/dev/null; then
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

make_reports() {
  cargo build --locked -q
  local bin=target/debug/tokentap
  rm -rf "$OUT/demo" "$OUT/live.jsonl"
  "$bin" demo --out "$OUT/demo" >"$OUT/demo.log" 2>&1
  "$bin" report "$OUT/demo/bench" --tap "$OUT/demo/proxy.jsonl" --format html --out "$OUT/demo.html"
  local port sim proxy admin
  port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
  sim=$(port); proxy=$(port); admin=$(port)
  "$bin" sim --listen "127.0.0.1:$sim" >"$OUT/sim.log" 2>&1 &
  PIDS+=($!)
  "$bin" serve --upstream "http://127.0.0.1:$sim" --listen "127.0.0.1:$proxy" \
    --admin "127.0.0.1:$admin" --log "$OUT/live.jsonl" >"$OUT/serve.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null && break; sleep 0.1; done
  local url="http://127.0.0.1:$proxy" i
  chat() {
    curl -sf "$url/v1/chat/completions" -H 'content-type: application/json' -d \
      "{\"model\":\"sim-qwen2.5-7b\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"max_tokens\":$2,\"messages\":[{\"role\":\"user\",\"content\":\"question $1\"}]}" >/dev/null
  }
  # Rounds of 1, 2, 4 and 8 at once, so the log has several in-flight levels.
  for n in 1 2 4 8; do
    for i in $(seq "$n"); do chat "$n-$i" $((10 + 3 * i)) & done
    wait $(jobs -p | grep -v -e "${PIDS[0]}" -e "${PIDS[1]}") 2>/dev/null || true
  done
  curl -sf "$url/v1/models" >/dev/null
  curl -s -o /dev/null "$url/no/such/path"
  curl -s -o /dev/null "$url/v1/chat/completions" -H 'content-type: application/json' -d '{"model": broken'
  sleep 0.5
  cleanup
  PIDS=()
  sleep 0.5
  "$bin" report "$OUT/live.jsonl" --format html --out "$OUT/live.html"
}

check() {
  local page=$1 copy dom profile
  copy="$OUT/$(basename "$page" .html).probe.html"
  dom="$OUT/$(basename "$page" .html).dom.html"
  python3 - "$page" "$copy" <<'PY'
import sys
src, dst = sys.argv[1], sys.argv[2]
probe = r"""<script>
(function () {
  const box = e => { const b = e.getBoundingClientRect(); return {x: b.left, y: b.top, w: b.width, h: b.height}; };
  const charts = [...document.querySelectorAll('.charts svg')].map(svg => ({
    title: svg.getAttribute('aria-label'),
    svg: box(svg),
    plot: svg.querySelector('rect.plot') ? box(svg.querySelector('rect.plot')) : null,
    zero: svg.querySelector('line.zero') ? box(svg.querySelector('line.zero')).y : null,
    texts: [...svg.querySelectorAll('text')].map(t => Object.assign(box(t), {s: t.textContent, c: t.getAttribute('class') || ''})),
    data: [...svg.querySelectorAll('.data')].map(e => Object.assign(box(e), {i: e.getAttribute('data-x'), ci: e.classList.contains('ci')})),
    xs: [...svg.querySelectorAll('text.xl')].map(t => t.getAttribute('data-x')),
  }));
  const pre = document.createElement('pre');
  pre.id = 'layout-result';
  pre.textContent = JSON.stringify(charts);
  document.body.appendChild(pre);
})();
</script>"""
html = open(src, encoding="utf-8").read()
open(dst, "w", encoding="utf-8").write(html.replace("</body>", probe + "</body>"))
PY
  profile=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --window-size=1400,2000 --dump-dom "file://$PWD/$copy" \
    >"$dom" 2>/dev/null
  rm -rf "$profile"
  python3 - "$page" "$dom" <<'PY'
import html, json, re, sys
page, dom = sys.argv[1], sys.argv[2]
m = re.search(r'<pre id="layout-result">(.*?)</pre>', open(dom, encoding="utf-8").read(), re.S)
if not m:
    sys.exit(f"{page}: the probe wrote no result (did chromium run?)")
charts = json.loads(html.unescape(m.group(1)))
failed = 0
print(f"{page}: {len(charts)} charts")
if not charts:
    failed += 1
def inter(a, b, eps=0.5):
    return (min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"]) > eps and
            min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"]) > eps)
for c in charts:
    problems = []
    ts, p, s = c["texts"], c["plot"], c["svg"]
    if p is None:
        problems.append("no plot area marked")
        p = s
    for i in range(len(ts)):
        for j in range(i + 1, len(ts)):
            if inter(ts[i], ts[j]):
                problems.append(f"text overlap: {ts[i]['s']!r} / {ts[j]['s']!r}")
    inner = {"x": p["x"] + 1, "y": p["y"] + 1, "w": p["w"] - 2, "h": p["h"] - 2}
    for t in ts:
        if inter(t, inner):
            problems.append(f"text inside the plot: {t['s']!r}")
        if t["x"] < s["x"] - 0.5 or t["y"] < s["y"] - 0.5 or t["x"] + t["w"] > s["x"] + s["w"] + 0.5 or t["y"] + t["h"] > s["y"] + s["h"] + 0.5:
            problems.append(f"text outside the chart: {t['s']!r}")
    d = c["data"]
    if not d:
        problems.append("no data marks")
        span = 0.0
    else:
        top = min(e["y"] for e in d)
        bottom = max(e["y"] + e["h"] for e in d)
        if c["zero"] is not None:
            top, bottom = min(top, c["zero"]), max(bottom, c["zero"])
        span = (bottom - top) / p["h"]
        if span < 0.40:
            problems.append(f"data spans {span:.0%} of the plot's height (< 40 %)")
    have = {e["i"] for e in d}
    empty = [x for x in c["xs"] if x not in have]
    if empty:
        problems.append(f"x categories without data: {empty}")
    cis = [e for e in d if e["ci"]]
    if c["title"].startswith("Gateway"):
        missing = [x for x in c["xs"] if x not in {e["i"] for e in cis}]
        if not cis or missing:
            problems.append(f"intervals missing at categories {missing or 'all'}")
    status = "ok" if not problems else "FAIL"
    print(f"  [{status}] {c['title']}: {len(ts)} texts, {len(ts) * (len(ts) - 1) // 2} pairs checked for overlap; "
          f"data spans {span:.0%} of the plot; {len(c['xs'])} x categories, each with data; {len(cis)} interval marks")
    for pr in problems:
        print(f"      {pr}")
    failed += bool(problems)
sys.exit(1 if failed else 0)
PY
}

if [ $# -gt 0 ]; then
  pages=("$@")
else
  make_reports
  pages=("$OUT/demo.html" "$OUT/live.html")
fi
rc=0
for page in "${pages[@]}"; do check "$page" || rc=1; done
if [ $rc -eq 0 ]; then echo "layout: every chart passed"; else echo "layout: FAILED"; fi
exit $rc
