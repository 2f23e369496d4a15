#!/bin/sh
# Writes resident.ld (next to this script): the linker script that puts the code a shim daemon
# runs in a pod's life side by side (see the header it writes, and build.rs).
#
# It runs one pod's life (apply, logs, exec, delete) in a private sandbox (unshare: nothing
# reaches the host) with the release shim under valgrind's callgrind, which names every
# function the daemon executed. Rust functions are then named by their section, C ones by the
# member of libc.a that holds them. Needs root, valgrind, and the release build:
#   cargo build --release -p podlab -p podlab-runtime -p podlab-pause
#   sh crates/runtime/src/shim/resident.sh     (KEEP=1 keeps its work folder in /tmp)
# Re-run it after a toolchain or dependency update (the names change), or when the shim's work
# changes; a stale list costs memory, never correctness.
set -eu
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
release=$(cd "$here/../../../.." && pwd)/target/release
libc_a=$(cc -print-file-name=libc.a)
work=$(mktemp -d /tmp/podlab-resident.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT

# The runtime starts the helpers found next to the podlab binary: a copy of podlab, with a
# podlab-shim that is the real one under callgrind (its thread cache already off, so that it
# runs as it would after its one re-exec). What ran before the daemon forked off is left out
# (counted from its setsid on): a forked process maps its binary's pages anew, as it touches
# them.
mkdir "$work/bin" "$work/out"
cp "$release/podlab" "$release/podlab-pause" "$work/bin/"
cp "$release/podlab-shim" "$work/bin/podlab-shim.real"
cat > "$work/bin/podlab-shim" <<EOF
#!/bin/sh
GLIBC_TUNABLES=glibc.malloc.tcache_count=0 exec valgrind -q --tool=callgrind --demangle=no \\
    --zero-before=setsid \\
    --callgrind-out-file=$work/out/callgrind.%p $work/bin/podlab-shim.real "\$@"
EOF
chmod +x "$work/bin/podlab-shim"
cat > "$work/pod.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: resident}
spec:
  terminationGracePeriodSeconds: 0
  # valgrind has no seccomp(2): a filter's install fails under it (ENOSYS), so the profiled
  # pod has none; the daemon's part of a filtered pod is listed by name below.
  securityContext: {seccompProfile: {type: Unconfined}}
  containers:
  - {name: c, image: busybox, command: [sh, -c, "echo hello; echo oops >&2; sleep 1000"]}
EOF
cat > "$work/life.sh" <<EOF
set -e
ip link set lo up
export PODLAB_ROOT=$work/root PODLAB_NETWORK=none
podlab=$work/bin/podlab
\$podlab apply -f $work/pod.yaml >/dev/null
\$podlab wait --for=condition=Ready pod/resident --timeout=300s >/dev/null
\$podlab logs resident >/dev/null
\$podlab exec resident -- true
\$podlab delete pod resident --grace-period 0 >/dev/null
# The daemon writes its profile as it exits (slowly, under valgrind): wait for it.
for i in \$(seq 300); do pgrep -f $work/bin/podlab-shim.real >/dev/null || break; sleep 0.1; done
EOF
unshare --mount --uts --ipc --net --pid --fork --kill-child --mount-proc --propagation private \
    -- sh "$work/life.sh"
# The daemon's profile is the largest one (the other is the process that only detaches).
profile=$(ls -S "$work"/out/callgrind.* | head -n 1)

nm -A --defined-only "$libc_a" 2>/dev/null | awk '$(NF-1) ~ /^[tTiW]$/ {
    split($1, where, ":"); print $NF, where[2] }' | sort -u > "$work/libc-members"
sed -n 's/^c\{0,1\}fn=([0-9]*) \(.*\)$/\1/p' "$profile" | sort -u > "$work/executed"

# The crates whose code only the shim's children run (a container's init: capabilities; the
# pause process: `lo` up over netlink), or a panic's report (the backtrace symbolizer), or
# nobody here (serde_json's float formatting): their constants go after everything else.
cold_crates="netlink_packet_core netlink_packet_route caps gimli addr2line rustc_demangle
    miniz_oxide zmij"
for crate in $cold_crates; do
    if grep -q "[0-9]${crate}[0-9]" "$work/executed"; then
        echo "resident.sh: the daemon ran code of $crate: take it off the cold list" >&2
        exit 1
    fi
done

# podlab-runtime's modules whose code (nearly) all runs in the daemon; the others (a
# container's init, the OCI bundle, ...) run in its children or not in the shim at all.
daemon_modules="shim protocol state cri_log liveness report id"

