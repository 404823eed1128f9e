#!/usr/bin/env python3
"""How a plan is served, compared on cold starts: the same plan through
`coldstart-run` with today's defaults, with `--no-read-around`, with no bound
on the reads in flight (`--window-kb 0`), read first
(`--wait`), with a head start (`--lead-kb`), on 8 threads, and by pread on 8
threads, each timed by `coldstart bench` interleaved run by run with the
plain cold and warm start.

It takes the plans `bench/prefetch_apps.py --keep DIR` left in DIR
(NAME-raKB.plan, and the profiles and program directories beside them),
so it measures the serving, not the planning:

    sudo bench/prefetch_variants.py --dir DIR [--only firefox] [--read-ahead-kb 128]
        [--runs N] [--variant "plan, no read-around" ...] [--coldstart BIN]
        [--served-by LABEL=COLDSTART_RUN ...]

`--served-by` adds the plan as is, served by another build's coldstart-run
(copy it aside before rebuilding), to compare two builds of the prefetcher
on the same plan in the same rounds; each such variant also gets a line
with the paired per-round difference from "plan" (median, its 95%
bootstrap interval, and the rounds it was faster in).

Prints one Markdown table per program and setting, with "gap closed" =
(cold - variant) / (cold - warm) for each variant. Every read_ahead_kb set
is restored on every way out."""

import argparse
import json
import os
import signal
import statistics
import sys

from benchlib import ReadAhead, build_coldstart, median_ci95, read_ahead_settings
from prefetch_apps import programs, run

LEAD_KB = 32768

VARIANTS = [
    ("plan", []),
    ("plan, no read-around", ["--no-read-around"]),
    ("plan, no window", ["--window-kb", "0"]),
    ("plan, wait", ["--wait"]),
    (f"plan, lead {LEAD_KB // 1024} MiB", ["--lead-kb", str(LEAD_KB)]),
    ("plan, 8 threads", ["--threads", "8"]),
    ("plan, pread on 8 threads", ["--threads", "8", "--method", "pread"]),
]


def paired(bench, label, baseline="plan"):
    """The per-round difference label - baseline of two cold variants of
    one `coldstart bench` JSON: median, 95% bootstrap interval, rounds
    faster, rounds paired."""
    index = {v["name"]: i for i, v in enumerate(bench["variants"])}
    times = {}
    for r in bench["runs"]:
        if r["ok"]:
            times[(r["variant"], r["round"])] = r["wall_ms"]
    a, b = index[f"{label} (cold)"], index[f"{baseline} (cold)"]
    rounds = sorted({rnd for (_, rnd) in times})
    diffs = [times[(a, rnd)] - times[(b, rnd)] for rnd in rounds
             if (a, rnd) in times and (b, rnd) in times]
    if len(diffs) < 2:
        return None
    low, high = median_ci95(diffs)
    return statistics.median(diffs), low, high, sum(d < 0 for d in diffs), len(diffs)


def measure(coldstart, work, name, argv, ra, runs, variants, served_by=()):
    plan = os.path.join(work, f"{name}-ra{ra}.plan")
    if not os.path.exists(plan):
        sys.exit(f"{plan}: no plan; run bench/prefetch_apps.py --keep {work} first")
    wrapper = os.path.join(os.path.dirname(coldstart), "coldstart-run")
    quoted = " ".join(f"'{a}'" for a in argv)
    out_json = os.path.join(work, f"{name}-ra{ra}-variants.json")
    command = [coldstart, "bench", "--as-root", "--cache", "warm,cold", "-n", str(runs),
               "--name", name]
    for label, flags in variants:
        command += ["--vs", " ".join([wrapper, *flags, "--plan", plan, "--", quoted]),
                    "--name", label]
    for label, binary in served_by:
        command += ["--vs", " ".join([binary, "--plan", plan, "--", quoted]), "--name", label]
    run(command + ["--json", out_json, "--", *argv], stdout=sys.stderr)
    with open(out_json) as f:
        bench = json.load(f)
    by = {v["name"]: v for v in bench["variants"]}
    median = {key: v["wall_ms"]["median"] for key, v in by.items()}
    warm, cold = median[f"{name} (warm)"], median[f"{name} (cold)"]
    lines = [f"### {name}, read_ahead_kb {ra} ({runs} interleaved rounds, medians)\n",
             "| variant | cold start ms | 95% CI of the mean, ms | gap closed | read from disk |",
             "|---|--:|--:|--:|--:|",
             f"| {name}, warm | {warm:.0f} | | | |",
             f"| {name}, cold | {cold:.0f} | | 0% | "
             f"{by[f'{name} (cold)']['read_bytes_median'] / 2**20:.1f} MiB |"]
    for label, _ in [*variants, *served_by]:
        v = by[f"{label} (cold)"]
        closed = (cold - v["wall_ms"]["median"]) / (cold - warm) if cold > warm else float("nan")
        ci = v["wall_ms"]["ci95"]
        interval = f"{ci[0]:.0f}-{ci[1]:.0f}" if ci else "-"
        lines.append(f"| {label} | {v['wall_ms']['median']:.0f} | {interval} | "
                     f"{closed:.0%} | "
                     f"{v['read_bytes_median'] / 2**20:.1f} MiB |")
    for label, _ in served_by:
        if not any(l == "plan" for l, _ in variants):
            break
        p = paired(bench, label)
        if p:
            lines.append(f"\n{label} - plan, paired by round: median {p[0]:+.0f} ms "
                         f"[{p[1]:+.0f}, {p[2]:+.0f}], faster in {p[3]} of {p[4]}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="what prefetch_apps.py --keep left")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--read-ahead-kb", type=int, action="append",
                        help="settings to measure at [default: 128 and the device's own]")
    parser.add_argument("--only", action="append", help="firefox, libreoffice or chromium")
    parser.add_argument("--variant", action="append", choices=[label for label, _ in VARIANTS],
                        help="measure only these variants (repeat it) [default: all]")
    parser.add_argument("--coldstart", help="coldstart binary (default: build it)")
    parser.add_argument("--served-by", action="append", default=[], metavar="LABEL=COLDSTART_RUN",
                        help="also serve the plan with this coldstart-run binary (repeat it)")
    args = parser.parse_args()
    served_by = []
    for item in args.served_by:
        label, _, binary = item.partition("=")
        if not label or not binary or not os.access(binary, os.X_OK):
            sys.exit(f"--served-by {item}: want LABEL=PATH of an executable coldstart-run")
        if label in [l for l, _ in VARIANTS]:
            sys.exit(f"--served-by {item}: {label!r} is already a variant's name")
        served_by.append((label, os.path.abspath(binary)))
    variants = [v for v in VARIANTS if not args.variant or v[0] in args.variant]
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): cold starts drop the page cache")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    table = programs(args.dir)
    coldstart = args.coldstart or build_coldstart()
    settings, device = read_ahead_settings(args.read_ahead_kb)
    for name in args.only or list(table):
        argv, _, dirs = table[name]
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        for ra in settings:
            with ReadAhead(None if str(ra) == device else ra):
                print(measure(coldstart, args.dir, name, argv, ra, args.runs, variants,
                              served_by) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
