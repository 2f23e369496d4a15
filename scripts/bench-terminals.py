#!/usr/bin/env python3
"""Terminal benchmarks of issue 18 (docs/benchmarks.md), a measurement and not a test: run by
hand, as root, with podlab built (target/debug or PODLAB_BIN).

1. Keystroke echo round-trip through `podlab exec -it POD -- cat`: one byte written to the
   user's terminal (a pty this script holds) until the container's line discipline has echoed
   it back through the relay, N times; median and p90.
2. Non-tty `podlab exec POD -- /bin/true` next to `runc exec ID /bin/true` into a runc
   container of the same busybox, interleaved, in one run; medians and their ratio.
"""
import json, os, pty, select, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
PODLAB = os.environ.get("PODLAB_BIN", os.path.join(HERE, "..", "target", "debug", "podlab"))
ROOT = os.environ.get("PODLAB_ROOT", "/run/podlab-ttybench")
ENV = dict(os.environ, PODLAB_ROOT=ROOT, PODLAB_NETWORK="none")
N = int(os.environ.get("N", "300"))


def podlab(*args, **kw):
    return subprocess.run([PODLAB, *args], env=ENV, check=True, capture_output=True, text=True, **kw)


def echo_round_trips():
    pid, master = pty.fork()
    if pid == 0:
        os.execve(PODLAB, [PODLAB, "exec", "-it", "bench", "--", "cat"], ENV)
    seen = b""

    def read_until(needle, limit=30):
        nonlocal seen
        end = time.monotonic() + limit
        while needle not in seen:
            left = end - time.monotonic()
            if left <= 0:
                raise SystemExit(f"no {needle!r} within {limit}s: {seen[-200:]!r}")
            r, _, _ = select.select([master], [], [], left)
            if r:
                seen += os.read(master, 4096)
        seen = seen[seen.index(needle) + len(needle):]

    # cat is ready when its echo comes (from the container: podlab's raw mode is on by then,
    # so the terminal here echoes nothing itself).
    for _ in range(100):
        if select.select([master], [], [], 0.1)[0]:
            seen += os.read(master, 4096)
        os.write(master, b"!")
        if select.select([master], [], [], 0.5)[0]:
            seen += os.read(master, 4096)
            if b"!" in seen:
                break
    time.sleep(0.5)
    read_until(b"!")
    times = []
    for i in range(N):
        key = bytes([ord("a") + i % 26])
        start = time.perf_counter_ns()
        os.write(master, key)
        read_until(key)
        times.append((time.perf_counter_ns() - start) / 1e3)
    os.write(master, b"\r")
    time.sleep(0.2)
    os.write(master, b"\x04")
    for _ in range(100):
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
        if select.select([master], [], [], 0.1)[0]:
            try:
                os.read(master, 4096)
            except OSError:
                pass
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    return times


def runc_container(work):
    bundle = os.path.join(work, "bundle")
    rootfs = os.path.join(bundle, "rootfs")
    os.makedirs(os.path.join(rootfs, "bin"))
    shutil.copy("/bin/busybox", os.path.join(rootfs, "bin", "busybox"))
    for tool in ["sh", "true", "sleep"]:
        os.symlink("busybox", os.path.join(rootfs, "bin", tool))
    subprocess.run(["runc", "spec"], cwd=bundle, check=True)
    with open(os.path.join(bundle, "config.json")) as f:
        spec = json.load(f)
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["sleep", "9999"]
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(spec, f)
    subprocess.run(["runc", "run", "-d", "podlab-bench"], cwd=bundle, check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def timed(argv, env=None):
    start = time.perf_counter_ns()
    subprocess.run(argv, env=env, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return (time.perf_counter_ns() - start) / 1e6


def main():
    podlab("run", "bench", "--image", "busybox", "--", "sleep", "9999")
    podlab("wait", "pod/bench", "--for=condition=Ready", "--timeout=120s")
    work = tempfile.mkdtemp(prefix="podlab-ttybench-")
    try:
        echo = echo_round_trips()
        print(f"keystroke echo through exec -it, {N} keys: median {statistics.median(echo):.0f} us, "
              f"p90 {statistics.quantiles(echo, n=10)[-1]:.0f} us, min {min(echo):.0f} us")
        runc_container(work)
        ours, theirs = [], []
        for _ in range(int(os.environ.get("EXECS", "40"))):
            ours.append(timed([PODLAB, "exec", "bench", "--", "/bin/true"], ENV))
            theirs.append(timed(["runc", "exec", "podlab-bench", "/bin/true"]))
        mo, mt = statistics.median(ours), statistics.median(theirs)
        print(f"exec /bin/true: podlab {mo:.2f} ms, runc exec {mt:.2f} ms (ratio {mo / mt:.2f}); "
              f"fastest {min(ours):.2f} vs {min(theirs):.2f} ms")
    finally:
        subprocess.run(["runc", "delete", "-f", "podlab-bench"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run([PODLAB, "delete", "pod", "bench", "--now"], env=ENV, capture_output=True)
        subprocess.run([PODLAB, "node", "--stop"], env=ENV, capture_output=True)
        subprocess.run([PODLAB, "gc"], env=ENV, capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
