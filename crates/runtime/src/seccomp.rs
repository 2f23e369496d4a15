//! Seccomp: which system calls a container may make, as a BPF filter the kernel runs on each.
//!
//! Three profiles, as Kubernetes names them: `Unconfined` (no filter), `RuntimeDefault`
//! (containerd's default profile, re-expressed here: an allow-list of about 360 calls, everything
//! else fails with EPERM, `clone` without namespace flags, `clone3` with ENOSYS so that libcs
//! fall back to `clone`, and the calls a capability in the bounding set needs) and `Localhost`
//! (an OCI seccomp JSON file from the node's seccomp folder). A profile is an
//! [`oci_spec::runtime::LinuxSeccomp`], as in a runc bundle's config.json; [`compile`] turns it
//! into one classic BPF program (written here, in pure Rust: nothing to link into the static
//! shim), as libseccomp turns it into one for runc.
//!
//! **One program for every action.** A call gets the strictest answer among the rules that
//! name it and whose conditions hold (KILL > TRAP > ERRNO > TRACE > LOG > ALLOW, the kernel's
//! order when several filters answer), and the profile's default when none holds. A rule
//! whose action is the default is left out, as runc leaves it out. The program finds a call
//! by a binary search over its number, so the kernel's work when the filter is attached (its
//! check, translation, JIT, and the per-call cache it computes by running the program for
//! every call number of each ABI) stays small: one filter of a few hundred instructions
//! rather than one filter per ABI and per action, each a chain of every call it names.
//!
//! Names an ABI does not have (`chown32` on x86_64) are skipped, as libseccomp skips them.
//!
//! **Every ABI the kernel takes calls in.** A 64-bit x86 kernel also runs 32-bit calls (`int
//! 0x80`, or a 32-bit program: audit arch I386, numbers of the i386 table) and x32 calls (the
//! x86_64 audit arch with bit 30 of the number set, numbers 512–547 for the calls x32 has its
//! own of). A filter that only compared x86_64 numbers would let `0x40000000 | N` through a
//! profile whose default is ALLOW, and an i386 number is another call's. As libseccomp does
//! for a profile's `architectures` (containerd's default lists x86_64, x86 and x32), the
//! program first dispatches on the call's ABI: a call of an ABI the profile does not admit is
//! killed (the native one always is admitted); each admitted one is judged by that ABI's
//! numbers (the x86_64 part masks bit 30 off when x32 is admitted, and kills x32 calls when it
//! is not). The arguments of an i386 call are compared on their low 32 bits, as libseccomp
//! compares them for a 32-bit ABI.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompArgBuilder,
    LinuxSeccompOperator, LinuxSyscall,
};

/// What a container's system calls are filtered with (Kubernetes' `seccompProfile.type`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SeccompProfile {
    /// No filter (the CRI's default when kubelet asks for nothing).
    #[default]
    Unconfined,
    /// containerd's default profile ([`runtime_default`]).
    RuntimeDefault,
    /// An OCI seccomp JSON file, by its absolute path on the node.
    Localhost(std::path::PathBuf),
}

/// Every call containerd's default profile allows unconditionally, on every architecture.
const ALLOWED: &[&str] = &[
    "_llseek",
    "_newselect",
    "accept",
    "accept4",
    "access",
    "adjtimex",
    "alarm",
    "bind",
    "brk",
    "cachestat",
    "capget",
    "capset",
    "chdir",
    "chmod",
    "chown",
    "chown32",
    "clock_adjtime",
    "clock_adjtime64",
    "clock_getres",
    "clock_getres_time64",
    "clock_gettime",
    "clock_gettime64",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "close",
    "close_range",
    "connect",
    "copy_file_range",
    "creat",
    "dup",
    "dup2",
    "dup3",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_ctl_old",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "epoll_wait_old",
    "eventfd",
    "eventfd2",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fadvise64_64",
    "fallocate",
    "fanotify_mark",
    "fchdir",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "fchown",
    "fchown32",
    "fchownat",
    "fcntl",
    "fcntl64",
    "fdatasync",
    "fgetxattr",
    "flistxattr",
    "flock",
    "fork",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstat64",
    "fstatat64",
    "fstatfs",
    "fstatfs64",
    "fsync",
    "ftruncate",
    "ftruncate64",
    "futex",
    "futex_requeue",
    "futex_time64",
    "futex_wait",
    "futex_waitv",
    "futex_wake",
    "futimesat",
    "get_robust_list",
    "get_thread_area",
    "getcpu",
    "getcwd",
    "getdents",
    "getdents64",
    "getegid",
    "getegid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getgroups",
    "getgroups32",
    "getitimer",
    "getpeername",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getpriority",
    "getrandom",
    "getresgid",
    "getresgid32",
    "getresuid",
    "getresuid32",
    "getrlimit",
    "getrusage",
    "getsid",
    "getsockname",
    "getsockopt",
    "gettid",
    "gettimeofday",
    "getuid",
    "getuid32",
    "getxattr",
    "getxattrat",
    "inotify_add_watch",
    "inotify_init",
    "inotify_init1",
    "inotify_rm_watch",
    "io_cancel",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "io_pgetevents_time64",
    "io_setup",
    "io_submit",
    "ioctl",
    "ioprio_get",
    "ioprio_set",
    "ipc",
    "kill",
    "landlock_add_rule",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "lchown",
    "lchown32",
    "lgetxattr",
    "link",
    "linkat",
    "listen",
    "listmount",
    "listxattr",
    "listxattrat",
    "llistxattr",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lsm_get_self_attr",
    "lsm_list_modules",
    "lsm_set_self_attr",
    "lstat",
    "lstat64",
    "madvise",
    "map_shadow_stack",
    "membarrier",
    "memfd_create",
    "memfd_secret",
    "mincore",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mmap2",
    "mprotect",
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedreceive_time64",
    "mq_timedsend",
    "mq_timedsend_time64",
    "mq_unlink",
    "mremap",
    "mseal",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "msync",
    "munlock",
    "munlockall",
    "munmap",
    "name_to_handle_at",
    "nanosleep",
    "newfstatat",
    "open",
    "openat",
    "openat2",
    "pause",
    "pidfd_open",
    "pidfd_send_signal",
    "pipe",
    "pipe2",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "poll",
    "ppoll",
    "ppoll_time64",
    "prctl",
    "pread64",
    "preadv",
    "preadv2",
    "prlimit64",
    "process_mrelease",
    "pselect6",
    "pselect6_time64",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "read",
    "readahead",
    "readlink",
    "readlinkat",
    "readv",
    "recv",
    "recvfrom",
    "recvmmsg",
    "recvmmsg_time64",
    "recvmsg",
    "remap_file_pages",
    "removexattr",
    "removexattrat",
    "rename",
    "renameat",
    "renameat2",
    "restart_syscall",
    "rmdir",
    "rseq",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_rr_get_interval_time64",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "sched_yield",
    "seccomp",
    "select",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "semtimedop_time64",
    "send",
    "sendfile",
    "sendfile64",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "set_robust_list",
    "set_thread_area",
    "set_tid_address",
    "setfsgid",
    "setfsgid32",
    "setfsuid",
    "setfsuid32",
    "setgid",
    "setgid32",
    "setgroups",
    "setgroups32",
    "setitimer",
    "setpgid",
    "setpriority",
    "setregid",
    "setregid32",
    "setresgid",
    "setresgid32",
    "setresuid",
    "setresuid32",
    "setreuid",
    "setreuid32",
    "setrlimit",
    "setsid",
    "setsockopt",
    "setuid",
    "setuid32",
    "setxattr",
    "setxattrat",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "shutdown",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "sigprocmask",
    "sigreturn",
    "socketcall",
    "socketpair",
    "splice",
    "stat",
    "stat64",
    "statfs",
    "statfs64",
    "statmount",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "syncfs",
    "sysinfo",
    "tee",
    "tgkill",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_gettime64",
    "timer_settime",
    "timer_settime64",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_gettime64",
    "timerfd_settime",
    "timerfd_settime64",
    "times",
    "tkill",
    "truncate",
    "truncate64",
    "ugetrlimit",
    "umask",
    "uname",
    "unlink",
    "unlinkat",
    "uretprobe",
    "utime",
    "utimensat",
    "utimensat_time64",
    "utimes",
    "vfork",
    "vmsplice",
    "wait4",
    "waitid",
    "waitpid",
    "write",
    "writev",
];

