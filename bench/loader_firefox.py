#!/usr/bin/env python3
"""What `coldstart trace --loader` costs and whether its figures agree
with ld.so's own, on a warm Firefox ESR start:

1. Overhead. Each round is one `coldstart trace --cache warm` with the
   loader probes and one without (order alternating), both timed from
   launch to exit by coldstart's launcher. Target: the loader trace at
   most 5% slower, as the median of the per-round ratios (paired, so noise
   spanning a round cancels out).
2. Agreement. Both traced starts run under LD_DEBUG=statistics, which
   prints rtld's own cycle counts for the initial set: total startup time,
   time relocating, time loading. glibc 2.36 prints each count divided by
   10 (HP_TIMING_PRINT writes its NUL over the last digit; docs/loader.md),
   so they are read x10. The loader trace's figures for the same process
   of the same start (the `start` span; the `relocate` and `load` spans
   inside it) are set beside them, cycles converted with the TSC frequency
   /proc/cpuinfo reports, as the median of the per-start ratios. Firefox
   also runs untraced under LD_DEBUG=statistics in each round: what the
   start costs without probes, beside the trace's corrected figures (each
   span less its probe hits times the calibrated cost of a hit).

Needs root (tracing) and libc6-dbg (ld.so's debug symbols). Installs what
is missing with apt-get, builds coldstart in release mode, prints Markdown
and exits 1 when the overhead target is missed.

    sudo bench/loader_firefox.py [--runs N] [--coldstart BIN] [--keep DIR]
"""

import argparse
import glob
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile

from benchlib import (FIREFOX, build_coldstart, describe, ensure_installed, firefox_argv,
                      median_ci95, timed)
from trace_firefox import machine

MAX_OVERHEAD = 1.05


def trace(coldstart, db, argv, loader, ld_debug_prefix):
    """One warm `coldstart trace` under LD_DEBUG=statistics; returns its
    --json summary."""
    extra = ["--loader"] if loader else []
    clear_ld_debug(ld_debug_prefix)
    env = dict(os.environ, LD_DEBUG="statistics", LD_DEBUG_OUTPUT=ld_debug_prefix)
    out = subprocess.run(
        [coldstart, "trace", "--as-root", "--json", "--cache", "warm", *extra, "-o", db,
         "--", *argv],
        check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    summary = json.loads(out.stdout)
    if summary["end_reason"] != "exited" or summary["exit_code"] != 0:
        sys.exit(f"firefox did not exit cleanly under trace: {summary}")
    return summary


def tsc_hz():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) * 1e6
    sys.exit("/proc/cpuinfo gives no cpu MHz to convert LD_DEBUG's cycles")


STAT = re.compile(r"^\s*\d+:\s+(total startup time in dynamic loader|time needed for relocation|"
                  r"time needed to load objects):\s+(\d+) cycles")


def clear_ld_debug(prefix):
    for old in glob.glob(prefix + ".*"):
        os.remove(old)


def ld_debug_statistics(argv, work):
    """rtld's own figures for the first process of one untraced warm start,
    in s."""
    prefix = os.path.join(work, "ld-debug")
    clear_ld_debug(prefix)
    env = dict(os.environ, LD_DEBUG="statistics", LD_DEBUG_OUTPUT=prefix)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    # One file per process, named by pid: the lowest pid is the first one.
    files = sorted(glob.glob(prefix + ".*"), key=lambda p: int(p.rsplit(".", 1)[1]))
    return read_ld_debug(files[0])


def read_ld_debug(path):
    """The three figures of one LD_DEBUG_OUTPUT file, in s."""
    figures = {}
    with open(path) as f:
        for line in f:
            m = STAT.match(line)
            if m and m.group(1) not in figures:
                figures[m.group(1)] = int(m.group(2))
    # Printed as cycles / 10: glibc's HP_TIMING_PRINT bug (docs/loader.md).
    hz = tsc_hz() / 10
    return {
        "total": figures["total startup time in dynamic loader"] / hz,
        "relocate": figures["time needed for relocation"] / hz,
        "load": figures["time needed to load objects"] / hz,
    }


def traced_figures(db, run_id):
    """The loader trace's figures for the run's first process, in s, as
    traced and corrected (less each span's probe hits times the calibrated
    cost of a hit), and that process's pid."""
    con = sqlite3.connect(db)
    root, hit_ns = con.execute(
        "SELECT root_pid, loader_hit_ns FROM runs WHERE id = ?", (run_id,)).fetchone()
    spans = con.execute(
        "SELECT phase, t_begin_ns, t_end_ns, depth, probe_hits FROM loader_spans "
        "WHERE run_id = ? AND pid = ? AND t_end_ns IS NOT NULL", (run_id, root)).fetchall()
    con.close()
    start = [s for s in spans if s[0] == "start"]
    if not start:
        sys.exit(f"{db}: run {run_id} has no start span: is libc6-dbg installed?")
    if hit_ns is None:
        sys.exit(f"{db}: run {run_id} has no calibrated probe cost")
    begin, end = start[0][1], start[0][2]
    inside = [s for s in spans if begin <= s[1] and s[2] <= end and s[3] == 0]

    def total(chosen, corrected):
        return sum(s[2] - s[1] - (s[4] * hit_ns if corrected else 0) for s in chosen) / 1e9

    figures = {}
    for corrected in (False, True):
        figures[corrected] = {
            "total": total(start[:1], corrected),
            "relocate": total([s for s in inside if s[0] == "relocate"], corrected),
            "load": total([s for s in inside if s[0] == "load"], corrected),
        }
    return figures[False], figures[True], root


