"""Shared pieces of coldstart's benchmark scripts: statistics as
BENCHMARKS.md asks for them (median, mean, 95% confidence interval),
installing the large packages a benchmark measures, and building coldstart.
"""

import os
import random
import statistics
import subprocess
import sys
import threading
import time

# Two-sided 95% Student t quantiles by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365,
       8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160,
       14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
       20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def t95(df):
    if df in T95:
        return T95[df]
    known = sorted(k for k in T95 if k <= df)
    return T95[known[-1]] if known else T95[1]


def ci95(samples):
    """Half-width of the 95% confidence interval of the mean."""
    if len(samples) < 2:
        return float("nan")
    return t95(len(samples) - 1) * statistics.stdev(samples) / len(samples) ** 0.5


def median_ci95(samples, resamples=10000, seed=1):
    """95% bootstrap interval of the median."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(samples, k=len(samples)))
                     for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def gap_closed_ci95(rounds, resamples=10000, seed=1):
    """95% bootstrap interval of the share of the cold-warm gap a variant
    closes, (median cold - median variant) / (median cold - median warm),
    from interleaved rounds: `rounds` is a list of (warm, cold, variant)
    times, one per round, resampled whole so that each keeps what the
    machine was doing during its round. None with fewer than 3 rounds."""
    if len(rounds) < 3:
        return None
    rng = random.Random(seed)
    gaps = []
    for _ in range(resamples):
        pick = rng.choices(rounds, k=len(rounds))
        warm, cold, variant = (statistics.median(r[i] for r in pick) for i in range(3))
        if cold > warm:
            gaps.append((cold - variant) / (cold - warm))
    if len(gaps) < resamples // 2:
        return None
    gaps.sort()
    return gaps[int(0.025 * len(gaps))], gaps[int(0.975 * len(gaps)) - 1]


def describe(samples, unit=1e3, suffix="ms"):
    """'median (mean ± CI)' in the given unit."""
    return (f"{statistics.median(samples) * unit:.1f} {suffix} "
            f"({statistics.mean(samples) * unit:.1f} ± {ci95(samples) * unit:.1f})")


def ensure_installed(paths):
    """Installs the Debian packages of {path: package} whose path is missing."""
    missing = sorted({pkg for path, pkg in paths.items() if pkg and not os.path.exists(path)})
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"missing {', '.join(missing)}: run as root so apt-get can install them")
    print(f"installing {' '.join(missing)} ...", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def build_coldstart():
    """Builds coldstart in release mode; returns the binary's path (under
    CARGO_TARGET_DIR when it is set, as cargo puts it there)."""
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "coldstart"], check=True, cwd=ROOT)
    target = os.path.join(ROOT, os.environ.get("CARGO_TARGET_DIR") or "target")
    return os.path.join(target, "release", "coldstart")


# Firefox can archive telemetry pings at every start (datareporting/archived)
# and scans that directory at the next one: a profile started a few thousand
# times by benchmarks held 7,156 pings (three a start), and its warm start
# took 1.69 s against 0.66 s for a copy without them (0.68 against 0.20 s of
# system time). These preferences keep the profile's state the same from
# one start to the next, so that runs early and late in a benchmark start the
# same program.
FIREFOX_PREFS = {
    "toolkit.telemetry.archive.enabled": "false",
    "toolkit.telemetry.enabled": "false",
    "toolkit.telemetry.unified": "false",
    "datareporting.healthreport.uploadEnabled": "false",
    "datareporting.policy.dataSubmissionEnabled": "false",
}


def firefox_profile(directory):
    """Creates (or keeps) a Firefox profile directory whose user.js holds
    FIREFOX_PREFS; returns its path."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "user.js"), "w") as f:
        for name, value in FIREFOX_PREFS.items():
            f.write(f'user_pref("{name}", {value});\n')
    return directory


FIREFOX = "/usr/bin/firefox-esr"


def firefox_argv(work):
    """The Firefox start the benchmarks measure: headless, a screenshot of
    about:blank, in the profile work/firefox-profile (created with
    FIREFOX_PREFS)."""
    profile = firefox_profile(os.path.join(work, "firefox-profile"))
    return [FIREFOX, "--headless", "--no-remote", "--profile", profile,
            "--screenshot", os.path.join(work, "shot.png"), "about:blank"]


def timed(argv, **kwargs):
    """Wall time of one run of argv, output discarded."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kwargs)
    return time.perf_counter() - start


class ReadAhead:
    """Sets read_ahead_kb of every backing device for a `with` block and
    restores each device's own value on every way out (None leaves them)."""

    def __init__(self, kb):
        self.kb = kb
        self.saved = {}

    def __enter__(self):
        if self.kb is not None:
            import glob
            self.saved = {p: open(p).read().strip()
                          for p in glob.glob("/sys/class/bdi/*/read_ahead_kb")}
            for path in self.saved:
                with open(path, "w") as f:
                    f.write(str(self.kb))
        return self

    def __exit__(self, *exc):
        for path, value in self.saved.items():
            with open(path, "w") as f:
                f.write(value)
        return False


def read_ahead_of(path):
    """read_ahead_kb of the device holding `path`, as text."""
    dev = os.stat(path).st_dev
    try:
        with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def read_ahead_settings(requested, path="/usr"):
    """The read_ahead_kb settings to measure at (those requested, else 128
    and the device's own), and the device's own setting as text: a block at
    the device's own setting changes nothing (ReadAhead(None))."""
    device = read_ahead_of(path)
    settings = requested or sorted({128, int(device)} if device.isdigit() else {128})
    return settings, device


class Serving:
    """`coldstart serve --hold-out 0` (and the flags `extra`) on the state
    directory `state` for a `with` block, stopped by its pid (SIGTERM, then
    SIGKILL) on every way out; what it said goes to the file `log` when one
    is given.

    A thread reads what the service says for as long as it runs: a pipe
    left unread fills and stops a service that logs, and the lines said
    after the last read were lost (communicate() after readline() on the
    same pipe returned none of them)."""

    def __init__(self, coldstart, state, log=None, extra=()):
        self.argv = [coldstart, "serve", "--state", state, "--hold-out", "0", *extra]
        self.log = log
        self.process = None
        self.reader = None
        self.said = []
        self.lock = threading.Lock()
        self.last_line = time.monotonic()

    def __enter__(self):
        self.process = subprocess.Popen(self.argv, stderr=subprocess.PIPE, text=True)
        serving = threading.Event()

        def read():
            for line in self.process.stderr:
                with self.lock:
                    self.said.append(line)
                    self.last_line = time.monotonic()
                # Serving once it said so: "serving N program(s) from ...".
                if line.startswith("coldstart serve: serving "):
                    serving.set()
            serving.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        serving.wait()
        with self.lock:
            started = any(line.startswith("coldstart serve: serving ") for line in self.said)
            said = "".join(self.said)
        if not started:
            self.__exit__()
            sys.exit(f"coldstart serve did not start: {said}")
        return self

    def wait_quiet(self, seconds):
        """Waits until the service said nothing for `seconds` (it is done
        with the starts so far) or stopped."""
        while self.process.poll() is None:
            with self.lock:
                quiet = time.monotonic() - self.last_line
            if quiet >= seconds:
                return
            time.sleep(min(0.2, seconds - quiet))

    def __exit__(self, *exc):
        if self.process and self.process.poll() is None:
            self.process.send_signal(15)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.reader:
            self.reader.join(timeout=10)
        if self.log:
            with self.lock, open(self.log, "w") as f:
                f.write("".join(self.said))
        return False