/// Calls allowed on one architecture only.
#[cfg(target_arch = "x86_64")]
const ALLOWED_ON_THIS_ARCH: &[&str] = &["arch_prctl", "modify_ldt"];
#[cfg(target_arch = "aarch64")]
const ALLOWED_ON_THIS_ARCH: &[&str] = &[
    "arm_fadvise64_64",
    "arm_sync_file_range",
    "sync_file_range2",
    "breakpoint",
    "cacheflush",
    "set_tls",
];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ALLOWED_ON_THIS_ARCH: &[&str] = &[];

/// The calls a capability in the bounding set brings with it.
const BY_CAPABILITY: &[(&str, &[&str])] = &[
    ("CAP_DAC_READ_SEARCH", &["open_by_handle_at"]),
    (
        "CAP_SYS_ADMIN",
        &[
            "bpf",
            "clone",
            "clone3",
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "open_tree",
            "perf_event_open",
            "quotactl",
            "quotactl_fd",
            "setdomainname",
            "sethostname",
            "setns",
            "syslog",
            "umount",
            "umount2",
            "unshare",
        ],
    ),
    ("CAP_SYS_BOOT", &["reboot"]),
    ("CAP_SYS_CHROOT", &["chroot"]),
    (
        "CAP_SYS_MODULE",
        &["delete_module", "init_module", "finit_module"],
    ),
    ("CAP_SYS_PACCT", &["acct"]),
    (
        "CAP_SYS_PTRACE",
        &[
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "process_vm_readv",
            "process_vm_writev",
            "ptrace",
        ],
    ),
    ("CAP_SYS_RAWIO", &["iopl", "ioperm"]),
    (
        "CAP_SYS_TIME",
        &["settimeofday", "stime", "clock_settime", "clock_settime64"],
    ),
    ("CAP_SYS_TTY_CONFIG", &["vhangup"]),
    (
        "CAP_SYS_NICE",
        &[
            "get_mempolicy",
            "mbind",
            "set_mempolicy",
            "set_mempolicy_home_node",
        ],
    ),
    ("CAP_SYSLOG", &["syslog"]),
    ("CAP_BPF", &["bpf"]),
    ("CAP_PERFMON", &["perf_event_open"]),
];

/// The namespace flags `clone` may not carry without CAP_SYS_ADMIN.
const NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64;

fn allow(names: &[&str]) -> LinuxSyscall {
    let mut rule = LinuxSyscall::default();
    rule.set_names(names.iter().map(|n| n.to_string()).collect());
    rule.set_action(LinuxSeccompAction::ScmpActAllow);
    rule
}

fn arg(
    index: usize,
    op: LinuxSeccompOperator,
    value: u64,
    value_two: Option<u64>,
) -> LinuxSeccompArg {
    let builder = LinuxSeccompArgBuilder::default()
        .index(index)
        .op(op)
        .value(value);
    match value_two {
        Some(two) => builder.value_two(two),
        None => builder,
    }
    .build()
    .expect("every field is set")
}

fn allow_if(name: &str, condition: LinuxSeccompArg) -> LinuxSyscall {
    let mut rule = allow(&[name]);
    rule.set_args(Some(vec![condition]));
    rule
}

/// containerd's default profile for a process whose bounding set is `bounding` (OCI names).
pub fn runtime_default(bounding: &[String]) -> LinuxSeccomp {
    use LinuxSeccompOperator::{ScmpCmpEq, ScmpCmpGt, ScmpCmpLt, ScmpCmpMaskedEq};
    let mut rules = vec![allow(ALLOWED), allow(ALLOWED_ON_THIS_ARCH)];
    // socket(2) for every family but AF_ALG and AF_VSOCK: three ranges around them.
    let (alg, vsock) = (libc::AF_ALG as u64, libc::AF_VSOCK as u64);
    rules.push(allow_if("socket", arg(0, ScmpCmpLt, alg, None)));
    rules.push(allow_if("socket", arg(0, ScmpCmpEq, alg + 1, None)));
    rules.push(allow_if("socket", arg(0, ScmpCmpGt, vsock, None)));
    // personality(2) only for the harmless personas (Linux, its 32-bit variant, and query).
    for persona in [0x0, 0x0008, 0x20000, 0x20008, 0xffff_ffff] {
        rules.push(allow_if("personality", arg(0, ScmpCmpEq, persona, None)));
    }
    rules.push(allow(&["process_vm_readv", "process_vm_writev", "ptrace"]));
    let has = |cap: &str| bounding.iter().any(|b| b == cap);
    for (cap, names) in BY_CAPABILITY {
        if has(cap) {
            rules.push(allow(names));
        }
    }
    if !has("CAP_SYS_ADMIN") {
        rules.push(allow_if(
            "clone",
            arg(0, ScmpCmpMaskedEq, NAMESPACE_FLAGS, Some(0)),
        ));
        let mut clone3 = LinuxSyscall::default();
        clone3.set_names(vec!["clone3".into()]);
        clone3.set_action(LinuxSeccompAction::ScmpActErrno);
        clone3.set_errno_ret(Some(libc::ENOSYS as u32));
        rules.push(clone3);
    }
    let mut profile = LinuxSeccomp::default();
    profile.set_default_action(LinuxSeccompAction::ScmpActErrno);
    profile.set_default_errno_ret(Some(libc::EPERM as u32));
    profile.set_architectures(Some(DEFAULT_ARCHITECTURES.to_vec()));
    profile.set_syscalls(Some(rules));
    profile
}

/// containerd's `arches()` for this machine: the native ABI and the ones its kernel also runs.
#[cfg(target_arch = "x86_64")]
const DEFAULT_ARCHITECTURES: &[Arch] =
    &[Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32];
/// containerd's `arches()` for this machine (its ARM entry is not compiled here: ARM calls are
/// killed).
#[cfg(target_arch = "aarch64")]
const DEFAULT_ARCHITECTURES: &[Arch] = &[Arch::ScmpArchAarch64];
#[cfg(target_arch = "riscv64")]
const DEFAULT_ARCHITECTURES: &[Arch] = &[Arch::ScmpArchRiscv64];

