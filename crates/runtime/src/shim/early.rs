//! The first container forked while pause still starts.
//!
//! `run --rm` sends its container's Start on the shim's socket while the shim starts
//! (`Runtime::run_pod_sandbox_and_start`; the socket is bound before the shim reads its
//! arguments). The shim reads that Start as soon as it comes while pause starts, and forks the
//! container at once:
//!
//! * before pause has made the pod's namespaces, with pause's pidfd: the container makes what
//!   needs none of them (its cgroup, its own mount namespace, the overlay root, `/proc`,
//!   `/dev`), waits for the shim's byte saying pause has made them (its report's
//!   [`crate::report::ReportLine::Namespaces`]), joins them with one `setns(2)` on the pidfd
//!   ([`crate::init::JoinLater`]), and goes on (`/sys` shows the network namespace of whoever
//!   mounts it, so it comes after);
//! * after, into the namespaces opened through `/proc/<pause>/ns`.
//!
//! Either way the container then waits at its gate ([`crate::init::SandboxGate`]): its program
//! runs only once the sandbox is up (pause `execve`d, its namespaces pinned), as a Start after
//! the sandbox's would. If pause fails, the container is killed at a gate
//! ([`Forked::abandon`]).
//!
//! Only the first request of the first client is read here; one that is not such a Start (or
//! whose fork fails) is handled once the shim serves, as it would have been. Nothing is taken
//! up early for a pod with a user namespace of its own (pause enters it last), a shared pid
//! namespace (see `until_started`), or a network attached while the shim starts (no Start
//! comes before the sandbox is Ready then).

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::unistd::Pid;

use podlab_ns::NsKind;

use super::containers::{fork_container, Forked, ForkedEarly, StartContext};
use super::sandbox::{pod_kinds, PodNamespaces, WhilePauseStarts};
use super::ShimArgs;
use crate::liveness::Pidfd;
use crate::protocol::{self, Request};
use crate::report::ReportPipe;
use crate::state::SandboxPaths;

/// What the shim took up while pause started: a client, its first request, and the container
/// forked for it.
pub(super) struct Early<'a> {
    args: &'a ShimArgs,
    paths: &'a SandboxPaths,
    listener: BorrowedFd<'a>,
    pod_cgroup: Option<&'a podlab_cgroups::Cgroup>,
    pub client: Option<OwnedFd>,
    /// The client's first request, when it was not taken up here.
    pub pending: Option<(Request, Vec<OwnedFd>)>,
    pub forked: Option<Forked>,
}

impl<'a> Early<'a> {
    pub fn new(
        args: &'a ShimArgs,
        paths: &'a SandboxPaths,
        listener: BorrowedFd<'a>,
        pod_cgroup: Option<&'a podlab_cgroups::Cgroup>,
    ) -> Early<'a> {
        Early {
            args,
            paths,
            listener,
            pod_cgroup,
            client: None,
            pending: None,
            forked: None,
        }
    }

    /// The sandbox did not start: a container forked for it is killed at its gate.
    pub fn abandon(&mut self) {
        if let Some(forked) = self.forked.take() {
            forked.abandon();
        }
    }

    /// Forks the container of a Start: into the namespaces pause has made, or, before it has,
    /// with pause's pidfd to join them through once it has.
    fn take_up(
        &mut self,
        made: Option<&PodNamespaces>,
        pause: &Pidfd,
        own_pid: BorrowedFd<'_>,
        request: Request,
        fds: Vec<OwnedFd>,
    ) {
        let Request::Start { container, waited } = &request else {
            self.pending = Some((request, fds));
            return;
        };
        let not_made;
        let (namespaces, early) = match made {
            Some(namespaces) => (namespaces, ForkedEarly::IntoMade),
            None => match PodNamespaces::not_made_yet(own_pid) {
                Ok(none) => {
                    not_made = none;
                    let kinds = pod_kinds(self.args.host_network, self.args.host_ipc, false);
                    let flags = NsKind::flags_of(&kinds);
                    let early = ForkedEarly::BeforeMade {
                        pause: pause.as_fd(),
                        flags,
                    };
                    (&not_made, early)
                }
                Err(_) => {
                    self.pending = Some((request, fds));
                    return;
                }
            },
        };
        let context = StartContext {
            paths: self.paths,
            namespaces,
            pod_cgroup: self.pod_cgroup,
            pause_alive: true,
            running: &HashMap::new(),
        };
        let template = fds.first().map(|fd| fd.as_fd());
        match fork_container(&context, container, template, *waited, Some(early)) {
            Ok(forked) => {
                crate::trace::process_mark("shim", "first container forked (pause starting)");
                self.forked = Some(forked);
            }
            // Tried again, and answered, once the shim serves.
            Err(_) => self.pending = Some((request, fds)),
        }
    }
}

