#!/usr/bin/env python3
"""tokentap's recorded times against a loopback capture (scripts/kernel-stamps.sh).

    kernel_stamps.py CAPTURE.pcap RECORDS.jsonl TT_PORT LABEL

The capture holds a gateway tap's traffic: client -> tokentap (/gateway) -> LiteLLM (:4000) ->
tokentap (/engine) -> vLLM (:8000), sequential streamed chat requests. From it: when each request
head's last segment reached tokentap (outer and inner), and when the segment that completed each
response's first content event did (from LiteLLM and from vLLM). The records are the same
requests' (outer and inner sides). The i-th request of each list is the i-th record of its side.
Prints, per measure, the median error and the worst request, over every request and over the
requests whose stamps the kernel could give exactly; exits 1 when a target is missed by the
latter (every request within 0.2 ms, the median within 0.05 ms). Standard library only.

A request's first-token stamp is exact unless its first read carried more than one content event
(`delivery.first_read_events` > 1): the next event had arrived too, and Linux keeps only the
newer segment's stamp when it merges the two in the socket's receive queue (docs/records.md).
Such a request is flagged, and printed apart.
"""
import datetime
import json
import struct
import sys
from collections import defaultdict

WORST_MS = 0.2
MEDIAN_MS = 0.05


def packets(path):
    """(time in s, src, sport, dst, dport, seq, payload) of each TCP/IPv4 packet of a pcap."""
    data = open(path, "rb").read()
    magic = data[:4]
    if magic in (b"\x4d\x3c\xb2\xa1", b"\xd4\xc3\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\x3c\x4d", b"\xa1\xb2\xc3\xd4"):
        end = ">"
    else:
        sys.exit(f"{path}: not a pcap file")
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    link = struct.unpack(end + "I", data[20:24])[0]
    skip = {1: 14, 113: 16, 276: 20, 0: 4}.get(link)
    if skip is None:
        sys.exit(f"{path}: link type {link} not read")
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(end + "IIII", data[off:off + 16])
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        t = sec + frac / (1e9 if nano else 1e6)
        ip = pkt[skip:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 0xF) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:total]
        sport, dport, seq = struct.unpack(">HHI", tcp[:8])
        thl = (tcp[12] >> 4) * 4
        yield t, ip[12:16], sport, ip[16:20], dport, seq, tcp[thl:]


class Stream:
    """One direction of a TCP connection: its bytes, and when each byte's segment came."""

    def __init__(self):
        self.data = bytearray()
        self.ends = []  # (end offset, time) per segment
        self.next = None

    def add(self, t, seq, payload):
        if not payload:
            return
        end = (seq + len(payload)) % (1 << 32)
        if self.next is not None:
            behind = (self.next - seq) % (1 << 32)
            if 0 < behind < 1 << 31:  # begins with bytes already had (a retransmission)
                if behind >= len(payload):
                    return
                payload = payload[behind:]
        self.data += payload
        self.ends.append((len(self.data), t))
        self.next = end

    def time_of(self, offset):
        """When the segment holding byte `offset` came."""
        for end, t in self.ends:
            if offset < end:
                return t
        return None


def streams(path):
    out = defaultdict(Stream)
    for t, src, sport, dst, dport, seq, payload in packets(path):
        out[(src, sport, dst, dport)].add(t, seq, payload)
    return out


def request_heads(s):
    """(time the head was complete, path) of each request on a client-to-server stream."""
    heads, pos, d = [], 0, bytes(s.data)
    while True:
        end = d.find(b"\r\n\r\n", pos)
        if end < 0:
            return heads
        head = d[pos:end].decode("latin-1")
        line = head.split("\r\n", 1)[0].split(" ")
        if len(line) < 2:
            return heads
        length = 0
        for h in head.split("\r\n")[1:]:
            k, _, v = h.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v.strip())
        heads.append((s.time_of(end + 3), line[1]))
        pos = end + 4 + length


