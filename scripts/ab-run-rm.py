#!/usr/bin/env python3
"""Two builds of podlab side by side: `podlab run --rm /bin/true` of each, alternated round by
round (the order flipped every round), a measurement and not a test. Run by hand, as root:

    scripts/ab-run-rm.py ROUNDS BEFORE/podlab AFTER/podlab

Each PODLAB must have its podlab-shim and podlab-pause beside it (copy the three release
binaries of a build to a folder of their own). It re-runs itself inside `unshare -m -n -p -f
--mount-proc` with a tmpfs on /run, as scripts/bench-run-rm.py does. AB_NET=cni uses the
default CNI network (the warm namespace) instead of PODLAB_NETWORK=none. Prints each build's
median, mean and minimum, and the median of AFTER/BEFORE over neighbouring rounds; ends with
`podlab gc`.
"""
import os, statistics, subprocess, sys, time

if os.environ.get("AB_INSIDE") != "1":
    os.execvp("unshare", ["unshare", "-m", "-n", "-p", "-f", "--mount-proc", "--propagation",
                          "private", "env", "AB_INSIDE=1", sys.executable] + sys.argv)
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
rounds, builds = int(sys.argv[1]), sys.argv[2:4]
env = dict(os.environ, PODLAB_ROOT="/run/podlab", PODLAB_NETWORK="none")
if os.environ.get("AB_NET") == "cni":
    del env["PODLAB_NETWORK"]


def run_rm(podlab, name):
    start = time.perf_counter_ns()
    done = subprocess.run([podlab, "run", name, "--image", "busybox", "--rm", "--restart",
                           "Never", "--command", "--", "/bin/true"], env=env,
                          stdout=subprocess.DEVNULL)
    assert done.returncode == 0, done
    return (time.perf_counter_ns() - start) / 1e6


for podlab in builds:  # warm-up
    run_rm(podlab, "warm-up")
    time.sleep(0.1)
took = {podlab: [] for podlab in builds}
for i in range(rounds):
    for j, podlab in enumerate(builds if i % 2 == 0 else builds[::-1]):
        took[podlab].append(run_rm(podlab, f"r{i}-{j}"))
        time.sleep(0.06)
for podlab in builds:
    ms = took[podlab]
    print(f"{podlab:32s} median {statistics.median(ms):6.2f}  mean {statistics.mean(ms):6.2f}"
          f"  min {min(ms):6.2f} ms")
paired = [after / before for before, after in zip(took[builds[0]], took[builds[1]])]
print(f"paired after/before: median {statistics.median(paired):.3f}")
subprocess.run([builds[0], "gc"], env=env, stdout=subprocess.DEVNULL)
