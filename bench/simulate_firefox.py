#!/usr/bin/env python3
"""How close `coldstart simulate` comes to the kernel, on Firefox ESR
(BENCHMARKS.md's scenario): Firefox is traced cold `--rounds` times at
read_ahead_kb 0, 128 and 8192 (interleaved), and every readahead-off run is
replayed against every run at 128 and 8192. Prints, per pair, predicted
and measured pages read for libxul.so and for every file that was cold when
the start began. Target: libxul.so within 10%.

Needs root (tracing changes the device's read_ahead_kb for each run and
restores it). Installs firefox-esr with apt-get when missing and builds
coldstart in release mode. Exits 1 when a pair misses the target.

    sudo bench/simulate_firefox.py [--rounds N] [--keep DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import build_coldstart, ensure_installed, firefox_argv  # noqa: E402

LIBXUL = "/usr/lib/firefox-esr/libxul.so"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", help="keep the profile and Firefox's profile here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("tracing needs root: sudo bench/simulate_firefox.py")
    ensure_installed({"/usr/bin/firefox-esr": "firefox-esr"})
    coldstart = build_coldstart()
    work = args.keep or tempfile.mkdtemp(prefix="coldstart-simulate-")
    os.makedirs(work, exist_ok=True)
    db = os.path.join(work, "ff.db")
    firefox = firefox_argv(work)
    # The first start creates Firefox's profile; it is not measured.
    subprocess.run(firefox, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = {0: [], 128: [], 8192: []}
    for _ in range(args.rounds):
        for kb in runs:
            out = subprocess.run([coldstart, "trace", "--json", "--read-ahead-kb", str(kb),
                                  "-o", db, "--", *firefox], check=True,
                                 capture_output=True, text=True).stdout
            runs[kb].append(json.loads(out)["run"])
    print("| replayed run | against run (read_ahead_kb) | libxul.so predicted / measured pages "
          "| error | cold files predicted / measured pages | error |")
    print("|---|---|---|---|---|---|")
    missed = False
    for source in runs[0]:
        for kb in (128, 8192):
            for against in runs[kb]:
                report = json.loads(subprocess.run(
                    [coldstart, "simulate", db, "--run", str(source), "--against", str(against),
                     "--json"], check=True, capture_output=True, text=True).stdout)
                xul = next(f for f in report["files"] if f["path"] == LIBXUL)
                predicted, measured = xul["pages_read"], xul["measured"]["pages_read"]
                error = (predicted - measured) / measured
                cold = report["totals"]["cold"]
                cold_error = (cold["pages_read"] - cold["measured_pages_read"]) / cold["measured_pages_read"]
                missed |= abs(error) > 0.10
                print(f"| {source} | {against} ({kb}) | {predicted:,} / {measured:,} | "
                      f"{error:+.1%} | {cold['pages_read']:,} / {cold['measured_pages_read']:,} | "
                      f"{cold_error:+.1%} |")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
