#!/usr/bin/env python3
"""Issue 19's scale targets with podlab's pods alone (docs/benchmarks.md), a measurement and
not a test: run by hand, as root, with podlab built (PODLAB_BIN, default target/release/podlab).

    scripts/bench-scale.py N [ROUNDS] [IDLE_SECONDS]

It re-runs itself inside `unshare -m -n -p -f --mount-proc` with a tmpfs on /run (nothing
reaches the host's network, mounts or state). On the default network (PODLAB_NETWORK as set):

1. the first pod: ROUNDS (default 5) times `podlab apply -f` of a one-container pod, then
   `podlab wait --for=condition=Ready`, timed together, then `podlab delete` (not timed);
2. N pods grown by a ReplicaSet (not timed), until all N are Ready;
3. the idle node agent: its utime + stime (/proc/PID/stat) over IDLE_SECONDS (default 60),
   as % of one core, and its threads' part by kind (their schedstat run times);
4. memory per pod: the Rss and Pss of every shim and pause process (smaps_rollup), / N;
5. one more pod at N: as in 1.

With SCALE_TRACE=1 it then applies one more pod with `--trace` and prints its phases.

Before 3 it waits (at most 15 minutes) for the machine to settle, until the one-minute load
average is below SETTLE_LOAD (default 1.0): growing N pods at once leaves a backlog (the load
reached 620 at 1000 pods on 2 cores) that would otherwise be counted as the idle agent's and
the one more pod's.

Each timed pod starts ROUND_GAP seconds (default 1.0) after the last one's delete returned, so
that what the last one left running (its removal, the agent's warm namespace for the next pod)
is not counted in the next one.

Prints each figure, the load average, and ends with the pods deleted, the agent stopped and
`podlab gc`.
"""
import os, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
PODLAB = os.path.abspath(
    os.environ.get("PODLAB_BIN", os.path.join(HERE, "..", "target", "release", "podlab")))
INSIDE = "PODLAB_BENCH_INSIDE"
ROOT = "/run/podlab"
ROUND_GAP = float(os.environ.get("ROUND_GAP", "1.0"))
WORKLOAD = ["sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"]


def podlab(*args, check=True):
    done = subprocess.run([PODLAB, *args], env=dict(os.environ, PODLAB_ROOT=ROOT),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"podlab {' '.join(args)}: {done.stderr}")
    return done.stdout


