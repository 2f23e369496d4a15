#!/usr/bin/env python3
"""What hardening costs `podlab run --rm` (issue 14, docs/benchmarks.md): a measurement and
not a test. Run by hand, as root, with a release build (PODLAB_BIN, default
target/release/podlab):

    scripts/bench-hardening.py [ROUNDS] [MODES]

`podlab run --rm bN --image busybox --restart Never --command -- /bin/true` with
PODLAB_NETWORK=none in a state root of its own (PODLAB_ROOT, default /run/podlab-hardbench),
the four modes interleaved round by round: seccomp (the node's default profile,
PODLAB_NODE_SECCOMP_DEFAULT) and cgroups (PODLAB_CGROUPS) each on and off. MODES picks some
of them (`on-on,off-off`: seccomp-cgroups). Wall time until the command returned; prints the
medians, minima and ratios to "neither", and the load average before and after. Ends with
`podlab gc` and removes the state root.
"""
import os, shutil, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
PODLAB = os.path.abspath(
    os.environ.get("PODLAB_BIN", os.path.join(HERE, "..", "target", "release", "podlab")))
ROOT = os.environ.get("PODLAB_ROOT", "/run/podlab-hardbench")
ALL = ["on-on", "on-off", "off-on", "off-off"]


def env_of(mode):
    seccomp, cgroups = mode.split("-")
    env = dict(os.environ, PODLAB_ROOT=ROOT, PODLAB_NETWORK="none")
    env["PODLAB_NODE_SECCOMP_DEFAULT"] = "true" if seccomp == "on" else "false"
    env["PODLAB_CGROUPS"] = cgroups
    return env


def timed(name, env):
    argv = [PODLAB, "run", "--rm", name, "--image", "busybox", "--restart", "Never",
            "--command", "--", "/bin/true"]
    start = time.perf_counter_ns()
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = (time.perf_counter_ns() - start) / 1e6
    assert done.returncode == 0, (argv, done.returncode)
    return elapsed


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 25
    modes = sys.argv[2].split(",") if len(sys.argv) > 2 else ALL
    load_before = open("/proc/loadavg").read().split()[:3]
    times = {mode: [] for mode in modes}
    try:
        # A first run of each mode, not counted: the image and the page cache.
        for mode in modes:
            timed(f"warm-{mode}", env_of(mode))
            time.sleep(0.3)
        for i in range(rounds):
            for mode in modes:
                times[mode].append(timed(f"b{i}-{mode}", env_of(mode)))
                # The previous pod's removal goes on after its command returned.
                time.sleep(0.3)
    finally:
        time.sleep(1)
        subprocess.run([PODLAB, "gc"], env=dict(os.environ, PODLAB_ROOT=ROOT),
                       stdout=subprocess.DEVNULL)
        shutil.rmtree(ROOT, ignore_errors=True)
    load_after = open("/proc/loadavg").read().split()[:3]
    base = statistics.median(times["off-off"]) if "off-off" in times else None
    print(f"{rounds} rounds, {PODLAB}; load average {' '.join(load_before)} before, "
          f"{' '.join(load_after)} after")
    print("seccomp-cgroups  median ms  (fastest)  ratio to neither")
    for mode in modes:
        median = statistics.median(times[mode])
        ratio = f"{median / base:.2f}" if base else "-"
        print(f"{mode:15}  {median:9.1f}  ({min(times[mode]):.1f})  {ratio}")


if __name__ == "__main__":
    main()