/// Reads an OCI seccomp profile (the JSON Kubernetes' `Localhost` profiles are written in).
pub fn load(path: &Path) -> Result<LinuxSeccomp, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot load seccomp profile {:?}: {e}",
            path.display().to_string()
        )
    })?;
    let profile: LinuxSeccomp = serde_json::from_str(&text).map_err(|e| {
        format!(
            "decoding seccomp profile {:?} failed: {e}",
            path.display().to_string()
        )
    })?;
    compile(&profile).map_err(|e| format!("seccomp profile {}: {e}", path.display()))?;
    Ok(profile)
}

/// An ABI a filter program judges the calls of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abi {
    /// The native one (with x32's calls on x86_64, told apart by bit 30 of the number).
    Native,
    /// i386 calls of a 64-bit x86 kernel.
    #[cfg(target_arch = "x86_64")]
    X86,
}

/// `AUDIT_ARCH_*` (linux/audit.h): what the kernel tags each call with.
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;
const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;
const AUDIT_ARCH_RISCV64: u32 = 243 | 0x8000_0000 | 0x4000_0000;

/// `__X32_SYSCALL_BIT`: set in the number of every x32 call.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The calls x32 has numbers of its own for (`arch/x86/entry/syscalls/syscall_64.tbl`, 512 to
/// 547; every other x32 call has its x86_64 number, bit 30 set).
#[cfg(target_arch = "x86_64")]
const X32_OWN_NUMBERS: &[(&str, i64)] = &[
    ("rt_sigaction", 512),
    ("rt_sigreturn", 513),
    ("ioctl", 514),
    ("readv", 515),
    ("writev", 516),
    ("recvfrom", 517),
    ("sendmsg", 518),
    ("recvmsg", 519),
    ("execve", 520),
    ("ptrace", 521),
    ("rt_sigpending", 522),
    ("rt_sigtimedwait", 523),
    ("rt_sigqueueinfo", 524),
    ("sigaltstack", 525),
    ("timer_create", 526),
    ("mq_notify", 527),
    ("kexec_load", 528),
    ("waitid", 529),
    ("set_robust_list", 530),
    ("get_robust_list", 531),
    ("vmsplice", 532),
    ("move_pages", 533),
    ("preadv", 534),
    ("pwritev", 535),
    ("rt_tgsigqueueinfo", 536),
    ("recvmmsg", 537),
    ("sendmmsg", 538),
    ("process_vm_readv", 539),
    ("process_vm_writev", 540),
    ("setsockopt", 541),
    ("getsockopt", 542),
    ("io_setup", 543),
    ("io_submit", 544),
    ("execveat", 545),
    ("preadv2", 546),
    ("pwritev2", 547),
];

impl Abi {
    fn audit_arch(self) -> u32 {
        match self {
            #[cfg(target_arch = "x86_64")]
            Abi::X86 => AUDIT_ARCH_I386,
            Abi::Native if cfg!(target_arch = "x86_64") => AUDIT_ARCH_X86_64,
            Abi::Native if cfg!(target_arch = "aarch64") => AUDIT_ARCH_AARCH64,
            Abi::Native => AUDIT_ARCH_RISCV64,
        }
    }

    /// The numbers of `name` in this ABI (x32's own one too, when `x32`); none for a name it
    /// does not have.
    fn numbers(self, name: &str, x32: bool) -> Vec<i64> {
        match self {
            #[cfg(target_arch = "x86_64")]
            Abi::X86 => syscalls::x86::Sysno::from_str(name)
                .ok()
                .map(|s| s.id() as i64)
                .into_iter()
                .collect(),
            Abi::Native => {
                let mut numbers: Vec<i64> = syscalls::Sysno::from_str(name)
                    .ok()
                    .map(|s| s.id() as i64)
                    .into_iter()
                    .collect();
                #[cfg(target_arch = "x86_64")]
                if x32 {
                    numbers.extend(
                        X32_OWN_NUMBERS
                            .iter()
                            .filter(|(n, _)| *n == name)
                            .map(|(_, number)| *number),
                    );
                }
                let _ = x32;
                numbers
            }
        }
    }

    /// Whether an argument is a 32-bit register in this ABI.
    fn is_32_bit(self) -> bool {
        !matches!(self, Abi::Native)
    }
}

/// The ABIs `profile` admits besides the native one (its `architectures`; none listed: only
/// the native one, as libseccomp's filter starts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Admitted {
    x86: bool,
    x32: bool,
}

impl Admitted {
    fn of(profile: &LinuxSeccomp) -> Admitted {
        let listed = |arch: Arch| {
            cfg!(target_arch = "x86_64")
                && profile.architectures().iter().flatten().any(|a| *a == arch)
        };
        Admitted {
            x86: listed(Arch::ScmpArchX86),
            x32: listed(Arch::ScmpArchX32),
        }
    }

    fn abis(self) -> Vec<Abi> {
        #[allow(unused_mut)]
        let mut abis = vec![Abi::Native];
        #[cfg(target_arch = "x86_64")]
        if self.x86 {
            abis.push(Abi::X86);
        }
        abis
    }
}

/// The syscall number of `name` on this architecture; None for a name it does not have.
#[cfg(test)]
fn number(name: &str) -> Option<i64> {
    syscalls::Sysno::from_str(name).ok().map(|s| s.id() as i64)
}

/// A seccomp filter: one classic BPF program, as `seccomp(SECCOMP_SET_MODE_FILTER)` takes it.
pub type BpfProgram = Vec<libc::sock_filter>;

/// `SECCOMP_RET_DATA`: the errno (or tracer's value) a return carries.
const RET_DATA: u32 = 0x0000_ffff;

/// A profile action as the kernel's return value (`SECCOMP_RET_*` and its data), with the
/// profile's errno default, as libseccomp encodes it.
fn action(action: LinuxSeccompAction, errno: Option<u32>) -> Result<u32, String> {
    Ok(match action {
        LinuxSeccompAction::ScmpActAllow => libc::SECCOMP_RET_ALLOW,
        LinuxSeccompAction::ScmpActErrno => {
            libc::SECCOMP_RET_ERRNO | (errno.unwrap_or(libc::EPERM as u32) & RET_DATA)
        }
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
            libc::SECCOMP_RET_KILL_THREAD
        }
        LinuxSeccompAction::ScmpActKillProcess => libc::SECCOMP_RET_KILL_PROCESS,
        LinuxSeccompAction::ScmpActTrap => libc::SECCOMP_RET_TRAP,
        LinuxSeccompAction::ScmpActLog => libc::SECCOMP_RET_LOG,
        LinuxSeccompAction::ScmpActTrace => {
            libc::SECCOMP_RET_TRACE | (errno.unwrap_or(0) & RET_DATA)
        }
        LinuxSeccompAction::ScmpActNotify => {
            return Err("SCMP_ACT_NOTIFY needs a seccomp agent, which podlab does not have".into())
        }
    })
}

/// How strict a return is, as the kernel ranks the answers of several filters (its
/// `ACTION_ONLY`, signed): lower is stricter, KILL_PROCESS the strictest, ALLOW the least.
fn strictness(ret: u32) -> i32 {
    (ret & !RET_DATA) as i32
}

/// One comparison of a system call's argument with a constant (unsigned, as libseccomp's).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Condition {
    index: u8,
    op: Op,
    /// Compared with the argument (masked first for [`Op::MaskedEq`]).
    value: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Ne,
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
    /// The argument ANDed with this mask equals the value.
    MaskedEq(u64),
}

