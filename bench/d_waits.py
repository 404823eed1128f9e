#!/usr/bin/env python3
"""Where a start waits on storage: the time each thread spends blocked in
uninterruptible sleep (D), by what the kernel was doing when it blocked.

Runs COMMAND under `perf record -e sched:sched_switch -g` (kernel call
chains at every context switch), then, for every switch-out in state D,
takes the time until the same thread is switched in again and files it
under the first telling frame of the kernel stack: a page fault or a read()
waiting on a page (being read by someone else, or its own miss), an ext4
directory lookup, inode, extent-tree or bitmap read (metadata), and so on.
Prints the first thread's (the program's main thread, which is the
launcher's pid when COMMAND is `coldstart-run ... -- PROGRAM`) totals and
longest waits, with when they began, and the largest totals by thread
name.

    sudo bench/d_waits.py [--cold] [--top N] [--stacks N] -- COMMAND [ARGS...]

--cold drops the page cache first (sync; drop_caches 3), as a cold start.
Needs perf with the sched tracepoints (root). Nothing is left behind but
the temporary perf.data, removed at the end."""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

# Frames that only say the thread slept, not why.
GENERIC = {
    "__schedule", "schedule", "io_schedule", "schedule_timeout", "bit_wait_io",
    "__wait_on_bit", "out_of_line_wait_on_bit", "folio_wait_bit_common",
    "schedule_preempt_disabled", "__wait_on_bit_lock", "out_of_line_wait_on_bit_lock",
}

SWITCH = re.compile(
    r"\s([\d.]+): sched:sched_switch: prev_comm=(.*?) prev_pid=(\d+) .*?"
    r"prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")


def cause(stack):
    """A short name for why a thread blocked, from its kernel stack."""
    frames = set(stack)
    if "filemap_fault" in frames:
        if frames & {"load_elf_binary", "elf_load"}:
            return "page fault, exec"
        return "page fault"
    if frames & {"filemap_read", "filemap_get_pages"}:
        return "read() of a page"
    if frames & {"__ext4_find_entry", "ext4_lookup"}:
        return "ext4 directory lookup"
    if frames & {"__ext4_iget", "__ext4_get_inode_loc"}:
        return "ext4 inode read"
    if frames & {"ext4_find_extent", "ext4_map_blocks"}:
        return "ext4 extent tree"
    if "blkdev_issue_discard" in frames:
        return "discard of freed blocks (a filesystem mounted -o discard)"
    if frames & {"ext4_free_blocks", "ext4_mb_load_buddy_gfp", "ext4_read_block_bitmap"}:
        return "ext4 block bitmap (freeing or allocating blocks)"
    named = next((f for f in stack if f not in GENERIC), "?")
    return f"other: {named}"


def switches(perf_data):
    """(time s, prev pid, prev comm, prev state, next pid, function names of
    the call chain, its frames as perf prints them)."""
    script = subprocess.run(["perf", "script", "-i", perf_data], capture_output=True,
                            text=True, check=True).stdout
    current = None
    for line in script.splitlines():
        if line.startswith("\t") or line.startswith(" "):
            if current is not None:
                parts = line.split()
                if len(parts) > 1:
                    current[5].append(parts[1].split("+")[0])
                    current[6].append(" ".join(parts[1:]))
            continue
        m = SWITCH.search(line)
        if m:
            if current is not None:
                yield current
            current = [float(m.group(1)), int(m.group(3)), m.group(2), m.group(4),
                       int(m.group(6)), [], []]
    if current is not None:
        yield current


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="drop the page cache first")
    parser.add_argument("--top", type=int, default=12, help="rows of the per-thread table")
    parser.add_argument("--stacks", type=int, default=0, metavar="N",
                        help="print the call chains of the main thread's N longest waits")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): the sched tracepoints and drop_caches need it")
    with tempfile.TemporaryDirectory(prefix="coldstart-d-waits-") as work:
        data = os.path.join(work, "perf.data")
        if args.cold:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        status = subprocess.run(["perf", "record", "-q", "-e", "sched:sched_switch", "-g",
                                 "-o", data, "--", *command],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        events = list(switches(data))
    if not events:
        sys.exit("perf recorded no context switch: is perf allowed the sched tracepoints?")
    first = events[0][1]
    names = {}
    blocked = {}
    main_thread = collections.Counter()
    main_count = collections.Counter()
    main_waits = []
    by_thread = collections.Counter()
    for t, prev, comm, state, nxt, stack, frames in events:
        names[prev] = comm
        if nxt in blocked:
            since, why, chain = blocked.pop(nxt)
            ms = (t - since) * 1000
            by_thread[(names.get(nxt, "?"), why)] += ms
            if nxt == first:
                main_thread[why] += ms
                main_count[why] += 1
                main_waits.append((ms, (since - events[0][0]) * 1000, why, chain))
        if state.startswith("D"):
            blocked[prev] = (t, cause(stack), frames)
    print(f"command exited with status {status}")
    print(f"\nthread {first} (the program's main thread), blocked in D:")
    print(f"| cause | ms | waits |\n|---|--:|--:|")
    for why, ms in main_thread.most_common():
        print(f"| {why} | {ms:.1f} | {main_count[why]} |")
    print(f"| total | {sum(main_thread.values()):.1f} | {sum(main_count.values())} |")
    print(f"\nits {args.top} longest waits (ms after the first context switch recorded):")
    print("| at ms | ms | cause |\n|--:|--:|---|")
    longest = sorted(main_waits, key=lambda w: w[0], reverse=True)
    for ms, at, why, _ in longest[:args.top]:
        print(f"| {at:.1f} | {ms:.1f} | {why} |")
    for ms, at, why, chain in longest[:args.stacks]:
        print(f"\n{ms:.1f} ms at {at:.1f} ms ({why}):")
        for frame in chain:
            print(f"    {frame}")
    print(f"\nevery thread, by name (the {args.top} largest):")
    print("| thread | cause | ms |\n|---|---|--:|")
    for (name, why), ms in by_thread.most_common(args.top):
        print(f"| {name} | {why} | {ms:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