impl WhilePauseStarts for Early<'_> {
    fn until_started(&mut self, pause: Pid, report: &mut ReportPipe, own_pid: BorrowedFd<'_>) {
        precompile(self.args);
        // A shared pid namespace is left out: pause is its PID 1, and a pause that fails is
        // reaped by itself (`kill_and_reap`), which would wait forever for a container of
        // its namespace that only this process could reap.
        if self.args.await_network
            || self.args.share_pid
            || self.args.security.user_namespace.is_some()
        {
            return;
        }
        let Ok(pidfd) = Pidfd::open(pause.as_raw()) else {
            return;
        };
        let mut made: Option<PodNamespaces> = None;
        // Only the first request of the first client is read here.
        let mut taken = false;
        loop {
            let watched = self
                .client
                .as_ref()
                .map_or(self.listener, |client| client.as_fd());
            let mut fds = vec![PollFd::new(report.as_fd(), PollFlags::POLLIN)];
            if !taken {
                fds.push(PollFd::new(watched, PollFlags::POLLIN));
            }
            match nix::poll::poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::Error::EINTR) => continue,
                Err(_) => return,
            }
            let ready = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
            let (report_ready, watched_ready) = (ready(&fds[0]), fds.get(1).is_some_and(ready));
            drop(fds);
            if report_ready {
                if made.is_some() || !report.namespaces_made() {
                    // pause is at its execve, or failed: the sandbox's start goes on.
                    return;
                }
                if let Some(forked) = &mut self.forked {
                    forked.namespaces_made();
                }
                if taken {
                    return;
                }
                match PodNamespaces::of_pause(self.args, pause, own_pid) {
                    Ok(namespaces) => made = Some(namespaces),
                    Err(_) => return,
                }
                continue;
            }
            if !watched_ready {
                continue;
            }
            let Some(client) = &self.client else {
                match nix::sys::socket::accept4(
                    self.listener.as_fd().as_raw_fd(),
                    nix::sys::socket::SockFlag::SOCK_CLOEXEC,
                ) {
                    // SAFETY: accept4 returned a new descriptor.
                    Ok(fd) => self.client = Some(unsafe { OwnedFd::from_raw_fd(fd) }),
                    Err(_) => return,
                }
                continue;
            };
            taken = true;
            match protocol::receive_message::<Request>(client.as_fd()) {
                Ok(Some((request, fds))) => {
                    self.take_up(made.as_ref(), &pidfd, own_pid, request, fds)
                }
                // It hung up: the shim's loop would forget it too.
                Ok(None) | Err(_) => self.client = None,
            }
            if made.is_some() || self.forked.is_none() {
                return;
            }
            // Forked before the namespaces: its gate opens when pause says they are made.
        }
    }
}

/// The first container's likely filters, compiled while the shim would only wait for pause:
/// done once the pod was announced, the compile (0.25 ms) held a CPU the caller then wanted
/// for the sandbox's records and its StartContainer.
fn precompile(args: &ShimArgs) {
    if args.security.seccomp == crate::seccomp::SeccompProfile::RuntimeDefault
        && !args.security.privileged
    {
        if let Ok(default_caps) = crate::capabilities::resolve(false, &[], &[]) {
            crate::seccomp::precompile(crate::seccomp::SeccompSpec::Named {
                named: crate::seccomp::NamedProfile::RuntimeDefault,
                bounding: default_caps,
            });
        }
    }
}