/// The conditions of one profile rule, all of which must hold; none: the rule always holds.
type Rule = Vec<Condition>;

/// The conditions of one profile rule, in a 32-bit ABI on the arguments' low 32 bits.
fn rule(args: &[LinuxSeccompArg], abi: Abi) -> Result<Rule, String> {
    let mask = if abi.is_32_bit() {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    let mut conditions = Vec::new();
    for arg in args {
        let index = u8::try_from(arg.index())
            .ok()
            .filter(|i| *i < 6)
            .ok_or_else(|| format!("argument index {}: a system call has 6", arg.index()))?;
        let value = arg.value() & mask;
        let (op, value) = match arg.op() {
            LinuxSeccompOperator::ScmpCmpNe => (Op::Ne, value),
            LinuxSeccompOperator::ScmpCmpLt => (Op::Lt, value),
            LinuxSeccompOperator::ScmpCmpLe => (Op::Le, value),
            LinuxSeccompOperator::ScmpCmpEq => (Op::Eq, value),
            LinuxSeccompOperator::ScmpCmpGe => (Op::Ge, value),
            LinuxSeccompOperator::ScmpCmpGt => (Op::Gt, value),
            // OCI: value is the mask, valueTwo what the masked argument must equal.
            LinuxSeccompOperator::ScmpCmpMaskedEq => {
                (Op::MaskedEq(value), arg.value_two().unwrap_or(0) & mask)
            }
        };
        let condition = Condition { index, op, value };
        if !conditions.contains(&condition) {
            conditions.push(condition);
        }
    }
    Ok(conditions)
}

/// What the filter answers one call number of one ABI.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Handling {
    /// Always this return.
    Ret(u32),
    /// The first group, strictest first, with a rule whose conditions all hold answers its
    /// return; if none does, the profile's default.
    Rules(Vec<(u32, Vec<Rule>)>),
}

impl Handling {
    /// The rules that name one call (return, rule), in the profile's order.
    fn of(rules: &[(u32, Rule)]) -> Handling {
        let mut groups: Vec<(u32, Vec<Rule>)> = Vec::new();
        for (ret, rule) in rules {
            let at = match groups.iter().position(|(r, _)| r == ret) {
                Some(at) => at,
                None => {
                    groups.push((*ret, Vec::new()));
                    groups.len() - 1
                }
            };
            let group = &mut groups[at].1;
            if group.first().is_some_and(Vec::is_empty) {
                // Already unconditional.
            } else if rule.is_empty() {
                *group = vec![Vec::new()];
            } else if !group.contains(rule) {
                group.push(rule.clone());
            }
        }
        // The kernel keeps the strictest answer of several filters: so does this one
        // program, and a group that always holds leaves nothing after it to ask.
        groups.sort_by_key(|(ret, _)| strictness(*ret));
        if let Some(at) = groups.iter().position(|(_, rules)| rules[0].is_empty()) {
            groups.truncate(at + 1);
            if at == 0 {
                return Handling::Ret(groups[0].0);
            }
        }
        Handling::Rules(groups)
    }
}

/// The call numbers of one ABI that a rule names with an action other than the default, and
/// what each gets. A rule whose action is the default one changes nothing and is left out,
/// as runc leaves it out (libseccomp refuses it).
fn table(
    profile: &LinuxSeccomp,
    abi: Abi,
    x32: bool,
    default: u32,
) -> Result<BTreeMap<u32, Handling>, String> {
    let mut named: BTreeMap<u32, Vec<(u32, Rule)>> = BTreeMap::new();
    for syscall in profile.syscalls().iter().flatten() {
        let ret = action(syscall.action(), syscall.errno_ret())?;
        let rule = rule(syscall.args().as_deref().unwrap_or_default(), abi)?;
        if ret == default {
            continue;
        }
        for number in syscall.names().iter().flat_map(|n| abi.numbers(n, x32)) {
            let number = u32::try_from(number).map_err(|_| format!("call number {number}"))?;
            named.entry(number).or_default().push((ret, rule.clone()));
        }
    }
    Ok(named
        .into_iter()
        .map(|(number, rules)| (number, Handling::of(&rules)))
        .collect())
}

/// `table` as contiguous ranges of call numbers covering them all (the first number of each),
/// neighbours with the same handling merged: what the search tree tells apart.
fn ranges(table: &BTreeMap<u32, Handling>, default: u32) -> Vec<(u32, Handling)> {
    let mut ranges: Vec<(u32, Handling)> = Vec::new();
    let mut push = |first: u32, handling: Handling| {
        if ranges.last().is_none_or(|(_, h)| *h != handling) {
            ranges.push((first, handling));
        }
    };
    let mut next: u64 = 0;
    for (number, handling) in table {
        if u64::from(*number) > next {
            push(next as u32, Handling::Ret(default));
        }
        push(*number, handling.clone());
        next = u64::from(*number) + 1;
    }
    if next <= u64::from(u32::MAX) {
        push(next as u32, Handling::Ret(default));
    }
    ranges
}

/// The BPF filter of `profile`, to be installed with [`install`]; None for a profile that
/// allows everything.
///
/// One program for the whole profile, every ABI and every action: it dispatches on the
/// call's ABI (killing an ABI the profile does not admit), then finds the call's number by a
/// binary search over ranges of numbers, each range ending in a return, or in its rules'
/// argument checks. The kernel verifies, translates and JITs one program, and works out its
/// per-call cache (which calls are always allowed) by running the program for each number:
/// a search of a few steps, not a walk along a chain of every named call.
pub fn compile(profile: &LinuxSeccomp) -> Result<Option<BpfProgram>, String> {
    let default = action(profile.default_action(), profile.default_errno_ret())?;
    let admitted = Admitted::of(profile);
    let mut tables = Vec::new();
    for abi in admitted.abis() {
        tables.push((abi, table(profile, abi, admitted.x32, default)?));
    }
    if default == libc::SECCOMP_RET_ALLOW && tables.iter().all(|(_, t)| t.is_empty()) {
        return Ok(None);
    }
    use bpf::*;
    let mut asm = Asm::default();
    asm.stmt(LD_W_ABS, ARCH_OFFSET);
    let starts: Vec<Label> = tables.iter().map(|_| asm.label()).collect();
    for ((abi, _), start) in tables.iter().zip(&starts) {
        let next = asm.label();
        asm.jump(JEQ_K, abi.audit_arch(), *start, next);
        asm.place(next);
    }
    // An ABI the profile does not admit (libseccomp's bad-arch action).
    asm.ret(libc::SECCOMP_RET_KILL_PROCESS);
    for ((abi, table), start) in tables.iter().zip(starts) {
        asm.place(start);
        asm.stmt(LD_W_ABS, NR_OFFSET);
        if *abi == Abi::Native && cfg!(target_arch = "x86_64") {
            if admitted.x32 {
                // x32 calls are judged by the numbers they share with x86_64 (and their own).
                asm.stmt(AND_K, !X32_SYSCALL_BIT);
            } else {
                let (kill, native) = (asm.label(), asm.label());
                asm.jump(JSET_K, X32_SYSCALL_BIT, kill, native);
                asm.place(kill);
                asm.ret(libc::SECCOMP_RET_KILL_PROCESS);
                asm.place(native);
            }
        }
        search(&mut asm, &ranges(table, default), default, !abi.is_32_bit());
    }
    asm.assemble().map(Some)
}

