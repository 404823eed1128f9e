#!/usr/bin/env python3
"""The system-wide service against the wrapper, on Firefox ESR, LibreOffice
Writer and Chromium started by their plain commands, at read_ahead_kb 128
and at the device's own setting.

For each program: three cold traces with readahead off and the seed plan
(as bench/prefetch_apps.py does), then at each read_ahead_kb the plan
refined through coldstart-run at that setting (`coldstart plan --refine`).
The refined plan is installed into a fresh state directory of a
`coldstart serve` run for the block (stopped by its pid on every way
out), and one `coldstart bench` interleaves, round by round:

- the plain command with COLDSTART_SERVE=0 (not served), warm and cold;
- the plain command, cold: served by the service, with no wrapper;
- coldstart-run with the same plan (COLDSTART_SERVE=0 so that the service
  does not serve it too), cold.

Prints per program and setting: medians, the share of the cold-warm gap the
service and the wrapper close with its 95% bootstrap interval, the bytes
each read over the bytes the start touched, and what the service recorded
(starts served, the median delay from the exec to its first request).
The bench counts the bytes the program's process tree read from disk; the
service reads outside that tree, so its share (the median bytes it asked
for in a cold served start, from its starts record) is added.

By default the service does not learn (--no-learn): the plan it serves is
the wrapper's, so this measures serving without a wrapper. With --learn the
service starts from an empty state directory and learns by itself: the
plain command is started cold --learn-starts times (5) with nothing else
done (the service watches the first, traces the second and serves and
traces the next ones), then the same bench runs, with coldstart-run given
the seed plan of the readahead-off traces (not refined). The learned plan's
size is reported beside the bytes the start touched.

    sudo bench/serve_apps.py [--runs N] [--traces N] [--iterations N] [--learn]
                             [--learn-starts N] [--read-ahead-kb KB ...]
                             [--only NAME] [--keep DIR]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys

from benchlib import ReadAhead, Serving
from prefetch_apps import (app_arguments, gap, gap_ci, percent_with_ci, prepare, ready_argv, run,
                           seed)


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def learn(argv, starts, service):
    """Starts the plain command cold `starts` times while the service
    learns; waits after each for the service to be done with the start."""
    for i in range(starts):
        drop_caches()
        run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # The start is over for the service once its tree was quiet for a
        # second; compiling the plan from a traced start takes a few more.
        service.wait_quiet(8)
        print(f"   learning start {i + 1} of {starts} done", file=sys.stderr)


def measure(coldstart, work, name, argv, db, ra, runs, iterations, learning=None):
    label = f"{name}-ra{ra}"
    state = os.path.join(work, f"{label}-state")
    shutil.rmtree(state, ignore_errors=True)
    if learning is None:
        plan = os.path.join(work, f"{label}.plan")
        run([coldstart, "plan", db, "-o", plan, "--refine", "--as-root", "--json",
             "--iterations", str(iterations), "--", *argv], stdout=subprocess.DEVNULL)
        run([coldstart, "serve", "install", plan, "--program", argv[0], "--state", state],
            stdout=subprocess.DEVNULL)
        extra = ["--no-learn"]
    else:
        plan, starts = learning
        extra = []
    wrapper = os.path.join(os.path.dirname(coldstart), "coldstart-run")
    quoted = " ".join(f"'{a}'" for a in argv)
    out_json = os.path.join(work, f"{label}-bench.json")
    out_md = os.path.join(work, f"{label}-bench.md")
    with Serving(coldstart, state, os.path.join(work, f"{label}-serve.log"), extra) as service:
        if learning is not None:
            learn(argv, starts, service)
        run([coldstart, "bench", "--as-root", "--cache", "warm,cold", "-n", str(runs),
             "--name", f"{name} not served",
             "--vs", quoted, "--name", f"{name} served",
             "--vs", f"env COLDSTART_SERVE=0 {wrapper} --plan {plan} -- {quoted}",
             "--name", f"{name} + coldstart-run",
             "--json", out_json, "--markdown", out_md,
             "--", "env", "COLDSTART_SERVE=0", *argv])
    status = json.loads(run([coldstart, "status", "--json", "--state", state],
                            stdout=subprocess.PIPE, text=True).stdout)
    exe = os.path.realpath(argv[0])
    ours = [p for p in status["programs"] if p["exe"] == exe]
    asked = service_reads(state, ours[0]["id"] if ours else None)
    with open(out_json) as f:
        bench = json.load(f)
    with open(out_md) as f:
        table = f.read()
    by = {v["name"]: v for v in bench["variants"]}
    base = f"{name} not served"
    served = f"{name} served (cold)"
    wrapped = f"{name} + coldstart-run (cold)"
    return {
        "table": table,
        "warm_ms": by[f"{base} (warm)"]["wall_ms"]["median"],
        "cold_ms": by[f"{base} (cold)"]["wall_ms"]["median"],
        "served_ms": by[served]["wall_ms"]["median"],
        "wrapped_ms": by[wrapped]["wall_ms"]["median"],
        # The bench counts the program's tree; the service read the rest.
        "served_read": by[served]["read_bytes_median"] + asked,
        "service_read": asked,
        "wrapped_read": by[wrapped]["read_bytes_median"],
        "gap_ci": {"served": gap_ci(bench, base, served),
                   "wrapped": gap_ci(bench, base, wrapped)},
        "status": ours[0] if ours else {},
    }


def service_reads(state, program):
    """The median bytes the service asked the kernel for in a cold served
    start of `program` (its id; starts.json: the bench's warm starts find
    the plan cached)."""
    asked = []
    programs = os.path.join(state, "programs")
    for program in [program] if program else []:
        with open(os.path.join(programs, program, "starts.json")) as f:
            for start in json.load(f)["starts"]:
                if start["outcome"] == "served" and start["resident_share"] < 0.5:
                    asked.append(start["prefetch_bytes"])
    return statistics.median(asked) if asked else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    app_arguments(parser)
    parser.add_argument("--learn", action="store_true",
                        help="the service learns its plans from an empty state")
    parser.add_argument("--learn-starts", type=int, default=5,
                        help="plain cold starts the service learns from [default: 5]")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): cold starts drop the page cache, the service needs root")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work, table, wanted, coldstart, settings, device = prepare(args, "coldstart-serve-")
    results = []
    for name in wanted:
        argv = ready_argv(table, name)
        print(f"== {name}: seed traces", file=sys.stderr)
        db, seed_plan, touched = seed(coldstart, work, name, argv, args.traces)
        for ra in settings:
            print(f"== {name} at read_ahead_kb {ra}", file=sys.stderr)
            learning = (seed_plan, args.learn_starts) if args.learn else None
            with ReadAhead(None if str(ra) == device else ra):
                r = measure(coldstart, work, name, argv, db, ra, args.runs, args.iterations,
                            learning)
            r.update(name=name, ra=ra, touched=touched)
            results.append(r)
    mib = 2 ** 20
    for r in results:
        print(f"### {r['name']}, read_ahead_kb {r['ra']}\n\n{r['table']}")
    print(f"device read_ahead_kb {device}; kernel {os.uname().release}; {args.runs} interleaved "
          "runs, medians; gap closed with its 95% bootstrap interval over the rounds\n")
    print("| program | read_ahead_kb | warm ms | cold ms | served ms | coldstart-run ms | "
          "gap closed: served | coldstart-run | read served / touched (of it the service's) | "
          "coldstart-run | "
          "starts served | first request after exec | plan MiB / touched MiB |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        s = r["status"]
        first = s.get("median_first_request_us")
        print(f"| {r['name']} | {r['ra']} | {r['warm_ms']:.0f} | {r['cold_ms']:.0f} | "
              f"{r['served_ms']:.0f} | {r['wrapped_ms']:.0f} | "
              f"{percent_with_ci(gap(r['cold_ms'], r['warm_ms'], r['served_ms']), r['gap_ci']['served'])} | "
              f"{percent_with_ci(gap(r['cold_ms'], r['warm_ms'], r['wrapped_ms']), r['gap_ci']['wrapped'])} | "
              f"{r['served_read'] / r['touched']:.2f} ({r['service_read'] / r['touched']:.2f}) | "
              f"{r['wrapped_read'] / r['touched']:.2f} | "
              f"{s.get('starts_served', 0)} of {s.get('starts_seen', 0)} | "
              f"{'-' if first is None else f'{first / 1000:.2f} ms'} "
              f"({s.get('starts_decided_at_exec', 0)} decided at the exec) | "
              f"{s.get('plan_bytes', 0) / mib:.1f} / {r['touched'] / mib:.1f} |")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