def overlap(a, b):
    return a[0] <= b[1] and b[0] <= a[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="rounds")
    parser.add_argument("--coldstart", help="coldstart binary (default: build it)")
    parser.add_argument("--keep", help="keep profiles in this directory")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("tracing needs root: sudo bench/loader_firefox.py")
    ensure_installed({FIREFOX: "firefox-esr", "/usr/lib/debug/.build-id": "libc6-dbg"})
    coldstart = args.coldstart or build_coldstart()
    work = args.keep or tempfile.mkdtemp(prefix="coldstart-bench-", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    try:
        argv = firefox_argv(work)
        # The first start in a new profile creates it: not a start to time.
        timed(argv, stderr=subprocess.DEVNULL)
        timed(argv, stderr=subprocess.DEVNULL)
        plain_db, loader_db = os.path.join(work, "plain.db"), os.path.join(work, "loader.db")
        plain, loader, ratios, untraced = [], [], [], []
        ld_debug, traced, corrected, same_start = [], [], [], []
        prefix = os.path.join(work, "ld-debug-traced")
        for i in range(args.runs):
            order = (False, True) if i % 2 == 0 else (True, False)
            ended = {}
            for with_loader in order:
                s = trace(coldstart, loader_db if with_loader else plain_db, argv, with_loader,
                          prefix)
                ended[with_loader] = s["ended_ms"] / 1e3
                untraced.append(s["warmup_ms"] / 1e3)
                if with_loader:
                    as_traced, as_corrected, pid = traced_figures(loader_db, s["run"])
                    traced.append(as_traced)
                    corrected.append(as_corrected)
                    same_start.append(read_ld_debug(f"{prefix}.{pid}"))
            plain.append(ended[False])
            loader.append(ended[True])
            ratios.append(ended[True] / ended[False])
            ld_debug.append(ld_debug_statistics(argv, work))
            print(f"  round {i + 1}/{args.runs}: trace {ended[False] * 1e3:.0f} ms, "
                  f"trace --loader {ended[True] * 1e3:.0f} ms", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    ratio = statistics.median(ratios)
    low, high = median_ci95(ratios)
    print(f"\n### Warm Firefox start, `trace --loader` versus `trace` ({args.runs} rounds; "
          f"{machine()})\n")
    print("| run | median (mean ± 95% CI) |")
    print("|---|---:|")
    print(f"| untraced (coldstart's warm-up runs) | {describe(untraced)} |")
    print(f"| `trace --cache warm` | {describe(plain)} |")
    print(f"| `trace --cache warm --loader` | {describe(loader)} |")
    print(f"\nloader / plain trace, median of per-round ratios: **{ratio:.3f}** "
          f"(95% bootstrap interval {low:.3f} to {high:.3f})")

    print(f"\n### Firefox's first process: the loader trace against LD_DEBUG=statistics "
          f"(read x10; TSC {tsc_hz() / 1e6:.0f} MHz)\n")
    print("Same traced start: LD_DEBUG's figure and the trace's, and the median of the per-start "
          "ratios (trace / LD_DEBUG). Untraced: LD_DEBUG of an untraced start in the same round, "
          "beside the trace's figure less its probes' calibrated cost.\n")
    print("| figure | LD_DEBUG, traced start | trace --loader | ratio (95% CI) "
          "| LD_DEBUG, untraced | trace less probe cost | intervals overlap |")
    print("|---|---:|---:|---:|---:|---:|---|")
    names = {"total": "rtld start to hand-over (start span)",
             "relocate": "relocating the initial set",
             "load": "loading the initial set"}
    for key, name in names.items():
        same = [f[key] for f in same_start]
        trace_ = [f[key] for f in traced]
        per_start = [t / d for t, d in zip(trace_, same) if d > 0]
        low, high = median_ci95(per_start)
        free = [f[key] for f in ld_debug]
        fixed = [f[key] for f in corrected]
        print(f"| {name} | {describe(same, 1e6, 'µs')} | {describe(trace_, 1e6, 'µs')} | "
              f"{statistics.median(per_start):.3f} ({low:.3f} to {high:.3f}) | "
              f"{describe(free, 1e6, 'µs')} | {describe(fixed, 1e6, 'µs')} | "
              f"{'yes' if overlap(median_ci95(free), median_ci95(fixed)) else 'no'} |")
    if ratio > MAX_OVERHEAD:
        print(f"FAIL: the loader trace adds more than {MAX_OVERHEAD - 1:.0%} to a warm start",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
