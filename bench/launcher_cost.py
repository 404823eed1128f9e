#!/usr/bin/env python3
"""What starting a program through coldstart-run costs a cold start when the
plan has nothing to read, beside what any exec wrapper costs.

A tiny C program (puts and exit) is started cold (`coldstart bench --cache
cold`: page cache, dentries and inodes dropped before every run), the
variants interleaved run by run:
  plain          the program itself;
  coldstart-run  coldstart-run with an empty plan in front of it (linked
                 without debug information and symbol table: build.rs);
  static-run     coldstart-run linked static-pie (crt-static): no loader
                 and no shared libraries of its own to open and map;
  env            /usr/bin/env in front of it: a wrapper that only execs;
  static-exec    a 10-line static C program that only execs: the least any
                 exec wrapper can cost.
The difference between static-exec and plain is what an extra exec costs
cold on this machine (its binary's path, inode and pages read from the
disk); the difference between coldstart-run and static-exec is what
coldstart-run adds to that (its loader and libraries, its size, the plan,
the prefetcher's fork).

    sudo bench/launcher_cost.py [--runs N] [--keep DIR] [--read-ahead-kb KB]

--read-ahead-kb sets the read_ahead_kb of the device holding the work
directory for the bench, and puts the old value back after.
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


def queue_file(path):
    """The read_ahead_kb file of the block device holding `path`."""
    dev = os.stat(path).st_dev
    block = os.path.realpath(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for directory in (block, os.path.dirname(block)):
        candidate = os.path.join(directory, "queue", "read_ahead_kb")
        if os.path.exists(candidate):
            return candidate
    sys.exit(f"cannot find the read_ahead_kb of the device holding {path} ({block})")


class read_ahead:
    """Holds the device's read_ahead_kb at `kb` inside a with block."""

    def __init__(self, path, kb):
        self.file = queue_file(path) if kb is not None else None
        self.kb = kb
        self.old = None

    def __enter__(self):
        if self.file:
            with open(self.file) as f:
                self.old = f.read().strip()
            with open(self.file, "w") as f:
                f.write(str(self.kb))
            print(f"read_ahead_kb {self.kb} (was {self.old}) on {self.file}", flush=True)

    def __exit__(self, *exc):
        if self.file and self.old is not None:
            with open(self.file, "w") as f:
                f.write(self.old)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--keep", help="directory to keep the work in")
    parser.add_argument("--read-ahead-kb", type=int,
                        help="read_ahead_kb of the work directory's device during the bench")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): cold runs drop the page cache")
    work = args.keep or tempfile.mkdtemp(prefix="coldstart-launcher-cost-")
    os.makedirs(work, exist_ok=True)
    coldstart = build_coldstart()
    wrapper = os.path.join(os.path.dirname(coldstart), "coldstart-run")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "coldstart", "--bin", "coldstart-run"],
                   check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    static_target = os.path.join(work, "static-target")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "coldstart", "--bin", "coldstart-run",
                    "--target", "x86_64-unknown-linux-gnu", "--target-dir", static_target],
                   check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   env=dict(os.environ, RUSTFLAGS="-C target-feature=+crt-static"))
    hello = os.path.join(work, "hello")
    with open(hello + ".c", "w") as f:
        f.write('#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n')
    subprocess.run(["cc", "-O2", "-o", hello, hello + ".c"], check=True)
    static_exec = os.path.join(work, "static-exec")
    with open(static_exec + ".c", "w") as f:
        f.write('#include <unistd.h>\n#include <stdio.h>\n'
                'int main(int argc, char **argv) {\n'
                '    if (argc < 2) return 2;\n'
                '    execv(argv[1], argv + 1);\n'
                '    perror("execv");\n'
                '    return 127;\n}\n')
    subprocess.run(["cc", "-O2", "-static", "-o", static_exec, static_exec + ".c"], check=True)
    plan = os.path.join(work, "empty.plan")
    with open(plan, "w") as f:
        f.write(EMPTY_PLAN)
    # Copies beside the program: every variant's wrapper on the same
    # filesystem, looked up the same way.
    full = os.path.join(work, "coldstart-run")
    shutil.copy2(wrapper, full)
    static_run = os.path.join(work, "coldstart-run-static")
    shutil.copy2(os.path.join(static_target, "x86_64-unknown-linux-gnu", "release", "coldstart-run"),
                 static_run)
    sizes = {p: os.path.getsize(p)
             for p in (hello, full, static_run, "/usr/bin/env", static_exec)}
    print("sizes: " + ", ".join(f"{os.path.basename(p)} {s / 1024:.0f} KiB" for p, s in sizes.items()),
          flush=True)
    command = [coldstart, "bench", "--cache", "cold", "-n", str(args.runs),
               "--name", "plain", "--name", "coldstart-run",
               "--name", "static-run", "--name", "env", "--name", "static-exec",
               "--vs", f"{full} --plan {plan} -- {hello}",
               "--vs", f"{static_run} --plan {plan} -- {hello}",
               "--vs", f"/usr/bin/env {hello}",
               "--vs", f"{static_exec} {hello}",
               "--", hello]
    with read_ahead(work, args.read_ahead_kb):
        subprocess.run(command, check=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
