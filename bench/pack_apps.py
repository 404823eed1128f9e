#!/usr/bin/env python3
"""`coldstart pack` on Debian's Chromium and LibreOffice's program directory
(issue 16): what packing the relative relocations as DT_RELR saves in file
bytes, in bytes a cold start touches and in the prefetch plan compiled for it,
and what it changes in cold and warm start time.

- Chromium: /usr/lib/chromium/chromium is packed into a work directory that
  holds symlinks to every other entry of /usr/lib/chromium, and runs from
  there (its renderers re-exec /proc/self/exe, so they run packed too).
- LibreOffice: /usr/lib/libreoffice/program is copied (cp -a) and every ELF
  file of the original directory is packed into the copy (files refused as
  not candidates stay as copied). A copied LibreOffice tree does not start,
  so each run binds the copy over /usr/lib/libreoffice/program in a private
  mount namespace (`unshare -m`); the original runs the same way with its
  own directory bound onto itself, so both pay the same wrapper.

The work directory must be on the filesystem that holds /usr/lib: a packed
copy on tmpfs would never be read from the device.

First the behaviour check, which stops the script if packed and original
differ: Chromium's `--dump-dom` of a small page whose script writes into the
DOM, LibreOffice's PDF of a text file (creation date, document ID and
checksum removed). Then per variant: cold traces with readahead off
(`coldstart trace --read-ahead-kb 0`, pages read are the pages demanded),
their `coldstart report` totals and the rows of the packed files alone, the
prefetch plan compiled from them (`coldstart plan`). Then at read_ahead_kb
128 and at the device's own setting (set on every device for the block,
restored on every way out) one `coldstart bench --cache warm,cold` of the
original against the packed variant, interleaved run by run.

Prints a Markdown table per program (original, packed, packed - original);
times are medians with the 95% CI of the mean that bench gives, the
difference of medians with a bootstrap 95% interval. Targets (issue 16) for
Chromium: the file at least 24 MB smaller and the cold start touching at
least 20 MB less; exits 1 when one is missed. Needs root; installs chromium
and libreoffice-writer-nogui with apt-get when missing and builds coldstart
in release mode unless --coldstart names a binary.

    sudo bench/pack_apps.py [--runs N] [--traces N] [--read-ahead-kb KB ...]
                            [--only NAME] [--keep DIR] [--json OUT] [--coldstart BIN]
"""

import argparse
import collections
import json
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

from benchlib import ReadAhead, build_coldstart, ensure_installed, read_ahead_of

# Issue 16's targets for Chromium, in bytes (MB = 1e6).
MIN_FILE_SAVED = 24e6
MIN_TOUCHED_SAVED = 20e6

CHROMIUM_DIR = "/usr/lib/chromium"
LIBREOFFICE_PROGRAM = "/usr/lib/libreoffice/program"

# A page whose DOM only exists once its script ran: dump-dom prints what the
# JavaScript engine computed, not just the parsed file.
PAGE = """<!DOCTYPE html>
<html><head><title>pack check</title></head>
<body><ul id="out"></ul>
<script>
const out = document.getElementById("out");
let a = 1, b = 1;
for (let i = 0; i < 30; i++) {
  const li = document.createElement("li");
  li.textContent = `${i}: ${a} ${(a / 7).toFixed(6)} ${[3, 1, 2].sort().join("")} ${Math.sqrt(a).toPrecision(8)}`;
  out.appendChild(li);
  [a, b] = [b, a + b];
}
document.title = "written by script: " + out.children.length + " rows";
</script></body></html>
"""

# What differs between two PDFs of the same document made at different
# times: the creation date, the trailer's document ID (two hex strings, the
# array may span lines) and the checksum.
PDF_VOLATILE = [
    re.compile(rb"/CreationDate\s*\([^)]*\)"),
    re.compile(rb"/ID\s*\[\s*<[0-9A-Fa-f]*>\s*<[0-9A-Fa-f]*>\s*\]"),
    re.compile(rb"/DocChecksum\s*/[0-9A-Fa-f]+"),
]


