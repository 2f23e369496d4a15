#!/usr/bin/env python3
"""How long after `podlab run --rm` returned its pod's traces stay on the node (issue 19:
"everything is gone once the command returns, or within 2 s after"), a measurement and not a
test: run by hand, as root, with podlab built (PODLAB_BIN, default target/release/podlab).

    scripts/bench-gone.py [ROUNDS] [GAP_SECONDS]

It re-runs itself inside `unshare -m -n -p -f --mount-proc` with a tmpfs on /run, as
bench-run-rm.py does. Each round runs `podlab run --rm --image busybox -- /bin/true` on the
default CNI network (with the environment's PODLAB_WARM_NETNS, if set), then polls every 2 ms
until nothing of podlab is left: no podlab process (shim, pause, removal child, warm-namespace
keeper), no veth, no bridge `podlab0`, no sandbox folder, no network folder under
/run/podlab-net. It prints, per round, how long the command took and when the last trace went
(ms after the return); the next round starts GAP_SECONDS (default 0.2) after that, so no round
finds a warm namespace (bench-run-rm.py measures what one saves). Ends with `podlab gc`.
"""
import os, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
PODLAB = os.path.abspath(
    os.environ.get("PODLAB_BIN", os.path.join(HERE, "..", "target", "release", "podlab")))
INSIDE = "PODLAB_BENCH_INSIDE"
SYSFS = "/run/bench-gone-sysfs"


def traces():
    """What of podlab is still on the node (empty when nothing)."""
    # This script is the namespace's PID 1: the orphans it inherits are reaped here.
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in (1, os.getpid()):
            continue
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
        except OSError:
            continue
        if comm.startswith("podlab"):
            left.append(comm)
    for link in os.listdir(f"{SYSFS}/class/net"):
        if link == "podlab0" or link.startswith("veth"):
            left.append(link)
    for folder in ("/run/podlab/sandboxes", "/run/podlab-net"):
        if os.path.isdir(folder) and os.listdir(folder):
            left.append(folder)
    return left


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    gap = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
    # /sys/class/net lists the links of the namespace that mounted sysfs (the host's): a
    # sysfs of this one's, beside it (the cgroup mounts under /sys stay).
    os.makedirs(SYSFS, exist_ok=True)
    subprocess.run(["mount", "-t", "sysfs", "sysfs", SYSFS], check=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    env = dict(os.environ, PODLAB_ROOT="/run/podlab")
    returned, gone = [], []
    for i in range(rounds):
        start = time.perf_counter()
        done = subprocess.run([PODLAB, "run", f"g{i}", "--image", "busybox", "--rm",
                               "--restart", "Never", "--command", "--", "/bin/true"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        back = time.perf_counter()
        assert done.returncode == 0, done
        seen = {}
        while traces():
            now = time.perf_counter() - back
            for t in traces():
                seen.setdefault(t, 0)
                seen[t] = now
            if now > 30:
                print(f"round {i}: still left after 30 s: {traces()}")
                break
            time.sleep(0.002)
        last = time.perf_counter()
        returned.append((back - start) * 1000)
        gone.append((last - back) * 1000)
        print(f"round {i}: returned after {returned[-1]:7.1f} ms, gone {gone[-1]:7.1f} ms later")
        if os.environ.get("BENCH_GONE_VERBOSE"):
            print("   last seen (ms after the return):",
                  {k: round(v * 1000) for k, v in sorted(seen.items(), key=lambda kv: kv[1])})
        time.sleep(gap)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"{rounds} rounds, PODLAB_WARM_NETNS="
          f"{os.environ.get('PODLAB_WARM_NETNS', '(default)')}, load average {' '.join(load)}")
    print(f"gone after the return: median {statistics.median(gone):.1f} ms, "
          f"max {max(gone):.1f} ms")
    subprocess.run([PODLAB, "gc"], env=env, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    if os.environ.get(INSIDE):
        main()
    else:
        os.execvpe("unshare", ["unshare", "-m", "-n", "-p", "-f", "--mount-proc",
                               sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                   dict(os.environ, **{INSIDE: "1"}))
