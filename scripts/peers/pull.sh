#!/usr/bin/env bash
# `cargo xtask peers pull`: pulling a ~50 MB, 5-layer image from a local registry, podlab next
# to containerd's `ctr image pull`, one run each on the same registry, wall time and peak RSS.
#
# Everything is private and temporary: a docker-registry on a free port of 127.0.0.1 (plain
# HTTP, configured so for both), a containerd with its root, state and socket in the scratch
# folder (CRI off), podlab's state root there too. All of it is stopped and removed at the end.
# Usage: scripts/peers/pull.sh PODLAB_BINARY   (a release build: cargo build --release -p podlab)
set -euo pipefail
podlab=${1:?usage: pull.sh PODLAB_BINARY}
for tool in docker-registry skopeo containerd ctr /usr/bin/time python3; do
  command -v "$tool" >/dev/null || { echo "pull.sh: $tool is missing" >&2; exit 2; }
done
scratch=$(mktemp -d /tmp/podlab-pull-bench.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  # containerd's snapshots are overlay folders, never mounted by a pull: plain removal works.
  rm -rf "$scratch"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
host=127.0.0.1:$port

# The registry.
cat > "$scratch/registry.yml" <<EOF
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $scratch/registry}}
http: {addr: "$host"}
EOF
docker-registry serve "$scratch/registry.yml" >"$scratch/registry.log" 2>&1 &
pids+=($!)

# The image: 5 layers of 13.5 MB of base64 text each (about 10 MB gzipped: ~50 MB to download).
layout=$scratch/layout
mkdir -p "$layout/blobs/sha256"
echo '{"imageLayoutVersion":"1.0.0"}' > "$layout/oci-layout"
layers="" diffs=""
for i in 1 2 3 4 5; do
  mkdir -p "$scratch/l$i/data$i"
  head -c 10000000 /dev/urandom | base64 -w 76 > "$scratch/l$i/data$i/file"
  tar -C "$scratch/l$i" -cf "$scratch/l$i.tar" "data$i"
  diff=$(sha256sum < "$scratch/l$i.tar" | cut -d' ' -f1)
  gzip -1 -c "$scratch/l$i.tar" > "$scratch/l$i.tgz"
  blob=$(sha256sum < "$scratch/l$i.tgz" | cut -d' ' -f1)
  mv "$scratch/l$i.tgz" "$layout/blobs/sha256/$blob"
  size=$(stat -c %s "$layout/blobs/sha256/$blob")
  layers+="${layers:+,}{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$blob\",\"size\":$size}"
  diffs+="${diffs:+,}\"sha256:$diff\""
  rm -rf "$scratch/l$i" "$scratch/l$i.tar"
done
blob() { # FILE MEDIATYPE -> descriptor
  local digest size
  digest=$(sha256sum < "$1" | cut -d' ' -f1); size=$(stat -c %s "$1")
  mv "$1" "$layout/blobs/sha256/$digest"
  printf '{"mediaType":"%s","digest":"sha256:%s","size":%s}' "$2" "$digest" "$size"
}
printf '{"architecture":"amd64","os":"linux","config":{"Cmd":["/bin/sh"]},"rootfs":{"type":"layers","diff_ids":[%s]}}' "$diffs" > "$scratch/config"
config=$(blob "$scratch/config" application/vnd.oci.image.config.v1+json)
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":[%s]}' "$config" "$layers" > "$scratch/manifest"
manifest=$(blob "$scratch/manifest" application/vnd.oci.image.manifest.v1+json)
printf '{"schemaVersion":2,"manifests":[%s]}' "${manifest%\}},\"annotations\":{\"org.opencontainers.image.ref.name\":\"bench\"}}" > "$layout/index.json"
for _ in $(seq 100); do curl -sf "http://$host/v2/" >/dev/null && break; sleep 0.1; done
unshare --mount --propagation private -- sh -c 'mount -t tmpfs podlab-bench /var/lib && exec "$0" "$@"' \
  skopeo copy -q --dest-tls-verify=false "oci:$layout:bench" "docker://$host/bench/image:1"
image_mb=$(du -sm "$layout/blobs" | cut -f1)
echo "image: 5 layers, ${image_mb} MB of blobs, on $host"

# containerd, private.
base=$scratch/containerd
mkdir -p "$base"
cat > "$base/config.toml" <<EOF
version = 2
root = "$base/root"
state = "$base/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$base/sock"
[ttrpc]
  address = "$base/sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$base/opt"
EOF
containerd --config "$base/config.toml" >"$base/log" 2>&1 &
pids+=($!)
containerd_pid=$!
for _ in $(seq 100); do ctr --address "$base/sock" version >/dev/null 2>&1 && break; sleep 0.1; done

sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
/usr/bin/time -f "%e %M" -o "$scratch/ctr.time" \
  ctr --address "$base/sock" image pull --plain-http "$host/bench/image:1" >/dev/null
read -r ctr_s ctr_kb < "$scratch/ctr.time"
containerd_kb=$(awk '/VmHWM/ {print $2}' "/proc/$containerd_pid/status")

mkdir -p "$scratch/certs.d/$host"
echo "server = \"http://$host\"" > "$scratch/certs.d/$host/hosts.toml"
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
PODLAB_ROOT=$scratch/podlab PODLAB_REGISTRY_CONFIG=$scratch/certs.d \
  /usr/bin/time -f "%e %M" -o "$scratch/podlab.time" \
  "$podlab" image pull --quiet "$host/bench/image:1" >/dev/null
read -r podlab_s podlab_kb < "$scratch/podlab.time"

ratio=$(python3 -c "print(f'{$podlab_s/$ctr_s:.2f}')")
echo "ctr image pull:    ${ctr_s} s (ctr ${ctr_kb} kB peak RSS, containerd ${containerd_kb} kB peak RSS)"
echo "podlab image pull: ${podlab_s} s (${podlab_kb} kB peak RSS)"
echo "podlab / ctr: ${ratio}x wall time"