def fail(message):
    print(f"FAILED: {message}", file=sys.stderr)
    sys.exit(1)


# The command running now. A SIGTERM or Ctrl-C is passed on to it and the
# script stops once it has ended: coldstart cleans up after itself (tracefs
# instance, read_ahead_kb) only when it is not killed outright, which is
# what subprocess.run does to its child when an exception interrupts it.
CHILD = None
STOPPED_BY = []


def on_stop_signal(signum, _frame):
    STOPPED_BY.append(signum)
    if CHILD is not None:
        CHILD.send_signal(signal.SIGTERM)
    else:
        sys.exit(128 + signum)


def spawn(argv, stdout=subprocess.PIPE):
    """Runs argv to its end; its exit status, output and error output."""
    global CHILD
    with subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE) as child:
        CHILD = child
        try:
            out, err = child.communicate()
        finally:
            CHILD = None
    if STOPPED_BY:
        sys.exit(128 + STOPPED_BY[0])
    return child.returncode, out, err


def run(argv, stdout=subprocess.PIPE):
    """Runs argv; on failure prints the end of its error output and stops.
    Its output (bytes), unless sent elsewhere."""
    status, out, err = spawn(argv, stdout)
    if status != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-15:]
        fail(f"{shlex.join(argv)} exited {status}:\n" + "\n".join(tail))
    return out


def run_json(argv):
    return json.loads(run(argv))


def elf_files(directory):
    """Regular ELF files directly in `directory`, by name."""
    names = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    names.append(entry.name)
    return names


class Chromium:
    name = "chromium"
    packages = {"/usr/lib/chromium/chromium": "chromium"}

    def __init__(self, work):
        self.work = work
        self.packed_dir = os.path.join(work, "chromium")
        self.data = os.path.join(work, "chromium-data")
        self.page = os.path.join(work, "page.html")

    def pack(self, coldstart):
        """Symlinks to /usr/lib/chromium's entries, the packed binary among them."""
        os.makedirs(self.packed_dir)
        for entry in sorted(os.listdir(CHROMIUM_DIR)):
            if entry != "chromium":
                os.symlink(os.path.join(CHROMIUM_DIR, entry), os.path.join(self.packed_dir, entry))
        original = os.path.join(CHROMIUM_DIR, "chromium")
        packed = os.path.join(self.packed_dir, "chromium")
        report = run_json([coldstart, "pack", original, "-o", packed, "--json"])
        with open(self.page, "w") as f:
            f.write(PAGE)
        os.makedirs(self.data)
        return report, [(original, packed)]

    def argv(self, variant):
        binary = os.path.join(CHROMIUM_DIR if variant == "original" else self.packed_dir, "chromium")
        return [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                f"--user-data-dir={self.data}", "--dump-dom", f"file://{self.page}"]

    def output(self, variant):
        """The DOM after the page's script ran."""
        return run(self.argv(variant))


