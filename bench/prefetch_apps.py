#!/usr/bin/env python3
"""Prefetch plans against the plain cold start, on Firefox ESR, LibreOffice
Writer and Chromium (BENCHMARKS.md's scenarios), at the kernel's default
read_ahead_kb 128 and at the device's own setting.

For each program: three cold traces with readahead off (`coldstart trace
--read-ahead-kb 0`, the exact pages each start demands) and the *seed* plan
compiled from them (`coldstart plan`). Then, at each read_ahead_kb (set on
every device for the block and restored on every way out):

- `coldstart plan --refine` learns from cold starts through coldstart-run
  with the plan at that setting (misses added as the pages the program
  demanded, until they stop shrinking); its JSON gives the miss accounting
  of each start: what the prefetcher read, what the program still read
  itself and why;
- one `coldstart bench`, warm and cold interleaved round by round, of the
  program, the program under coldstart-run with the seed plan, under
  coldstart-run with the refined plan (also with a head start, and with
  `--no-read-around`);
- one traced start with the refined plan and `--no-read-around`, for its
  miss accounting.

Prints per program and setting: medians, the share of the cold-warm gap
each plan closes ((cold - cold with plan) / (cold - warm)), with its 95%
bootstrap interval (the bench's rounds resampled whole), the bytes read
with the refined plan over the bytes the start touched, and the program's
own reads over the plan's bytes (from the refine loop's accounting of the
start its plan was written from), and the part of those the program asked
the kernel for itself (readahead(2), WILLNEED); then the same for the
refined plan served with `--no-read-around`. Targets (issue 15): gap closed
at least 80%, read / touched at most 1.2, the program's own reads under 5%
of the plan. Prints every target each way of serving misses; exits 1 when
a program and setting meets all three in neither. Needs root; installs the three
packages with apt-get when missing and builds coldstart in release mode.

With --on-btrfs each program runs from a copy of its installation on a
btrfs subvolume (a loop-mounted image made in the work directory), where
the page-cache tracepoints name files by a superblock device stat() never
reports: what Fedora and openSUSE users run programs from. The rest (the
system libraries) stays where it is.

    sudo bench/prefetch_apps.py [--runs N] [--traces N] [--iterations N]
                                [--read-ahead-kb KB ...] [--only NAME] [--keep DIR]
                                [--on-btrfs]
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from benchlib import (ReadAhead, build_coldstart, ensure_installed, firefox_profile,
                      gap_closed_ci95, read_ahead_settings)

MIN_GAP_CLOSED = 0.80
MAX_READ_OVER_TOUCHED = 1.2
MAX_OWN_OVER_PLAN = 0.05
# The head start measured as a fourth variant: the program starts once the
# prefetcher has requested this much of the refined plan.
LEAD_KB = 16384


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


# name -> (installation directory, its program inside it, relative to its
# parent): what --on-btrfs copies and starts.
INSTALLATIONS = {
    "firefox": ("/usr/lib/firefox-esr", "firefox-esr/firefox-esr"),
    "libreoffice": ("/usr/lib/libreoffice", "libreoffice/program/soffice"),
    "chromium": ("/usr/lib/chromium", "chromium/chromium"),
}


class OnBtrfs:
    """A copy of a program's installation on a btrfs subvolume of a
    loop-mounted image in `work`, for a `with` block: unmounted and
    removed on every way out."""

    def __init__(self, work, name):
        self.installation, self.program = INSTALLATIONS[name]
        self.image = os.path.join(work, f"{name}-btrfs.img")
        self.mount = os.path.join(work, f"{name}-btrfs")
        self.mounted = False

    def __enter__(self):
        used = int(subprocess.run(["du", "-sb", self.installation], check=True,
                                  stdout=subprocess.PIPE, text=True).stdout.split()[0])
        with open(self.image, "wb") as f:
            f.truncate(used * 3 // 2 + (512 << 20))
        run(["mkfs.btrfs", "-q", "-f", self.image], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.makedirs(self.mount, exist_ok=True)
        run(["mount", "-o", "loop", self.image, self.mount])
        self.mounted = True
        os.chmod(self.mount, 0o755)
        run(["btrfs", "subvolume", "create", os.path.join(self.mount, "apps")],
            stdout=subprocess.DEVNULL)
        os.chmod(os.path.join(self.mount, "apps"), 0o755)
        run(["cp", "-a", self.installation, os.path.join(self.mount, "apps")])
        return self

    def argv(self, argv):
        """`argv` starting the copy instead of the installed program."""
        return [os.path.join(self.mount, "apps", self.program), *argv[1:]]

    def __exit__(self, *exc):
        if self.mounted:
            subprocess.run(["umount", self.mount], check=False)
        for path in [self.image]:
            if os.path.exists(path):
                os.remove(path)
        return False


def remove_profile(db):
    """Removes a profile database and its SQLite journal files, if any."""
    for path in [db, db + "-wal", db + "-shm"]:
        if os.path.exists(path):
            os.remove(path)


def seed(coldstart, work, name, argv, traces):
    """Readahead-off traces into a fresh profile; the bytes they touched."""
    db = os.path.join(work, f"{name}.db")
    remove_profile(db)
    # The first start of a fresh profile creates it: not a start to measure.
    run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(traces):
        run([coldstart, "trace", "--as-root", "--json", "--read-ahead-kb", "0", "-o", db,
             "--", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = json.loads(run([coldstart, "report", db, "--json", "--no-attribution"],
                            stdout=subprocess.PIPE, text=True).stdout)
    plan = os.path.join(work, f"{name}.seed.plan")
    run([coldstart, "plan", db, "-o", plan], stderr=subprocess.DEVNULL)
    return db, plan, report["totals"]["bytes_touched"]


def measure(coldstart, work, name, argv, db, seed_plan, ra, runs, iterations):
    """Refine at this read_ahead_kb, then bench plain, seed and refined."""
    label = f"{name}-ra{ra}"
    refined = os.path.join(work, f"{label}.plan")
    result = run([coldstart, "plan", db, "-o", refined, "--refine", "--as-root", "--json",
                  "--iterations", str(iterations), "--", *argv],
                 stdout=subprocess.PIPE, text=True)
    refine = json.loads(result.stdout)
    best = refine["iterations"][refine["best"]]
    first = refine["iterations"][0]
    wrapper = os.path.join(os.path.dirname(coldstart), "coldstart-run")
    quoted = " ".join(f"'{a}'" for a in argv)
    out_json = os.path.join(work, f"{label}-bench.json")
    out_md = os.path.join(work, f"{label}-bench.md")
    floor = predict_floor(coldstart, work, label, argv, db, refined)
    run([coldstart, "bench", "--as-root", "--cache", "warm,cold", "-n", str(runs),
         "--name", name,
         "--vs", f"{wrapper} --plan {seed_plan} -- {quoted}", "--name", f"{name} + seed plan",
         "--vs", f"{wrapper} --plan {refined} -- {quoted}", "--name", f"{name} + refined plan",
         "--vs", f"{wrapper} --lead-kb {LEAD_KB} --plan {refined} -- {quoted}",
         "--name", f"{name} + refined plan, lead",
         "--vs", f"{wrapper} --no-read-around --plan {refined} -- {quoted}",
         "--name", f"{name} + refined plan, no read-around",
         "--json", out_json, "--markdown", out_md, "--", *argv])
    with open(out_json) as f:
        bench = json.load(f)
    with open(out_md) as f:
        table = f.read()
    by = {v["name"]: v for v in bench["variants"]}
    no_read_around = traced_misses(coldstart, os.path.join(work, f"{label}.no-read-around.db"),
                                   argv, [wrapper, "--no-read-around", "--plan", refined])
    return {
        "gap_ci": {which: gap_ci(bench, name, variant) for which, variant in [
            ("seed", f"{name} + seed plan (cold)"),
            ("refined", f"{name} + refined plan (cold)"),
            ("lead", f"{name} + refined plan, lead (cold)"),
            ("no_read_around", f"{name} + refined plan, no read-around (cold)")]},
        "table": table,
        "warm_ms": by[f"{name} (warm)"]["wall_ms"]["median"],
        "cold_ms": by[f"{name} (cold)"]["wall_ms"]["median"],
        "seed_ms": by[f"{name} + seed plan (cold)"]["wall_ms"]["median"],
        "refined_ms": by[f"{name} + refined plan (cold)"]["wall_ms"]["median"],
        "refined_read": by[f"{name} + refined plan (cold)"]["read_bytes_median"],
        "lead_ms": by[f"{name} + refined plan, lead (cold)"]["wall_ms"]["median"],
        "lead_read": by[f"{name} + refined plan, lead (cold)"]["read_bytes_median"],
        "no_read_around_ms": by[f"{name} + refined plan, no read-around (cold)"]["wall_ms"]["median"],
        "no_read_around_read": by[f"{name} + refined plan, no read-around (cold)"]["read_bytes_median"],
        "no_read_around_misses": no_read_around,
        "floor": floor,
        "seed_read": by[f"{name} + seed plan (cold)"]["read_bytes_median"],
        "seed_misses": first["misses"],
        "refined_misses": best["misses"],
        "refine_starts": len(refine["iterations"]),
        "refine_stopped": refine["stopped"],
    }


def traced_misses(coldstart, db, argv, served_by):
    """The miss accounting of one cold start traced into a fresh profile
    `db` through `served_by` (coldstart-run and its flags) at the
    read_ahead_kb in force."""
    remove_profile(db)
    run([coldstart, "trace", "--as-root", "-o", db, "--", *served_by, "--", *argv],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = json.loads(run([coldstart, "report", db, "--json", "--no-attribution"],
                            stdout=subprocess.PIPE, text=True).stdout)
    return report["misses"]


def predict_floor(coldstart, work, label, argv, db, plan):
    """The floor of the plan (`report --bandwidth-mb-s --request-us`): the
    device calibrated on the plan's largest file, a warm traced start for
    when each extent is first used."""
    scratch = os.path.join(work, f"{label}.calibration.plan")
    summary = json.loads(run([coldstart, "plan", db, "--calibrate", "--json", "-o", scratch],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout)
    device = summary["calibration"]
    # Its own profile: a warm run must never seed a plan.
    warm_db = os.path.join(work, f"{label}.warm.db")
    warm = json.loads(run([coldstart, "trace", "--as-root", "--json", "--cache", "warm", "-o",
                           warm_db, "--", *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True).stdout)
    report = json.loads(run([coldstart, "report", warm_db, "--run", str(warm["run"]), "--plan", plan,
                             "--no-attribution", "--json",
                             "--bandwidth-mb-s", str(device["bandwidth_mb_s"]),
                             "--request-us", str(device["request_us"])],
                            stdout=subprocess.PIPE, text=True).stdout)
    floor = report["floor"]
    floor["bandwidth_mb_s"] = device["bandwidth_mb_s"]
    floor["request_us"] = device["request_us"]
    return floor


def gap_ci(bench, name, variant):
    """The bootstrap interval of the gap `variant` closes, over the bench's
    rounds in which the warm, the cold and that variant's run all ran."""
    index = {v["name"]: i for i, v in enumerate(bench["variants"])}
    wanted = [index[f"{name} (warm)"], index[f"{name} (cold)"], index[variant]]
    times = {}
    for run in bench["runs"]:
        if run["ok"]:
            times[(run["round"], run["variant"])] = run["wall_ms"]
    rounds = sorted({r for r, _ in times})
    paired = [[times[(r, v)] for v in wanted] for r in rounds
              if all((r, v) in times for v in wanted)]
    return gap_closed_ci95(paired)


