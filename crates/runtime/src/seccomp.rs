//! Seccomp: which system calls a container may make, as a BPF filter the kernel runs on each.
//!
//! Three profiles, as Kubernetes names them: `Unconfined` (no filter), `RuntimeDefault`
//! (containerd's default profile, re-expressed here: an allow-list of about 360 calls, everything
//! else fails with EPERM, `clone` without namespace flags, `clone3` with ENOSYS so that libcs
//! fall back to `clone`, and the calls a capability in the bounding set needs) and `Localhost`
//! (an OCI seccomp JSON file from the node's seccomp folder). A profile is an
//! [`oci_spec::runtime::LinuxSeccomp`], as in a runc bundle's config.json; [`compile`] turns it
//! into BPF with `seccompiler` (pure Rust: nothing to link into the static shim).
//!
//! One seccompiler filter has a single action on a match; a profile has one per rule. So a
//! profile becomes several programs, as if each were installed: the kernel runs every filter
//! and keeps the strictest answer (KILL > TRAP > ERRNO > TRACE > LOG > ALLOW). The first
//! program answers the default action for every call no rule names (and ALLOW for the rest);
//! each further program answers one rule action for its calls (and ALLOW otherwise). A call
//! that a rule names with conditions that do not hold gets the default action, as libseccomp
//! gives it. The first program finds the calls allowed whatever their arguments by a binary
//! search over runs of numbers (`seccomp/search.rs`), as libseccomp's optimised filters do,
//! and leaves the calls allowed on conditions to seccompiler's code. The programs are then
//! chained into one filter that gives the same answers (`seccomp/chain.rs`), as runc
//! installs one.
//!
//! Names an ABI does not have (`chown32` on x86_64) are skipped, as libseccomp skips them.
//!
//! **Every ABI the kernel takes calls in.** A 64-bit x86 kernel also runs 32-bit calls (`int
//! 0x80`, or a 32-bit program: audit arch I386, numbers of the i386 table) and x32 calls (the
//! x86_64 audit arch with bit 30 of the number set, numbers 512–547 for the calls x32 has its
//! own of). A filter that only compared x86_64 numbers would let `0x40000000 | N` through a
//! profile whose default is ALLOW, and an i386 number is another call's. As libseccomp does
//! for a profile's `architectures` (containerd's default lists x86_64, x86 and x32), each
//! filter here is one program per admitted ABI, each judging only its ABI's calls by that ABI's
//! numbers (the x86_64 one masks bit 30 off when x32 is admitted, and leaves x32 calls to the
//! gate when it is not), and one more program, the gate, kills a call of any ABI the profile
//! does not admit (the native one always is; x32 calls when x32 is not). So each program has
//! one answer besides ALLOW, which lets them be chained into one filter. The arguments of an
//! i386 call are compared on their low 32 bits, as libseccomp compares them for a 32-bit ABI.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompArgBuilder,
    LinuxSeccompOperator, LinuxSyscall,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

mod chain;
mod search;

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

/// A process's filter as its record keeps it: one of podlab's own profiles by name and the
/// capability set it was made for (rebuilt where it is compiled: a record is read and written
/// several times in a container's life, and containerd's profile spelt out is 15 kB of its
/// JSON), or a whole profile (`Localhost`). Records from before this form hold the whole
/// profile and still read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum SeccompSpec {
    Named {
        named: NamedProfile,
        bounding: Vec<String>,
    },
    Profile(LinuxSeccomp),
}

/// podlab's profiles, made from a capability bounding set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NamedProfile {
    /// [`runtime_default`].
    RuntimeDefault,
    /// [`pause_default`].
    PauseDefault,
}

impl SeccompSpec {
    /// The profile itself.
    pub fn profile(&self) -> std::borrow::Cow<'_, LinuxSeccomp> {
        match self {
            SeccompSpec::Named {
                named: NamedProfile::RuntimeDefault,
                bounding,
            } => std::borrow::Cow::Owned(runtime_default(bounding)),
            SeccompSpec::Named {
                named: NamedProfile::PauseDefault,
                bounding,
            } => std::borrow::Cow::Owned(pause_default(bounding)),
            SeccompSpec::Profile(profile) => std::borrow::Cow::Borrowed(profile),
        }
    }
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

/// The calls the pause process makes once its filter is in: the shim's last steps before the
/// `execve` (the profile's further filters, capabilities, groups, user, umask, cwd,
/// descriptors, the trace's write, memory of its own), then podlab-pause's own (signal handlers, `pause`, `wait4`, `getpid`, `write`,
/// `exit_group`).
const PAUSE_CALLS: &[&str] = &[
    "brk",
    "capget",
    "capset",
    "chdir",
    "close",
    "close_range",
    "execve",
    "exit",
    "exit_group",
    "futex",
    "getpid",
    "gettid",
    "madvise",
    "mmap",
    "mprotect",
    "mremap",
    "munmap",
    "pause",
    "prctl",
    "restart_syscall",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "rt_sigsuspend",
    "seccomp",
    "setgroups",
    "setresgid",
    "setresuid",
    "umask",
    "wait4",
    "write",
];

