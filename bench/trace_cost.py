#!/usr/bin/env python3
"""What a trace costs beyond the start it records: `coldstart trace --
/bin/true`, cold (the default), timed from this script, against the
traced program's own time from the trace's --json summary (launch to
exit). The difference is the trace's fixed cost: the private tracefs
instance set up and removed, the cache dropped, the name recorder loaded
and detached, the profile written.

With --coldstart BIN given more than once, the builds are interleaved
round by round (to compare a change against the build before it);
without it, this repository's release build is timed.

    sudo bench/trace_cost.py [--runs N] [--coldstart BIN ...] [--keep DIR]

Prints per build: medians of the wall time, the program's own time and
their difference, each with a 95% bootstrap interval of the median.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import build_coldstart, median_ci95


def one_trace(coldstart, db):
    """Wall time of one `coldstart trace -- /bin/true` and the program's
    own time from its summary, in ms."""
    start = time.perf_counter()
    out = subprocess.run([coldstart, "trace", "--json", "-o", db, "--", "/bin/true"],
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    wall = (time.perf_counter() - start) * 1000
    summary = json.loads(out.stdout)
    if summary["end_reason"] != "exited" or summary["exit_code"] != 0:
        sys.exit(f"/bin/true did not exit cleanly under {coldstart}: {summary}")
    return wall, summary["ended_ms"]


def row(name, samples):
    low, high = median_ci95(samples)
    return f"{name} {statistics.median(samples):.0f} [{low:.0f}, {high:.0f}]"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--coldstart", action="append",
                        help="a coldstart binary to time (repeatable); default: this repository's")
    parser.add_argument("--keep", help="directory to keep the profiles in")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): tracing needs it")
    builds = args.coldstart or [build_coldstart()]
    work = args.keep or tempfile.mkdtemp(prefix="coldstart-trace-cost-")
    os.makedirs(work, exist_ok=True)
    times = {b: [] for b in builds}
    try:
        for round_ in range(args.runs):
            for i, build in enumerate(builds):
                times[build].append(one_trace(build, os.path.join(work, f"build{i}.db")))
            print(f"round {round_ + 1} of {args.runs} done", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"kernel {os.uname().release}, {os.cpu_count()} CPUs; {args.runs} interleaved rounds; "
          "medians in ms [95% bootstrap interval]")
    for build in builds:
        walls = [w for w, _ in times[build]]
        programs = [p for _, p in times[build]]
        fixed = [w - p for w, p in times[build]]
        print(f"{build}: {row('wall', walls)}; {row('program', programs)}; "
              f"{row('fixed cost', fixed)}")


if __name__ == "__main__":
    main()
