#!/usr/bin/env bash
# Installs the real peers that `cargo xtask peers` and the podlab-layers demo drive, from
# Debian's packages, without letting any of them start a service.
#
#   scripts/peers/install.sh          # as root: installs what is missing
#   scripts/peers/install.sh --print  # prints the install line only
#
# Why the policy-rc.d guard: docker.io's and containerd's maintainer scripts start their
# services right after installing, with the default configuration, and dockerd's default adds
# a docker0 bridge, MASQUERADE rules and turns on ip_forward. Debian's documented way to stop a
# package from starting services is a /usr/sbin/policy-rc.d that exits 101; if the machine has
# none, this script puts one in place for the install and removes it afterwards.
set -euo pipefail

PACKAGES=(runc crun containerd docker.io podman catatonit busybox-static containernetworking-plugins umoci)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "peers: all installed (${PACKAGES[*]})"
    exit 0
fi

line="apt-get install -y ${missing[*]}"
if [ "${1:-}" = "--print" ] || [ "$(id -u)" -ne 0 ]; then
    echo "peers: missing ${missing[*]}; install them with:"
    echo "    apt-get update && $line"
    [ "${1:-}" = "--print" ] && exit 0
    exit 1
fi

guard=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
    guard=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\n# podlab scripts/peers/install.sh: no service starts during the install\nexit 101\n' > "$guard"
    chmod 755 "$guard"
    trap 'rm -f "$guard"' EXIT
fi
echo "peers: $line"
apt-get update -q
DEBIAN_FRONTEND=noninteractive $line
