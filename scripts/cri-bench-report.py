#!/usr/bin/env python3
"""critest --benchmark of podlab next to containerd's, from one `cargo xtask cri-validate
--benchmark --containerd` run (issue 17): each operation's median and p90, the ratio, the target.

usage: scripts/cri-bench-report.py PODLAB_REPORT CONTAINERD_REPORT [OUT_DIR]

Reads bench/*.json (critest's raw per-sample durations) and roundtrip.txt (cri-roundtrip's
medians on one connection, JSON on its last line) of both report folders; writes cri-bench.md,
cri-bench.csv and cri-bench.svg (grouped bars on a log scale, no plotting library) into OUT_DIR
(default: PODLAB_REPORT) and prints the Markdown table.

Targets (issue 17): every operation's median <= 0.25x containerd's, except the calls that are
already about a round trip (status and list calls), which must be <= 2x podlab's own Version
round trip.
"""
import csv
import glob
import json
import math
import os
import statistics
import sys

ROUND_TRIP_CALLS = {"StatusPod", "StatusContainer", "StatusImage", "ListImages",
                    "ListPodSandbox", "ListContainers"}
ORDER = ["CreatePod", "StatusPod", "StopPod", "RemovePod", "CreateContainer", "StartContainer",
         "StatusContainer", "StopContainer", "RemoveContainer", "PullImage", "StatusImage",
         "RemoveImage", "ListImages"]


def medians(report):
    """operation -> (median ms, p90 ms, samples) from REPORT/bench/*.json."""
    out = {}
    for path in sorted(glob.glob(os.path.join(report, "bench", "*.json"))):
        try:
            data = json.load(open(path))
        except (OSError, ValueError):
            continue
        names = data.get("operationsNames", [])
        points = data.get("datapoints", []) or []
        for i, name in enumerate(names):
            values = [p["operationsDurationsNs"][i] for p in points
                      if i < len(p.get("operationsDurationsNs") or [])
                      and p["operationsDurationsNs"][i] > 0]
            if values:
                values.sort()
                out[name] = (statistics.median(values) / 1e6,
                             values[int(0.9 * (len(values) - 1))] / 1e6, len(values))
    return out


def round_trips(report):
    """call -> median ms from REPORT/roundtrip.txt (its last line is JSON)."""
    try:
        lines = open(os.path.join(report, "roundtrip.txt")).read().strip().splitlines()
        return {k: v["median_ms"] for k, v in json.loads(lines[-1]).items()}
    except (OSError, ValueError, IndexError, KeyError):
        return {}


def plot(path, rows):
    """Grouped horizontal bars, podlab and containerd, log-scaled milliseconds."""
    rows = [r for r in rows if r[1] or r[2]]
    width, left, top, bar, gap = 760, 150, 40, 9, 8
    height = top + len(rows) * (2 * bar + gap) + 40
    values = [v for r in rows for v in r[1:3] if v]
    lo = 10 ** math.floor(math.log10(min(values)))
    hi = 10 ** math.ceil(math.log10(max(values)))
    span = width - left - 30

    def x(v):
        return left + span * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16" font-size="13">critest --benchmark medians (ms, log scale): '
           'podlab (blue) vs containerd 1.6 (grey), same run</text>']
    decade = lo
    while decade <= hi:
        out.append(f'<line x1="{x(decade):.1f}" y1="{top - 6}" x2="{x(decade):.1f}" '
                   f'y2="{height - 30}" stroke="#ddd"/>')
        out.append(f'<text x="{x(decade):.1f}" y="{height - 16}" text-anchor="middle">'
                   f'{decade:g}</text>')
        decade *= 10
    y = top
    for name, podlab, containerd in rows:
        out.append(f'<text x="{left - 6}" y="{y + bar + 3}" text-anchor="end">{name}</text>')
        for value, colour, dy in ((podlab, "#2c6fbb", 0), (containerd, "#999", bar)):
            if value:
                out.append(f'<rect x="{left}" y="{y + dy}" width="{max(x(value) - left, 1):.1f}" '
                           f'height="{bar - 1}" fill="{colour}"/>')
                out.append(f'<text x="{x(value) + 3:.1f}" y="{y + dy + bar - 2}" font-size="9">'
                           f'{value:.2f}</text>')
        y += 2 * bar + gap
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    podlab_dir, containerd_dir = sys.argv[1], sys.argv[2]
    out_dir = sys.argv[3] if len(sys.argv) > 3 else podlab_dir
    podlab, containerd = medians(podlab_dir), medians(containerd_dir)
    rtt, rtt_containerd = round_trips(podlab_dir), round_trips(containerd_dir)
    version = rtt.get("Version")
    names = [n for n in ORDER if n in podlab or n in containerd]
    names += sorted(n for n in set(podlab) | set(containerd) if n not in names)
    lines = ["| operation | podlab median (p90), ms | containerd median (p90), ms | ratio | target |",
             "|---|---:|---:|---:|---|"]
    rows = []
    with open(os.path.join(out_dir, "cri-bench.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["operation", "podlab_median_ms", "podlab_p90_ms", "podlab_samples",
                    "containerd_median_ms", "containerd_p90_ms", "containerd_samples"])
        for name in names:
            p, c = podlab.get(name), containerd.get(name)
            w.writerow([name, *(p or ("", "", "")), *(c or ("", "", ""))])
            ratio = f"{p[0] / c[0]:.2f}" if p and c else ""
            if name in ROUND_TRIP_CALLS:
                if p and version:
                    limit = 2 * version
                    verdict = "met" if p[0] <= limit else "missed"
                    target = f"≤ 2× Version ({limit:.2f}): {verdict}"
                else:
                    target = "≤ 2× Version: no Version figure"
            elif p and c:
                target = f"≤ 0.25×: {'met' if p[0] <= 0.25 * c[0] else 'missed'}"
            else:
                target = ""
            cell = (lambda m: f"{m[0]:.2f} ({m[1]:.2f})" if m else "")
            lines.append(f"| {name} | {cell(p)} | {cell(c)} | {ratio} | {target} |")
            rows.append((name, p[0] if p else None, c[0] if c else None))
    if rtt:
        lines.append("")
        lines.append("Round trips on one connection (`cri-roundtrip`, median ms): " + ", ".join(
            f"{k} {v:.3f}" + (f" (containerd {rtt_containerd[k]:.3f})" if k in rtt_containerd else "")
            for k, v in rtt.items()))
    text = "\n".join(lines) + "\n"
    open(os.path.join(out_dir, "cri-bench.md"), "w").write(text)
    if rows:
        plot(os.path.join(out_dir, "cri-bench.svg"), rows)
    print(text)
    print(f"wrote {out_dir}/cri-bench.{{md,csv,svg}}")


if __name__ == "__main__":
    main()
