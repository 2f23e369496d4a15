#!/usr/bin/env python3
"""`podlab run --rm /bin/true` next to `runc run` (issue 19, docs/benchmarks.md), a measurement
and not a test: run by hand, as root, with podlab built (PODLAB_BIN, default
target/release/podlab).

    scripts/bench-run-rm.py [ROUNDS] [OUT.json]

It re-runs itself inside `unshare -m -n -p -f --mount-proc` with a tmpfs on /run (so nothing
reaches the host's network, mounts or state), makes a runc bundle of the host's busybox-static
(`/bin/true`, runc's default spec, read-only root), then runs ROUNDS interleaved rounds of
`runc run` (+ `runc delete`), `podlab run --rm` on the default CNI network (the warm network
namespace left by the previous round's removal), the same with PODLAB_NETWORK=none, and the
same with PODLAB_WARM_NETNS=0 (the plugins' ADD on the way); wall time until each command
returned. Prints medians, minima, ratios to runc and paired ratios; ends with `podlab gc`.
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
PODLAB = os.path.abspath(
    os.environ.get("PODLAB_BIN", os.path.join(HERE, "..", "target", "release", "podlab")))
INSIDE = "PODLAB_BENCH_INSIDE"


def bundle(dir):
    rootfs = os.path.join(dir, "rootfs", "bin")
    os.makedirs(rootfs)
    shutil.copy(shutil.which("busybox"), os.path.join(rootfs, "busybox"))
    os.symlink("busybox", os.path.join(rootfs, "true"))
    subprocess.run(["runc", "spec"], cwd=dir, check=True)
    path = os.path.join(dir, "config.json")
    config = json.load(open(path))
    config["process"]["terminal"] = False
    config["process"]["args"] = ["/bin/true"]
    config["root"]["readonly"] = True
    json.dump(config, open(path, "w"))


def timed(argv, env=None):
    start = time.perf_counter_ns()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL)
    elapsed = (time.perf_counter_ns() - start) / 1e6
    assert done.returncode == 0, done
    return elapsed


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    out = sys.argv[2] if len(sys.argv) > 2 else None
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    env = dict(os.environ, PODLAB_ROOT="/run/podlab")
    work = tempfile.mkdtemp(prefix="bench-run-rm.")
    try:
        measure(rounds, out, env, work)
    finally:
        # runc's bundle is on the host's /tmp, as in every earlier run: removed even when a
        # command fails.
        shutil.rmtree(work)


def measure(rounds, out, env, work):
    bundle(work)
    n = [0]

    def runc():
        n[0] += 1
        ms = timed(["runc", "--root", "/run/runc-bench", "run", "--bundle", work, f"b{n[0]}"])
        subprocess.run(["runc", "--root", "/run/runc-bench", "delete", "-f", f"b{n[0]}"],
                       stderr=subprocess.DEVNULL)
        return ms

    def podlab(name, **extra):
        return timed([PODLAB, "run", name, "--image", "busybox", "--rm", "--restart", "Never",
                      "--command", "--", "/bin/true"], dict(env, **extra))

    rows = {"runc run": [], "podlab cni (warm)": [], "podlab none": [],
            "podlab cni (no warm ns)": []}
    podlab("w0"), runc(), podlab("w1", PODLAB_NETWORK="none")  # warm-up
    time.sleep(0.3)
    for i in range(rounds):
        rows["runc run"].append(runc())
        time.sleep(0.05)
        rows["podlab cni (warm)"].append(podlab(f"c{i}"))
        time.sleep(0.05)
        rows["podlab none"].append(podlab(f"n{i}", PODLAB_NETWORK="none"))
        time.sleep(0.05)
        rows["podlab cni (no warm ns)"].append(podlab(f"k{i}", PODLAB_WARM_NETNS="0"))
        time.sleep(0.1)
    load = open("/proc/loadavg").read().split()[:3]
    base = statistics.median(rows["runc run"])
    print(f"{rounds} rounds, load average {' '.join(load)}")
    for name, values in rows.items():
        median = statistics.median(values)
        paired = statistics.median(a / b for a, b in zip(values, rows["runc run"]))
        print(f"{name:26s} median {median:8.2f} ms  min {min(values):8.2f}  "
              f"/ runc {median / base:5.2f}  paired {paired:5.2f}")
    if out:
        json.dump(rows, open(out, "w"))
    subprocess.run([PODLAB, "gc"], env=env, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    if os.environ.get(INSIDE):
        main()
    else:
        os.execvpe("unshare", ["unshare", "-m", "-n", "-p", "-f", "--mount-proc",
                               sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                   dict(os.environ, **{INSIDE: "1"}))