class LibreOffice:
    name = "libreoffice"
    packages = {"/usr/bin/soffice": "libreoffice-writer-nogui"}

    def __init__(self, work):
        self.work = work
        self.packed_dir = os.path.join(work, "libreoffice-program")
        self.profile = os.path.join(work, "libreoffice-profile")
        self.text = os.path.join(work, "letter.txt")

    def pack(self, coldstart):
        """A copy of the program directory with every ELF file that packs packed."""
        run(["cp", "-a", LIBREOFFICE_PROGRAM, self.packed_dir])
        inputs = [os.path.join(LIBREOFFICE_PROGRAM, n) for n in elf_files(LIBREOFFICE_PROGRAM)]
        # Exit 1 also when a file is refused for a reason other than "not a
        # candidate"; that file then stays as copied, which is what a user
        # would get too. The JSON says which and why.
        status, out, err = spawn([coldstart, "pack", *inputs, "--out-dir", self.packed_dir, "--json"])
        try:
            report = json.loads(out)
        except ValueError:
            fail(f"coldstart pack of {LIBREOFFICE_PROGRAM} printed no JSON (exit {status}): "
                 f"{err.decode(errors='replace')[-2000:]}")
        if not report["packed"]:
            fail(f"coldstart pack packed none of the {len(inputs)} ELF files of {LIBREOFFICE_PROGRAM}")
        with open(self.text, "w") as f:
            f.write("Dear reader,\n\nthis letter becomes a PDF, packed or not.\n" * 40)
        pairs = [(r["input"], os.path.join(self.packed_dir, os.path.basename(r["input"])))
                 for r in report["packed"]]
        return report, pairs

    def out_dir(self, variant):
        return os.path.join(self.work, f"pdf-{variant}")

    def argv(self, variant):
        program = LIBREOFFICE_PROGRAM if variant == "original" else self.packed_dir
        soffice = ["/usr/bin/soffice", f"-env:UserInstallation=file://{self.profile}", "--headless",
                   "--convert-to", "pdf", "--outdir", self.out_dir(variant), self.text]
        script = (f"mount --bind {shlex.quote(program)} {LIBREOFFICE_PROGRAM} && "
                  f"exec {shlex.join(soffice)}")
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]

    def output(self, variant):
        """The PDF, without what changes from one conversion to the next."""
        pdf = os.path.join(self.out_dir(variant), "letter.pdf")
        if os.path.exists(pdf):
            os.remove(pdf)
        run(self.argv(variant))
        with open(pdf, "rb") as f:
            data = f.read()
        for pattern in PDF_VOLATILE:
            data, found = pattern.subn(b"", data)
            if not found:
                fail(f"{pdf} has no {pattern.pattern!r}: the PDF check would compare the wrong thing")
        return data


def check_behaviour(program):
    """Packed and original must produce the same output; stops otherwise."""
    # The first start of a fresh profile creates it: not the one to compare.
    program.output("original")
    original = program.output("original")
    packed = program.output("packed")
    if original != packed:
        import difflib
        diff = difflib.unified_diff(original.decode(errors="replace").splitlines(),
                                    packed.decode(errors="replace").splitlines(),
                                    "original", "packed", lineterm="", n=1)
        fail(f"{program.name}: packed output differs from the original:\n"
             + "\n".join(list(diff)[:40]))
    print(f"{program.name}: packed output equals the original ({len(original)} bytes compared)",
          file=sys.stderr)
    return len(original)


def pack_summary(report, pairs):
    """File bytes before and after, by stat (the pack report as a cross-check)."""
    before = sum(os.stat(o).st_size for o, _ in pairs)
    after = sum(os.stat(p).st_size for _, p in pairs)
    reported = (sum(r["file_bytes_before"] for r in report["packed"]),
                sum(r["file_bytes_after"] for r in report["packed"]))
    if reported != (before, after):
        fail(f"coldstart pack reports {reported} file bytes before/after, stat says {(before, after)}")
    refused = collections.Counter(r["code"] for r in report["refused"])
    return {
        "files_packed": len(report["packed"]),
        "refused_by_code": dict(sorted(refused.items())),
        "relative_packed": sum(r["relative_packed"] for r in report["packed"]),
        "file_bytes": {"original": before, "packed": after},
        "compacted_bytes": sum(r["compacted_bytes"] for r in report["packed"]),
        "hole_bytes": sum(r["hole_bytes"] for r in report["packed"]),
        "loader_pages": {"original": sum(r["loader_pages_before"] for r in report["packed"]),
                         "packed": sum(r["loader_pages_after"] for r in report["packed"])},
    }


