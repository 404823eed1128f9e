#!/usr/bin/env python3
"""coldstart's order files against the layout peers, on CPython 3.11 built
from Debian's source package (BENCHMARKS.md's relink scenario: shared
libpython, -ffunction-sections -fdata-sections, startup
`python -c "import json, decimal, asyncio"`).

Variants of libpython3.11.so.1.0, all but the clang one relinked from the
same gcc objects, so only the layout differs:

- base: gcc, GNU ld, the default layout;
- coldstart: `coldstart order` (first-call) from function traces of a build
  instrumented with coldstart's runtime, relinked with lld;
- coldstart-pages: `coldstart order` from the page-level trace of the base
  build alone (no instrumented build), relinked with lld;
- temporal: clang-19 temporal profiling (-pgo-temporal-instrumentation) and
  `llvm-profdata order`, the order relinked with lld;
- lld-cdsort: clang-19 PGO build (-fprofile-use with the same profile)
  linked with lld --call-graph-profile-sort=cdsort (its own objects);
- bolt-cdsort: the base objects linked with --emit-relocs, instrumented and
  rewritten by llvm-bolt -reorder-functions=cdsort;
- clang-base: clang-19 with -fbasic-block-address-map, linked with lld, the
  default layout (the build the split one is compared with);
- coldstart-split: `coldstart order --clusters` from --block-traces block
  traces of clang-base (`coldstart trace --blocks`, pooled), compiled again
  with -fbasic-block-sections=list and linked with lld in its order.

For each: text pages and data pages (.rodata, .data.rel.ro, .data) of
libpython the start touched (a readahead-off trace), what it read at
read_ahead_kb 128 and at the device's own setting (cold traces), and cold
start times at 128 and at the device's setting, --runs interleaved runs
each (`coldstart bench`; the device's read_ahead_kb is set for the bench
at 128 and restored). Needs root. Installs what it needs with apt-get, keeps builds in
--work between runs (a build is skipped when its directory is complete).

    sudo bench/order_cpython.py [--work DIR] [--runs N] [--block-traces N]
                                [--variants base,coldstart-split,...]
"""

import argparse
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import build_coldstart, ensure_installed  # noqa: E402

LIB = "libpython3.11.so.1.0"
LINK_NAME = "libpython3.11.so"
SCENARIO = ["-c", "import json, decimal, asyncio"]
COMMON = "-O2 -ffunction-sections -fdata-sections -g0"
LLVM = "/usr/lib/llvm-19/bin"
LLD = [f"-B{LLVM}", "-fuse-ld=lld"]
VARIANTS = ["base", "coldstart", "coldstart-pages", "temporal", "lld-cdsort", "bolt-cdsort",
            "clang-base", "coldstart-split"]


def sh(argv, **kwargs):
    print("+", " ".join(str(a) for a in argv), file=sys.stderr)
    return subprocess.run(argv, check=True, **kwargs)


def source(work):
    """Debian's python3.11 source package, unpacked with its patches."""
    src = os.path.join(work, "src")
    if os.path.exists(os.path.join(src, "configure")):
        return src
    lists = " ".join(glob.glob("/etc/apt/sources.list.d/*") + ["/etc/apt/sources.list"])
    if subprocess.run(f"grep -qs '^deb-src' {lists}", shell=True).returncode != 0:
        with open("/etc/apt/sources.list.d/coldstart-bookworm-src.list", "w") as f:
            f.write("deb-src http://deb.debian.org/debian bookworm main\n")
        sh(["apt-get", "update", "-qq"])
    download = os.path.join(work, "download")
    os.makedirs(download, exist_ok=True)
    sh(["apt-get", "source", "-qq", "--download-only", "python3.11"], cwd=download)
    dsc = glob.glob(os.path.join(download, "python3.11_*.dsc"))[0]
    sh(["dpkg-source", "-x", "--no-check", dsc, src], stdout=subprocess.DEVNULL)
    return src


def build(work, src, name, cc, cflags, ldflags=""):
    """An out-of-tree build with --enable-shared; reused when complete."""
    out = os.path.join(work, name)
    if os.path.exists(os.path.join(out, ".complete")):
        return out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ, CC=cc, CFLAGS=cflags, LDFLAGS=ldflags)
    with open(os.path.join(out, "build.log"), "w") as log:
        sh([os.path.join(src, "configure"), "--enable-shared", "--without-ensurepip"],
           cwd=out, env=env, stdout=log, stderr=log)
        sh(["make", f"-j{os.cpu_count()}"], cwd=out, env=env, stdout=log, stderr=log)
    open(os.path.join(out, ".complete"), "w").close()
    return out