/// The binary search over `ranges` (the call number in A), each leaf its handling.
fn search(asm: &mut bpf::Asm, ranges: &[(u32, Handling)], default: u32, wide: bool) {
    if let [(_, handling)] = ranges {
        return judge(asm, handling, default, wide);
    }
    let middle = ranges.len() / 2;
    let (low, high) = (asm.label(), asm.label());
    asm.jump(bpf::JGE_K, ranges[middle].0, high, low);
    asm.place(low);
    search(asm, &ranges[..middle], default, wide);
    asm.place(high);
    search(asm, &ranges[middle..], default, wide);
}

/// One range's answer: a return, or its rules' checks and then the default.
fn judge(asm: &mut bpf::Asm, handling: &Handling, default: u32, wide: bool) {
    let groups = match handling {
        Handling::Ret(ret) => return asm.ret(*ret),
        Handling::Rules(groups) => groups,
    };
    for (ret, rules) in groups {
        for rule in rules {
            let next = asm.label();
            for condition in rule {
                compare(asm, condition, wide, next);
            }
            asm.ret(*ret);
            asm.place(next);
            if rule.is_empty() {
                return;
            }
        }
    }
    asm.ret(default);
}

/// Goes on to the next instruction when `condition` holds, to `fail` otherwise. A 64-bit
/// argument is compared word by word, high word first (`struct seccomp_data` holds it
/// little-endian); in a 32-bit ABI only its low word.
fn compare(asm: &mut bpf::Asm, condition: &Condition, wide: bool, fail: bpf::Label) {
    use bpf::*;
    let low_offset = ARGS_OFFSET + 8 * u32::from(condition.index);
    let (value_high, value_low) = ((condition.value >> 32) as u32, condition.value as u32);
    let ok = asm.label();
    if wide {
        // The high words decide unless they are equal; then the low words do.
        let low = asm.label();
        asm.stmt(LD_W_ABS, low_offset + 4);
        match condition.op {
            Op::Eq => asm.jump(JEQ_K, value_high, low, fail),
            Op::Ne => asm.jump(JEQ_K, value_high, low, ok),
            Op::Gt | Op::Ge => {
                let equal = asm.label();
                asm.jump(JGT_K, value_high, ok, equal);
                asm.place(equal);
                asm.jump(JEQ_K, value_high, low, fail);
            }
            Op::Lt | Op::Le => {
                let not_below = asm.label();
                asm.jump(JGE_K, value_high, not_below, ok);
                asm.place(not_below);
                asm.jump(JEQ_K, value_high, low, fail);
            }
            Op::MaskedEq(mask) => {
                asm.stmt(AND_K, (mask >> 32) as u32);
                asm.jump(JEQ_K, value_high, low, fail);
            }
        }
        asm.place(low);
    }
    asm.stmt(LD_W_ABS, low_offset);
    match condition.op {
        Op::Eq => asm.jump(JEQ_K, value_low, ok, fail),
        Op::Ne => asm.jump(JEQ_K, value_low, fail, ok),
        Op::Gt => asm.jump(JGT_K, value_low, ok, fail),
        Op::Ge => asm.jump(JGE_K, value_low, ok, fail),
        Op::Lt => asm.jump(JGE_K, value_low, fail, ok),
        Op::Le => asm.jump(JGT_K, value_low, fail, ok),
        Op::MaskedEq(mask) => {
            asm.stmt(AND_K, mask as u32);
            asm.jump(JEQ_K, value_low, ok, fail);
        }
    }
    asm.place(ok);
}

/// Classic BPF (linux/filter.h, linux/seccomp.h) and a small assembler for it: instructions
/// with jumps to labels, laid out with the conditional jumps' 8-bit offsets, and a `ja`
/// trampoline after a jump whose target is farther than 255 instructions.
mod bpf {
    use libc::sock_filter;

    pub const LD_W_ABS: u16 = 0x00 | 0x00 | 0x20;
    pub const JA: u16 = 0x05;
    pub const JEQ_K: u16 = 0x05 | 0x10;
    pub const JGT_K: u16 = 0x05 | 0x20;
    pub const JGE_K: u16 = 0x05 | 0x30;
    pub const JSET_K: u16 = 0x05 | 0x40;
    pub const AND_K: u16 = 0x04 | 0x50;
    pub const RET_K: u16 = 0x06;
    /// Offsets in `struct seccomp_data`.
    pub const NR_OFFSET: u32 = 0;
    pub const ARCH_OFFSET: u32 = 4;
    pub const ARGS_OFFSET: u32 = 16;
    /// `BPF_MAXINSNS`: the longest program the kernel takes.
    pub const MAX_INSNS: usize = 4096;

    pub fn stmt(code: u16, k: u32) -> sock_filter {
        sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    pub fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
        sock_filter { code, jt, jf, k }
    }

    /// A place in the program, which jumps go to (always forward, as BPF's do).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Label(usize);

    #[derive(Debug)]
    enum Item {
        Stmt(sock_filter),
        /// A conditional jump; `long_*`: its target is reached through a `ja` after it.
        Jump {
            code: u16,
            k: u32,
            jt: Label,
            jf: Label,
            long_t: bool,
            long_f: bool,
        },
        Place(Label),
    }

    #[derive(Debug, Default)]
    pub struct Asm {
        items: Vec<Item>,
        labels: usize,
    }

    impl Asm {
        pub fn label(&mut self) -> Label {
            self.labels += 1;
            Label(self.labels - 1)
        }

        pub fn place(&mut self, label: Label) {
            self.items.push(Item::Place(label));
        }

        pub fn stmt(&mut self, code: u16, k: u32) {
            self.items.push(Item::Stmt(stmt(code, k)));
        }

        pub fn ret(&mut self, k: u32) {
            self.stmt(RET_K, k);
        }

        pub fn jump(&mut self, code: u16, k: u32, jt: Label, jf: Label) {
            self.items.push(Item::Jump {
                code,
                k,
                jt,
                jf,
                long_t: false,
                long_f: false,
            });
        }

        /// Each item's address, and each label's.
        fn layout(&self) -> (Vec<usize>, Vec<Option<usize>>) {
            let mut at = 0;
            let mut addresses = Vec::with_capacity(self.items.len());
            let mut labels = vec![None; self.labels];
            for item in &self.items {
                addresses.push(at);
                at += match item {
                    Item::Stmt(_) => 1,
                    Item::Jump { long_t, long_f, .. } => {
                        1 + usize::from(*long_t) + usize::from(*long_f)
                    }
                    Item::Place(label) => {
                        labels[label.0] = Some(at);
                        0
                    }
                };
            }
            (addresses, labels)
        }