def trace_variants(coldstart, work, program, pairs, traces):
    """Readahead-off cold traces, interleaved; per variant the touched and
    read bytes of each run, of the whole start and of the packed files, and
    the plan compiled from its runs."""
    files = {"original": [os.stat(o) for o, _ in pairs], "packed": [os.stat(p) for _, p in pairs]}
    dbs = {v: os.path.join(work, f"{program.name}-{v}.db") for v in files}
    runs = {v: [] for v in files}
    for i in range(traces):
        for variant in files:
            print(f"== {program.name}: readahead-off trace {i + 1} of {variant}", file=sys.stderr)
            trace = run_json([coldstart, "trace", "--as-root", "--read-ahead-kb", "0", "--json",
                              "-o", dbs[variant], "--", *program.argv(variant)])
            report = run_json([coldstart, "report", dbs[variant], "--run", str(trace["run"]),
                               "--json", "--no-attribution"])
            runs[variant].append(touched_of(report, files[variant]))
    result = {}
    for variant, db in dbs.items():
        plan_path = os.path.join(work, f"{program.name}-{variant}.plan")
        plan = run_json([coldstart, "plan", db, "-o", plan_path, "--json"])
        paths = {p for r in runs[variant] for p in r["packed_paths"]}
        result[variant] = {
            "runs": runs[variant],
            "bytes_touched": statistics.median(r["bytes_touched"] for r in runs[variant]),
            "bytes_read": statistics.median(r["bytes_read"] for r in runs[variant]),
            "packed_files_bytes_touched": statistics.median(
                r["packed_files_bytes_touched"] for r in runs[variant]),
            "plan_bytes": plan["bytes"],
            "plan_packed_files_bytes": plan_bytes_of(plan["plan"], paths),
        }
    return result


def touched_of(report, stats):
    """Totals of one run, and the rows of the packed (or their original) files,
    found by device and inode whatever path the run saw them under."""
    wanted = {(s.st_dev, s.st_ino) for s in stats}
    rows = [f for f in report["files"] if (f["dev"], f["ino"]) in wanted]
    if not rows:
        fail(f"run {report['run']['id']} of {report['profile']} shows none of the packed files")
    return {
        "run": report["run"]["id"],
        "complete": report["run"]["complete"],
        "bytes_touched": report["totals"]["bytes_touched"],
        "bytes_read": report["totals"]["bytes_read"],
        "packed_files_seen": len(rows),
        "packed_files_bytes_touched": sum(f["bytes_touched"] for f in rows),
        "packed_files_bytes_read": sum(f["bytes_read"] for f in rows),
        "packed_paths": sorted(f["path"] for f in rows),
    }


def plan_bytes_of(plan, paths):
    index = {i for i, f in enumerate(plan["files"]) if f["path"] in paths}
    return sum(e["pages"] for e in plan["extents"] if e["file"] in index) * plan["page_size"]


def bench(coldstart, work, program, ra, runs):
    """One interleaved warm,cold bench of original against packed."""
    label = f"{program.name}-ra{ra}"
    out_json = os.path.join(work, f"{label}-bench.json")
    out_md = os.path.join(work, f"{label}-bench.md")
    # Its table goes to stderr with the progress: stdout is the report.
    run([coldstart, "bench", "--as-root", "--cache", "warm,cold", "-n", str(runs),
         "--name", "original", "--vs", shlex.join(program.argv("packed")), "--name", "packed",
         "--json", out_json, "--markdown", out_md, "--", *program.argv("original")], stdout=sys.stderr)
    with open(out_json) as f:
        result = json.load(f)
    with open(out_md) as f:
        table = f.read()
    samples = {}
    for index, variant in enumerate(result["variants"]):
        samples[variant["name"]] = [r["wall_ms"] for r in result["runs"] if r["variant"] == index and r["ok"]]
    figures = {"read_ahead_kb": ra, "table": table, "warnings": result["warnings"]}
    for cache in ["cold", "warm"]:
        by = {v: next(x for x in result["variants"] if x["name"] == f"{v} ({cache})")
              for v in ["original", "packed"]}
        for v, x in by.items():
            if x["wall_ms"] is None:
                fail(f"{program.name} {v} ({cache}) at read_ahead_kb {ra}: no run counted")
        original, packed = samples[f"original ({cache})"], samples[f"packed ({cache})"]
        low, high = median_difference_ci95(original, packed)
        figures[cache] = {
            v: {"median_ms": x["wall_ms"]["median"], "mean_ci95_ms": x["wall_ms"]["ci95"],
                "runs": x["runs_ok"], "failed": x["runs_failed"],
                "read_bytes_median": x["read_bytes_median"]}
            for v, x in by.items()}
        figures[cache]["difference_ms"] = by["packed"]["wall_ms"]["median"] - by["original"]["wall_ms"]["median"]
        figures[cache]["difference_ci95_ms"] = [low, high]
    return figures


