#!/usr/bin/env python3
"""coldstart's orders against the layout peers on the sample app at its
default size (the demo's app: 200 C++ units, 10,000 functions among 120
MiB of code no start runs, 24 generated part libraries), a start whose
text is spread over a large file.

Every variant is built by clang-19 at -O2 (-ffunction-sections
-fdata-sections, the generator's flags) and linked by lld; only the
layout of the executable and of libcs_sample.so differs (the part
libraries are generated assembly and the same in all):

- base: the default layout, compiled with -fbasic-block-address-map (the
  build the block trace runs; the map is not loaded);
- coldstart: base's objects relinked in the function order `coldstart
  order --clusters` writes from --block-traces block traces of base
  (pooled; first run);
- coldstart-split: compiled again with -fbasic-block-sections=list from
  that trace's cluster files, linked in the same order;
- temporal: clang-19 temporal profiling (-pgo-temporal-instrumentation),
  `llvm-profdata order`, base's objects relinked in that order;
- lld-cdsort: a PGO build (-fprofile-use with the same profile) linked
  with lld --call-graph-profile-sort=cdsort (PGO changes the code too);
- bolt-cdsort: base's objects linked with --emit-relocs, both binaries
  instrumented by llvm-bolt-19, run once, and rewritten with
  -reorder-blocks=ext-tsp -split-functions -reorder-functions=cdsort
  (the generator's cold-code functions skipped: BOLT runs out of memory
  disassembling them).

For each: the text pages of the executable and the library a start
touches (a readahead-off trace), what the two read at read_ahead_kb 128
and at the device's setting, and cold start times at both settings,
--runs interleaved rounds each (`coldstart bench --cache cold`; the
device's read_ahead_kb is set to 128 for the first bench and restored).
Needs root. Installs what it needs; builds stay in --work between runs.

    sudo bench/order_sample.py [--work DIR] [--runs N] [--block-traces N]
                               [--variants base,coldstart-split,...]
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, build_coldstart, ensure_installed  # noqa: E402
from order_cpython import (block_traces, bolt, cold_times, read_ahead_of,  # noqa: E402
                           wanted_variants)

LLVM = "/usr/lib/llvm-19/bin"
DRIVER = "clang++-19"
LLD = [f"-B{LLVM}", "-fuse-ld=lld"]
BBMAP = "-fbasic-block-address-map"
NO_WARN = "-Wl,--no-warn-symbol-ordering"
# The generator's cold code: one function of int3 per unit, 600 KiB each,
# that no start runs. BOLT 19 disassembles each instruction of it and ran
# out of 24 GiB on the library; skipped (a regex), it stays where it is.
COLD_CODE = ["cs_cold_tu.*"]
VARIANTS = ["base", "coldstart", "coldstart-split", "temporal", "lld-cdsort", "bolt-cdsort"]


def sh(argv, **kwargs):
    print("+", " ".join(str(a) for a in argv), file=sys.stderr)
    return subprocess.run(argv, check=True, **kwargs)


def sample_builder():
    """The sample crate's build_sample example, built once."""
    sh(["cargo", "build", "--release", "-q", "-p", "coldstart-sample", "--example",
        "build_sample"], cwd=ROOT)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "examples", "build_sample")


class App:
    """One build of the sample app: its executable, library and parts."""

    def __init__(self, built):
        self.executable = built["executable"]
        self.library = built["library"]
        self.build_dir = built["build_dir"]

    def binaries(self):
        return [self.executable, self.library]


def build(builder, work, name, cflags=(), ldflags=(), library=(), executable=(),
          reuse=None, fresh=False):
    """Builds (or brings up to date) the app in work/name with clang-19;
    `fresh` starts from an empty directory, for builds that read a file
    made by this run (the sample's build keys hash flags, not the files
    they name)."""
    if fresh:
        shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    argv = [builder, work, "--build", name, "--compiler", "clang", "--driver", DRIVER, "--json"]
    for flag in cflags:
        argv += ["--cflag", flag]
    for flag in [*LLD, *ldflags]:
        argv += ["--ldflag", flag]
    for flag in library:
        argv += ["--library-ldflag", flag]
    for flag in executable:
        argv += ["--executable-ldflag", flag]
    if reuse:
        argv += ["--reuse-from", reuse.build_dir]
    return App(json.loads(sh(argv, capture_output=True, text=True).stdout))


