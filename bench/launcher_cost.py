#!/usr/bin/env python3
"""What starting a program through coldstart-run costs a cold start when the
plan has nothing to read, beside what any exec wrapper costs.

A tiny C program (puts and exit) is started cold (`coldstart bench --cache
cold`: page cache, dentries and inodes dropped before every run), the
variants interleaved run by run:
  plain          the program itself;
  coldstart-run  coldstart-run with an empty plan in front of it;
  stripped       the same coldstart-run without its symbol tables;
  env            /usr/bin/env in front of it: a wrapper that only execs.
The difference between env and plain is what an extra exec costs cold on
this machine (its binary's path, inode and pages read from the disk); the
difference between coldstart-run and env is what coldstart-run adds to that.

    sudo bench/launcher_cost.py [--runs N] [--keep DIR]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from benchlib import build_coldstart

EMPTY_PLAN = ("coldstart-plan 2\npage-size 4096\n"
              "source profile=none runs=1 min-runs=1 merge-gap-pages=0 max-extent-pages=1024 "
              "max-bytes=- pages-from=demand\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--keep", help="directory to keep the work in")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): cold runs drop the page cache")
    work = args.keep or tempfile.mkdtemp(prefix="coldstart-launcher-cost-")
    os.makedirs(work, exist_ok=True)
    coldstart = build_coldstart()
    wrapper = os.path.join(os.path.dirname(coldstart), "coldstart-run")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "coldstart", "--bin", "coldstart-run"],
                   check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    hello = os.path.join(work, "hello")
    with open(hello + ".c", "w") as f:
        f.write('#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n')
    subprocess.run(["cc", "-O2", "-o", hello, hello + ".c"], check=True)
    plan = os.path.join(work, "empty.plan")
    with open(plan, "w") as f:
        f.write(EMPTY_PLAN)
    # Copies beside the program: every variant's wrapper on the same
    # filesystem, looked up the same way.
    full = os.path.join(work, "coldstart-run")
    shutil.copy2(wrapper, full)
    stripped = os.path.join(work, "coldstart-run-stripped")
    subprocess.run(["strip", "-o", stripped, full], check=True)
    sizes = {p: os.path.getsize(p) for p in (hello, full, stripped, "/usr/bin/env")}
    print("sizes: " + ", ".join(f"{os.path.basename(p)} {s / 1024:.0f} KiB" for p, s in sizes.items()),
          flush=True)
    command = [coldstart, "bench", "--cache", "cold", "-n", str(args.runs),
               "--name", "plain", "--name", "coldstart-run", "--name", "stripped", "--name", "env",
               "--vs", f"{full} --plan {plan} -- {hello}",
               "--vs", f"{stripped} --plan {plan} -- {hello}",
               "--vs", f"/usr/bin/env {hello}",
               "--", hello]
    subprocess.run(command, check=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