def percent_with_ci(value, ci):
    if ci is None:
        return f"{value:.0%}"
    return f"{value:.0%} [{ci[0]:.0%}, {ci[1]:.0%}]"


def gap(cold, warm, with_plan):
    return (cold - with_plan) / (cold - warm) if cold > warm else float("nan")


def own_over_plan(misses):
    plan = misses["plan_bytes"]
    return misses["program"]["bytes"] / plan if plan else float("nan")


def asked_over_plan(misses):
    """The part of the program's own reads it asked the kernel for itself
    (readahead(2), fadvise or madvise WILLNEED): no plan stops those."""
    plan = misses["plan_bytes"]
    asked = sum(c["bytes"] for r, c in misses["by_reason"] if r == "asked")
    return asked / plan if plan else float("nan")


def reasons(misses):
    mib = 2 ** 20
    return ", ".join(f"{r} {c['bytes'] / mib:.1f}" for r, c in misses["by_reason"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    app_arguments(parser)
    parser.add_argument("--on-btrfs", action="store_true",
                        help="run each program from a copy of its installation on a btrfs subvolume")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): cold starts drop the page cache")
    # A kill must unwind too, so that every read_ahead_kb set is restored.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work, table, wanted, coldstart, settings, device = prepare(args, "coldstart-prefetch-")
    results = []
    for name in wanted:
        argv = ready_argv(table, name)
        with contextlib.ExitStack() as stack:
            if args.on_btrfs:
                argv = stack.enter_context(OnBtrfs(work, name)).argv(argv)
                print(f"== {name}: started from {argv[0]}", file=sys.stderr)
            print(f"== {name}: seed traces", file=sys.stderr)
            db, seed_plan, touched = seed(coldstart, work, name, argv, args.traces)
            for ra in settings:
                print(f"== {name} at read_ahead_kb {ra}", file=sys.stderr)
                with ReadAhead(None if str(ra) == device else ra):
                    r = measure(coldstart, work, name, argv, db, seed_plan, ra, args.runs,
                                args.iterations)
                r.update(name=f"{name} (btrfs)" if args.on_btrfs else name, ra=ra,
                         touched=touched)
                results.append(r)
    failures = []
    mib = 2 ** 20
    for r in results:
        print(f"### {r['name']}, read_ahead_kb {r['ra']}\n\n{r['table']}")
        for which, m in [("seed plan", r["seed_misses"]), ("refined plan", r["refined_misses"]),
                         ("refined plan, no read-around", r["no_read_around_misses"])]:
            print(f"- {which}, traced start: plan {m['plan_bytes'] / mib:.1f} MiB, prefetcher read "
                  f"{m['prefetcher']['bytes'] / mib:.1f} MiB, program read "
                  f"{m['program']['bytes'] / mib:.1f} MiB itself ({reasons(m)} MiB; "
                  f"{m['program']['demanded_pages']} pages demanded)")
        print(f"- refine: {r['refine_starts']} starts, stopped: {r['refine_stopped']}")
        f = r["floor"]
        print(f"- floor: device {f['bandwidth_mb_s']:.0f} MB/s, {f['request_us']:.0f} us a request; a perfect "
              f"prefetch would hold the start back {f['held_back_ns'] / 1e6:.1f} ms, the plan's own order "
              f"{f['held_back_plan_order_ns'] / 1e6:.1f} ms (demanded pages only: "
              f"{f['demanded']['held_back_ns'] / 1e6:.1f} and "
              f"{f['demanded']['held_back_plan_order_ns'] / 1e6:.1f} ms); the whole plan is read by "
              f"{f['plan_read_ns'] / 1e6:.1f} ms\n")
    print(f"device read_ahead_kb {device}; kernel {os.uname().release}; {args.runs} interleaved runs, "
          "medians; gap closed with its 95% bootstrap interval over the rounds\n")
    print("| program | read_ahead_kb | warm ms | cold ms | seed plan ms | refined plan ms | refined, lead ms | "
          "gap closed: seed | refined | refined, lead | floor ms | read with refined plan | touched | "
          "read / touched | program's own reads / plan | of which it asked for |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    missed = {}
    for r in results:
        g_seed = gap(r["cold_ms"], r["warm_ms"], r["seed_ms"])
        g_refined = gap(r["cold_ms"], r["warm_ms"], r["refined_ms"])
        g_lead = gap(r["cold_ms"], r["warm_ms"], r["lead_ms"])
        # The floor: the warm median, held back by what a perfect prefetch
        # of the plan on the calibrated device could not deliver in time.
        floor_ms = r["warm_ms"] + r["floor"]["held_back_ns"] / 1e6
        read_over = r["refined_read"] / r["touched"] if r["touched"] else float("nan")
        own = own_over_plan(r["refined_misses"])
        print(f"| {r['name']} | {r['ra']} | {r['warm_ms']:.0f} | {r['cold_ms']:.0f} | {r['seed_ms']:.0f} | "
              f"{r['refined_ms']:.0f} | {r['lead_ms']:.0f} | "
              f"{percent_with_ci(g_seed, r['gap_ci']['seed'])} | "
              f"{percent_with_ci(g_refined, r['gap_ci']['refined'])} | "
              f"{percent_with_ci(g_lead, r['gap_ci']['lead'])} | "
              f"{floor_ms:.0f} | {r['refined_read'] / mib:.1f} MiB | "
              f"{r['touched'] / mib:.1f} MiB | {read_over:.2f} | {own:.1%} | "
              f"{asked_over_plan(r['refined_misses']):.1%} |")
        where = f"{r['name']} at read_ahead_kb {r['ra']}"
        missed[where] = [missed_targets(f"{where}, refined plan", max(g_refined, g_lead),
                                        read_over, own)]
    print("\nThe refined plan served with --no-read-around (same bench; the program's own reads "
          "from one more traced start):\n")
    print("| program | read_ahead_kb | refined, no read-around ms | gap closed | read | "
          "read / touched | program's own reads / plan | of which it asked for |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        g = gap(r["cold_ms"], r["warm_ms"], r["no_read_around_ms"])
        read_over = r["no_read_around_read"] / r["touched"] if r["touched"] else float("nan")
        m = r["no_read_around_misses"]
        own = own_over_plan(m)
        print(f"| {r['name']} | {r['ra']} | {r['no_read_around_ms']:.0f} | "
              f"{percent_with_ci(g, r['gap_ci']['no_read_around'])} | "
              f"{r['no_read_around_read'] / mib:.1f} MiB | {read_over:.2f} | {own:.1%} | "
              f"{asked_over_plan(m):.1%} |")
        where = f"{r['name']} at read_ahead_kb {r['ra']}"
        missed[where].append(missed_targets(f"{where}, refined plan, no read-around", g,
                                            read_over, own))
    for where, ways in missed.items():
        for way in ways:
            failures.extend(way)
        if all(ways):
            failures.append(f"{where}: no way of serving the plan meets every target")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print(f"MISSED: {f}", file=sys.stderr)
    sys.exit(1 if any(all(ways) for ways in missed.values()) else 0)


def prepare(args, prefix):
    """The work directory (with the letter LibreOffice converts), the
    programs and those wanted, coldstart built, and the read_ahead_kb
    settings with the device's own."""
    work = args.keep or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "letter.txt"), "w") as f:
        f.write("Dear reader,\n\nthis letter becomes a PDF.\n" * 40)
    table = programs(work)
    wanted = args.only or list(table)
    ensure_installed({path: pkg for name in wanted for path, pkg in table[name][1].items()})
    coldstart = build_coldstart()
    settings, device = read_ahead_settings(args.read_ahead_kb)
    return work, table, wanted, coldstart, settings, device


def ready_argv(table, name):
    """The command of program `name`, its directories made (and Firefox's
    profile with its preferences)."""
    argv, _, dirs = table[name]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    if name == "firefox":
        firefox_profile(dirs[0])
    return argv


def app_arguments(parser):
    """The flags every benchmark of the three programs takes."""
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--traces", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--read-ahead-kb", type=int, action="append",
                        help="settings to measure at [default: 128 and the device's own]")
    parser.add_argument("--only", action="append", help="firefox, libreoffice or chromium")
    parser.add_argument("--keep", help="directory to keep profiles, plans and results in")


def missed_targets(where, gap_closed, read_over, own):
    """The targets one way of serving a plan misses, said."""
    missed = []
    if not gap_closed >= MIN_GAP_CLOSED:
        missed.append(f"{where}: closes {gap_closed:.0%} of the gap")
    if not read_over <= MAX_READ_OVER_TOUCHED:
        missed.append(f"{where}: reads {read_over:.2f} x what it touches")
    if not own < MAX_OWN_OVER_PLAN:
        missed.append(f"{where}: the program read {own:.1%} of the plan's bytes itself")
    return missed


if __name__ == "__main__":
    main()
