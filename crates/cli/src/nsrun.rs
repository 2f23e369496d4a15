//! `podlab ns run`: podlab's `unshare --fork`. One `clone(2)` makes the namespaces asked for
//! and the child in them; the child finishes what a new namespace needs before it is of use
//! (uid/gid maps, private mounts, its own `/proc`, `lo` up, the hostname), then `execvp`s the
//! command, which the parent waits for and whose status it passes on, as a shell would.
//!
//! This is also the `ns-set` row of the peers benchmark, against `unshare --fork`, so it does no
//! more than that: everything the child needs is prepared before the clone, nothing is read that
//! the namespaces do not need, no helper is executed. The child's setup errors come back over a
//! close-on-exec pipe, which a successful exec closes: an empty pipe means the command runs.

use std::ffi::{CString, OsString};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use clap::{Args, Parser};
use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::wait::WaitStatus;
use podlab_ns::NsKind;

use crate::UsageError;

/// The kernel's limit on a hostname (`HOST_NAME_MAX`).
const HOSTNAME_MAX: usize = 64;

#[derive(Args, Debug)]
#[command(
    override_usage = "podlab ns run [OPTIONS] [--] CMD [ARGS]...",
    about = "Run a command in new namespaces, like `unshare --fork`",
    long_about = "Run CMD in new namespaces, like `unshare --fork`: one clone(2) makes the \
                  namespaces and CMD's process in them; podlab waits for CMD and exits with its \
                  status.",
    after_help = "Exit status: CMD's own; 128+N when signal N killed it; 127 when CMD is not \
                  found, 126 when it cannot be executed; 1 when a namespace could not be set up \
                  (the message names the namespace and the system call); 2 for a usage error.\n\n\
                  podlab waits with SIGINT and SIGTERM blocked, as unshare does, and CMD is \
                  killed if podlab dies (as with unshare --kill-child)."
)]
pub struct RunArgs {
    /// A new uts namespace: a hostname and NIS domain name of CMD's own.
    #[arg(short = 'u', long)]
    uts: bool,
    /// A new ipc namespace: System V IPC objects and POSIX message queues of CMD's own.
    #[arg(short = 'i', long)]
    ipc: bool,
    /// A new network namespace, with `lo` brought up.
    ///
    /// unshare leaves `lo` down; podlab brings it up because pods do (the CNI loopback plugin's
    /// job), so 127.0.0.1 works inside.
    #[arg(short = 'n', long)]
    net: bool,
    /// A new pid namespace, with CMD as its PID 1.
    ///
    /// With --mount, /proc is remounted so that ps shows only this namespace (unshare
    /// --mount-proc); without it, /proc is still the host's.
    #[arg(short = 'p', long)]
    pid: bool,
    /// A new mount namespace, its mounts made private.
    ///
    /// As unshare's default --propagation private: nothing mounted inside shows outside, nor
    /// the other way round.
    #[arg(short = 'm', long)]
    mount: bool,
    /// A new user namespace, which owns the other new namespaces.
    ///
    /// Without --map-root-user, CMD's ids are unmapped there: it runs as nobody.
    #[arg(short = 'U', long)]
    user: bool,
    /// The hostname of the new uts namespace (needs --uts).
    #[arg(long, value_name = "NAME")]
    hostname: Option<String>,
    /// Map your uid and gid to root in the new user namespace (implies --user).
    ///
    /// As unshare -r does: one line `0 UID 1` in uid_map, `0 GID 1` in gid_map, setgroups
    /// denied.
    #[arg(short = 'r', long)]
    map_root_user: bool,
    /// The command and its arguments, looked up in PATH like a shell does.
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true)]
    command: Vec<OsString>,
}

// `podlab ns run` as a command line of its own, for `parse_alone`; no doc comment, which would
// replace RunArgs' own about text.
#[derive(Parser)]
#[command(name = "podlab ns run", bin_name = "podlab ns run")]
struct Alone {
    #[command(flatten)]
    args: RunArgs,
}

/// Parses `podlab ns run ...` without building the parser of every other podlab command, which
/// costs this command, a benchmark row against `unshare`, a tenth of its page faults
/// (clap allocates the whole tree before it looks at a word); `None` for any other command
/// line. Help, usage and errors are the same as through the full tree.
pub fn parse_alone() -> Option<RunArgs> {
    let mut words = std::env::args_os().skip(1);
    if words.next()? != "ns" || words.next()? != "run" {
        return None;
    }
    Some(Alone::parse_from(std::iter::once(OsString::from("podlab ns run")).chain(words)).args)
}