/// The pause process's `RuntimeDefault`: containerd's default profile ([`runtime_default`])
/// with only the rules of the calls the pause process makes (`PAUSE_CALLS`), so it allows
/// nothing containerd's profile does not, and installs in about half the time (measured: 0.06
/// ms against 0.10, `measure_the_install_of_each_seccomp_profile`). containerd gives the
/// sandbox container its whole default profile; a process that only waits for signals needs
/// none of the rest.
pub fn pause_default(bounding: &[String]) -> LinuxSeccomp {
    let mut profile = runtime_default(bounding);
    let rules = profile.syscalls().clone().unwrap_or_default();
    let narrowed: Vec<LinuxSyscall> = rules
        .into_iter()
        .filter_map(|mut rule| {
            let names: Vec<String> = rule
                .names()
                .iter()
                .filter(|n| PAUSE_CALLS.contains(&n.as_str()))
                .cloned()
                .collect();
            (!names.is_empty()).then(|| {
                rule.set_names(names);
                rule
            })
        })
        .collect();
    profile.set_syscalls(Some(narrowed));
    profile
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

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "riscv64")]
const ARCH: TargetArch = TargetArch::riscv64;

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

/// A profile action as seccompiler's, with the profile's errno default.
fn action(action: LinuxSeccompAction, errno: Option<u32>) -> Result<SeccompAction, String> {
    Ok(match action {
        LinuxSeccompAction::ScmpActAllow => SeccompAction::Allow,
        LinuxSeccompAction::ScmpActErrno => {
            SeccompAction::Errno(errno.unwrap_or(libc::EPERM as u32))
        }
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
            SeccompAction::KillThread
        }
        LinuxSeccompAction::ScmpActKillProcess => SeccompAction::KillProcess,
        LinuxSeccompAction::ScmpActTrap => SeccompAction::Trap,
        LinuxSeccompAction::ScmpActLog => SeccompAction::Log,
        LinuxSeccompAction::ScmpActTrace => SeccompAction::Trace(errno.unwrap_or(0)),
        LinuxSeccompAction::ScmpActNotify => {
            return Err("SCMP_ACT_NOTIFY needs a seccomp agent, which podlab does not have".into())
        }
    })
}

