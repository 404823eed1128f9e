#!/usr/bin/env python3
"""Prefetch plans against the plain cold start and the peers, on Firefox ESR,
LibreOffice Writer and Chromium (BENCHMARKS.md's scenarios).

For each program: three cold traces with readahead off (`coldstart trace
--read-ahead-kb 0`, the exact pages each start demands), a plan compiled from
them (`coldstart plan`), then one `coldstart bench` with the cache warm and
cold, interleaved round by round, for three commands: the program itself,
the program under `coldstart-run --method whole-file` (readahead of every
planned file whole: the peer), and under `coldstart-run` with the plan
(coldstart-run is `coldstart run` as the small wrapper binary). So
each program gets six variants; the ones that matter are warm, cold, cold
with whole-file prefetch and cold with the plan (warm with the plan shows
what the plan costs when nothing needs reading).

Prints one Markdown table per program and a summary: the cold-with-plan
median over the warm median (target at most 1.10) and the bytes read from
disk with the plan over the bytes the start touched (target at most 1.2).
Exits 1 when a target is missed. Needs root; installs the three packages
with apt-get when missing and builds coldstart in release mode.

    sudo bench/prefetch_apps.py [--runs N] [--traces N] [--only NAME] [--keep DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from benchlib import build_coldstart, ensure_installed

MAX_PLAN_OVER_WARM = 1.10
MAX_READ_OVER_TOUCHED = 1.2


def programs(work):
    """name -> (argv, ready-regex or None, packages to install)."""
    ff_profile = os.path.join(work, "firefox-profile")
    chrome_dir = os.path.join(work, "chromium-data")
    text = os.path.join(work, "letter.txt")
    out_dir = os.path.join(work, "pdf")
    return {
        "firefox": ([
            "/usr/bin/firefox-esr", "--headless", "--no-remote", "--profile", ff_profile,
            "--screenshot", os.path.join(work, "shot.png"), "about:blank"],
            {"/usr/bin/firefox-esr": "firefox-esr"}, [ff_profile]),
        "libreoffice": ([
            "/usr/bin/soffice", "--headless", "--convert-to", "pdf", "--outdir", out_dir, text],
            {"/usr/bin/soffice": "libreoffice-writer-nogui"}, [out_dir]),
        "chromium": ([
            "/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--no-first-run",
            f"--user-data-dir={chrome_dir}", "--dump-dom", "about:blank"],
            {"/usr/bin/chromium": "chromium"}, [chrome_dir]),
    }


def run(argv, **kwargs):
    return subprocess.run(argv, check=True, **kwargs)


def bench_program(coldstart, work, name, argv, runs, traces):
    db = os.path.join(work, f"{name}.db")
    plan = os.path.join(work, f"{name}.plan")
    if os.path.exists(db):
        os.remove(db)
    # The first start of a fresh profile creates it: not a start to measure.
    run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(traces):
        run([coldstart, "trace", "--as-root", "--json", "--read-ahead-kb", "0", "-o", db,
             "--", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = json.loads(run([coldstart, "report", db, "--json", "--no-attribution"],
                            stdout=subprocess.PIPE, text=True).stdout)
    touched = report["totals"]["bytes_touched"]
    run([coldstart, "plan", db, "-o", plan], stderr=subprocess.DEVNULL)
    quoted = " ".join(f"'{a}'" for a in argv)
    out_json = os.path.join(work, f"{name}-bench.json")
    out_md = os.path.join(work, f"{name}-bench.md")
    # The small wrapper a distribution would install in front of the program.
    wrapper = os.path.join(os.path.dirname(coldstart), "coldstart-run")
    run([coldstart, "bench", "--as-root", "--cache", "warm,cold", "-n", str(runs),
         "--name", name,
         "--vs", f"{wrapper} --method whole-file --plan {plan} -- {quoted}",
         "--name", f"{name} + whole files",
         "--vs", f"{wrapper} --plan {plan} -- {quoted}",
         "--name", f"{name} + plan",
         "--json", out_json, "--markdown", out_md, "--", *argv])
    with open(out_json) as f:
        result = json.load(f)
    with open(out_md) as f:
        table = f.read()
    by = {v["name"]: v for v in result["variants"]}
    warm = by[f"{name} (warm)"]["wall_ms"]["median"]
    with_plan = by[f"{name} + plan (cold)"]
    return {
        "name": name,
        "table": table,
        "touched_bytes": touched,
        "warm_ms": warm,
        "cold_ms": by[f"{name} (cold)"]["wall_ms"]["median"],
        "plan_ms": with_plan["wall_ms"]["median"],
        "plan_ratio": with_plan["ratio"],
        "plan_read_bytes": with_plan["read_bytes_median"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--traces", type=int, default=3)
    parser.add_argument("--only", action="append", help="firefox, libreoffice or chromium")
    parser.add_argument("--keep", help="directory to keep profiles, plans and results in")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): cold starts drop the page cache")
    work = args.keep or tempfile.mkdtemp(prefix="coldstart-prefetch-")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "letter.txt"), "w") as f:
        f.write("Dear reader,\n\nthis letter becomes a PDF.\n" * 40)
    table = programs(work)
    wanted = args.only or list(table)
    ensure_installed({path: pkg for name in wanted for path, pkg in table[name][1].items()})
    coldstart = build_coldstart()
    results = []
    for name in wanted:
        argv, _, dirs = table[name]
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        print(f"== {name}", file=sys.stderr)
        results.append(bench_program(coldstart, work, name, argv, args.runs, args.traces))
    failures = []
    for r in results:
        print(f"### {r['name']}\n\n{r['table']}")
    print("| program | warm ms | cold ms | cold + plan ms | plan / warm | read with plan | touched | read / touched |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        ratio = r["plan_ms"] / r["warm_ms"]
        read_over = r["plan_read_bytes"] / r["touched_bytes"] if r["touched_bytes"] else float("nan")
        print(f"| {r['name']} | {r['warm_ms']:.0f} | {r['cold_ms']:.0f} | {r['plan_ms']:.0f} | "
              f"{ratio:.2f} | {r['plan_read_bytes'] / 2**20:.1f} MiB | "
              f"{r['touched_bytes'] / 2**20:.1f} MiB | {read_over:.2f} |")
        if ratio > MAX_PLAN_OVER_WARM:
            failures.append(f"{r['name']}: cold with the plan is {ratio:.2f} x warm")
        if read_over > MAX_READ_OVER_TOUCHED:
            failures.append(f"{r['name']}: reads {read_over:.2f} x what it touches")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print(f"MISSED: {f}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