# libc's part of a section kind ($1: .text or .rodata): the members holding the executed C
# functions, and those the daemon needs at times a profile may miss (madvise: malloc_trim gives
# pages back with it); then every string function's CPU variants, grouped by instruction set
# (glibc picks one variant per CPU at start-up, and valgrind's CPU is not the one it runs on).
always_members="madvise.o"
libc_members() {
    { grep -v -e '^_ZN' -e '^_R' "$work/executed" | join - "$work/libc-members" | cut -d' ' -f2
      printf '%s\n' $always_members; } | awk -v kind="$1" '
        !/^(mem|str|stp|wcs|wmem|rawmem)[a-z0-9_]*-/ { member[$1] = 1 }
        END {
            for (m in member) printf "    *libc.a:%s(%s %s.*)\n", m, kind, kind | "sort"
            close("sort")
            n = split("avx512 evex avx2 avx sse4 ssse3 sse2", isa, " ")
            for (i = 1; i <= n; i++)
                printf "    *libc.a:mem*-*%s*.o(%s %s.*) *libc.a:str*-*%s*.o(%s %s.*)\n" \
                    "    *libc.a:stp*-*%s*.o(%s %s.*) *libc.a:wcs*-*%s*.o(%s %s.*)\n" \
                    "    *libc.a:wmem*-*%s*.o(%s %s.*) *libc.a:rawmem*-*%s*.o(%s %s.*)\n",
                    isa[i], kind, kind, isa[i], kind, kind, isa[i], kind, kind,
                    isa[i], kind, kind, isa[i], kind, kind, isa[i], kind, kind
        }'
}

{
    cat <<EOF
/* Generated by resident.sh (see there): what one podlab-shim daemon used in a pod's life,
 * placed side by side. The kernel maps a file's pages around each one touched (fault-around,
 * 64 KiB), so code spread over the binary keeps most of it resident in every shim; packed, it
 * keeps a few hundred KiB. Rust functions by their (mangled) section names; libc by the
 * members of libc.a that hold the functions, its string functions in every CPU variant,
 * grouped by instruction set (glibc picks one per CPU at start-up); the constants of the rest
 * of libc and of the crates the daemon does not run, after all others. */
SECTIONS {
  /* On a boundary of fault-around's window, lest the cold code before it come in too. */
  .text.resident ALIGN(0x10000) : {
EOF
    libc_members .text
    # Rust: the function sections, also when LLVM moved them to .text.unlikely or renamed
    # them with a .llvm.N suffix. A legacy-mangled name ends in a hash of the crate's build
    # (cargo's metadata: it changes with the set of packages built together, so with the
    # command), which the pattern leaves open; the standard library's names (v0) are fixed
    # for a toolchain.
    # podlab-runtime's modules that are the daemon's own go whole, so that the code they gain
    # after this profile is packed too.
    for module in $daemon_modules; do
        printf '_ZN14podlab_runtime%s%s\n' "${#module}" "$module"
    done | awk '{ printf "    *(.text.%s* .text.unlikely.%s*)\n", $1, $1 }'
    # What the profiled pod (seccomp Unconfined, above) does not run: a filtered pod's daemon
    # builds pause's profile (podlab_runtime::seccomp, oci-spec's seccomp types) and receives
    # its containers' profiles (their serde code). The filters' compilation (seccompiler) runs
    # only in the children and stays out.
    for name in _ZN14podlab_runtime7seccomp '*podlab_runtime..seccomp..' '*LinuxSeccomp' \
        '*LinuxSyscall' '*oci_spec..runtime..linux..Arch' '*oci_spec7runtime5linux4Arch'; do
        printf '    *(.text.%s* .text.unlikely.%s*)\n' "$name" "$name"
    done | sed 's/\*\*/*/g'
    { grep -e '^_ZN' -e '^_R' "$work/executed"; echo main; } |
        sed -e 's/\.llvm\..*//' -e 's/17h[0-9a-f]\{16\}E$/17h*/' | sort -u |
        awk '{ printf "    *(.text.%s .text.unlikely.%s)\n", $1 "*", $1 "*" }' | sed 's/\*\*/*/g'
    cat <<EOF
  }
}
INSERT AFTER .text;

SECTIONS {
  .rodata.resident : {
EOF
    libc_members .rodata
    cat <<EOF
  }
  .rodata.cold : {
    *libc.a:*(.rodata .rodata.*)
EOF
    for crate in $cold_crates; do
        echo "    *$crate*(.rodata .rodata.*)"
    done
    cat <<EOF
  }
}
INSERT AFTER .rodata;
EOF
} > "$here/resident.ld"
echo "wrote $here/resident.ld ($(grep -c '^    \*' "$here/resident.ld") patterns)"
