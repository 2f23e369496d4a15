#!/bin/sh
# podlab run --rm of /bin/true, interleaved: the node's seccomp default on, then off (docs/benchmarks.md).
# A measurement, not a test: run it by hand, as root, with podlab built (target/debug or PODLAB_BIN).
set -e
export PODLAB_ROOT=${PODLAB_ROOT:-/run/podlab-secbench} PODLAB_NETWORK=none
P=${PODLAB_BIN:-$(dirname "$0")/../target/debug/podlab}
$P image ls >/dev/null 2>&1 || true
for i in $(seq 1 15); do
  for mode in true false; do
    s=$(date +%s%N)
    PODLAB_NODE_SECCOMP_DEFAULT=$mode $P run --rm b$i$mode --image busybox --restart Never --command -- /bin/true >/dev/null
    e=$(date +%s%N)
    echo "$mode $(( (e - s) / 1000 ))"
  done
done