def reap():
    """This script is the namespace's PID 1: the orphans it inherits are reaped here."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def manifest(kind, name, replicas=None):
    container = ("  containers:\n  - name: c\n    image: busybox\n"
                 f"    command: [{', '.join(repr(w) for w in WORKLOAD)}]\n")
    if kind == "Pod":
        return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n"
                f"  terminationGracePeriodSeconds: 0\n{container}")
    pod = container.replace("\n  ", "\n      ").replace("  containers", "      containers", 1)
    return (f"apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {{name: {name}}}\nspec:\n"
            f"  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n"
            f"  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n"
            f"      terminationGracePeriodSeconds: 0\n{pod}")


def one_more(work, rounds, tag):
    times = []
    for i in range(rounds):
        # Each pod on a node at rest: the last one's removal and the agent's work ahead (the
        # warm network namespace it makes for the next pod) are done.
        time.sleep(ROUND_GAP)
        reap()
        path = os.path.join(work, f"{tag}{i}.yaml")
        open(path, "w").write(manifest("Pod", f"{tag}{i}"))
        start = time.perf_counter()
        podlab("apply", "-f", path)
        podlab("wait", "--for=condition=Ready", f"pod/{tag}{i}", "--timeout=120s")
        times.append((time.perf_counter() - start) * 1000)
        podlab("delete", "pod", f"{tag}{i}", "--grace-period", "0")
        reap()
    return times


def ready_pods():
    out = podlab("get", "pods", "--no-headers")
    return sum(1 for line in out.splitlines() if " 1/1 " in f" {line} " and "Running" in line)


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def thread_cpu(pid):
    """CPU nanoseconds of each of the agent's threads by kind (/proc/PID/task/*/schedstat):
    the pod workers (named pod-NAME), the PLEG, the controllers, the main loop."""
    kinds = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            ns = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except OSError:
            continue
        kind = "pod workers" if comm.startswith("pod-") else comm
        kinds[kind] = kinds.get(kind, 0) + ns
    return kinds


def memory():
    rss = pss = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            if comm not in ("podlab-shim", "podlab-pause"):
                continue
            for line in open(f"/proc/{pid}/smaps_rollup"):
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            continue
    return rss, pss


def main():
    n = int(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    idle = float(sys.argv[3]) if len(sys.argv) > 3 else 60
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    # On the namespace's own /run: the manifests go with it, even when the run is killed.
    work = tempfile.mkdtemp(prefix="bench-scale.", dir="/run")
    print(f"load average at the start: {open('/proc/loadavg').read().split()[:3]}", flush=True)
    one_more(work, 1, "warmup")
    first = one_more(work, rounds, "first")
    print(f"first pod: median {statistics.median(first):.1f} ms, all {[round(t, 1) for t in first]}",
          flush=True)
    rs = os.path.join(work, "rs.yaml")
    open(rs, "w").write(manifest("ReplicaSet", "scale", n))
    start = time.perf_counter()
    podlab("apply", "-f", rs)
    while ready_pods() < n:
        reap()
        if time.perf_counter() - start > 3600:
            raise SystemExit(f"only {ready_pods()} of {n} pods Ready after an hour")
        time.sleep(2)
    print(f"{n} pods Ready in {time.perf_counter() - start:.0f} s", flush=True)
    settle_load = float(os.environ.get("SETTLE_LOAD", "1.0"))
    settle_start = time.perf_counter()
    while os.getloadavg()[0] >= settle_load and time.perf_counter() - settle_start < 900:
        reap()
        time.sleep(5)
    print(f"settled for {time.perf_counter() - settle_start:.0f} s: load average "
          f"{open('/proc/loadavg').read().split()[:3]}", flush=True)
    agent = int(open(os.path.join(ROOT, "node.pid")).read().split()[0])
    hz = os.sysconf("SC_CLK_TCK")
    before, threads_before, t0 = cpu_ticks(agent), thread_cpu(agent), time.perf_counter()
    time.sleep(idle)
    elapsed = time.perf_counter() - t0
    used = (cpu_ticks(agent) - before) / hz / elapsed * 100
    spent = {kind: ns - threads_before.get(kind, 0) for kind, ns in thread_cpu(agent).items()}
    parts = ", ".join(f"{kind} {ns / 1e9 / elapsed * 100:.2f}"
                      for kind, ns in sorted(spent.items(), key=lambda kv: -kv[1]))
    print(f"idle agent with {n} pods: {used:.2f} % of one core over {idle:.0f} s ({parts})",
          flush=True)
    rss, pss = memory()
    print(f"shim + pause per pod at {n}: Rss {rss / n:.0f} kB, Pss {pss / n:.0f} kB", flush=True)
    more = one_more(work, rounds, "more")
    print(f"one more pod at {n}: median {statistics.median(more):.1f} ms, all "
          f"{[round(t, 1) for t in more]}; / first {statistics.median(more) / statistics.median(first):.2f}",
          flush=True)
    if os.environ.get("SCALE_TRACE"):
        # Where one more pod's time goes at N: `podlab apply --trace`'s table of phases.
        path = os.path.join(work, "traced.yaml")
        open(path, "w").write(manifest("Pod", "traced"))
        traced = subprocess.run([PODLAB, "apply", "-f", path, "--trace"],
                                env=dict(os.environ, PODLAB_ROOT=ROOT), capture_output=True, text=True)
        print(traced.stdout + traced.stderr, flush=True)
        podlab("wait", "--for=condition=Ready", "pod/traced", "--timeout=120s")
        podlab("delete", "pod", "traced", "--grace-period", "0")
        reap()
    print(f"load average at the end: {open('/proc/loadavg').read().split()[:3]}")
    podlab("delete", "replicaset", "scale", check=False)
    podlab("delete", "pods", "--all", "--grace-period", "0", check=False)
    # The namespace ends with this script: the agent finishes its removals first.
    gone_by = time.perf_counter() + 900
    while podlab("get", "pods", "--no-headers", check=False).strip() and time.perf_counter() < gone_by:
        reap()
        time.sleep(2)
    podlab("node", "--stop", check=False)
    podlab("gc", check=False)
    reap()


if __name__ == "__main__":
    if os.environ.get(INSIDE):
        main()
    else:
        os.execvpe("unshare", ["unshare", "-m", "-n", "-p", "-f", "--mount-proc",
                               sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                   dict(os.environ, **{INSIDE: "1"}))