/// The conditions of one profile rule (all must hold), or None for an unconditional rule; in
/// a 32-bit ABI on the arguments' low 32 bits.
fn rule(args: &[LinuxSeccompArg], abi: Abi) -> Result<Option<SeccompRule>, String> {
    if args.is_empty() {
        return Ok(None);
    }
    let (len, mask) = if abi.is_32_bit() {
        (SeccompCmpArgLen::Dword, u64::from(u32::MAX))
    } else {
        (SeccompCmpArgLen::Qword, u64::MAX)
    };
    let width = |v: u64| v & mask;
    let mut conditions = Vec::new();
    for arg in args {
        let value = width(arg.value());
        let (op, value) = match arg.op() {
            LinuxSeccompOperator::ScmpCmpNe => (SeccompCmpOp::Ne, value),
            LinuxSeccompOperator::ScmpCmpLt => (SeccompCmpOp::Lt, value),
            LinuxSeccompOperator::ScmpCmpLe => (SeccompCmpOp::Le, value),
            LinuxSeccompOperator::ScmpCmpEq => (SeccompCmpOp::Eq, value),
            LinuxSeccompOperator::ScmpCmpGe => (SeccompCmpOp::Ge, value),
            LinuxSeccompOperator::ScmpCmpGt => (SeccompCmpOp::Gt, value),
            // OCI: value is the mask, valueTwo what the masked argument must equal.
            LinuxSeccompOperator::ScmpCmpMaskedEq => (
                SeccompCmpOp::MaskedEq(value),
                width(arg.value_two().unwrap_or(0)),
            ),
        };
        let index =
            u8::try_from(arg.index()).map_err(|_| format!("argument index {}", arg.index()))?;
        conditions
            .push(SeccompCondition::new(index, len.clone(), op, value).map_err(|e| e.to_string())?);
    }
    SeccompRule::new(conditions)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The calls of some rules, each with its rules; an empty list matches the call whatever its
/// arguments.
type Calls = BTreeMap<i64, Vec<SeccompRule>>;

fn add(calls: &mut Calls, number: i64, rule: Option<SeccompRule>) {
    let unconditional = calls.get(&number).is_some_and(|r| r.is_empty());
    match rule {
        _ if unconditional => {}
        None => {
            calls.insert(number, Vec::new());
        }
        Some(rule) => calls.entry(number).or_default().push(rule),
    }
}

/// The BPF filters of `profile`, to be installed in order ([`install`]); empty for a profile
/// that allows everything. Usually one: the programs chained (`seccomp/chain.rs`).
pub fn compile(profile: &LinuxSeccomp) -> Result<Vec<BpfProgram>, String> {
    compile_shaped(profile, true).map(chain::chain)
}

/// A profile compiled ahead of time ([`precompile`]), and its filters.
static PRECOMPILED: std::sync::Mutex<Option<Precompiled>> = std::sync::Mutex::new(None);

/// Filters kept until the pod's containers have started ([`forget_precompiled`]), in one
/// block: the compiler's own programs are scattered among the heap pages of its temporaries,
/// and each page holding a piece of one stays resident in every shim (about 20 kB of a shim's
/// 110 kB).
struct Precompiled {
    spec: SeccompSpec,
    instructions: Vec<seccompiler::sock_filter>,
    lengths: Vec<usize>,
}

impl Precompiled {
    fn new(spec: SeccompSpec, filters: Vec<BpfProgram>) -> Precompiled {
        let lengths: Vec<usize> = filters.iter().map(Vec::len).collect();
        let mut instructions = Vec::with_capacity(lengths.iter().sum());
        for filter in &filters {
            instructions.extend_from_slice(filter);
        }
        // One allocation made once the compiler's temporaries are free: its pages are few
        // and shared with nothing the compiler left.
        drop(filters);
        Precompiled {
            spec,
            instructions,
            lengths,
        }
    }

    fn filters(&self) -> Vec<BpfProgram> {
        let mut rest = self.instructions.as_slice();
        self.lengths
            .iter()
            .map(|&length| {
                let (filter, after) = rest.split_at(length);
                rest = after;
                filter.to_vec()
            })
            .collect()
    }
}

/// Compiles `spec` now and keeps the filters for [`compile_cached`]: the shim does it for the
/// pod's `RuntimeDefault` while it waits for pause to start, so that a container's init,
/// forked from it, finds its filters made instead of compiling them on the way to its
/// `execve` (0.25 ms of a release build).
pub fn precompile(spec: SeccompSpec) {
    if let Ok(filters) = compile(&spec.profile()) {
        let kept = Precompiled::new(spec, filters);
        if let Ok(mut slot) = PRECOMPILED.lock() {
            *slot = Some(kept);
        }
    }
}

/// Drops what [`precompile`] kept (about 7 kB of a shim's heap): the shim does it once its
/// pod's containers have started and it has gone idle, so that an idle pod does not keep, for
/// its whole life, filters that only a restart would use (which then compiles them again).
pub fn forget_precompiled() {
    if let Ok(mut slot) = PRECOMPILED.lock() {
        *slot = None;
    }
}

/// [`compile`] of `spec`'s profile, from what [`precompile`] kept when it is the same.
pub fn compile_cached(spec: &SeccompSpec) -> Result<Vec<BpfProgram>, String> {
    if let Ok(slot) = PRECOMPILED.lock() {
        if let Some(kept) = slot.as_ref().filter(|kept| &kept.spec == spec) {
            return Ok(kept.filters());
        }
    }
    compile(&spec.profile())
}

/// [`compile`], or with `shaped` false seccompiler's programs as they come: the allow-list in
/// one filter per ABI, not compacted (what the shaped filters are checked against).
fn compile_shaped(profile: &LinuxSeccomp, shaped: bool) -> Result<Vec<BpfProgram>, String> {
    let admitted = Admitted::of(profile);
    let mut filters = Vec::new();
    for abi in admitted.abis() {
        filters.extend(compile_abi(profile, abi, admitted.x32, shaped)?);
    }
    if !filters.is_empty() {
        filters.push(abi_gate(admitted));
    }
    Ok(filters)
}

/// The filters of `profile` for the calls of `abi` (every other ABI's call is allowed by them).
fn compile_abi(
    profile: &LinuxSeccomp,
    abi: Abi,
    x32: bool,
    shaped: bool,
) -> Result<Vec<BpfProgram>, String> {
    let default = action(profile.default_action(), profile.default_errno_ret())?;
    // Every named call (with its conditions) is ALLOW in the first filter; each action's calls
    // get that action in a filter of their own.
    let mut named = Calls::new();
    let mut by_action: Vec<(SeccompAction, Calls)> = Vec::new();
    for syscall in profile.syscalls().iter().flatten() {
        let act = action(syscall.action(), syscall.errno_ret())?;
        let args = syscall.args().clone().unwrap_or_default();
        let condition = rule(&args, abi)?;
        // A rule whose action is the default's changes nothing, as runc leaves it out; were it
        // named here, the first filter would let its call through as ALLOW.
        if act == default {
            continue;
        }
        for number in syscall.names().iter().flat_map(|n| abi.numbers(n, x32)) {
            add(&mut named, number, condition.clone());
            if act != SeccompAction::Allow {
                let at = match by_action.iter().position(|(a, _)| *a == act) {
                    Some(at) => at,
                    None => {
                        by_action.push((act.clone(), Calls::new()));
                        by_action.len() - 1
                    }
                };
                add(&mut by_action[at].1, number, condition.clone());
            }
        }
    }
    let mut programs = Vec::new();
    if default != SeccompAction::Allow {
        programs.push(if shaped {
            searched(named, default, abi, x32)?
        } else {
            let filter = SeccompFilter::new(named, default, SeccompAction::Allow, ARCH);
            for_abi(seccompiler_program(filter)?, abi, x32)?
        });
    }
    for (act, calls) in by_action {
        let filter = SeccompFilter::new(calls, SeccompAction::Allow, act, ARCH);
        programs.push(for_abi(seccompiler_program(filter)?, abi, x32)?);
    }
    Ok(programs
        .into_iter()
        .map(|program| {
            if shaped {
                compact::compact(&program)
            } else {
                program
            }
        })
        .collect())
}

fn seccompiler_program(
    filter: Result<SeccompFilter, seccompiler::BackendError>,
) -> Result<BpfProgram, String> {
    let filter = filter.map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

/// The allow-list's program for `abi` with its unconditional calls found by a binary search
/// (`seccomp/search.rs`), and its calls allowed on conditions (clone's flags, personality's
/// personas, socket's families) after it, as seccompiler writes them, then the default answer.
fn searched(
    named: Calls,
    default: SeccompAction,
    abi: Abi,
    x32: bool,
) -> Result<BpfProgram, String> {
    let (plain, conditional): (Calls, Calls) = named.into_iter().partition(|(_, r)| r.is_empty());
    let plain: Vec<u32> = plain
        .into_keys()
        .map(|n| u32::try_from(n).map_err(|_| format!("call number {n} out of range")))
        .collect::<Result<_, _>>()?;
    let rest = SeccompFilter::new(conditional, default, SeccompAction::Allow, ARCH);
    let rest = for_abi(seccompiler_program(rest)?, abi, x32)?;
    let body_at = abi_prologue(abi, x32).len();
    let mut program = rest[..body_at].to_vec();
    program.extend(search::allow_any_of(&plain));
    program.extend_from_slice(&rest[body_at..]);
    Ok(program)
}

/// seccompiler's programs, shortened without changing any answer. For a call it allows
/// whatever the arguments, seccompiler writes five instructions (the comparison, two jumps
/// over the rule's body, its ALLOW, and the mismatch return its rule list can never reach);
/// one does the same work. Branches to a return go to one shared by the branches around
/// them, every jump that lands on an unconditional jump is sent straight to where that one
/// leads, instructions nothing reaches are dropped, and the offsets are recomputed. A
/// conditional jump's offset is one byte: one that would jump farther than 255 keeps its
/// first hop. The kernel's cost of installing a filter grows with its length (its checks, the
/// JIT, and the per-call cache it fills by running the filter for every call number): the
/// default profile's 1,800 instructions per ABI cost about 0.7 ms per ABI and process.
mod compact {
    use seccompiler::sock_filter;

    const CLASS_JMP: u16 = 0x05;
    const CLASS_RET: u16 = 0x06;
    const OP_JA: u16 = 0x00;

    fn class(code: u16) -> u16 {
        code & 0x07
    }

    fn is_ja(insn: &sock_filter) -> bool {
        class(insn.code) == CLASS_JMP && insn.code & 0xf0 == OP_JA
    }

    fn is_conditional(insn: &sock_filter) -> bool {
        class(insn.code) == CLASS_JMP && !is_ja(insn)
    }

    /// Where a jump's branches lead, as absolute positions: (taken, not taken) for a
    /// conditional jump, (target, target) for JA.
    fn targets(program: &[sock_filter], pc: usize) -> (usize, usize) {
        let insn = &program[pc];
        if is_ja(insn) {
            let target = pc + 1 + insn.k as usize;
            (target, target)
        } else {
            (pc + 1 + insn.jt as usize, pc + 1 + insn.jf as usize)
        }
    }

    /// The first instruction from `pc` on that is not an unconditional jump.
    fn through_jumps(program: &[sock_filter], mut pc: usize) -> usize {
        while pc < program.len() && is_ja(&program[pc]) {
            pc = targets(program, pc).0;
        }
        pc
    }

    /// Sends each conditional branch that lands on a `RET k` to a later `RET k` that others
    /// land on too, when one is within a one-byte offset: seccompiler gives every allowed call
    /// a return of its own, which then serves a hundred of them, and the others are dropped.
    fn share_returns(program: &[sock_filter]) -> Vec<sock_filter> {
        const RET_K: u16 = CLASS_RET;
        let mut out = program.to_vec();
        let last = program.len().saturating_sub(1);
        let mut shared: std::collections::HashMap<u32, usize> = Default::default();
        for pc in 0..out.len() {
            if !is_conditional(&out[pc]) {
                continue;
            }
            let (taken, not_taken) = targets(&out, pc);
            for (is_taken, target) in [(true, taken), (false, not_taken)] {
                let target = through_jumps(program, target);
                let Some(ret) = program.get(target).filter(|i| i.code == RET_K) else {
                    continue;
                };
                let reach = (pc + 1 + u8::MAX as usize).min(last);
                if target > reach {
                    continue;
                }
                let same = |at: usize| program[at].code == RET_K && program[at].k == ret.k;
                let chosen = match shared.get(&ret.k) {
                    Some(&at) if at > pc && at <= reach => at,
                    _ => (pc + 1..=reach)
                        .rev()
                        .find(|&at| same(at))
                        .unwrap_or(target),
                };
                shared.insert(ret.k, chosen);
                let offset = (chosen - pc - 1) as u8;
                if is_taken {
                    out[pc].jt = offset;
                } else {
                    out[pc].jf = offset;
                }
            }
        }
        out
    }

    pub fn compact(program: &[sock_filter]) -> Vec<sock_filter> {
        let shared = share_returns(program);
        let program = shared.as_slice();
        let n = program.len();
        // A conditional branch (pc, taken?) that must keep its first hop: its threaded target
        // would be out of a one-byte offset's reach.
        let mut first_hop: std::collections::BTreeSet<(usize, bool)> = Default::default();
        loop {
            let wanted = |pc: usize, taken: bool, target: usize| {
                if first_hop.contains(&(pc, taken)) {
                    target
                } else {
                    through_jumps(program, target)
                }
            };
            // Where each instruction's branches go once threaded.
            let mut next: Vec<(usize, usize)> = vec![(0, 0); n];
            for (pc, insn) in program.iter().enumerate() {
                next[pc] = if is_ja(insn) {
                    let t = through_jumps(program, targets(program, pc).0);
                    (t, t)
                } else if is_conditional(insn) {
                    let (t, f) = targets(program, pc);
                    (wanted(pc, true, t), wanted(pc, false, f))
                } else {
                    (pc + 1, pc + 1)
                };
            }
            // What the first instruction reaches.
            let mut reached = vec![false; n];
            let mut todo = vec![through_jumps(program, 0)];
            while let Some(pc) = todo.pop() {
                if pc >= n || reached[pc] {
                    continue;
                }
                reached[pc] = true;
                if class(program[pc].code) != CLASS_RET {
                    todo.push(next[pc].0);
                    todo.push(next[pc].1);
                }
            }
            let mut at = vec![usize::MAX; n + 1];
            let mut count = 0;
            for pc in 0..n {
                if reached[pc] {
                    at[pc] = count;
                    count += 1;
                }
            }
            at[n] = count;
            let mut out = Vec::with_capacity(count);
            let mut too_far = false;
            for pc in (0..n).filter(|&pc| reached[pc]) {
                let mut insn = program[pc].clone();
                let offset = |target: usize| at[target] - at[pc] - 1;
                if is_ja(&insn) {
                    insn.k = offset(next[pc].0) as u32;
                } else if is_conditional(&insn) {
                    for (taken, target) in [(true, next[pc].0), (false, next[pc].1)] {
                        match u8::try_from(offset(target)) {
                            Ok(o) if taken => insn.jt = o,
                            Ok(o) => insn.jf = o,
                            Err(_) => {
                                first_hop.insert((pc, taken));
                                too_far = true;
                            }
                        }
                    }
                }
                out.push(insn);
            }
            if !too_far {
                return out;
            }
        }
    }

    #[cfg(test)]
    pub mod tests {
        use super::*;

        /// What `program` answers for a call: a small interpreter of the classic BPF a
        /// seccomp filter may hold (loads of the call's data, AND, jumps, returns).
        pub fn run(program: &[sock_filter], data: &[u32; 16]) -> u32 {
            let (mut pc, mut a) = (0usize, 0u32);
            loop {
                let insn = &program[pc];
                match insn.code {
                    0x20 => a = data[insn.k as usize / 4],
                    0x54 => a &= insn.k,
                    0x06 => return insn.k,
                    code if class(code) == CLASS_JMP => {
                        let (t, f) = targets(program, pc);
                        let taken = match code & 0xf0 {
                            0x00 => true,
                            0x10 => a == insn.k,
                            0x20 => a > insn.k,
                            0x30 => a >= insn.k,
                            0x40 => a & insn.k != 0,
                            other => panic!("jump op {other:#x}"),
                        };
                        pc = if taken { t } else { f };
                        continue;
                    }
                    other => panic!("instruction {other:#x}"),
                }
                pc += 1;
            }
        }
    }
}

/// The classic BPF of a seccomp filter (linux/filter.h, linux/seccomp.h).
mod bpf {
    use seccompiler::sock_filter;

    // The opcodes as linux/bpf_common.h composes them (libc has the parts, as u32; they fit
    // in the instruction's u16 code).
    use libc::{BPF_ABS, BPF_ALU, BPF_AND, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_JSET, BPF_K, BPF_LD};
    use libc::{BPF_RET, BPF_W};

    pub const LD_W_ABS: u16 = (BPF_LD | BPF_W | BPF_ABS) as u16;
    pub const JEQ_K: u16 = (BPF_JMP | BPF_JEQ | BPF_K) as u16;
    pub const JSET_K: u16 = (BPF_JMP | BPF_JSET | BPF_K) as u16;
    pub const JGE_K: u16 = (BPF_JMP | BPF_JGE | BPF_K) as u16;
    pub const AND_K: u16 = (BPF_ALU | BPF_AND | BPF_K) as u16;
    pub const RET_K: u16 = (BPF_RET | BPF_K) as u16;
    /// Offsets in `struct seccomp_data`.
    pub const NR_OFFSET: u32 = 0;
    pub const ARCH_OFFSET: u32 = 4;

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
}

/// seccompiler's program made to judge only `abi`'s calls: its arch check (load the arch, jump
/// over a KILL_PROCESS when it is seccompiler's target) becomes [`abi_prologue`], followed by
/// the program's body.
fn for_abi(program: BpfProgram, abi: Abi, x32: bool) -> Result<BpfProgram, String> {
    use bpf::*;
    let prologue = [
        stmt(LD_W_ABS, ARCH_OFFSET),
        jump(JEQ_K, Abi::Native.audit_arch(), 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
    ];
    if program.len() < 4 || program[..3] != prologue {
        return Err("seccompiler's program does not start with its architecture check".into());
    }
    let mut out = abi_prologue(abi, x32);
    // The body loads the number first (unless it is only the default's return); it is loaded
    // (and masked) by the prologue already.
    let body = &program[3..];
    let body = match body.first() {
        Some(first) if *first == stmt(LD_W_ABS, NR_OFFSET) => &body[1..],
        _ => body,
    };
    out.extend_from_slice(body);
    Ok(out)
}

/// "ALLOW unless `abi`", then the call's number loaded into A; in the native x86_64 program,
/// the number's bit 30 is masked off (x32 admitted), or an x32 call is allowed here and killed
/// by the gate ([`abi_gate`]): one answer per program.
fn abi_prologue(abi: Abi, x32: bool) -> BpfProgram {
    use bpf::*;
    let mut out = vec![
        stmt(LD_W_ABS, ARCH_OFFSET),
        jump(JEQ_K, abi.audit_arch(), 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
        stmt(LD_W_ABS, NR_OFFSET),
    ];
    if abi == Abi::Native && cfg!(target_arch = "x86_64") {
        if x32 {
            out.push(stmt(AND_K, !X32_SYSCALL_BIT));
        } else {
            out.push(jump(JSET_K, X32_SYSCALL_BIT, 0, 1));
            out.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
        }
    }
    out
}

/// The program that kills a call of an ABI `admitted` does not name (libseccomp's bad-arch
/// action); the native one is always admitted, and on x86_64 its x32 calls (bit 30 of the
/// number) only when x32 is.
fn abi_gate(admitted: Admitted) -> BpfProgram {
    use bpf::*;
    let mut gate = vec![stmt(LD_W_ABS, ARCH_OFFSET)];
    for abi in admitted.abis() {
        if abi == Abi::Native && cfg!(target_arch = "x86_64") && !admitted.x32 {
            gate.push(jump(JEQ_K, abi.audit_arch(), 0, 4));
            gate.push(stmt(LD_W_ABS, NR_OFFSET));
            gate.push(jump(JSET_K, X32_SYSCALL_BIT, 0, 1));
            gate.push(stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS));
        } else {
            gate.push(jump(JEQ_K, abi.audit_arch(), 0, 1));
        }
        gate.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
    }
    gate.push(stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS));
    gate
}

/// Installs the filters on the calling thread. Without no_new_privs the kernel allows it only
/// to a caller with CAP_SYS_ADMIN, so a container's init does it before dropping capabilities.
pub fn install(filters: &[BpfProgram]) -> Result<(), nix::Error> {
    for filter in filters {
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
    fn the_runtime_default_profile_is_a_searched_allow_list_an_enosys_program_and_a_gate_in_one_filter(
    ) {
        let programs = compile_shaped(&runtime_default(&default_caps()), true).unwrap();
        let abis = if cfg!(target_arch = "x86_64") { 2 } else { 1 };
        // Per ABI: the allow-list, then clone3's ENOSYS; then the gate.
        assert_eq!(programs.len(), 2 * abis + 1);
        // seccompiler's five instructions per allowed call are two once compacted.
        let total: usize = programs.iter().map(Vec::len).sum();
        // Chained into the one filter the kernel gets, no longer than BPF_MAXINSNS.
        let filters = compile(&runtime_default(&default_caps())).unwrap();
        assert_eq!(filters.len(), 1);
        assert_eq!(filters[0].len(), total);
        assert!(total <= 4096, "{total} instructions");
        let plain: usize = compile_shaped(&runtime_default(&default_caps()), false)
            .unwrap()
            .iter()
            .map(Vec::len)
            .sum();
        assert!(
            total * 2 < plain,
            "{total} instructions against seccompiler's {plain}"
        );
    }

    /// The answer of a set of filters as the kernel gives it: every filter runs, the newest
    /// first, and the strictest action wins (`seccomp_run_filters`).
    pub(super) fn answer(filters: &[BpfProgram], data: &[u32; 16]) -> u32 {
        let action = |ret: u32| (ret & 0xffff_0000) as i32;
        filters
            .iter()
            .rev()
            .fold(libc::SECCOMP_RET_ALLOW, |best, f| {
                let ret = compact::tests::run(f, data);
                if action(ret) < action(best) {
                    ret
                } else {
                    best
                }
            })
    }

    #[test]
    fn shaped_filters_answer_every_call_as_seccompiler_s_programs() {
        let mut admin = default_caps();
        admin.push("CAP_SYS_ADMIN".into());
        let oci: LinuxSeccomp = serde_json::from_str(
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64"],
                "syscalls": [
                  {"names": ["mkdir", "rmdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13},
                  {"names": ["kill"], "action": "SCMP_ACT_KILL_PROCESS"},
                  {"names": ["fchmod"], "action": "SCMP_ACT_ERRNO",
                   "args": [{"index": 1, "value": 511, "op": "SCMP_CMP_EQ"}]}]}"#,
        )
        .unwrap();
        // Rules that overlap, two errnos and every ABI: chained into one filter, whose answer
        // must still be the strictest one, and the later rule's among equally strict ones.
        let overlapping: LinuxSeccomp = serde_json::from_str(
            r#"{"defaultAction": "SCMP_ACT_ERRNO",
                "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
                "syscalls": [
                  {"names": ["getpid", "mkdir", "exit"], "action": "SCMP_ACT_ALLOW"},
                  {"names": ["mkdir", "rmdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13},
                  {"names": ["rmdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 2},
                  {"names": ["kill"], "action": "SCMP_ACT_KILL_PROCESS"},
                  {"names": ["kill", "tkill"], "action": "SCMP_ACT_TRAP"},
                  {"names": ["fchmod"], "action": "SCMP_ACT_LOG",
                   "args": [{"index": 1, "value": 511, "op": "SCMP_CMP_EQ"}]}]}"#,
        )
        .unwrap();
        assert_eq!(compile(&overlapping).unwrap().len(), 1);
        let profiles = [
            runtime_default(&default_caps()),
            runtime_default(&admin),
            pause_default(&default_caps()),
            oci,
            overlapping,
        ];
        let mut arches = vec![Abi::Native.audit_arch(), 0x4000_00b7];
        #[cfg(target_arch = "x86_64")]
        arches.push(Abi::X86.audit_arch());
        // Arguments that the default profile's conditions look at: clone's namespace flags,
        // personality's personas, socket's families; and zero.
        let args: [u64; 6] = [
            0,
            libc::CLONE_NEWNS as u64,
            0x0008,
            libc::AF_ALG as u64,
            libc::AF_VSOCK as u64,
            511,
        ];
        for profile in &profiles {
            let shaped = compile(profile).unwrap();
            let plain = compile_shaped(profile, false).unwrap();
            for &arch in &arches {
                for nr in (0..640u32).chain((0..640).map(|n| n | X32_SYSCALL_BIT)) {
                    for arg in args {
                        let mut data = [0u32; 16];
                        data[0] = nr;
                        data[1] = arch;
                        for i in 0..6 {
                            data[4 + 2 * i] = arg as u32;
                            data[5 + 2 * i] = (arg >> 32) as u32;
                        }
                        assert_eq!(
                            answer(&shaped, &data),
                            answer(&plain, &data),
                            "call {nr:#x} arch {arch:#x} argument {arg:#x}"
                        );
                        let x32_call = arch == Abi::Native.audit_arch()
                            && nr & X32_SYSCALL_BIT != 0
                            && cfg!(target_arch = "x86_64");
                        if x32_call && !Admitted::of(profile).x32 {
                            assert_eq!(
                                answer(&shaped, &data),
                                libc::SECCOMP_RET_KILL_PROCESS,
                                "x32 call {nr:#x} of a profile without x32"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_pause_profile_allows_nothing_the_runtime_default_does_not() {
        let mut allowed_by_pause = 0;
        let full = compile(&runtime_default(&default_caps())).unwrap();
        let pause = compile(&pause_default(&default_caps())).unwrap();
        for nr in 0..640u32 {
            let mut data = [0u32; 16];
            data[0] = nr;
            data[1] = Abi::Native.audit_arch();
            if answer(&pause, &data) == libc::SECCOMP_RET_ALLOW {
                allowed_by_pause += 1;
                assert_eq!(answer(&full, &data), libc::SECCOMP_RET_ALLOW, "call {nr}");
            }
        }
        assert!(
            allowed_by_pause >= PAUSE_CALLS.len() - 2,
            "{allowed_by_pause}"
        );
        let total: usize = pause.iter().map(Vec::len).sum();
        assert!(total < 300, "{total} instructions");
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
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        assert!(
            compile(&admin)
                .unwrap()
                .iter()
                .flatten()
                .all(|insn| insn.code != 0x06 || insn.k != enosys),
            "no clone3 ENOSYS rule"
        );
    }

    #[test]
    fn a_record_keeps_podlabs_profiles_by_name_and_still_reads_a_whole_one() {
        let named = SeccompSpec::Named {
            named: NamedProfile::RuntimeDefault,
            bounding: default_caps(),
        };
        let json = serde_json::to_string(&named).unwrap();
        assert!(json.len() < 600, "{} bytes: {json}", json.len());
        assert_eq!(serde_json::from_str::<SeccompSpec>(&json).unwrap(), named);
        assert_eq!(*named.profile(), runtime_default(&default_caps()));
        // A record written before: the whole profile.
        let whole = serde_json::to_string(&runtime_default(&default_caps())).unwrap();
        assert!(whole.len() > 4_000, "{}", whole.len());
        let read: SeccompSpec = serde_json::from_str(&whole).unwrap();
        assert_eq!(read, SeccompSpec::Profile(runtime_default(&default_caps())));
        assert_eq!(compile(&read.profile()), compile(&named.profile()));
    }

    #[test]
    fn the_precompiled_filters_are_the_compilers_own_and_only_for_their_spec() {
        let named = SeccompSpec::Named {
            named: NamedProfile::RuntimeDefault,
            bounding: default_caps(),
        };
        let compiled = compile(&named.profile()).unwrap();
        precompile(named.clone());
        assert_eq!(compile_cached(&named).unwrap(), compiled);
        let fewer = SeccompSpec::Named {
            named: NamedProfile::RuntimeDefault,
            bounding: vec!["CAP_CHOWN".to_string()],
        };
        assert_eq!(
            compile_cached(&fewer).unwrap(),
            compile(&fewer.profile()).unwrap()
        );
        assert_ne!(compile_cached(&fewer).unwrap(), compiled);
        // Once forgotten (an idle shim's), the filters are compiled again, the same.
        forget_precompiled();
        assert!(PRECOMPILED.lock().unwrap().is_none());
        assert_eq!(compile_cached(&named).unwrap(), compiled);
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
        // A program per action and the gate (which kills x32 calls: x32 is not admitted),
        // chained into one filter.
        assert_eq!(compile_shaped(&profile, true).unwrap().len(), 3);
        assert_eq!(compile(&profile).unwrap().len(), 1);
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

    /// Forks a child that installs `filters` under no_new_privs and makes `calls`, each result
    /// (or -errno) written to a pipe at once; returns the results and how the child ended
    /// (a call the filter kills ends it with SIGSYS, and the results stop there).
    #[cfg(target_arch = "x86_64")]
    fn probe(filters: &[BpfProgram], calls: &[Call]) -> (Vec<i64>, nix::sys::wait::WaitStatus) {
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
                if install(filters).is_err() {
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

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_pause_profile_installs_all_its_filters_and_refuses_what_pause_does_not_make() {
        let filters = compile(&pause_default(&default_caps())).unwrap();
        let (results, status) = probe(
            &filters,
            &[
                Call::Native(libc::SYS_getpid, 0),
                Call::Native(libc::SYS_getppid, 0),
            ],
        );
        assert!(exited(status), "{status:?}");
        assert!(results[0] > 0, "getpid: {}", results[0]);
        assert_eq!(results[1], -i64::from(libc::EPERM), "getppid");
    }

    /// A rule whose action is the profile's default must not let its call through: the
    /// allow-list filter named every rule's calls, so an ERRNO rule under an ERRNO default was
    /// answered ALLOW (runc leaves such a rule out).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn regression_a_rule_with_the_default_action_does_not_allow_its_call() {
        let json = r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
            {"names":["exit","exit_group","write","seccomp"],"action":"SCMP_ACT_ALLOW"},
            {"names":["getppid"],"action":"SCMP_ACT_ERRNO"}]}"#;
        let profile: LinuxSeccomp = serde_json::from_str(json).unwrap();
        let filters = compile(&profile).unwrap();
        let (results, status) = probe(&filters, &[Call::Native(libc::SYS_getppid, 0)]);
        assert!(exited(status), "{status:?} after {results:?}");
        assert_eq!(results, [-i64::from(libc::EPERM)], "getppid is denied");
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
        let filters = compile(&runtime_default(&default_caps())).unwrap();
        let (results, status) = probe(
            &filters,
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
        let filters = compile(&native_only).unwrap();
        let (results, status) = probe(
            &filters,
            &[Call::Native(getppid, 0), Call::I386(i386_getpid, 0)],
        );
        assert_eq!(results, [-i64::from(libc::EACCES)]);
        assert!(killed_by_sigsys(status), "i386 not admitted: {status:?}");
        let (results, status) = probe(&filters, &[Call::X32(getppid, 0)]);
        assert!(
            results.is_empty() && killed_by_sigsys(status),
            "x32 not admitted: {status:?}"
        );

        let all: LinuxSeccomp = serde_json::from_str(&json(
            r#""architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86","SCMP_ARCH_X32"],"#,
        ))
        .unwrap();
        let filters = compile(&all).unwrap();
        let (results, status) = probe(
            &filters,
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
}