/// Everything the child does, prepared before the clone so that the child only makes calls.
#[derive(Debug)]
struct Plan {
    kinds: Vec<NsKind>,
    /// The uid_map and gid_map lines of `--map-root-user`.
    root_maps: Option<(String, String)>,
    hostname: Option<String>,
    argv: Vec<CString>,
}

impl Plan {
    /// Checks the flags as a usage question; `ids` are the caller's uid and gid.
    fn new(args: RunArgs, ids: (u32, u32)) -> Result<Plan, UsageError> {
        let user = args.user || args.map_root_user;
        let chosen = [
            (user, NsKind::User),
            (args.uts, NsKind::Uts),
            (args.ipc, NsKind::Ipc),
            (args.net, NsKind::Net),
            (args.pid, NsKind::Pid),
            (args.mount, NsKind::Mnt),
        ];
        let kinds: Vec<NsKind> = chosen
            .into_iter()
            .filter_map(|(on, kind)| on.then_some(kind))
            .collect();
        if kinds.is_empty() {
            return Err(UsageError(
                "ns run: name the namespaces to create: at least one of --uts, --ipc, --net, \
                 --pid, --mount, --user"
                    .into(),
            ));
        }
        if let Some(name) = &args.hostname {
            if !args.uts {
                return Err(UsageError(
                    "ns run: --hostname sets the hostname of a new uts namespace: add --uts \
                     (without it, it would be the host's)"
                        .into(),
                ));
            }
            if name.len() > HOSTNAME_MAX {
                return Err(UsageError(format!(
                    "ns run: hostname {name:?} is {} bytes long, the kernel takes {HOSTNAME_MAX} \
                     at most",
                    name.len()
                )));
            }
        }
        let argv = args
            .command
            .iter()
            .map(|word| CString::new(word.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| UsageError("ns run: CMD has an argument with a NUL byte".into()))?;
        let (uid, gid) = ids;
        Ok(Plan {
            kinds,
            root_maps: args
                .map_root_user
                .then(|| (format!("0 {uid} 1"), format!("0 {gid} 1"))),
            hostname: args.hostname,
            argv,
        })
    }

    fn has(&self, kind: NsKind) -> bool {
        self.kinds.contains(&kind)
    }

    fn command_name(&self) -> String {
        self.argv[0].to_string_lossy().into_owned()
    }
}

/// Runs the command in its new namespaces and returns the status to exit with.
pub fn run(args: RunArgs) -> Result<i32> {
    let ids = (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    );
    let plan = Plan::new(args, ids)?;
    let (read_end, write_end) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("pipe2 for the child's errors")?;
    // As unshare does: a ^C or a TERM for podlab alone must not orphan CMD. CMD gets the mask back.
    let mut waiting = SigSet::empty();
    waiting.add(Signal::SIGINT);
    waiting.add(Signal::SIGTERM);
    let old_mask = waiting
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .context("sigprocmask")?;
    let spawned = podlab_ns::ops::spawn_with_clone(&plan.kinds, || {
        in_child(&plan, &read_end, &write_end, &old_mask)
    });
    let child = spawned.map_err(|err| clone_error(err, &plan))?;
    drop(write_end);
    let mut answer = Vec::new();
    let read = std::fs::File::from(read_end).read_to_end(&mut answer);
    let status = podlab_ns::child::wait_for(child).map_err(|err| anyhow!("ns run: {err}"))?;
    read.context("reading the child's errors")?;
    if answer.is_empty() {
        return Ok(exit_status(status));
    }
    match Failure::decode(&answer) {
        Some(Failure::Setup(message)) => Err(anyhow!(
            "ns run: setting up the new namespaces (child pid {child}): {message}"
        )),
        Some(Failure::Exec(errno)) => {
            let name = plan.command_name();
            eprintln!("podlab: {}", exec_message(&name, errno));
            Ok(exec_status(errno))
        }
        None => Err(anyhow!(
            "ns run: unreadable answer from the child (pid {child}, {}): {:?}",
            podlab_ns::child::describe(status),
            String::from_utf8_lossy(&answer)
        )),
    }
}

/// An EPERM from clone is most often a missing privilege: say what would do. The message is
/// made here, not chained, as podlab-ns's errors already end with their errno. A kind this
/// kernel lacks stays that error, a usage error for `main`.
fn clone_error(err: podlab_ns::Error, plan: &Plan) -> anyhow::Error {
    if matches!(err, podlab_ns::Error::KindUnsupported { .. }) {
        return err.into();
    }
    let unprivileged = err.errno() == Some(Errno::EPERM)
        && !plan.has(NsKind::User)
        && !nix::unistd::geteuid().is_root();
    let hint = if unprivileged {
        ": creating namespaces needs root; as another user, add --map-root-user (-r) for a user \
         namespace in which you are root"
    } else {
        ""
    };
    anyhow!("ns run: {err}{hint}")
}

/// The child, right after the clone: PID 1 of the new pid namespace if there is one. It never
/// returns from a successful exec; otherwise it reports why over `report` and ends.
fn in_child(plan: &Plan, unused: &OwnedFd, report: &OwnedFd, old_mask: &SigSet) -> isize {
    // SAFETY: the parent's read end, which this process never uses; nothing else holds it here.
    unsafe { libc::close(unused.as_raw_fd()) };
    // SAFETY: PR_SET_PDEATHSIG takes a signal number, no pointers.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if parent_is_gone(report) {
        return 1;
    }
    let failure = match set_up(plan) {
        Err(message) => Failure::Setup(message),
        Ok(()) => {
            let _ = old_mask.thread_set_mask();
            Failure::Exec(nix::unistd::execvp(&plan.argv[0], &plan.argv).unwrap_err())
        }
    };
    let _ = nix::unistd::write(report.as_fd(), &failure.encode());
    match failure {
        Failure::Exec(errno) => exec_status(errno) as isize,
        Failure::Setup(_) => 1,
    }
}