        /// The program: labels resolved, the far targets of conditional jumps reached through
        /// a `ja` (32-bit offset) placed right after the jump.
        pub fn assemble(mut self) -> Result<Vec<sock_filter>, String> {
            let (addresses, labels) = loop {
                let (addresses, labels) = self.layout();
                let mut grown = false;
                for (item, at) in self.items.iter_mut().zip(&addresses) {
                    if let Item::Jump {
                        jt,
                        jf,
                        long_t,
                        long_f,
                        ..
                    } = item
                    {
                        for (target, long) in [(*jt, long_t), (*jf, long_f)] {
                            let to = labels[target.0].ok_or("a jump to a label never placed")?;
                            if !*long && to.checked_sub(at + 1).is_none_or(|d| d > 255) {
                                *long = true;
                                grown = true;
                            }
                        }
                    }
                }
                if !grown {
                    break (addresses, labels);
                }
            };
            let resolve = |label: Label| labels[label.0].expect("checked above");
            let mut program = Vec::new();
            for (item, at) in self.items.iter().zip(addresses) {
                match item {
                    Item::Stmt(insn) => program.push(*insn),
                    Item::Place(_) => {}
                    Item::Jump {
                        code,
                        k,
                        jt,
                        jf,
                        long_t,
                        long_f,
                    } => {
                        let after = at + 1 + usize::from(*long_t) + usize::from(*long_f);
                        // A short target is counted from the next instruction (past the
                        // trampolines); a long one is its trampoline.
                        let offset =
                            |target: Label, long: bool, trampoline: usize| -> Result<u8, String> {
                                if long {
                                    Ok((trampoline - (at + 1)) as u8)
                                } else {
                                    u8::try_from(resolve(target) - (at + 1))
                                        .map_err(|_| "a jump too far".to_string())
                                }
                            };
                        let t = offset(*jt, *long_t, at + 1)?;
                        let f = offset(*jf, *long_f, at + 1 + usize::from(*long_t))?;
                        program.push(jump(*code, *k, t, f));
                        let mut trampoline = at + 1;
                        for (target, long) in [(*jt, *long_t), (*jf, *long_f)] {
                            if long {
                                let distance = resolve(target) - (trampoline + 1);
                                program.push(stmt(JA, distance as u32));
                                trampoline += 1;
                            }
                        }
                        debug_assert_eq!(trampoline, after);
                    }
                }
            }
            if program.len() > MAX_INSNS {
                return Err(format!(
                    "the filter has {} instructions, more than the kernel's {MAX_INSNS}",
                    program.len()
                ));
            }
            Ok(program)
        }
    }
}

