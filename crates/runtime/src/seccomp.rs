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
//! profile becomes several filters, all installed: the kernel runs every one and keeps the
//! strictest answer (KILL > TRAP > ERRNO > TRACE > LOG > ALLOW). The first filter answers the
//! default action for every call no rule names (and ALLOW for the rest); each further filter
//! answers one rule action for its calls (and ALLOW otherwise). A call that a rule names with
//! conditions that do not hold gets the default action, as libseccomp gives it.
//!
//! Names this architecture does not have (`chown32` on x86_64) are skipped, as libseccomp skips
//! them. Unlike libseccomp the filter only admits the native architecture: a 32-bit system call
//! of another ABI is killed rather than filtered.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use oci_spec::runtime::{
    LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompArgBuilder,
    LinuxSeccompOperator, LinuxSyscall,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
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
    profile.set_syscalls(Some(rules));
    profile
}

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

/// The syscall number of `name` on this architecture; None for a name it does not have.
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

/// The conditions of one profile rule (all must hold), or None for an unconditional rule.
fn rule(args: &[LinuxSeccompArg]) -> Result<Option<SeccompRule>, String> {
    if args.is_empty() {
        return Ok(None);
    }
    let mut conditions = Vec::new();
    for arg in args {
        let (op, value) = match arg.op() {
            LinuxSeccompOperator::ScmpCmpNe => (SeccompCmpOp::Ne, arg.value()),
            LinuxSeccompOperator::ScmpCmpLt => (SeccompCmpOp::Lt, arg.value()),
            LinuxSeccompOperator::ScmpCmpLe => (SeccompCmpOp::Le, arg.value()),
            LinuxSeccompOperator::ScmpCmpEq => (SeccompCmpOp::Eq, arg.value()),
            LinuxSeccompOperator::ScmpCmpGe => (SeccompCmpOp::Ge, arg.value()),
            LinuxSeccompOperator::ScmpCmpGt => (SeccompCmpOp::Gt, arg.value()),
            // OCI: value is the mask, valueTwo what the masked argument must equal.
            LinuxSeccompOperator::ScmpCmpMaskedEq => (
                SeccompCmpOp::MaskedEq(arg.value()),
                arg.value_two().unwrap_or(0),
            ),
        };
        let index =
            u8::try_from(arg.index()).map_err(|_| format!("argument index {}", arg.index()))?;
        conditions.push(
            SeccompCondition::new(index, SeccompCmpArgLen::Qword, op, value)
                .map_err(|e| e.to_string())?,
        );
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
/// that allows everything.
pub fn compile(profile: &LinuxSeccomp) -> Result<Vec<BpfProgram>, String> {
    let default = action(profile.default_action(), profile.default_errno_ret())?;
    // Every named call (with its conditions) is ALLOW in the first filter; each action's calls
    // get that action in a filter of their own.
    let mut named = Calls::new();
    let mut by_action: Vec<(SeccompAction, Calls)> = Vec::new();
    for syscall in profile.syscalls().iter().flatten() {
        let act = action(syscall.action(), syscall.errno_ret())?;
        let args = syscall.args().clone().unwrap_or_default();
        let condition = rule(&args)?;
        for number in syscall.names().iter().filter_map(|n| number(n)) {
            add(&mut named, number, condition.clone());
            if act != SeccompAction::Allow && act != default {
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
    let mut filters = Vec::new();
    if default != SeccompAction::Allow {
        filters.push(SeccompFilter::new(
            named,
            default,
            SeccompAction::Allow,
            ARCH,
        ));
    }
    for (act, calls) in by_action {
        filters.push(SeccompFilter::new(calls, SeccompAction::Allow, act, ARCH));
    }
    filters
        .into_iter()
        .map(|f| {
            let filter = f.map_err(|e| e.to_string())?;
            BpfProgram::try_from(filter).map_err(|e| e.to_string())
        })
        .collect()
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
    fn the_runtime_default_profile_compiles_into_two_filters() {
        let filters = compile(&runtime_default(&default_caps())).unwrap();
        // The allow-list with EPERM, and clone3's ENOSYS.
        assert_eq!(filters.len(), 2);
        assert!(filters[0].len() > ALLOWED.len() / 2, "{}", filters[0].len());
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
        assert_eq!(compile(&admin).unwrap().len(), 1, "no clone3 ENOSYS rule");
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
        assert_eq!(compile(&profile).unwrap().len(), 2);
        let notify = r#"{"defaultAction":"SCMP_ACT_NOTIFY"}"#;
        let profile: LinuxSeccomp = serde_json::from_str(notify).unwrap();
        assert!(compile(&profile).unwrap_err().contains("NOTIFY"));
    }
}
