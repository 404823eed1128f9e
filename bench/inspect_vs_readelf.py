#!/usr/bin/env python3
"""Speed of `coldstart inspect --json` against `readelf -W -d -r -s` on the
largest real binaries of this machine kind (BENCHMARKS.md): libxul.so of
Firefox ESR (183 MB) and chromium (297 MB).

Runs are interleaved (coldstart, readelf, coldstart, readelf, ...) after one
warm-up each, so both see the same warm page cache and the same machine
noise. Prints a Markdown table with medians, means and 95% confidence
intervals, and exits 1 if coldstart is not faster on every file.

Installs firefox-esr and chromium with apt-get when they are missing
(needs root), and builds coldstart in release mode.

    bench/inspect_vs_readelf.py [--runs N] [FILE...]
"""

import argparse
import os
import shutil
import statistics
import sys

from benchlib import build_coldstart, ci95, ensure_installed, timed

DEFAULT_FILES = {
    "/usr/lib/firefox-esr/libxul.so": "firefox-esr",
    "/usr/lib/chromium/chromium": "chromium",
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()

    files = {f: None for f in args.files} if args.files else DEFAULT_FILES
    ensure_installed(files)
    coldstart = build_coldstart()
    readelf = shutil.which("readelf") or sys.exit("readelf not found (apt-get install binutils)")

    kernel = os.uname().release
    print(f"{args.runs} interleaved runs per command after one warm-up; kernel {kernel}; "
          f"{os.cpu_count()} CPUs; files warm in the page cache\n")
    print("| file | size | coldstart inspect --json: median (mean ± 95% CI) "
          "| readelf -W -d -r -s: median (mean ± 95% CI) | ratio of medians |")
    print("|---|---:|---:|---:|---:|")
    slower = []
    for path in files:
        ours_cmd = [coldstart, "inspect", "--json", path]
        theirs_cmd = [readelf, "-W", "-d", "-r", "-s", path]
        timed(ours_cmd)
        timed(theirs_cmd)
        ours, theirs = [], []
        for _ in range(args.runs):
            ours.append(timed(ours_cmd))
            theirs.append(timed(theirs_cmd))
        m_ours, m_theirs = statistics.median(ours), statistics.median(theirs)
        size_mb = os.path.getsize(path) / 1e6
        print(f"| {path} | {size_mb:.0f} MB "
              f"| {m_ours * 1e3:.1f} ms ({statistics.mean(ours) * 1e3:.1f} ± {ci95(ours) * 1e3:.1f}) "
              f"| {m_theirs * 1e3:.1f} ms ({statistics.mean(theirs) * 1e3:.1f} ± {ci95(theirs) * 1e3:.1f}) "
              f"| {m_ours / m_theirs:.3f} |")
        if m_ours >= m_theirs:
            slower.append(path)
    if slower:
        print(f"\ncoldstart was not faster on: {', '.join(slower)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
