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
import subprocess
import sys
import time

DEFAULT_FILES = {
    "/usr/lib/firefox-esr/libxul.so": "firefox-esr",
    "/usr/lib/chromium/chromium": "chromium",
}

# Two-sided 95% Student t quantiles by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365,
       8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160,
       14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
       20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000}


def t95(df):
    if df in T95:
        return T95[df]
    known = sorted(k for k in T95 if k <= df)
    return T95[known[-1]] if known else T95[1]


def ci95(samples):
    if len(samples) < 2:
        return float("nan")
    return t95(len(samples) - 1) * statistics.stdev(samples) / len(samples) ** 0.5


def ensure_installed(files):
    missing = sorted({pkg for path, pkg in files.items() if pkg and not os.path.exists(path)})
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"missing {', '.join(missing)}: run as root so apt-get can install them")
    print(f"installing {' '.join(missing)} ...", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def timed(argv):
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()

    files = {f: None for f in args.files} if args.files else DEFAULT_FILES
    ensure_installed(files)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "coldstart"], check=True, cwd=root)
    coldstart = os.path.join(root, "target", "release", "coldstart")
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
