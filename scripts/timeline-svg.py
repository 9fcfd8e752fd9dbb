#!/usr/bin/env python3
"""Draws an hvdrun timeline (the Chrome trace `hvdrun --timeline-filename` writes) as an SVG.

    scripts/timeline-svg.py TRACE.json OUT.svg [--tensors N] [--window-ms MS]

One band per rank; in it one row per tensor (the first N tensor names by first event),
each phase a coloured box (QUEUE, NEGOTIATE_*, MEMCPY_IN/OUT_FUSION_BUFFER, ALLREDUCE, ...),
cycle marks as thin vertical lines. Only the first MS milliseconds after the last rank's
first event are drawn. Standard library only.
"""
import argparse
import json
import sys

COLOURS = {
    "QUEUE": "#c7c7c7",
    "NEGOTIATE": "#f4b942",
    "MEMCPY_IN_FUSION_BUFFER": "#6fa8dc",
    "MEMCPY_OUT_FUSION_BUFFER": "#3d85c6",
    "ALLREDUCE": "#6aa84f",
}


def colour(name):
    if name.startswith("NEGOTIATE"):
        return COLOURS["NEGOTIATE"]
    return COLOURS.get(name, "#8e7cc3")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--tensors", type=int, default=24)
    ap.add_argument("--window-ms", type=float, default=0)
    a = ap.parse_args()
    with open(a.trace) as f:
        events = json.load(f)
    names = {}  # (pid, tid) -> tensor name
    spans = []  # (pid, tid, name, t0, t1)
    cycles = []
    open_ = {}
    for e in events:
        ph, pid = e.get("ph"), e.get("pid")
        if ph == "M" and e.get("name") == "thread_name":
            names[(pid, e["tid"])] = e["args"]["name"]
        elif ph == "B":
            open_[(pid, e["tid"])] = (e["name"], e["ts"])
        elif ph == "E":
            k = (pid, e["tid"])
            if k in open_:
                n, t0 = open_.pop(k)
                spans.append((pid, e["tid"], n, t0, e["ts"]))
        elif ph == "i" and e.get("name") == "CYCLE_START":
            cycles.append((pid, e["ts"]))
    if not spans:
        sys.exit("timeline-svg: no phases in " + a.trace)
    pids = sorted({s[0] for s in spans})
    start = max(min(s[3] for s in spans if s[0] == p) for p in pids)
    end = max(s[4] for s in spans)
    if a.window_ms > 0:
        end = min(end, start + a.window_ms * 1000)
    first_seen = {}
    for pid, tid, n, t0, t1 in spans:
        key = names.get((pid, tid), str(tid))
        first_seen[key] = min(first_seen.get(key, t0), t0)
    tensors = sorted(first_seen, key=lambda k: first_seen[k])[: a.tensors]
    row = {t: i for i, t in enumerate(tensors)}
    W, left, rh = 1100, 120, 9
    band = (len(tensors) + 2) * rh
    H = 40 + band * len(pids) + 40
    sx = (W - left - 20) / max(1, end - start)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="10">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{left}" y="16" font-size="12">hvdrun timeline: {len(pids)} ranks, first {len(tensors)} '
           f'tensors, {(end - start) / 1000:.2f} ms</text>']
    for bi, pid in enumerate(pids):
        y0 = 30 + bi * band
        out.append(f'<text x="4" y="{y0 + 12}" font-weight="bold">rank {pid}</text>')
        out.append(f'<line x1="{left}" y1="{y0}" x2="{W - 20}" y2="{y0}" stroke="#999"/>')
        for p, ts in cycles:
            if p == pid and start <= ts <= end:
                x = left + (ts - start) * sx
                out.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + band - rh}" stroke="#e06666" '
                           f'stroke-width="0.4"/>')
        for t in tensors:
            if bi == 0 or True:
                out.append(f'<text x="{left - 4}" y="{y0 + (row[t] + 1) * rh + 7}" text-anchor="end" '
                           f'font-size="7">{t}</text>')
        for p, tid, n, t0, t1 in spans:
            t = names.get((p, tid), str(tid))
            if p != pid or t not in row or t1 < start or t0 > end:
                continue
            x0 = left + (max(t0, start) - start) * sx
            x1 = left + (min(t1, end) - start) * sx
            y = y0 + (row[t] + 1) * rh
            out.append(f'<rect x="{x0:.1f}" y="{y}" width="{max(0.6, x1 - x0):.1f}" height="{rh - 2}" '
                       f'fill="{colour(n)}"><title>{n} {(t1 - t0)} us</title></rect>')
    ly = H - 20
    lx = left
    for n, c in list(COLOURS.items()) + [("cycle", "#e06666")]:
        out.append(f'<rect x="{lx}" y="{ly - 8}" width="10" height="10" fill="{c}"/>')
        out.append(f'<text x="{lx + 14}" y="{ly}">{n}</text>')
        lx += 40 + 7 * len(n)
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