def median_difference_ci95(original, packed, resamples=10000, seed=1):
    """95% bootstrap interval of median(packed) - median(original), each
    side resampled on its own."""
    rng = random.Random(seed)
    differences = sorted(statistics.median(rng.choices(packed, k=len(packed)))
                         - statistics.median(rng.choices(original, k=len(original)))
                         for _ in range(resamples))
    return differences[int(0.025 * resamples)], differences[int(0.975 * resamples) - 1]


def mb(n):
    return f"{n / 1e6:.2f} MB"


def signed_mb(n):
    return f"{n / 1e6:+.2f} MB"


def ms(figure):
    ci = figure["mean_ci95_ms"]
    around = f" [{ci[0]:.0f}, {ci[1]:.0f}]" if ci else ""
    return f"{figure['median_ms']:.0f} ms{around}"


def table(result):
    """Markdown: one row per figure, original / packed / packed - original."""
    rows = []
    p = result["pack"]
    t = result["traces"]
    what = "the binary" if result["name"] == "chromium" else f"the {p['files_packed']} packed files"

    def bytes_row(label, original, packed):
        rows.append(f"| {label} | {mb(original)} | {mb(packed)} | {signed_mb(packed - original)} |")

    bytes_row(f"file bytes, {what}", p["file_bytes"]["original"], p["file_bytes"]["packed"])
    bytes_row("cold start touched (readahead off), whole start",
              t["original"]["bytes_touched"], t["packed"]["bytes_touched"])
    bytes_row(f"cold start touched (readahead off), {what}",
              t["original"]["packed_files_bytes_touched"], t["packed"]["packed_files_bytes_touched"])
    bytes_row("cold start read (readahead off), whole start",
              t["original"]["bytes_read"], t["packed"]["bytes_read"])
    bytes_row("prefetch plan", t["original"]["plan_bytes"], t["packed"]["plan_bytes"])
    bytes_row(f"prefetch plan, {what}",
              t["original"]["plan_packed_files_bytes"], t["packed"]["plan_packed_files_bytes"])
    for b in result["bench"]:
        for cache in ["cold", "warm"]:
            f = b[cache]
            low, high = f["difference_ci95_ms"]
            rows.append(f"| {cache} start, read_ahead_kb {b['read_ahead_kb']} | {ms(f['original'])} | "
                        f"{ms(f['packed'])} | {f['difference_ms']:+.0f} ms [{low:+.0f}, {high:+.0f}] |")
    head = ["| | original | packed | packed - original |", "|---|--:|--:|--:|"]
    return "\n".join(head + rows)


def check_targets(result):
    if result["name"] != "chromium":
        return []
    missed = []
    saved_file = result["pack"]["file_bytes"]["original"] - result["pack"]["file_bytes"]["packed"]
    if not saved_file >= MIN_FILE_SAVED:
        missed.append(f"chromium's file is {mb(saved_file)} smaller, the target is {mb(MIN_FILE_SAVED)}")
    t = result["traces"]
    saved_touched = t["original"]["bytes_touched"] - t["packed"]["bytes_touched"]
    if not saved_touched >= MIN_TOUCHED_SAVED:
        missed.append(f"chromium's cold start touches {mb(saved_touched)} less, "
                      f"the target is {mb(MIN_TOUCHED_SAVED)}")
    return missed


