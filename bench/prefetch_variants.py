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

Prints one Markdown table per program and setting, with "gap closed" =
(cold - variant) / (cold - warm) for each variant. Every read_ahead_kb set
is restored on every way out."""

import argparse
import json
import os
import signal
import sys

from benchlib import ReadAhead, build_coldstart, read_ahead_settings
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


def measure(coldstart, work, name, argv, ra, runs, variants):
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
    run(command + ["--json", out_json, "--", *argv], stdout=sys.stderr)
    with open(out_json) as f:
        by = {v["name"]: v for v in json.load(f)["variants"]}
    median = {key: v["wall_ms"]["median"] for key, v in by.items()}
    warm, cold = median[f"{name} (warm)"], median[f"{name} (cold)"]
    lines = [f"### {name}, read_ahead_kb {ra} ({runs} interleaved rounds, medians)\n",
             "| variant | cold start ms | 95% CI of the mean, ms | gap closed | read from disk |",
             "|---|--:|--:|--:|--:|",
             f"| {name}, warm | {warm:.0f} | | | |",
             f"| {name}, cold | {cold:.0f} | | 0% | "
             f"{by[f'{name} (cold)']['read_bytes_median'] / 2**20:.1f} MiB |"]
    for label, _ in variants:
        v = by[f"{label} (cold)"]
        closed = (cold - v["wall_ms"]["median"]) / (cold - warm) if cold > warm else float("nan")
        ci = v["wall_ms"]["ci95"]
        interval = f"{ci[0]:.0f}-{ci[1]:.0f}" if ci else "-"
        lines.append(f"| {label} | {v['wall_ms']['median']:.0f} | {interval} | "
                     f"{closed:.0%} | "
                     f"{v['read_bytes_median'] / 2**20:.1f} MiB |")
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
    args = parser.parse_args()
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
                print(measure(coldstart, args.dir, name, argv, ra, args.runs, variants) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