def copy_with(app, work, name, replaced):
    """A copy of `app`'s build directory with some binaries replaced:
    `replaced` maps a binary of `app` to the file that takes its place."""
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    sh(["cp", "-a", app.build_dir, out])
    for original, new in replaced.items():
        shutil.copy(new, os.path.join(out, os.path.basename(original)))
    return App({"executable": os.path.join(out, os.path.basename(app.executable)),
                "library": os.path.join(out, os.path.basename(app.library)),
                "build_dir": out})


def trace(coldstart, db, app, read_ahead_kb=None, extra=()):
    argv = [coldstart, "trace", "--json", "-o", db, *extra]
    if read_ahead_kb is not None:
        argv += ["--read-ahead-kb", str(read_ahead_kb)]
    out = sh(argv + ["--", app.executable], capture_output=True, text=True).stdout
    return json.loads(out)["run"]


def figures(coldstart, db, run, app):
    """Text pages touched, bytes and requests read, summed over the
    executable and the library, and the whole start's bytes read."""
    report = json.loads(sh([coldstart, "report", db, "--run", str(run), "--json"],
                           capture_output=True, text=True).stdout)
    text = read = requests = 0
    for file in report["files"]:
        if file["path"] in app.binaries():
            read += file["bytes_read"]
            requests += file["read_requests"]
            text += sum(s["pages_read"] for s in file.get("sections", [])
                        if s["name"] == ".text")
    whole = sum(f["bytes_read"] for f in report["files"])
    return text, read, requests, whole


def block_orders(coldstart, db, base, work, traces):
    """`traces` block traces of base, pooled by `coldstart order --clusters`
    for each of its two binaries: one cluster file for the compiles
    (function names are unique across the app) and one symbol order for
    both links."""
    runs = block_traces(coldstart, db, [base.executable], traces)
    clusters, order = [], []
    for binary in base.binaries():
        stem = os.path.join(work, os.path.basename(binary))
        sh([coldstart, "order", db, "--binary", binary, "--linker", "lld",
            "--block-run", runs,
            "--clusters", stem + ".clusters", "-o", stem + ".order"], stdout=subprocess.DEVNULL)
        lines = open(stem + ".clusters").read().splitlines()
        # One version line, the first file's.
        clusters += lines if not clusters else [l for l in lines if l != "v1"]
        order += open(stem + ".order").read().splitlines()
    paths = os.path.join(work, "app.clusters"), os.path.join(work, "app.order")
    for path, lines in zip(paths, (clusters, order)):
        with open(path, "w") as f:
            f.write("".join(line + "\n" for line in lines))
    return paths


