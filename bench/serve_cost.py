#!/usr/bin/env python3
"""What `coldstart serve` costs the machine when it has nothing to serve.

1. Per exec of a program it has no plan for: a copy of /bin/true started
   EXECS times in a row (bench/fixtures/exec_loop.c: posix_spawn and
   waitpid, the mean time of a start), in rounds that interleave four
   variants: no service; the service with learning off (--no-learn) and a
   plan installed for another executable (its fanotify group holds one
   inode mark); the service learning, with the same plan (its group marks
   every filesystem: each exec is an event it reads, and the first 3
   starts of the program are watched); and, for scale, the service (not
   learning) with a plan for the very program started (every exec is an
   event it follows: what a planned start costs the exec loop, not the
   unplanned case). Each round starts and stops the service by its
   pid, and runs the variants in another order than the round before. Prints each variant's median per-exec time and the difference to
   no service with its 95% bootstrap interval over rounds paired by index.
2. Idle: the service running with a plan installed and nothing starting,
   for IDLE seconds, learning off and on: its context switches (voluntary
   and not, every thread, /proc/PID/task/*/status) over that time, which
   count its wakeups (a learning service wakes for every exec on the
   machine: what else runs here counts), and its resident memory (VmRSS).

    sudo bench/serve_cost.py [--rounds N] [--execs N] [--idle S] [--keep DIR]
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, Serving, build_coldstart, median_ci95


def compile_exec_loop(work):
    out = os.path.join(work, "exec_loop")
    subprocess.run(["cc", "-O2", "-o", out, os.path.join(ROOT, "bench", "fixtures", "exec_loop.c")],
                   check=True)
    return out


def write_plan(path, data):
    """A one-extent plan of `data`: something for the service to hold."""
    st = os.stat(data)
    with open(path, "w") as f:
        f.write("coldstart-plan 2\npage-size 4096\n"
                "source profile=cost.db runs=1 min-runs=1 merge-gap-pages=0 max-extent-pages=1024 "
                "max-bytes=- pages-from=demand\n"
                f"file 0 size={st.st_size} mtime={st.st_mtime_ns} build-id=- {data}\n"
                "extent 0 0+1 need=0.000000ms\n")


def exec_time(loop, program, execs):
    out = subprocess.run([loop, str(execs), program], check=True, stdout=subprocess.PIPE, text=True)
    return float(out.stdout) / 1e3  # us


def switches(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--execs", type=int, default=500)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--keep", help="directory to keep the work in")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): the service needs CAP_SYS_ADMIN")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = args.keep or tempfile.mkdtemp(prefix="coldstart-serve-cost-")
    os.makedirs(work, exist_ok=True)
    coldstart = build_coldstart()
    loop = compile_exec_loop(work)
    program = os.path.join(work, "true")
    shutil.copy2("/bin/true", program)
    other = os.path.join(work, "other")
    shutil.copy2("/bin/true", other)
    data = os.path.join(work, "data.bin")
    with open(data, "wb") as f:
        f.write(b"\0" * 65536)
    plan = os.path.join(work, "cost.plan")
    write_plan(plan, data)
    states = {}
    for name, exe in [("other", other), ("self", program)]:
        states[name] = os.path.join(work, f"state-{name}")
        subprocess.run([coldstart, "serve", "install", plan, "--program", exe, "--state",
                        states[name]], check=True, stdout=subprocess.DEVNULL)
    variants = ["no service", "service, other program planned",
                "service learning, other program planned", "service, this program planned"]
    times = {v: [] for v in variants}
    state_of = {variants[1]: (states["other"], ["--no-learn"]),
                variants[2]: (states["other"], []),
                variants[3]: (states["self"], ["--no-learn"])}
    n = len(variants)
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        # Each round in another order: no variant always runs first.
        for v in variants[r % n:] + variants[:r % n]:
            if v in state_of:
                state, extra = state_of[v]
                with Serving(coldstart, state, extra=extra):
                    times[v].append(exec_time(loop, program, args.execs))
            else:
                times[v].append(exec_time(loop, program, args.execs))
    print(f"\nkernel {os.uname().release}; {args.rounds} rounds of {args.execs} starts of a copy of "
          "/bin/true per variant, interleaved; medians of the rounds' mean start time\n")
    print("| variant | us per start | vs no service, us [95% CI] |")
    print("|---|--:|--:|")
    base = times[variants[0]]
    for v in variants:
        diffs = [t - b for t, b in zip(times[v], base)]
        lo, hi = median_ci95(diffs)
        print(f"| {v} | {statistics.median(times[v]):.1f} | "
              f"{statistics.median(diffs):+.1f} [{lo:+.1f}, {hi:+.1f}] |")
    print()
    for extra, how in [(["--no-learn"], "not learning"), ([], "learning")]:
        with Serving(coldstart, states["other"], extra=extra) as service:
            pid = service.process.pid
            time.sleep(1.0)
            before = switches(pid)
            time.sleep(args.idle)
            after = switches(pid)
            rss = rss_kb(pid)
        print(f"idle for {args.idle:.0f} s with a plan installed, {how}: {after - before} context "
              f"switches (all threads), resident memory {rss / 1024:.1f} MiB")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
