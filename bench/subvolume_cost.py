#!/usr/bin/env python3
"""What telling btrfs subvolumes apart costs a traced start.

While a btrfs filesystem is mounted, `coldstart trace` runs a BPF program
beside each page-cache tracepoint (record::subvolumes); it leaves after a
few reads for an inode on another filesystem. This measures Firefox ESR's
traced cold start (on the root filesystem, not btrfs: the program's cost
where it has nothing to place) with an empty btrfs image mounted, so the
programs are attached, and without, so they are not, interleaved round by
round. Prints the medians of the start's own time (launch to exit, from the
trace's summary) and of the trace's wall time, the difference of the
medians with a 95% bootstrap interval over rounds paired by index, and the
trace events each recorded.

    sudo bench/subvolume_cost.py [--runs N] [--keep DIR]
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

from benchlib import build_coldstart, ensure_installed, firefox_argv, median_ci95


class EmptyBtrfs:
    """An empty btrfs image mounted in `work` for a `with` block, unmounted
    and removed on every way out."""

    def __init__(self, work):
        self.image = os.path.join(work, "empty-btrfs.img")
        self.mount = os.path.join(work, "empty-btrfs")
        self.mounted = False

    def __enter__(self):
        with open(self.image, "wb") as f:
            f.truncate(300 << 20)
        subprocess.run(["mkfs.btrfs", "-q", "-f", self.image], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.makedirs(self.mount, exist_ok=True)
        subprocess.run(["mount", "-o", "loop", self.image, self.mount], check=True)
        self.mounted = True
        return self

    def __exit__(self, *exc):
        if self.mounted:
            subprocess.run(["umount", self.mount], check=False)
        if os.path.exists(self.image):
            os.remove(self.image)
        return False


def traced_start(coldstart, db, argv):
    """One cold traced start: (the start's own ms, the trace's wall ms,
    trace events)."""
    began = time.monotonic()
    out = subprocess.run([coldstart, "trace", "--as-root", "--json", "--cache", "cold",
                          "-o", db, "--", *argv],
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    wall_ms = (time.monotonic() - began) * 1e3
    summary = json.loads(out.stdout)
    return summary["ended_ms"], wall_ms, summary["events"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--keep", help="directory to keep the profiles in")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): traced cold starts drop the page cache")
    work = args.keep or tempfile.mkdtemp(prefix="coldstart-subvolume-cost-")
    os.makedirs(work, exist_ok=True)
    ensure_installed({"/usr/bin/firefox-esr": "firefox-esr", "/usr/sbin/mkfs.btrfs": "btrfs-progs"})
    coldstart = build_coldstart()
    argv = firefox_argv(work)
    # A first start creates the profile: not a start to measure.
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rounds = {"without btrfs": [], "with btrfs mounted": []}
    for i in range(args.runs):
        # Alternate which goes first, so neither always follows the other.
        order = list(rounds) if i % 2 == 0 else list(reversed(list(rounds)))
        for variant in order:
            db = os.path.join(work, f"{i}-{variant.replace(' ', '-')}.db")
            if variant == "with btrfs mounted":
                with EmptyBtrfs(work):
                    rounds[variant].append(traced_start(coldstart, db, argv))
            else:
                rounds[variant].append(traced_start(coldstart, db, argv))
            os.remove(db)
    print(f"{args.runs} interleaved rounds; kernel {os.uname().release}; Firefox ESR traced "
          "cold (`coldstart trace --cache cold`), medians\n")
    print("| variant | start ms | trace wall ms | trace events |")
    print("|---|--:|--:|--:|")
    for variant, samples in rounds.items():
        start = statistics.median(s[0] for s in samples)
        wall = statistics.median(s[1] for s in samples)
        events = statistics.median(s[2] for s in samples)
        print(f"| {variant} | {start:.0f} | {wall:.0f} | {events:.0f} |")
    diffs = [b[0] - a[0] for a, b in zip(rounds["without btrfs"], rounds["with btrfs mounted"])]
    low, high = median_ci95(diffs)
    print(f"\nstart, with btrfs mounted - without, paired by round: median "
          f"{statistics.median(diffs):+.0f} ms [{low:+.0f}, {high:+.0f}]")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