def bolted(work, base_relocs, name):
    """base linked with --emit-relocs, both binaries instrumented by BOLT,
    run once, then rewritten from the profile."""
    instrumented, fdata, skips = {}, {}, {}
    for binary in base_relocs.binaries():
        fdata[binary] = os.path.join(work, os.path.basename(binary) + ".fdata")
        if os.path.exists(fdata[binary]):
            os.remove(fdata[binary])
        # BOLT 19 prepends /usr/lib/ to this path, whatever it is given.
        skips[binary] = bolt(binary, ["-instrument", f"--instrumentation-file={fdata[binary]}",
                                      "--runtime-instrumentation-lib="
                                      "llvm-19/lib/libbolt_rt_instr.a",
                                      "-o", binary + ".instrumented"], list(COLD_CODE))
        instrumented[binary] = binary + ".instrumented"
    run = copy_with(base_relocs, work, name + "-instrumented", instrumented)
    sh([run.executable], stdout=subprocess.DEVNULL)
    rewritten = {}
    for binary in base_relocs.binaries():
        bolt(binary, ["-o", binary + ".bolt", f"-data={fdata[binary]}",
                      "-reorder-blocks=ext-tsp", "-split-functions",
                      "-reorder-functions=cdsort"], skips[binary])
        rewritten[binary] = binary + ".bolt"
    return copy_with(base_relocs, work, name, rewritten)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/var/tmp/coldstart-order-sample")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--block-traces", type=int, default=3,
                        help="block traces pooled for the orders (default 3)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated subset (default: all of {','.join(VARIANTS)})")
    args = parser.parse_args()
    wanted = wanted_variants(args.variants, VARIANTS)
    if os.geteuid() != 0:
        sys.exit("tracing needs root: sudo bench/order_sample.py")
    ensure_installed({"/usr/bin/clang++-19": "clang-19", f"{LLVM}/ld.lld": "lld-19",
                      "/usr/bin/llvm-bolt-19": "bolt-19", "/usr/bin/llvm-profdata-19": "llvm-19",
                      "/usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.profile-x86_64.a":
                      "libclang-rt-19-dev"})
    coldstart = build_coldstart()
    builder = sample_builder()
    work = args.work
    os.makedirs(work, exist_ok=True)
    db = os.path.join(work, "sample.db")
    if os.path.exists(db):
        os.remove(db)

    base = build(builder, work, "base", cflags=[BBMAP])
    variants = {"base": base}
    if {"coldstart", "coldstart-split"} & set(wanted):
        clusters, order = block_orders(coldstart, db, base, work, args.block_traces)
        ordered = [f"-Wl,--symbol-ordering-file={order}", NO_WARN]
        if "coldstart" in wanted:
            variants["coldstart"] = build(builder, work, "coldstart", cflags=[BBMAP],
                                          ldflags=ordered, reuse=base,
                                          fresh=True)
        if "coldstart-split" in wanted:
            variants["coldstart-split"] = build(
                builder, work, "coldstart-split",
                cflags=[BBMAP, f"-fbasic-block-sections=list={clusters}"], ldflags=ordered,
                fresh=True)
    profdata = os.path.join(work, "temporal.profdata")
    if {"temporal", "lld-cdsort"} & set(wanted):
        temporal = build(builder, work, "temporal-instrumented",
                         cflags=["-fprofile-generate", "-mllvm", "-pgo-temporal-instrumentation"],
                         ldflags=["-fprofile-generate"])
        for old in glob.glob(os.path.join(work, "temporal-*.profraw")):
            os.remove(old)
        sh(["env", f"LLVM_PROFILE_FILE={work}/temporal-%p-%m.profraw", temporal.executable],
           stdout=subprocess.DEVNULL)
        sh(["llvm-profdata-19", "merge", "-o", profdata,
            *glob.glob(os.path.join(work, "temporal-*.profraw"))])
        if "temporal" in wanted:
            order = os.path.join(work, "temporal.order")
            sh(["llvm-profdata-19", "order", profdata, "-o", order])
            variants["temporal"] = build(builder, work, "temporal", cflags=[BBMAP],
                                         ldflags=[f"-Wl,--symbol-ordering-file={order}", NO_WARN],
                                         reuse=base, fresh=True)
        if "lld-cdsort" in wanted:
            variants["lld-cdsort"] = build(
                builder, work, "lld-cdsort",
                cflags=[f"-fprofile-use={profdata}", "-Wno-profile-instr-unprofiled",
                        "-Wno-profile-instr-out-of-date", "-Wno-backend-plugin"],
                ldflags=["-Wl,--call-graph-profile-sort=cdsort"], fresh=True)
    if "bolt-cdsort" in wanted:
        relocs = build(builder, work, "bolt-input", cflags=[BBMAP], ldflags=["-Wl,-q"],
                       reuse=base)
        variants["bolt-cdsort"] = bolted(work, relocs, "bolt-cdsort")
    variants = {name: variants[name] for name in VARIANTS if name in variants and name in wanted}

    device_kb = read_ahead_of(work)
    rows = []
    for name, app in variants.items():
        sh([app.executable], stdout=subprocess.DEVNULL)
        text, _, _, _ = figures(coldstart, db, trace(coldstart, db, app, read_ahead_kb=0), app)
        at_128 = figures(coldstart, db, trace(coldstart, db, app, read_ahead_kb=128), app)
        at_device = figures(coldstart, db, trace(coldstart, db, app), app)
        rows.append((name, text, at_128, at_device))

    names = list(variants)
    times = cold_times(coldstart, names, [[variants[name].executable] for name in names],
                       args.runs, work, device_kb)

    mib = 2 ** 20
    print(f"\nsample app (default size, clang-19, lld); executable + libcs_sample.so; "
          f"device read_ahead_kb {device_kb}; times: {args.runs} interleaved cold runs, "
          f"median (sd), ratio of means to {names[0]} [95% CI]\n")
    print("| variant | .text pages touched | read at 128 KiB (start) | requests at 128 | "
          f"read at {device_kb} KiB (start) | requests | cold start at 128 KiB | "
          f"cold start at {device_kb} KiB |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for name, text, f128, fdev in rows:
        print(f"| {name} | {text} | {f128[1] / mib:.2f} MiB ({f128[3] / mib:.1f}) | {f128[2]} | "
              f"{fdev[1] / mib:.2f} MiB ({fdev[3] / mib:.1f}) | {fdev[2]} | "
              f"{times[(name, '128')]} | {times[(name, device_kb)]} |")


if __name__ == "__main__":
    main()