def is_content(event):
    try:
        j = json.loads(event)
    except ValueError:
        return False
    for c in j.get("choices") or []:
        d = c.get("delta") or {}
        if d.get("content") or d.get("reasoning_content") or d.get("reasoning") or d.get("tool_calls"):
            return True
        if c.get("text"):
            return True
    return False


def first_tokens(s):
    """Per response on a server-to-client stream (chunked SSE): when the segment that completed
    its first content event came (None: no content)."""
    out, pos, d = [], 0, bytes(s.data)
    while pos < len(d):
        end = d.find(b"\r\n\r\n", pos)
        if end < 0 or not d.startswith(b"HTTP/1.1 ", pos):
            return out
        head = d[pos:end].decode("latin-1").lower()
        pos = end + 4
        if "chunked" not in head:
            length = 0
            for h in head.split("\r\n")[1:]:
                k, _, v = h.partition(":")
                if k.strip() == "content-length":
                    length = int(v.strip())
            pos += length
            out.append(None)
            continue
        # De-chunk, keeping each body byte's offset on the wire.
        body, where = bytearray(), []
        while True:
            eol = d.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(d[pos:eol].split(b";")[0], 16)
            pos = eol + 2
            if size == 0:
                trailer = d.find(b"\r\n\r\n", pos - 2)
                pos = trailer + 4 if trailer >= 0 else len(d)
                break
            body += d[pos:pos + size]
            where.extend(range(pos, pos + size))
            pos += size + 2
        found, start = None, 0
        while found is None:
            sep = body.find(b"\n\n", start)
            if sep < 0:
                break
            event = bytes(body[start:sep]).decode("utf-8", "replace")
            data = "\n".join(l[5:].lstrip() for l in event.split("\n") if l.startswith("data:"))
            if data and data != "[DONE]" and is_content(data):
                found = s.time_of(where[sep + 1])
            start = sep + 2
        out.append(found)
    return out


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def main():
    pcap, recs_path, port, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    ss = streams(pcap)
    outer_heads, inner_heads, outer_toks, inner_toks = [], [], [], []
    for (src, sport, dst, dport), s in ss.items():
        if dport == port:
            for t, path in request_heads(s):
                if "chat/completions" not in path:
                    continue
                (inner_heads if path.startswith("/engine") else outer_heads).append(t)
        elif sport in (4000, 8000):
            toks = [t for t in first_tokens(s) if t is not None]
            (outer_toks if sport == 4000 else inner_toks).extend(toks)
    for v in (outer_heads, inner_heads, outer_toks, inner_toks):
        v.sort()
    recs = [json.loads(l) for l in open(recs_path) if l.strip()]
    side = lambda r: (r.get("gateway_tap") or {}).get("side")
    outer = [r for r in recs if side(r) == "outer"]
    inner = [r for r in recs if side(r) == "inner"]
    print(f"== {label}: {len(outer)} outer and {len(inner)} inner records; the capture has "
          f"{len(outer_heads)} outer heads, {len(inner_heads)} inner heads, {len(outer_toks)} first "
          f"tokens from LiteLLM, {len(inner_toks)} from vLLM")

    def at(rec):  # the record's wall-clock arrival, s
        return datetime.datetime.fromisoformat(rec["ts"].replace("Z", "+00:00")).timestamp()

    def head_of(rec, heads):  # the capture's head nearest the record (within 50 ms), or None
        best = min(heads, key=lambda h: abs(h - at(rec)), default=None)
        return best if best is not None and abs(best - at(rec)) < 0.05 else None

    def token_after(h, toks):  # the first first-token after head h
        return next((t for t in toks if t > h), None)

    # Pair each outer record with its inner one (the tap's join: the inner head after the outer).
    rows = []
    for o in sorted(outer, key=at):
        oh = head_of(o, outer_heads)
        if oh is None:
            continue
        i = min(inner, key=lambda r: abs(at(r) - at(o) - (o["gateway_tap"].get("admission_ms") or 0) / 1000))
        ih = head_of(i, inner_heads)
        ot, it = token_after(oh, outer_toks), token_after(ih, inner_toks) if ih else None
        if None in (ih, ot, it):
            continue
        rows.append((o, i, oh, ih, ot, it))
    n = len(rows)
    print(f"paired with the capture: {n} requests")
    if n == 0:
        return 1
    joined = sum(1 for o, *_ in rows if o["gateway_tap"].get("admission_ms") is not None)
    clocks = defaultdict(int)
    for o, i, *_ in rows:
        clocks[o.get("clock", "absent")] += 1
        clocks[i.get("clock", "absent")] += 1
    print(f"joined {joined}/{n}; clock: {dict(clocks)}")
    ms = lambda a, b: (a - b) * 1000.0
    # Whether a record's first token shared its read with a later content event.
    shared = lambda r: ((r.get("delivery") or {}).get("first_read_events") or 0) > 1
    # Per measure: (recorded, captured, flagged) per request.
    measures = {
        "admission (inner t0 - outer t0)": [(o["gateway_tap"].get("admission_ms"), ms(ih, oh), False) for o, i, oh, ih, ot, it in rows],
        "first-token relay (outer - inner)": [(o["gateway_tap"].get("relay_ms"), ms(ot, it), shared(o) or shared(i)) for o, i, oh, ih, ot, it in rows],
        "tap hop (outer TTFT - inner TTFT)": [(o["gateway_tap"].get("ttft_ms"), ms(ot, oh) - ms(it, ih), shared(o) or shared(i)) for o, i, oh, ih, ot, it in rows],
        "TTFT outer": [(o.get("ttft_ms"), ms(ot, oh), shared(o)) for o, i, oh, ih, ot, it in rows],
        "TTFT inner": [(i.get("ttft_ms"), ms(it, ih), shared(i)) for o, i, oh, ih, ot, it in rows],
    }
    print(f"first token shared its read with the next content event: {sum(map(shared, [r[0] for r in rows]))} outer, "
          f"{sum(map(shared, [r[1] for r in rows]))} inner records (flagged: the kernel kept the newer segment's stamp)")
    outer, inner = [r[0] for r in rows], [r[1] for r in rows]
    ok = True
    print(f"{'measure':<36} {'capture median':>14} {'error median':>12} {'worst request':>13}  "
          f"{'all requests':<12}  {'unflagged: n, median, worst':<28} target")
    for name, pairs in measures.items():
        errs = [(rec - cap, flag) for rec, cap, flag in pairs if rec is not None]
        if len(errs) != n:
            print(f"{name:<36} {n - len(errs)} records lack it")
            ok = False
            continue
        all_e = [e for e, _ in errs]
        med, worst = median(all_e), max(all_e, key=abs)
        strict = abs(med) <= MEDIAN_MS and abs(worst) <= WORST_MS
        exact = [e for e, flag in errs if not flag]
        emed = median(exact) if exact else 0.0
        eworst = max(exact, key=abs) if exact else 0.0
        hit = abs(emed) <= MEDIAN_MS and abs(eworst) <= WORST_MS
        ok &= hit
        print(f"{name:<36} {median([c for _, c, _ in pairs]):>11.3f} ms {med:>+9.3f} ms {worst:>+10.3f} ms  "
              f"{'met' if strict else 'MISSED':<12}  {len(exact):>3} {emed:>+8.3f} {eworst:>+9.3f} ms     "
              f"{'met' if hit else 'MISSED'}")
        over = [f"{e:+.3f}{' (flagged)' if flag else ''}" for e, flag in errs if abs(e) > WORST_MS]
        if over:
            print(f"{'':<36} {len(over)} request(s) beyond {WORST_MS} ms: {', '.join(over)}")
    for nm, side_recs in (("outer", outer), ("inner", inner)):
        lags = [r["stamp_lag_ms"] for r in side_recs if r.get("stamp_lag_ms") is not None]
        if lags:
            print(f"stamp_lag_ms {nm}: median {median(lags):.3f}, max {max(lags):.3f} "
                  f"(the process's clock would have stamped the first token this late)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