/// Whether the parent died before PR_SET_PDEATHSIG was in place: then nobody reads the pipe
/// (the child closed its own copy of the read end), which poll shows as POLLERR.
fn parent_is_gone(report: &OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(report.as_fd(), PollFlags::empty())];
    poll(&mut fds, PollTimeout::ZERO).is_ok()
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLERR))
}

/// Makes each new namespace ready, in the order they depend on each other: the maps first (root
/// inside owns the rest), then the mounts, the network, the hostname.
fn set_up(plan: &Plan) -> Result<(), String> {
    let step = |what: &str, err: podlab_ns::Error| format!("{what}: {err}");
    if let Some((uid_map, gid_map)) = &plan.root_maps {
        podlab_ns::user::write_own_id_maps(uid_map, gid_map, true)
            .map_err(|e| step("mapping the caller to root in the new user namespace", e))?;
    }
    if plan.has(NsKind::Mnt) {
        podlab_ns::mnt::make_rprivate(Path::new("/"))
            .map_err(|e| step("making the new mount namespace private", e))?;
        if plan.has(NsKind::Pid) {
            podlab_ns::mnt::mount_proc(Path::new("/proc"))
                .map_err(|e| step("mounting /proc for the new pid namespace", e))?;
        }
    }
    if plan.has(NsKind::Net) {
        podlab_ns::net::Netlink::open()
            .and_then(|mut netlink| netlink.loopback_up())
            .map_err(|e| step("bringing lo up in the new network namespace", e))?;
    }
    if let Some(name) = &plan.hostname {
        podlab_ns::uts::set_hostname(name)
            .map_err(|e| step("setting the hostname of the new uts namespace", e))?;
    }
    Ok(())
}

/// Why the child did not get to run the command, as it travels over the pipe.
#[derive(Debug, PartialEq)]
enum Failure {
    /// A namespace could not be set up: the message names the step, namespace and call.
    Setup(String),
    /// `execvp` failed.
    Exec(Errno),
}

impl Failure {
    fn encode(&self) -> Vec<u8> {
        match self {
            Failure::Setup(message) => format!("setup {message}").into_bytes(),
            Failure::Exec(errno) => format!("exec {}", *errno as i32).into_bytes(),
        }
    }

    fn decode(bytes: &[u8]) -> Option<Failure> {
        let text = std::str::from_utf8(bytes).ok()?;
        if let Some(message) = text.strip_prefix("setup ") {
            Some(Failure::Setup(message.to_string()))
        } else {
            let errno = text.strip_prefix("exec ")?.parse().ok()?;
            Some(Failure::Exec(Errno::from_raw(errno)))
        }
    }
}

/// A shell's statuses for a command it could not run: 127 not found, 126 found but not run.
fn exec_status(errno: Errno) -> i32 {
    if errno == Errno::ENOENT {
        127
    } else {
        126
    }
}