/// Installs the filter on the calling thread. Without no_new_privs the kernel allows it only
/// to a caller with CAP_SYS_ADMIN, so a container's init does it before dropping capabilities.
pub fn install(filter: &BpfProgram) -> Result<(), nix::Error> {
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: the kernel copies the program; `filter` outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &program as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(nix::Error::last());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_caps() -> Vec<String> {
        crate::capabilities::default_names()
    }

    #[test]
    fn the_runtime_default_profile_compiles_into_one_short_program() {
        let program = compile(&runtime_default(&default_caps())).unwrap().unwrap();
        // A search over ranges of numbers for each ABI, not a chain of ~360 calls per ABI
        // and action (460 instructions on x86_64).
        assert!(program.len() < 600, "{}", program.len());
        assert!(program.len() > 20, "{}", program.len());
    }

    #[test]
    fn cap_sys_admin_allows_mount_and_any_clone() {
        let mut caps = default_caps();
        let plain = runtime_default(&caps);
        let names = |p: &LinuxSeccomp| -> Vec<String> {
            p.syscalls()
                .iter()
                .flatten()
                .filter(|s| {
                    s.args().as_ref().is_none_or(|a| a.is_empty())
                        && s.action() == LinuxSeccompAction::ScmpActAllow
                })
                .flat_map(|s| s.names().clone())
                .collect()
        };
        assert!(!names(&plain).contains(&"mount".to_string()));
        caps.push("CAP_SYS_ADMIN".into());
        let admin = runtime_default(&caps);
        assert!(names(&admin).contains(&"mount".to_string()));
        assert!(names(&admin).contains(&"clone".to_string()));
        assert!(
            !admin
                .syscalls()
                .iter()
                .flatten()
                .any(|s| s.names().contains(&"clone3".to_string())
                    && s.action() == LinuxSeccompAction::ScmpActErrno),
            "no clone3 ENOSYS rule with CAP_SYS_ADMIN"
        );
    }

    #[test]
    fn names_of_other_architectures_are_skipped() {
        assert!(number("chown32").is_none() || cfg!(target_arch = "x86"));
        assert_eq!(number("openat"), Some(libc::SYS_openat));
    }

    #[test]
    fn an_oci_profile_decodes_and_a_notify_action_is_refused() {
        let json = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
            {"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":13},
            {"names":["unshare"],"action":"SCMP_ACT_KILL_PROCESS"}]}"#;
        let profile: LinuxSeccomp = serde_json::from_str(json).unwrap();
        assert!(compile(&profile).unwrap().is_some());
        let allow_all: LinuxSeccomp =
            serde_json::from_str(r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#).unwrap();
        assert!(compile(&allow_all).unwrap().is_none(), "nothing to filter");
        let notify = r#"{"defaultAction":"SCMP_ACT_NOTIFY"}"#;
        let profile: LinuxSeccomp = serde_json::from_str(notify).unwrap();
        assert!(compile(&profile).unwrap_err().contains("NOTIFY"));
    }

    /// One system call made by [`probe`]'s child, in one ABI.
    #[cfg(target_arch = "x86_64")]
    #[derive(Clone, Copy)]
    enum Call {
        /// `syscall`, x86_64 numbers.
        Native(i64, u64),
        /// `int 0x80`, i386 numbers, as a 32-bit program makes them.
        I386(u32, u32),
        /// `syscall` with bit 30 of the number set.
        X32(i64, u64),
    }

    /// `int 0x80` from 64-bit code: the kernel takes it as an i386 call (IA32 emulation).
    #[cfg(target_arch = "x86_64")]
    fn int80(nr: u32, arg: u32) -> i64 {
        let ret: u32;
        // SAFETY: an i386 system call with one integer argument; rbx (LLVM's) is swapped in
        // and out around it, and the registers int 0x80 may clobber are declared.
        unsafe {
            std::arch::asm!(
                "xchg {arg:e}, ebx",
                "int 0x80",
                "xchg {arg:e}, ebx",
                arg = inout(reg) arg => _,
                inout("eax") nr => ret,
                out("r8") _, out("r9") _, out("r10") _, out("r11") _,
            );
        }
        i64::from(ret as i32)
    }

    /// Forks a child that installs `filter` under no_new_privs and makes `calls`, each result
    /// (or -errno) written to a pipe at once; returns the results and how the child ended
    /// (a call the filter kills ends it with SIGSYS, and the results stop there).
    #[cfg(target_arch = "x86_64")]
    fn probe(filter: &BpfProgram, calls: &[Call]) -> (Vec<i64>, nix::sys::wait::WaitStatus) {
        let (r, w) = nix::unistd::pipe().unwrap();
        // SAFETY: the child only makes system calls (no allocation, no lock) and _exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                use std::os::fd::AsRawFd;
                let no_core = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                // SAFETY: plain system calls on values of this frame.
                unsafe {
                    libc::setrlimit(libc::RLIMIT_CORE, &no_core);
                    libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                }
                if install(filter).is_err() {
                    unsafe { libc::_exit(100) }
                }
                for call in calls {
                    let result = match *call {
                        Call::Native(nr, arg) => unsafe { libc::syscall(nr, arg) },
                        Call::I386(nr, arg) => int80(nr, arg),
                        Call::X32(nr, arg) => unsafe {
                            libc::syscall(nr | i64::from(X32_SYSCALL_BIT), arg)
                        },
                    };
                    let result = if result == -1 && !matches!(call, Call::I386(..)) {
                        -i64::from(nix::errno::Errno::last_raw())
                    } else {
                        result
                    };
                    let bytes = result.to_ne_bytes();
                    unsafe { libc::write(w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
                }
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop(w);
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::fs::File::from(r), &mut bytes).unwrap();
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                let results = bytes
                    .chunks_exact(8)
                    .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
                    .collect();
                (results, status)
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn exited(status: nix::sys::wait::WaitStatus) -> bool {
        matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0))
    }

    #[cfg(target_arch = "x86_64")]
    fn killed_by_sigsys(status: nix::sys::wait::WaitStatus) -> bool {
        matches!(
            status,
            nix::sys::wait::WaitStatus::Signaled(_, nix::sys::signal::Signal::SIGSYS, _)
        )
    }

    /// A 32-bit (i386) or x32 call cannot get past the filter: the kernel answers it by that
    /// ABI's numbers, as containerd's profile has libseccomp answer it (which was not so while
    /// the filter knew only x86_64 numbers: i386 calls were killed, and x32 ones went past a
    /// profile whose default is ALLOW).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn calls_of_the_i386_and_x32_abis_are_judged_by_their_own_numbers() {
        const READ_IMPLIES_EXEC: u64 = 0x0040_0000;
        let (i386_getpid, i386_getppid, i386_personality) = (20, 64, 136);
        let getpid = libc::SYS_getpid;
        let getppid = libc::SYS_getppid;
        let personality = libc::SYS_personality;

        // containerd's default: an i386 program runs, and is denied what a 64-bit one is.
        let filter = compile(&runtime_default(&default_caps())).unwrap().unwrap();
        let (results, status) = probe(
            &filter,
            &[
                Call::Native(getpid, 0),
                Call::I386(i386_getpid, 0),
                Call::I386(i386_personality, READ_IMPLIES_EXEC as u32),
                Call::X32(personality, READ_IMPLIES_EXEC),
                Call::X32(getpid, 0),
            ],
        );
        assert!(exited(status), "{status:?} after {results:?}");
        let pid = results[0];
        assert!(pid > 0, "{results:?}");
        assert_eq!(results[1], pid, "i386 getpid is allowed");
        assert_eq!(
            results[2],
            -i64::from(libc::EPERM),
            "i386 personality denied"
        );
        assert_eq!(
            results[3],
            -i64::from(libc::EPERM),
            "x32 personality denied"
        );
        // Allowed by the filter; a kernel without x32 (this one) answers ENOSYS after it.
        assert!(
            results[4] == pid || results[4] == -i64::from(libc::ENOSYS),
            "x32 getpid: {results:?}"
        );

        // A Localhost profile that allows all but getppid: with only the native ABI admitted,
        // an i386 or x32 call is killed; with all three, each ABI's getppid gets the errno.
        let json = |arches: &str| {
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW",{arches}"syscalls":[
                {{"names":["getppid"],"action":"SCMP_ACT_ERRNO","errnoRet":13}}]}}"#
            )
        };
        let native_only: LinuxSeccomp = serde_json::from_str(&json("")).unwrap();
        let filter = compile(&native_only).unwrap().unwrap();
        let (results, status) = probe(
            &filter,
            &[Call::Native(getppid, 0), Call::I386(i386_getpid, 0)],
        );
        assert_eq!(results, [-i64::from(libc::EACCES)]);
        assert!(killed_by_sigsys(status), "i386 not admitted: {status:?}");
        let (results, status) = probe(&filter, &[Call::X32(getppid, 0)]);
        assert!(
            results.is_empty() && killed_by_sigsys(status),
            "x32 not admitted: {status:?}"
        );

        let all: LinuxSeccomp = serde_json::from_str(&json(
            r#""architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86","SCMP_ARCH_X32"],"#,
        ))
        .unwrap();
        let filter = compile(&all).unwrap().unwrap();
        let (results, status) = probe(
            &filter,
            &[
                Call::Native(getppid, 0),
                Call::I386(i386_getppid, 0),
                Call::X32(getppid, 0),
                Call::I386(i386_getpid, 0),
            ],
        );
        assert!(exited(status), "{status:?} after {results:?}");
        let eacces = -i64::from(libc::EACCES);
        assert_eq!(results[..3], [eacces, eacces, eacces], "{results:?}");
        assert!(results[3] > 0, "i386 getpid allowed: {results:?}");
    }

    /// Runs `program` as the kernel would on one call (classic BPF, the instructions
    /// [`compile`] emits).
    fn run(program: &BpfProgram, arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        use bpf::*;
        let mut data = [0u32; 16];
        data[0] = nr;
        data[1] = arch;
        for (i, arg) in args.iter().enumerate() {
            data[4 + 2 * i] = *arg as u32;
            data[5 + 2 * i] = (*arg >> 32) as u32;
        }
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let insn = program[pc];
            pc += 1;
            let k = insn.k;
            match insn.code {
                LD_W_ABS => a = data[k as usize / 4],
                AND_K => a &= k,
                RET_K => return k,
                JA => pc += k as usize,
                code => {
                    let taken = match code {
                        JEQ_K => a == k,
                        JGT_K => a > k,
                        JGE_K => a >= k,
                        JSET_K => a & k != 0,
                        _ => panic!("instruction {code:#x}"),
                    };
                    pc += usize::from(if taken { insn.jt } else { insn.jf });
                }
            }
        }
    }

    fn holds(condition: &Condition, arg: u64) -> bool {
        let v = condition.value;
        match condition.op {
            Op::Ne => arg != v,
            Op::Lt => arg < v,
            Op::Le => arg <= v,
            Op::Eq => arg == v,
            Op::Ge => arg >= v,
            Op::Gt => arg > v,
            Op::MaskedEq(mask) => arg & mask == v,
        }
    }

    /// What `profile` answers the calls of `abi`, worked out rule by rule: for a call, the
    /// strictest action of the rules that name it and hold (the first of equals), else the
    /// default.
    struct Expected {
        default: u32,
        width: u64,
        /// Each call's rules (return, conditions), in the profile's order.
        rules: BTreeMap<u32, Vec<(u32, Rule)>>,
    }

    impl Expected {
        fn of(profile: &LinuxSeccomp, abi: Abi) -> Expected {
            let x32 = Admitted::of(profile).x32;
            let default = action(profile.default_action(), profile.default_errno_ret()).unwrap();
            let mut rules: BTreeMap<u32, Vec<(u32, Rule)>> = BTreeMap::new();
            for syscall in profile.syscalls().iter().flatten() {
                let ret = action(syscall.action(), syscall.errno_ret()).unwrap();
                let conditions = rule(syscall.args().as_deref().unwrap_or_default(), abi).unwrap();
                for nr in syscall.names().iter().flat_map(|n| abi.numbers(n, x32)) {
                    rules
                        .entry(nr as u32)
                        .or_default()
                        .push((ret, conditions.clone()));
                }
            }
            let width = if abi.is_32_bit() {
                u64::from(u32::MAX)
            } else {
                u64::MAX
            };
            Expected {
                default,
                width,
                rules,
            }
        }

        fn answer(&self, nr: u32, args: [u64; 6]) -> u32 {
            let mut best: Option<u32> = None;
            for (ret, conditions) in self.rules.get(&nr).into_iter().flatten() {
                if *ret == self.default {
                    continue;
                }
                let all = conditions
                    .iter()
                    .all(|c| holds(c, args[usize::from(c.index)] & self.width));
                if all && best.is_none_or(|b| strictness(*ret) < strictness(b)) {
                    best = Some(*ret);
                }
            }
            best.unwrap_or(self.default)
        }
    }

    /// Every call number of every admitted ABI, with `values` as each argument, answered by
    /// the program as the profile's rules answer it.
    fn agrees(profile: &LinuxSeccomp, values: &[u64]) {
        let program = compile(profile).unwrap().unwrap();
        for abi in Admitted::of(profile).abis() {
            let expected = Expected::of(profile, abi);
            for nr in 0..600 {
                for value in values {
                    let args = [*value; 6];
                    assert_eq!(
                        run(&program, abi.audit_arch(), nr, args),
                        expected.answer(nr, args),
                        "{abi:?} call {nr} with {value:#x}"
                    );
                }
            }
        }
        // Another ABI is killed.
        assert_eq!(
            run(&program, 0x1234, 0, [0; 6]),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }

    #[test]
    fn the_program_answers_each_call_as_the_profile_rules_do() {
        let values = [
            0,
            8,
            libc::AF_ALG as u64,
            libc::AF_ALG as u64 + 1,
            libc::AF_VSOCK as u64,
            libc::AF_VSOCK as u64 + 1,
            libc::CLONE_NEWUSER as u64,
            0x20008,
            0xffff_ffff,
            0x1_0000_0008,
            u64::MAX,
        ];
        agrees(&runtime_default(&default_caps()), &values);
        let mut caps = default_caps();
        caps.push("CAP_SYS_ADMIN".into());
        agrees(&runtime_default(&caps), &values);
    }

    /// Every comparison on 64-bit values whose high words differ, or are equal with the low
    /// words deciding; the actions' strictness; a rule with the default action left out.
    #[test]
    fn comparisons_actions_and_far_jumps_follow_the_rules() {
        let v = 0x1_0000_0005u64;
        let ops = [
            ("SCMP_CMP_NE", 11),
            ("SCMP_CMP_LT", 12),
            ("SCMP_CMP_LE", 13),
            ("SCMP_CMP_EQ", 14),
            ("SCMP_CMP_GE", 15),
            ("SCMP_CMP_GT", 16),
        ];
        let mut rules: Vec<String> = ops
            .iter()
            .enumerate()
            .map(|(i, (op, errno))| {
                format!(
                    r#"{{"names":["getppid","getpgrp"],"action":"SCMP_ACT_ERRNO","errnoRet":{errno},
                    "args":[{{"index":{i},"value":{v},"op":"{op}"}}]}}"#
                )
            })
            .collect();
        rules.push(format!(
            r#"{{"names":["getppid"],"action":"SCMP_ACT_TRAP",
            "args":[{{"index":0,"value":{},"valueTwo":{},"op":"SCMP_CMP_MASKED_EQ"}}]}}"#,
            0xff00_0000_00ffu64, 0x1200_0000_0034u64
        ));
        rules.push(r#"{"names":["getppid"],"action":"SCMP_ACT_ALLOW"}"#.into());
        rules.push(r#"{"names":["getpgrp"],"action":"SCMP_ACT_KILL_PROCESS","args":[{"index":3,"value":7,"op":"SCMP_CMP_EQ"}]}"#.into());
        // Far jumps: one call with 300 rules of its own.
        for i in 0..300 {
            rules.push(format!(
                r#"{{"names":["getsid"],"action":"SCMP_ACT_ERRNO","errnoRet":{},"args":[{{"index":4,"value":{i},"op":"SCMP_CMP_EQ"}}]}}"#,
                i % 100 + 1
            ));
        }
        let json = format!(
            r#"{{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86"],"syscalls":[{}]}}"#,
            rules.join(",")
        );
        let profile: LinuxSeccomp = serde_json::from_str(&json).unwrap();
        let program = compile(&profile).unwrap().unwrap();
        assert!(
            program.len() > 255 && program.len() <= 4096,
            "{}",
            program.len()
        );
        let values = [
            0,
            5,
            6,
            0x34,
            0x1_0000_0004,
            v,
            0x1_0000_0006,
            0x2_0000_0000,
            0x1200_0000_0034,
            0x12ff_0000_0034,
            7,
            u64::MAX,
        ];
        agrees(&profile, &values);
        let getsid = libc::SYS_getsid as u32;
        let arch = Abi::Native.audit_arch();
        for i in [0u64, 99, 150, 299, 300] {
            let want = if i < 300 {
                libc::SECCOMP_RET_ERRNO | (i as u32 % 100 + 1)
            } else {
                libc::SECCOMP_RET_ALLOW
            };
            assert_eq!(run(&program, arch, getsid, [0, 0, 0, 0, i, 0]), want);
        }

        // A rule with the default action changes nothing (it allowed the call while each
        // action had a filter of its own).
        let same = r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
            {"names":["getppid"],"action":"SCMP_ACT_ERRNO"},
            {"names":["getpid"],"action":"SCMP_ACT_ALLOW"}]}"#;
        let profile: LinuxSeccomp = serde_json::from_str(same).unwrap();
        let program = compile(&profile).unwrap().unwrap();
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        assert_eq!(run(&program, arch, libc::SYS_getppid as u32, [0; 6]), eperm);
        assert_eq!(
            run(&program, arch, libc::SYS_getpid as u32, [0; 6]),
            libc::SECCOMP_RET_ALLOW
        );
    }

    /// The kernel reads the program as [`run`] does: 64-bit arguments word by word, far
    /// jumps through their trampolines.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_kernel_judges_64_bit_arguments_as_the_rules_say() {
        let mut rules = vec![format!(
            r#"{{"names":["getppid"],"action":"SCMP_ACT_ERRNO","errnoRet":13,
            "args":[{{"index":0,"value":{},"op":"SCMP_CMP_GT"}}]}}"#,
            0x1_0000_0000u64
        )];
        for i in 0..300 {
            rules.push(format!(
                r#"{{"names":["getppid"],"action":"SCMP_ACT_ERRNO","errnoRet":{},"args":[{{"index":0,"value":{},"op":"SCMP_CMP_EQ"}}]}}"#,
                i % 50 + 20,
                1000 + i
            ));
        }
        let json = format!(
            r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{}]}}"#,
            rules.join(",")
        );
        let profile: LinuxSeccomp = serde_json::from_str(&json).unwrap();
        let program = compile(&profile).unwrap().unwrap();
        let getppid = libc::SYS_getppid;
        let (results, status) = probe(
            &program,
            &[
                Call::Native(getppid, 0xffff_ffff),
                Call::Native(getppid, 0x1_0000_0000),
                Call::Native(getppid, 0x1_0000_0001),
                Call::Native(getppid, 0x2_0000_0000),
            ],
        );
        assert!(exited(status), "{status:?} after {results:?}");
        let parent = i64::from(std::process::id());
        let eacces = -i64::from(libc::EACCES);
        assert_eq!(results, [parent, parent, eacces, eacces]);
    }
}
