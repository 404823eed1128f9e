#!/usr/bin/env python3
"""What `coldstart trace --loader` costs and whether its figures agree
with ld.so's own, on a warm Firefox ESR start:

1. Overhead. Each round is one `coldstart trace --cache warm` with the
   loader probes and one without (order alternating), both timed from
   launch to exit by coldstart's launcher. Target: the loader trace at
   most 5% slower, as the median of the per-round ratios (paired, so noise
   spanning a round cancels out).
2. Agreement. Interleaved with the rounds, Firefox runs warm and untraced
   under LD_DEBUG=statistics, which prints rtld's own cycle counts for the
   initial set: total startup time, time relocating, time loading. The
   loader trace's figures for the same process (the `start` span; the
   `relocate` and `load` spans inside it) are set beside them, cycles
   converted with the TSC frequency /proc/cpuinfo reports. They agree when
   the 95% intervals of the two medians overlap.

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

from benchlib import build_coldstart, describe, ensure_installed, median_ci95, timed
from trace_firefox import FIREFOX, firefox_argv, machine

MAX_OVERHEAD = 1.05


def trace(coldstart, db, argv, loader):
    """One warm `coldstart trace`; returns its --json summary."""
    extra = ["--loader"] if loader else []
    out = subprocess.run(
        [coldstart, "trace", "--as-root", "--json", "--cache", "warm", *extra, "-o", db,
         "--", *argv],
        check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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


def ld_debug_statistics(argv, work):
    """rtld's own figures for the first process of one warm start, in s."""
    prefix = os.path.join(work, "ld-debug")
    for old in glob.glob(prefix + ".*"):
        os.remove(old)
    env = dict(os.environ, LD_DEBUG="statistics", LD_DEBUG_OUTPUT=prefix)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    # One file per process, named by pid: the lowest pid is the first one.
    files = sorted(glob.glob(prefix + ".*"), key=lambda p: int(p.rsplit(".", 1)[1]))
    figures = {}
    with open(files[0]) as f:
        for line in f:
            m = STAT.match(line)
            if m and m.group(1) not in figures:
                figures[m.group(1)] = int(m.group(2))
    hz = tsc_hz()
    return {
        "total": figures["total startup time in dynamic loader"] / hz,
        "relocate": figures["time needed for relocation"] / hz,
        "load": figures["time needed to load objects"] / hz,
    }


def traced_figures(db, run_id):
    """The loader trace's figures for the run's first process, in s."""
    con = sqlite3.connect(db)
    root = con.execute("SELECT root_pid FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    spans = con.execute(
        "SELECT phase, t_begin_ns, t_end_ns, depth FROM loader_spans "
        "WHERE run_id = ? AND pid = ? AND t_end_ns IS NOT NULL", (run_id, root)).fetchall()
    con.close()
    start = [s for s in spans if s[0] == "start"]
    if not start:
        sys.exit(f"{db}: run {run_id} has no start span: is libc6-dbg installed?")
    begin, end = start[0][1], start[0][2]
    inside = [s for s in spans if begin <= s[1] and s[2] <= end and s[3] == 0]
    return {
        "total": (end - begin) / 1e9,
        "relocate": sum(s[2] - s[1] for s in inside if s[0] == "relocate") / 1e9,
        "load": sum(s[2] - s[1] for s in inside if s[0] == "load") / 1e9,
    }


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
        plain, loader, ratios, ld_debug, traced, untraced = [], [], [], [], [], []
        for i in range(args.runs):
            order = (False, True) if i % 2 == 0 else (True, False)
            ended = {}
            for with_loader in order:
                s = trace(coldstart, loader_db if with_loader else plain_db, argv, with_loader)
                ended[with_loader] = s["ended_ms"] / 1e3
                untraced.append(s["warmup_ms"] / 1e3)
                if with_loader:
                    traced.append(traced_figures(loader_db, s["run"]))
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
          f"(TSC {tsc_hz() / 1e6:.0f} MHz)\n")
    print("| figure | LD_DEBUG=statistics, ms | trace --loader, ms | 95% intervals overlap |")
    print("|---|---:|---:|---|")
    names = {"total": "rtld start to hand-over (start span)",
             "relocate": "relocating the initial set",
             "load": "loading the initial set"}
    for key, name in names.items():
        a = [f[key] for f in ld_debug]
        b = [f[key] for f in traced]
        print(f"| {name} | {describe(a)} | {describe(b)} | "
              f"{'yes' if overlap(median_ci95(a), median_ci95(b)) else 'no'} |")
    if ratio > MAX_OVERHEAD:
        print(f"FAIL: the loader trace adds more than {MAX_OVERHEAD - 1:.0%} to a warm start",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