/// A shell's words: `foo: command not found` for a name looked up in PATH, else the errno's.
fn exec_message(name: &str, errno: Errno) -> String {
    if errno == Errno::ENOENT && !name.contains('/') {
        format!("{name}: command not found")
    } else {
        format!("{name}: {}", errno.desc())
    }
}

/// The status a shell gives a command that ended so: its exit code, or 128+N for signal N.
fn exit_status(status: WaitStatus) -> i32 {
    match status {
        WaitStatus::Exited(_, code) => code,
        WaitStatus::Signaled(_, signal, _) => 128 + signal as i32,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RunArgs,
    }

    fn plan(words: &[&str]) -> Result<Plan, UsageError> {
        let cli = Cli::try_parse_from(std::iter::once("run").chain(words.iter().copied()))
            .expect("clap accepts the words");
        Plan::new(cli.args, (1000, 1001))
    }

    #[test]
    fn flags_choose_the_kinds() {
        let p = plan(&["--uts", "--net", "--mount", "--", "/bin/true", "-x"]).unwrap();
        assert_eq!(p.kinds, [NsKind::Uts, NsKind::Net, NsKind::Mnt]);
        assert_eq!(p.argv, [c"/bin/true".to_owned(), c"-x".to_owned()]);
        assert!(p.root_maps.is_none());
        let p = plan(&["-uipm", "ls", "-l"]).unwrap();
        assert_eq!(
            p.kinds,
            [NsKind::Uts, NsKind::Ipc, NsKind::Pid, NsKind::Mnt],
            "short flags as unshare's; CMD's own flags stay CMD's"
        );
        assert_eq!(p.argv.len(), 2);
    }

    #[test]
    fn an_unknown_flag_before_cmd_is_refused_not_run() {
        assert!(Cli::try_parse_from(["run", "--uts", "--utss", "true"]).is_err());
    }

    #[test]
    fn map_root_user_implies_user_and_maps_the_caller() {
        let p = plan(&["-r", "--net", "id"]).unwrap();
        assert_eq!(p.kinds, [NsKind::User, NsKind::Net]);
        assert_eq!(
            p.root_maps,
            Some(("0 1000 1".to_string(), "0 1001 1".to_string()))
        );
    }

    #[test]
    fn no_namespace_is_a_usage_error() {
        let err = plan(&["--", "/bin/true"]).unwrap_err();
        assert!(err.0.contains("--uts, --ipc, --net"), "{err}");
    }

    #[test]
    fn hostname_needs_uts_and_the_kernel_limit() {
        let err = plan(&["--net", "--hostname", "pod", "true"]).unwrap_err();
        assert!(err.0.contains("add --uts"), "{err}");
        let long = "h".repeat(65);
        let err = plan(&["--uts", "--hostname", &long, "true"]).unwrap_err();
        assert!(err.0.contains("64 at most"), "{err}");
        let p = plan(&["--uts", "--hostname", "pod", "true"]).unwrap();
        assert_eq!(p.hostname.as_deref(), Some("pod"));
    }

    #[test]
    fn a_command_is_required() {
        assert!(Cli::try_parse_from(["run", "--uts"]).is_err());
    }

    #[test]
    fn failures_cross_the_pipe_intact() {
        for failure in [
            Failure::Setup("mount(proc) (mnt namespace, /proc): EPERM".into()),
            Failure::Exec(Errno::EACCES),
        ] {
            assert_eq!(Failure::decode(&failure.encode()), Some(failure));
        }
        assert_eq!(Failure::decode(b"garbage"), None);
    }

    #[test]
    fn statuses_are_a_shells() {
        let pid = nix::unistd::Pid::from_raw(7);
        assert_eq!(exit_status(WaitStatus::Exited(pid, 3)), 3);
        assert_eq!(
            exit_status(WaitStatus::Signaled(pid, Signal::SIGKILL, false)),
            137
        );
        assert_eq!(exec_status(Errno::ENOENT), 127);
        assert_eq!(exec_status(Errno::EACCES), 126);
        assert_eq!(
            exec_message("nosuch", Errno::ENOENT),
            "nosuch: command not found"
        );
        assert_eq!(
            exec_message("./nosuch", Errno::ENOENT),
            "./nosuch: No such file or directory"
        );
        assert_eq!(
            exec_message("/etc/passwd", Errno::EACCES),
            "/etc/passwd: Permission denied"
        );
    }
}