def relink(work, base, name, flags, lib=None):
    """A copy of `base` whose libpython is linked again with `flags`, or
    replaced by `lib`."""
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    sh(["cp", "-a", base, out])
    # The make target is the unversioned name; it links the soname and
    # hard-links the other to it.
    for name in (LIB, LINK_NAME):
        os.remove(os.path.join(out, name))
    if lib:
        shutil.copy(lib, os.path.join(out, LIB))
    else:
        sh(["make", LINK_NAME, "BLDSHARED=" + " ".join(["gcc", "-shared", *flags])], cwd=out,
           stdout=subprocess.DEVNULL)
    return out


def bolt(lib, options, skip):
    """Runs llvm-bolt, adding each function it cannot rewrite (computed
    gotos: the interpreter loop, the regex matchers) to --skip-funcs and
    trying again, as its error message advises. Returns the skip list."""
    for _ in range(30):
        argv = ["llvm-bolt-19", lib, *options]
        if skip:
            argv.append("--skip-funcs=" + ",".join(skip))
        print("+", " ".join(argv), file=sys.stderr)
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode == 0:
            return skip
        marker = "in function "
        line = next((l for l in done.stderr.splitlines() + done.stdout.splitlines()
                     if "BOLT-ERROR" in l and marker in l), None)
        if line is None:
            sys.exit(f"llvm-bolt failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        name = line.split(marker, 1)[1].split(". ")[0].split("(")[0].strip()
        skip.append(name)
    sys.exit("llvm-bolt: too many functions to skip")


def python(build):
    return ["env", f"LD_LIBRARY_PATH={build}", os.path.join(build, "python"), *SCENARIO]


def trace(coldstart, db, build, read_ahead_kb=None, extra=(), env_prefix=()):
    argv = [coldstart, "trace", "--json", "-o", db, *extra]
    if read_ahead_kb is not None:
        argv += ["--read-ahead-kb", str(read_ahead_kb)]
    command = python(build)
    out = sh(argv + ["--", *command[:2], *env_prefix, *command[2:]],
             capture_output=True, text=True).stdout
    return json.loads(out)["run"]


DATA_SECTIONS = (".rodata", ".data.rel.ro", ".data")


def library_figures(coldstart, db, run, build):
    """The library's row of the run's report, its .text row, and the pages
    of its data sections the run read."""
    report = json.loads(sh([coldstart, "report", db, "--run", str(run), "--json", "--file",
                            f"*{LIB}"], capture_output=True, text=True).stdout)
    path = os.path.join(build, LIB)
    file = next(f for f in report["files"] if f["path"] == path)
    sections = file.get("sections", [])
    text = next((s for s in sections if s["name"] == ".text"), None)
    data = sum(s["pages_read"] for s in sections if s["name"] in DATA_SECTIONS)
    return file, text, data


def device_read_ahead():
    """The sysfs files of every backing device and their values."""
    return {p: open(p).read().strip() for p in glob.glob("/sys/class/bdi/*/read_ahead_kb")}


def read_ahead_of(path):
    """read_ahead_kb of the device holding `path`."""
    dev = os.stat(path).st_dev
    try:
        return open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb").read().strip()
    except OSError:
        return "unknown"


def wanted_variants(text, known):
    """The comma-separated variants asked for, or exit naming the unknown."""
    wanted = text.split(",")
    unknown = [v for v in wanted if v not in known]
    if unknown:
        sys.exit(f"unknown variants {unknown}; known: {','.join(known)}")
    return wanted


def block_traces(coldstart, db, command, count):
    """`count` block traces of `command` (`coldstart trace --blocks`) into
    `db`; their block run ids, to pool in `coldstart order --block-run`."""
    return ",".join(
        str(json.loads(sh([coldstart, "trace", "--blocks", "--json", "-o", db, "--", *command],
                          capture_output=True, text=True).stdout)["block_run"])
        for _ in range(count))


def cold_times(coldstart, names, commands, runs, work, device_kb):
    """`coldstart bench --cache cold` of the commands, interleaved, at
    read_ahead_kb 128 (set on every device, then restored) and at the
    device's own setting: per (name, "128" or `device_kb`), the median and
    the ratio of means to the first command with its 95% interval."""
    device = device_read_ahead()
    times = {}
    for setting in ("128", None):
        label = setting or device_kb
        bench_json = os.path.join(work, f"bench-{label}.json")
        try:
            if setting:
                for path in device:
                    with open(path, "w") as f:
                        f.write(setting)
            argv = [coldstart, "bench", "--cache", "cold", "-n", str(runs), "--json", bench_json]
            for command in commands[1:]:
                argv += ["--vs", shlex.join(command)]
            sh(argv + ["--", *commands[0]], stdout=subprocess.DEVNULL)
        finally:
            for path, value in device.items():
                with open(path, "w") as f:
                    f.write(value)
        bench = json.load(open(bench_json))
        for name, v in zip(names, bench["variants"]):
            wall, ratio = v.get("wall_ms"), v.get("ratio")
            if not wall:
                times[(name, label)] = "failed"
                continue
            text = f"{wall['median']:.1f} ms (sd {wall['std_dev'] or 0:.0f})"
            if ratio:
                low, high = ratio["ci95"]
                text += f", {ratio['ratio']:.2f} [{low:.2f}, {high:.2f}]"
            times[(name, label)] = text
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/var/tmp/coldstart-cpython")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--block-traces", type=int, default=3,
                        help="block traces pooled for the split order (default 3)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated subset to build and measure "
                             f"(default: all of {','.join(VARIANTS)})")
    args = parser.parse_args()
    wanted = wanted_variants(args.variants, VARIANTS)
    if os.geteuid() != 0:
        sys.exit("tracing needs root: sudo bench/order_cpython.py")
    ensure_installed({"/usr/bin/clang-19": "clang-19", f"{LLVM}/ld.lld": "lld-19",
                      "/usr/bin/llvm-bolt-19": "bolt-19", "/usr/bin/llvm-profdata-19": "llvm-19",
                      "/usr/bin/dpkg-source": "dpkg-dev", "/usr/bin/gcc": "gcc",
                      # clang's -fprofile-generate links compiler-rt's profile runtime.
                      "/usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.profile-x86_64.a":
                      "libclang-rt-19-dev"})
    coldstart = build_coldstart()
    work = args.work
    os.makedirs(work, exist_ok=True)
    src = source(work)

    # The gcc build, which every variant but the clang ones relinks.
    gcc_variants = {"base", "coldstart", "coldstart-pages", "temporal", "bolt-cdsort"}
    base = build(work, src, "gcc-base", "gcc", COMMON) if gcc_variants & set(wanted) else None
    db = os.path.join(work, "cpython.db")
    if os.path.exists(db):
        os.remove(db)
    orders = {}
    if {"coldstart", "coldstart-pages"} & set(wanted):
        runtime = os.path.join(work, "runtime")
        sh([coldstart, "runtime", "--out", runtime], stdout=subprocess.DEVNULL)
        # glibc's own no-op hooks satisfy the link; the preloaded runtime
        # interposes them at run time, one table for the whole process.
        instrumented = build(work, src, "gcc-instrumented", "gcc",
                             COMMON + " -finstrument-functions")
        functions_run = trace(coldstart, db, instrumented, extra=["--functions"],
                              env_prefix=[f"LD_PRELOAD={runtime}/libcoldstart_functions.so"])
        base_demand = trace(coldstart, db, base, read_ahead_kb=0)
        # Function records give the functions; the plain build's own page
        # trace gives the data startup touched.
        for name, extra in [("coldstart", ["--runs", f"{functions_run},{base_demand}"]),
                            ("coldstart-pages", ["--runs", str(base_demand), "--pages"])]:
            orders[name] = os.path.join(work, f"{name}.order")
            sh([coldstart, "order", db, "--binary", os.path.join(base, LIB), "--linker", "lld",
                *extra, "-o", orders[name]])

    profdata = os.path.join(work, "temporal.profdata")
    if {"temporal", "lld-cdsort"} & set(wanted):
        temporal = build(work, src, "clang-temporal", "clang-19",
                         COMMON + " -fprofile-generate -mllvm -pgo-temporal-instrumentation",
                         "-fprofile-generate")
        for old in glob.glob(os.path.join(work, "temporal-*.profraw")):
            os.remove(old)
        sh(["env", f"LLVM_PROFILE_FILE={work}/temporal-%p.profraw", *python(temporal)])
        sh(["llvm-profdata-19", "merge", "-o", profdata,
            *glob.glob(os.path.join(work, "temporal-*.profraw"))])
        orders["temporal"] = os.path.join(work, "temporal.order")
        sh(["llvm-profdata-19", "order", profdata, "-o", orders["temporal"]])

    variants = {"base": base} if base else {}
    for name, order in orders.items():
        if name in wanted:
            variants[name] = relink(work, base, name,
                                    [*LLD, f"-Wl,--symbol-ordering-file={order}",
                                     "-Wl,--no-warn-symbol-ordering"])
    if "lld-cdsort" in wanted:
        variants["lld-cdsort"] = build(work, src, "clang-pgo-cdsort", "clang-19",
                                       COMMON + f" -fprofile-use={profdata}"
                                       " -Wno-profile-instr-unprofiled"
                                       " -Wno-profile-instr-out-of-date -Wno-backend-plugin",
                                       " ".join(LLD + ["-Wl,--call-graph-profile-sort=cdsort"]))
    if "bolt-cdsort" in wanted:
        relocs = relink(work, base, "bolt-input", ["-Wl,-q"])
        lib = os.path.join(relocs, LIB)
        fdata = os.path.join(work, "bolt.fdata")
        if os.path.exists(fdata):
            os.remove(fdata)
        # BOLT 19 prepends /usr/lib/ to this path, whatever it is given.
        skip = bolt(lib, ["-instrument", f"--instrumentation-file={fdata}",
                          "--runtime-instrumentation-lib=llvm-19/lib/libbolt_rt_instr.a",
                          "-o", lib + ".instrumented"], [])
        instrumented_bolt = relink(work, relocs, "bolt-instrumented", [],
                                   lib=lib + ".instrumented")
        sh(python(instrumented_bolt), stdout=subprocess.DEVNULL)
        bolt(lib, ["-o", lib + ".bolt", f"-data={fdata}", "-reorder-functions=cdsort"], skip)
        variants["bolt-cdsort"] = relink(work, relocs, "bolt-cdsort", [], lib=lib + ".bolt")
    if {"clang-base", "coldstart-split"} & set(wanted):
        bbmap_flags = COMMON + " -fbasic-block-address-map"
        clang_base = build(work, src, "clang-bbmap", "clang-19", bbmap_flags, " ".join(LLD))
        if "clang-base" in wanted:
            variants["clang-base"] = clang_base
        if "coldstart-split" in wanted:
            # The block trace, then the split build: compiled again with the
            # cluster file (its block ids are the traced build's), linked in
            # the order. Rebuilt each time: the trace may differ.
            # Pooled over several starts: each takes some paths of its own
            # (string hashing is seeded at random). Not the build's first
            # start, which compiles a .pyc (see below).
            sh(python(clang_base), stdout=subprocess.DEVNULL)
            block_runs = block_traces(coldstart, db, python(clang_base), args.block_traces)
            clusters = os.path.join(work, "libpython.clusters")
            split_order = os.path.join(work, "libpython.split.order")
            sh([coldstart, "order", db, "--binary", os.path.join(clang_base, LIB),
                "--linker", "lld", "--clusters", clusters, "-o", split_order,
                "--block-run", block_runs])
            shutil.rmtree(os.path.join(work, "clang-split"), ignore_errors=True)
            variants["coldstart-split"] = build(
                work, src, "clang-split", "clang-19",
                bbmap_flags + f" -fbasic-block-sections=list={clusters}",
                " ".join(LLD + [f"-Wl,--symbol-ordering-file={split_order}",
                                "-Wl,--no-warn-symbol-ordering"]))
    variants = {name: variants[name] for name in VARIANTS if name in variants and name in wanted}
    if not variants:
        sys.exit("no variant to measure")

    device_kb = read_ahead_of(work)
    rows = []
    for name, build_dir in variants.items():
        # The first start of a build writes the .pyc of its own
        # _sysconfigdata (build/lib.*/__pycache__), running the compiler;
        # no later start does, and a fresh build must not be measured on it.
        sh(python(build_dir), stdout=subprocess.DEVNULL)
        demand = trace(coldstart, db, build_dir, read_ahead_kb=0)
        at_128 = trace(coldstart, db, build_dir, read_ahead_kb=128)
        at_device = trace(coldstart, db, build_dir)
        _, text, data = library_figures(coldstart, db, demand, build_dir)
        f128, _, _ = library_figures(coldstart, db, at_128, build_dir)
        fdev, _, _ = library_figures(coldstart, db, at_device, build_dir)
        rows.append((name, text["pages_read"] if text else None, data, f128, fdev))

    names = list(variants)
    times = cold_times(coldstart, names, [python(variants[name]) for name in names], args.runs,
                       work, device_kb)

    print(f"\nCPython 3.11 ({os.path.basename(src)}), libpython3.11.so.1.0, "
          f"`python -c \"import json, decimal, asyncio\"`; device read_ahead_kb {device_kb}; "
          f"times: {args.runs} interleaved cold runs, ratio of means to {names[0]} [95% CI]\n")
    print("| variant | .text pages touched | data pages touched | read at 128 KiB | requests | "
          f"read at device | requests | cold start at 128 KiB | cold start at {device_kb} KiB |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, text, data, f128, fdev in rows:
        print(f"| {name} | {text} | {data} | {f128['bytes_read'] / 2**20:.2f} MiB | "
              f"{f128['read_requests']} | {fdev['bytes_read'] / 2**20:.2f} MiB | "
              f"{fdev['read_requests']} | {times[(name, '128')]} | "
              f"{times[(name, device_kb)]} |")


if __name__ == "__main__":
    main()