def measure(coldstart, work, program, args, settings, device):
    print(f"== {program.name}: pack", file=sys.stderr)
    report, pairs = program.pack(coldstart)
    # Cold starts drop the page cache, which keeps dirty pages: the packed
    # files must be on the device before the first one.
    os.sync()
    result = {"name": program.name, "pack": pack_summary(report, pairs)}
    print(f"== {program.name}: behaviour check", file=sys.stderr)
    result["behaviour_bytes_compared"] = check_behaviour(program)
    result["traces"] = trace_variants(coldstart, work, program, pairs, args.traces)
    result["bench"] = []
    for ra in settings:
        print(f"== {program.name}: bench at read_ahead_kb {ra}", file=sys.stderr)
        with ReadAhead(None if str(ra) == device else ra):
            result["bench"].append(bench(coldstart, work, program, ra, args.runs))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="interleaved bench runs per variant")
    parser.add_argument("--traces", type=int, default=2, help="readahead-off traces per variant")
    parser.add_argument("--read-ahead-kb", type=int, action="append",
                        help="settings to time at [default: 128 and the device's own]")
    parser.add_argument("--only", action="append", choices=["chromium", "libreoffice"])
    parser.add_argument("--keep", help="directory to keep the packed files, profiles, plans and results in")
    parser.add_argument("--json", help="write every figure as JSON to this file")
    parser.add_argument("--coldstart", help="coldstart binary to use instead of building one")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): cold starts drop the page cache, LibreOffice runs need mounts")
    # A kill must unwind too, so that read_ahead_kb is restored and the work
    # directory removed.
    signal.signal(signal.SIGTERM, on_stop_signal)
    signal.signal(signal.SIGINT, on_stop_signal)
    wanted = list(dict.fromkeys(args.only or ["chromium", "libreoffice"]))
    kinds = {"chromium": Chromium, "libreoffice": LibreOffice}
    ensure_installed({path: pkg for name in wanted for path, pkg in kinds[name].packages.items()})
    coldstart = os.path.abspath(args.coldstart) if args.coldstart else build_coldstart()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        if os.listdir(args.keep):
            sys.exit(f"--keep {args.keep}: the directory is not empty")
    work = os.path.abspath(args.keep or tempfile.mkdtemp(prefix="coldstart-pack-", dir="/var/tmp"))
    try:
        if os.stat(work).st_dev != os.stat("/usr/lib").st_dev:
            sys.exit(f"{work} is not on the filesystem of /usr/lib: a packed copy there would not be read "
                     "from the same device as the original; give --keep DIR on that filesystem")
        device = read_ahead_of("/usr/lib")
        settings = args.read_ahead_kb or sorted({128, int(device)} if device.isdigit() else {128})
        results = [measure(coldstart, work, kinds[name](work), args, settings, device) for name in wanted]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"device read_ahead_kb {device}; kernel {os.uname().release}; {args.runs} interleaved runs a variant, "
          f"{args.traces} readahead-off traces a variant; times: median [95% CI of the mean], "
          "difference of medians [95% bootstrap interval]\n")
    missed = []
    for r in results:
        p = r["pack"]
        refused = ", ".join(f"{code} {n}" for code, n in p["refused_by_code"].items()) or "none"
        print(f"### {r['name']}\n\n{table(r)}\n\n- {p['files_packed']} files packed, "
              f"{p['relative_packed']} relative relocations as RELR; {mb(p['compacted_bytes'])} cut out, "
              f"{mb(p['hole_bytes'])} left as holes; loader pages {p['loader_pages']['original']} -> "
              f"{p['loader_pages']['packed']}; refused: {refused}")
        for variant, t in r["traces"].items():
            for trace in t["runs"]:
                if not trace["complete"]:
                    print(f"- the readahead-off trace of {variant} (run {trace['run']}) is incomplete: "
                          "see `coldstart report` of the kept profile")
        for b in r["bench"]:
            print(f"\n`coldstart bench` at read_ahead_kb {b['read_ahead_kb']}:\n\n{b['table']}")
        print()
        missed += check_targets(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device_read_ahead_kb": device, "kernel": os.uname().release, "runs": args.runs,
                       "traces": args.traces, "programs": results}, f, indent=2)
    for m in missed:
        print(f"MISSED: {m}", file=sys.stderr)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
