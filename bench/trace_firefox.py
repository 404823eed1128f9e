#!/usr/bin/env python3
"""What tracing costs, on Firefox ESR (BENCHMARKS.md's scenario):

1. Overhead on a warm start. Each round is one `coldstart trace --cache
   warm`, which runs Firefox untraced (the warm-up) and then traced, both
   launched by the same code and timed from launch to exit by the same
   clock; rounds alternate with plain runs timed from this script (a
   second, independent baseline). Target: the traced start at most 3%
   slower than the untraced one, as the median of the per-round ratios
   (paired, so machine noise that spans a round cancels out).
2. `coldstart report` on a cold Firefox profile: text with ELF sections
   and symbols, --json, and --html with the chart. Target: under 1 s each
   (median).

Needs root (tracing). Installs firefox-esr with apt-get when missing and
builds coldstart in release mode. Prints Markdown tables and exits 1 when
a target is missed.

    sudo bench/trace_firefox.py [--runs N] [--report-runs N] [--keep DIR]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import (FIREFOX, build_coldstart, describe, ensure_installed, firefox_argv,
                      median_ci95, timed)

MAX_OVERHEAD = 1.03
MAX_REPORT_SECONDS = 1.0


def trace(coldstart, db, cache, argv, extra=()):
    """One `coldstart trace`; returns its --json summary."""
    out = subprocess.run(
        [coldstart, "trace", "--as-root", "--json", "--cache", cache, *extra, "-o", db, "--", *argv],
        check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    summary = json.loads(out.stdout)
    if summary["end_reason"] != "exited" or summary["exit_code"] != 0:
        sys.exit(f"firefox did not exit cleanly under trace: {summary}")
    return summary


def machine():
    ra = "unknown"
    try:
        with open("/sys/class/bdi/254:0/read_ahead_kb") as f:
            ra = f.read().strip()
    except OSError:
        pass
    return f"kernel {os.uname().release}, {os.cpu_count()} CPUs, read_ahead_kb {ra} (vda)"


def overhead(coldstart, work, runs):
    argv = firefox_argv(work)
    db = os.path.join(work, "warm.db")
    # Firefox's first start in a new profile creates it: not a start to time.
    timed(argv, stderr=subprocess.DEVNULL)
    timed(argv, stderr=subprocess.DEVNULL)
    untraced, traced, plain, events = [], [], [], []
    for i in range(runs):
        # Alternate which comes first so neither always follows the other.
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            if which == 0:
                s = trace(coldstart, db, "warm", argv)
                untraced.append(s["warmup_ms"] / 1e3)
                traced.append(s["ended_ms"] / 1e3)
                events.append(s["events"])
            else:
                plain.append(timed(argv, stderr=subprocess.DEVNULL))
        print(f"  round {i + 1}/{runs}: untraced {untraced[-1] * 1e3:.0f} ms, "
              f"traced {traced[-1] * 1e3:.0f} ms, plain {plain[-1] * 1e3:.0f} ms",
              file=sys.stderr)
    paired = [t / u for t, u in zip(traced, untraced)]
    ratio = statistics.median(paired)
    low, high = median_ci95(paired)
    print(f"\n### Warm start, traced versus untraced ({runs} rounds; {machine()})\n")
    print("| run | median (mean ± 95% CI) |")
    print("|---|---:|")
    print(f"| untraced (coldstart's warm-up run) | {describe(untraced)} |")
    print(f"| traced (same launcher, {statistics.median(events):.0f} events) | {describe(traced)} |")
    print(f"| plain (this script's subprocess) | {describe(plain)} |")
    print(f"\ntraced / untraced, median of per-round ratios: **{ratio:.3f}** "
          f"(95% bootstrap interval {low:.3f} to {high:.3f}); ratio of medians "
          f"{statistics.median(traced) / statistics.median(untraced):.3f}; "
          f"traced / plain {statistics.median(traced) / statistics.median(plain):.3f}")
    return ratio <= MAX_OVERHEAD


def report_time(coldstart, work, runs):
    argv = firefox_argv(work)
    db = os.path.join(work, "cold.db")
    s = trace(coldstart, db, "cold", argv)
    print(f"\n### `coldstart report` on a cold Firefox profile ({s['events']} events, "
          f"{s['files']} files, {s['bytes_read'] / 2**20:.1f} MiB read)\n")
    print("| command | median (mean ± 95% CI) |")
    print("|---|---:|")
    ok = True
    for name, extra in [("report", []), ("report --json", ["--json"]),
                        ("report --html", ["--html", os.path.join(work, "r.html")])]:
        cmd = [coldstart, "report", db, *extra]
        timed(cmd)
        samples = [timed(cmd) for _ in range(runs)]
        print(f"| `{name}` | {describe(samples)} |")
        ok &= statistics.median(samples) < MAX_REPORT_SECONDS
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="warm-start rounds")
    parser.add_argument("--report-runs", type=int, default=10)
    parser.add_argument("--keep", help="keep profiles and pages in this directory")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("tracing needs root: sudo bench/trace_firefox.py")
    ensure_installed({FIREFOX: "firefox-esr"})
    coldstart = build_coldstart()
    work = args.keep or tempfile.mkdtemp(prefix="coldstart-bench-", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    try:
        overhead_ok = overhead(coldstart, work, args.runs)
        report_ok = report_time(coldstart, work, args.report_runs)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    failed = []
    if not overhead_ok:
        failed.append(f"tracing adds more than {MAX_OVERHEAD - 1:.0%} to a warm start")
    if not report_ok:
        failed.append(f"a report took {MAX_REPORT_SECONDS} s or more")
    for failure in failed:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
