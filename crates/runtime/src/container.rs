//! CreateContainer, StartContainer, StopContainer, RemoveContainer, ContainerStatus,
//! ListContainers, ReopenContainerLog, and a wait for a container's exit.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::config::{ContainerConfig, PodSandboxConfig};
use crate::id::{ContainerId, SandboxId};
use crate::image::read_from_layers;
use crate::liveness::now_ns;
use crate::process;
use crate::protocol::{Request, Response};
use crate::runtime::{remove_tree, Runtime};
use crate::sandbox::{expect_ok, unexpected};
use crate::seccomp::{self, SeccompProfile};
use crate::state::{self, ContainerRecord, ImageRecord, PidMode, SandboxLock, SandboxPaths};
use crate::status::{ContainerFilter, ContainerState, ContainerStatus, SandboxState};
use crate::{Error, Result};

/// How long a SIGKILLed container may take to be seen gone.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// How often a grace period's wait asks whether to give up
/// ([`Runtime::stop_container_unless`]).
pub const GIVE_UP_POLL: Duration = Duration::from_millis(100);

impl Runtime {
    /// CreateContainer: resolves the image and the process (Kubernetes' command/args rules,
    /// env, working dir, user) and records the container as Created. Nothing runs yet.
    pub fn create_container(
        &self,
        sandbox_id: &SandboxId,
        config: &ContainerConfig,
    ) -> Result<ContainerId> {
        let paths = self.layout.sandbox(sandbox_id);
        let _lock = self.lock_existing(sandbox_id, &paths)?;
        let sandbox = self.sandbox_record(sandbox_id, &paths)?;
        let status = self.pod_sandbox_status(sandbox_id)?;
        if status.state != SandboxState::Ready {
            return Err(Error::SandboxNotReady {
                id: sandbox_id.to_string(),
                reason: status.reason.unwrap_or_default(),
            });
        }
        let record = self.new_container(
            sandbox_id,
            &paths,
            &sandbox.config,
            sandbox.cgroup.as_ref(),
            config,
            StartParts::AtStart,
        )?;
        self.record_container(&paths, &sandbox.config, record)
    }

    /// CreateContainer's work up to its record, under the sandbox's lock: the image and the
    /// process resolved, the container's folder made (and its layer's folders and cgroup when
    /// `parts` says so). What it made is removed if it fails; the caller records the container
    /// ([`Runtime::record_container`]) or removes it. `pod_cgroup` is the sandbox's (made
    /// already).
    pub(crate) fn new_container(
        &self,
        sandbox_id: &SandboxId,
        paths: &SandboxPaths,
        sandbox_config: &PodSandboxConfig,
        pod_cgroup: Option<&podlab_cgroups::Cgroup>,
        config: &ContainerConfig,
        parts: StartParts,
    ) -> Result<ContainerRecord> {
        let name = config.metadata.name.clone();
        let invalid = |message: String| Error::InvalidConfig {
            name: name.clone(),
            message,
        };
        if name.is_empty() {
            return Err(invalid("a container needs a name".into()));
        }
        let pid_mode = match &config.target_container {
            Some(target) => {
                let target_status = self
                    .container_status(target)
                    .map_err(|_| invalid(format!("target container {target} not found")))?;
                if target_status.sandbox_id != *sandbox_id
                    || target_status.state != ContainerState::Running
                {
                    return Err(invalid(format!(
                        "target container {target} is not running in this pod"
                    )));
                }
                PidMode::Target(target.clone())
            }
            None if sandbox_config.host_pid => PidMode::Node,
            None if sandbox_config.share_process_namespace => PidMode::Pod,
            None => PidMode::Container,
        };
        for mount in &config.mounts {
            check_propagation_source(mount).map_err(invalid)?;
        }
        let mut config = config.clone();
        for (index, mount) in config.mounts.iter_mut().enumerate() {
            self.resolve_image_volume(index, mount).map_err(invalid)?;
        }
        let config = &config;
        let image = self.images.resolve(&config.image)?;
        let argv = process::resolve_argv(&config.command, &config.args, &image.process)
            .map_err(invalid)?;
        let hostname = std::fs::read_to_string(paths.hostname()).unwrap_or_default();
        let env = process::resolve_env(&image.process.env, &config.env, hostname.trim());
        let cwd = process::resolve_cwd(config.working_dir.as_deref(), &image.process.working_dir);
        let passwd = read_from_layers(&image.lowerdirs, "etc/passwd");
        let group = read_from_layers(&image.lowerdirs, "etc/group");
        let (uid, gid, additional_gids) = process::resolve_user(
            &image.process.user,
            config.run_as_user,
            config.run_as_group,
            passwd.as_deref(),
            group.as_deref(),
        )
        .map_err(invalid)?;
        let security = &config.security;
        // containerd: the image's /etc/group memberships (`WithAdditionalGIDs`) only under
        // the Merge policy; Strict keeps the primary group and the pod's groups.
        let mut additional_gids = if security.strict_supplemental_groups {
            vec![gid]
        } else {
            additional_gids
        };
        for gid in &security.supplemental_groups {
            if !additional_gids.contains(gid) {
                additional_gids.push(*gid);
            }
        }
        let capabilities = crate::capabilities::resolve(
            security.privileged,
            &security.add_capabilities,
            &security.drop_capabilities,
        )
        .map_err(invalid)?;
        // containerd gives a privileged container no filter, whatever the profile says.
        let seccomp = match &security.seccomp {
            _ if security.privileged => None,
            SeccompProfile::Unconfined => None,
            SeccompProfile::RuntimeDefault => Some(seccomp::SeccompSpec::Named {
                named: seccomp::NamedProfile::RuntimeDefault,
                bounding: capabilities.clone(),
            }),
            SeccompProfile::Localhost(path) => Some(seccomp::SeccompSpec::Profile(
                seccomp::load(path).map_err(invalid)?,
            )),
        };

        let id = ContainerId::generate();
        let container = paths.container(&id);
        let log_path = log_path(sandbox_config, config, &container.default_log());
        std::fs::create_dir_all(&container.dir)
            .map_err(|e| Error::io("creating", &container.dir, e))?;
        if parts == StartParts::Now {
            let owner = sandbox_config
                .linux
                .security
                .user_namespace
                .as_ref()
                .map(|user| user.host_root());
            if let Err(e) = make_layer_dirs(&container, owner) {
                let _ = remove_tree(&container.dir);
                return Err(e);
            }
        }
        // runc makes the cgroup at create; its values are the container's from here on.
        let cgroup = match pod_cgroup.filter(|_| parts == StartParts::Now) {
            Some(pod) => {
                match crate::cgroups::make_container(
                    pod,
                    id.as_str(),
                    &config.resources.cgroup,
                    security.privileged,
                ) {
                    Ok(cgroup) => Some(cgroup),
                    Err(e) => {
                        let _ = remove_tree(&container.dir);
                        return Err(e);
                    }
                }
            }
            None => None,
        };
        let record = ContainerRecord {
            id: id.clone(),
            sandbox_id: sandbox_id.clone(),
            config: config.clone(),
            image: ImageRecord {
                name: config.image.clone(),
                id: image.id,
                lowerdirs: image.lowerdirs,
            },
            process: process::ProcessSpec {
                argv,
                env,
                cwd,
                uid,
                gid,
                additional_gids,
                capabilities: Some(capabilities),
                no_new_privs: security.no_new_privs,
                seccomp,
            },
            log_path,
            pid_mode,
            created_at: now_ns(),
            started_at: 0,
            finished_at: 0,
            state: ContainerState::Created,
            exit_code: None,
            reason: None,
            message: None,
            pid: None,
            namespaces: Default::default(),
            start_trace: Vec::new(),
            cgroup,
            user: None,
            spec_annotations: None,
        };
        Ok(record)
    }

    /// CreateContainer's end: the container made by [`Runtime::new_container`] recorded as
    /// Created, or removed if it cannot be.
    pub(crate) fn record_container(
        &self,
        paths: &SandboxPaths,
        sandbox_config: &PodSandboxConfig,
        record: ContainerRecord,
    ) -> Result<ContainerId> {
        let container = paths.container(&record.id);
        if let Err(e) = state::write_record(&container.record(), &record) {
            self.forget_new_container(paths, &record);
            return Err(e);
        }
        podlab_fault::point_reached("container.after-create");
        self.pod_trace(&sandbox_config.metadata)
            .mark("CreateContainer (image, record)");
        Ok(record.id)
    }

    /// Removes a container made by [`Runtime::new_container`] and not recorded.
    pub(crate) fn forget_new_container(&self, paths: &SandboxPaths, record: &ContainerRecord) {
        if let Some(cgroup) = &record.cgroup {
            let _ = cgroup.remove();
        }
        let _ = remove_tree(&paths.container(&record.id).dir);
    }

    /// StartContainer: the shim forks the container's init, which joins the pod, builds the
    /// rootfs and `execve`s. An init failure is [`Error::StartFailed`] with the failing step
    /// (kubelet: `RunContainerError`); the container is then Exited with reason StartError.
    pub fn start_container(&self, id: &ContainerId) -> Result<()> {
        self.start_then(id, false).map(drop)
    }

    /// [`Runtime::start_container`], with a Wait sent right behind the Start on the same
    /// connection: the container's exit then comes on it ([`ExitWaiter::wait`]), with no
    /// second connection to the shim and no status read before and after (`run --rm`).
    pub fn start_container_and_wait(&self, id: &ContainerId) -> Result<ExitWaiter> {
        self.start_then(id, true)
    }

    /// Sends Start (and a Wait behind it when `wait`), then waits for Start's answer.
    fn start_then(&self, id: &ContainerId, wait: bool) -> Result<ExitWaiter> {
        let sandbox = self.sandbox_of(id)?;
        let paths = self.layout.sandbox(&sandbox);
        let _lock = SandboxLock::acquire(&paths.lock())?;
        let client = self.shim(&sandbox)?;
        send_start(&client, id, &self.mount_template_fds(), wait)?;
        started(client, &sandbox, id)
    }

    /// The mount template's descriptor as a Start carries it, if the runtime has one.
    pub(crate) fn mount_template_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.mount_template
            .iter()
            .map(|t| std::os::fd::AsRawFd::as_raw_fd(&t.fd()))
            .collect()
    }

    /// StopContainer: SIGTERM, up to `grace` for it to exit, then SIGKILL. A container that is
    /// not running is left as it is. (A PID 1 without a SIGTERM handler ignores SIGTERM, as in
    /// Kubernetes: it then takes the whole grace period.)
    pub fn stop_container(&self, id: &ContainerId, grace: Duration) -> Result<()> {
        self.stop_container_unless(id, grace, &|| false).map(drop)
    }

    /// StopContainer that stops waiting out the grace period as soon as `give_up()` is true
    /// (it is asked every `GIVE_UP_POLL`): a node agent that is asked to stop leaves its pods
    /// running, as kubelet does, and a container already sent SIGTERM keeps it; the next agent
    /// takes the kill up again. True when the container is no longer running.
    pub fn stop_container_unless(
        &self,
        id: &ContainerId,
        grace: Duration,
        give_up: &dyn Fn() -> bool,
    ) -> Result<bool> {
        let status = self.container_status(id)?;
        if status.state != ContainerState::Running {
            return Ok(true);
        }
        let sandbox = status.sandbox_id;
        let waiter = self.shim(&sandbox)?;
        waiter.send(
            &Request::Wait {
                container: id.clone(),
            },
            &[],
        )?;
        if !grace.is_zero() {
            self.signal(&sandbox, id, libc::SIGTERM)?;
            let deadline = std::time::Instant::now() + grace;
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                if waiter.wait_readable(left.min(GIVE_UP_POLL))? {
                    return exited(&sandbox, waiter.receive(None)?).map(|()| true);
                }
                if give_up() {
                    return Ok(false);
                }
            }
        }
        self.signal(&sandbox, id, libc::SIGKILL)?;
        exited(&sandbox, waiter.receive(Some(KILL_WAIT))?).map(|()| true)
    }

    fn signal(&self, sandbox: &SandboxId, id: &ContainerId, signal: i32) -> Result<()> {
        let client = self.shim(sandbox)?;
        match client.call(&Request::Signal {
            container: id.clone(),
            signal,
        })? {
            Response::Ok => Ok(()),
            // It exited meanwhile: the waiter hears of it.
            Response::Error { .. } => Ok(()),
            other => expect_ok(sandbox, other),
        }
    }

    /// Waits until the container has exited, at most `timeout` (None: as long as it takes), and
    /// returns its status.
    pub fn wait_container(
        &self,
        id: &ContainerId,
        timeout: Option<Duration>,
    ) -> Result<ContainerStatus> {
        let status = self.container_status(id)?;
        match status.state {
            ContainerState::Exited | ContainerState::Unknown => return Ok(status),
            ContainerState::Created => {
                return Err(Error::InvalidState {
                    id: id.to_string(),
                    state: status.state.to_string(),
                    message: "it has not been started".into(),
                })
            }
            ContainerState::Running => {}
        }
        let client = self.shim(&status.sandbox_id)?;
        client.send(
            &Request::Wait {
                container: id.clone(),
            },
            &[],
        )?;
        let response = client.receive(timeout).map_err(|e| match e {
            Error::Timeout { seconds, .. } => Error::Timeout {
                what: format!("waiting for container {id}"),
                seconds,
            },
            other => other,
        })?;
        exited(&status.sandbox_id, response)?;
        self.container_status(id)
    }

    /// RemoveContainer: a running container is killed first, as the CRI asks; then its folder
    /// (record, overlay upper, default log) goes. Removing an absent container is fine.
    pub fn remove_container(&self, id: &ContainerId) -> Result<()> {
        let sandbox = match self.sandbox_of(id) {
            Ok(sandbox) => sandbox,
            Err(Error::ContainerNotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        if self.container_status(id)?.state == ContainerState::Running {
            self.stop_container(id, Duration::ZERO)?;
        }
        let paths = self.layout.sandbox(&sandbox);
        let _lock = SandboxLock::acquire(&paths.lock())?;
        // Its cgroup, its folder and what the shim kept of it go with the trash (now, or
        // after the answer: crate::trash).
        self.forget_container(id);
        self.discard(&paths.container(id).dir, "c-", id.as_str())
    }

    /// The cgroup of a container (None when it has none: cgroups are off), for its usage.
    pub fn container_cgroup(&self, id: &ContainerId) -> Result<Option<podlab_cgroups::Cgroup>> {
        let sandbox = self.container_status(id)?.sandbox_id;
        let paths = self.layout.sandbox(&sandbox);
        Ok(
            state::read_record::<ContainerRecord>(&paths.container(id).record())?
                .and_then(|r| r.cgroup),
        )
    }

    /// UpdateContainerResources: new values for a container's cgroup, written to the kernel at
    /// once (a container not started yet gets them with its cgroup at its start); fields left
    /// at 0 keep the container's current ones (the CRI's rule). Fails when the kernel refuses a
    /// value (a memory limit below what the container uses now: EBUSY), or when the container
    /// has no cgroup (cgroups are off).
    pub fn update_container_resources(
        &self,
        id: &ContainerId,
        resources: &podlab_cgroups::Resources,
    ) -> Result<()> {
        let sandbox = self.sandbox_of(id)?;
        let paths = self.layout.sandbox(&sandbox);
        let _lock = SandboxLock::acquire(&paths.lock())?;
        let path = paths.container(id).record();
        let mut record: ContainerRecord = state::read_record(&path)?
            .ok_or_else(|| Error::ContainerNotFound { id: id.to_string() })?;
        match &record.cgroup {
            Some(cgroup) => resources.apply(cgroup)?,
            // Its cgroup comes at its start, with the values recorded here (containerd updates
            // a created container's spec alone).
            None if record.state == ContainerState::Created
                && self.sandbox_record(&sandbox, &paths)?.cgroup.is_some() => {}
            None => {
                return Err(Error::InvalidConfig {
                    name: record.config.metadata.name.clone(),
                    message: "the container has no cgroup (cgroups are off on this node)".into(),
                })
            }
        }
        record.config.resources.cgroup = record.config.resources.cgroup.merged(resources);
        state::write_record(&path, &record)
    }

    /// Changes a container that is created and not started yet (NRI plugins' adjustments,
    /// which containerd makes to the spec before its `runc create`): `change` gets its record,
    /// which is written back, under the sandbox's lock, if it returns Ok. Its volumes are
    /// checked as CreateContainer checks them.
    pub fn adjust_created_container(
        &self,
        id: &ContainerId,
        change: impl FnOnce(&mut ContainerRecord) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let sandbox = self.sandbox_of(id)?;
        let paths = self.layout.sandbox(&sandbox);
        let _lock = SandboxLock::acquire(&paths.lock())?;
        let path = paths.container(id).record();
        let mut record: ContainerRecord = state::read_record(&path)?
            .ok_or_else(|| Error::ContainerNotFound { id: id.to_string() })?;
        let name = record.config.metadata.name.clone();
        let invalid = |message: String| Error::InvalidConfig {
            name: name.clone(),
            message,
        };
        if record.state != ContainerState::Created {
            return Err(invalid(format!(
                "container {id} is {:?}: only a created container can be adjusted",
                record.state
            )));
        }
        change(&mut record).map_err(invalid)?;
        for mount in &record.config.mounts {
            check_propagation_source(mount).map_err(invalid)?;
        }
        state::write_record(&path, &record)
    }

    /// ContainerStatus. A container recorded as running whose shim is gone is Unknown.
    pub fn container_status(&self, id: &ContainerId) -> Result<ContainerStatus> {
        self.container_status_and_record(id)
            .map(|(status, _)| status)
    }

    /// [`Runtime::container_status`] and the record it was read from, for a caller that
    /// reports the record's parts too (CRI ContainerStatus: mounts, resources, user).
    pub fn container_status_and_record(
        &self,
        id: &ContainerId,
    ) -> Result<(ContainerStatus, std::sync::Arc<ContainerRecord>)> {
        let (sandbox, record) = self.sandbox_and_record_of(id)?;
        let paths = self.layout.sandbox(&sandbox);
        let shim_alive =
            record.state == ContainerState::Running && self.live_shim(&paths)?.is_some();
        Ok((container_status(&record, shim_alive), record))
    }

    pub fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<ContainerStatus>> {
        let mut list = Vec::new();
        // One sandbox's containers: its folder alone, not a listing of every sandbox's.
        let sandboxes = match &filter.sandbox_id {
            Some(id) if self.layout.sandbox(id).dir.is_dir() => vec![id.clone()],
            Some(_) => Vec::new(),
            None => self.layout.sandbox_ids()?,
        };
        for sandbox in sandboxes {
            let paths = self.layout.sandbox(&sandbox);
            let shim_alive = self.live_shim(&paths)?.is_some();
            for id in paths.container_ids()? {
                if filter.id.as_ref().is_some_and(|i| *i != id) {
                    continue;
                }
                let Some(record) = self
                    .container_records
                    .read(&paths.container(&id).record())?
                else {
                    continue;
                };
                let status = container_status(&record, shim_alive);
                if filter.matches(&status) {
                    list.push(status);
                }
            }
        }
        list.sort_by_key(|s| s.created_at);
        Ok(list)
    }

    /// ReopenContainerLog: the shim reopens the log file (after the caller moved it away).
    pub fn reopen_container_log(&self, id: &ContainerId) -> Result<()> {
        let sandbox = self.sandbox_of(id)?;
        let client = self.shim(&sandbox)?;
        expect_ok(
            &sandbox,
            client.call(&Request::ReopenLog {
                container: id.clone(),
            })?,
        )
    }

    /// The container's CRI log file.
    pub fn container_log_path(&self, id: &ContainerId) -> Result<PathBuf> {
        Ok(self.container_status(id)?.log_path)
    }

    /// The stored record of a container (config, resolved process, image layers).
    pub fn container_record(&self, id: &ContainerId) -> Result<ContainerRecord> {
        let (_, record) = self.sandbox_and_record_of(id)?;
        Ok(ContainerRecord::clone(&record))
    }
}

/// A started container's connection to its shim, on which a Wait was sent
/// ([`Runtime::start_container_and_wait`]).
#[derive(Debug)]
pub struct ExitWaiter {
    client: crate::protocol::ShimClient,
    sandbox: SandboxId,
}

/// How a container ended, as its shim recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerExit {
    pub exit_code: i32,
    /// Nanoseconds since the epoch.
    pub finished_at: i64,
}

impl ExitWaiter {
    /// The container's exit once it has exited (its record says the same by then); `None`
    /// when `limit` passed first. An error when the shim went away: the container's status
    /// is then Unknown.
    pub fn wait(&self, limit: Duration) -> Result<Option<ContainerExit>> {
        if !self.client.wait_readable(limit)? {
            return Ok(None);
        }
        match self.client.receive(None)? {
            Response::Exited {
                exit_code,
                finished_at,
            } => Ok(Some(ContainerExit {
                exit_code,
                finished_at,
            })),
            other => Err(unexpected(&self.sandbox, None, "Wait", other)),
        }
    }
}

/// When a new container's parts for running are made: its writable layer (the overlay's upper
/// and work folders, the folder its rootfs is mounted on) and its cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartParts {
    /// With its record: a pod and its first container made together (`run`), where they are
    /// made while the shim starts.
    Now,
    /// By the shim at the container's start, as containerd's CRI runs `runc create` (which
    /// makes the cgroup) in StartContainer: CreateContainer then writes two inodes (its folder
    /// and record) rather than five, and no cgroup. On an ext4 without a journal, as here,
    /// each new inode walks every recently deleted inode of its group first: 0.15-0.8 ms each
    /// in critest's /tmp, most of what CreateContainer cost.
    AtStart,
}

/// Makes a container's upper, work and rootfs folders (those that are missing), the first two
/// owned by `owner` (the node's ids of a user-namespaced pod's root: the rootfs's own files
/// belong to the pod's root, its lower layers are idmapped at start).
pub(crate) fn make_layer_dirs(
    container: &state::ContainerPaths,
    owner: Option<(u32, u32)>,
) -> Result<()> {
    // The rootfs folder last: once it exists, so do the others.
    for dir in [container.upper(), container.work(), container.rootfs()] {
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("creating", dir, e)),
        }
    }
    if let Some((uid, gid)) = owner {
        let (uid, gid) = (
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        );
        for dir in [container.upper(), container.work()] {
            nix::unistd::chown(&dir, uid, gid).map_err(|errno| Error::Sys {
                call: "chown",
                target: dir.display().to_string(),
                errno,
            })?;
        }
    }
    Ok(())
}

/// Sends StartContainer of `id` on `client`, with the mount template's descriptor, and when
/// `wait` a Wait behind it (the shim reads it once Start is answered).
pub(crate) fn send_start(
    client: &crate::protocol::ShimClient,
    id: &ContainerId,
    template: &[std::os::fd::RawFd],
    wait: bool,
) -> Result<()> {
    client.send(
        &Request::Start {
            container: id.clone(),
            waited: wait,
        },
        template,
    )?;
    if wait {
        client.send(
            &Request::Wait {
                container: id.clone(),
            },
            &[],
        )?;
    }
    Ok(())
}

/// The answer to a Start sent on `client` (with a Wait behind it, for the waiter).
pub(crate) fn started(
    client: crate::protocol::ShimClient,
    sandbox: &SandboxId,
    id: &ContainerId,
) -> Result<ExitWaiter> {
    match client.receive(None)? {
        Response::Started { .. } => {
            podlab_fault::point_reached("container.after-start");
            Ok(ExitWaiter {
                client,
                sandbox: sandbox.clone(),
            })
        }
        other => Err(unexpected(sandbox, Some(id), "Start", other)),
    }
}

/// Polls nothing: the shim answers a Wait when the container exits.
fn exited(sandbox: &SandboxId, response: Response) -> Result<()> {
    match response {
        Response::Exited { .. } => Ok(()),
        other => Err(unexpected(sandbox, None, "Wait", other)),
    }
}

fn container_status(record: &ContainerRecord, shim_alive: bool) -> ContainerStatus {
    let state = match record.state {
        ContainerState::Running if !shim_alive => ContainerState::Unknown,
        state => state,
    };
    ContainerStatus {
        id: record.id.clone(),
        sandbox_id: record.sandbox_id.clone(),
        metadata: record.config.metadata.clone(),
        state,
        created_at: record.created_at,
        started_at: record.started_at,
        finished_at: record.finished_at,
        exit_code: record.exit_code,
        reason: record.reason.clone(),
        message: record.message.clone(),
        image: record.image.name.clone(),
        image_id: record.image.id.clone(),
        pid: record
            .pid
            .map(|p| p.pid)
            .filter(|_| state == ContainerState::Running),
        log_path: record.log_path.clone(),
        namespaces: record.namespaces.clone(),
        start_trace: record.start_trace.clone(),
        labels: record.config.labels.clone(),
        annotations: record.config.annotations.clone(),
        user: record.user.clone(),
    }
}

/// The log file: the config's path (below the sandbox's log directory when relative), else the
/// container's own folder.
fn log_path(
    sandbox_config: &PodSandboxConfig,
    config: &ContainerConfig,
    default: &std::path::Path,
) -> PathBuf {
    match (&config.log_path, &sandbox_config.log_directory) {
        (Some(path), _) if path.is_absolute() => path.clone(),
        (Some(path), Some(dir)) => dir.join(path),
        _ => default.to_path_buf(),
    }
}

/// A deadline helper for loops that wait on several things.
pub(crate) fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

impl Runtime {
    /// An image volume's image, resolved in the store now (its layers recorded with the
    /// container, as its own image's are), and its sub path checked in it: the CRI asks a
    /// runtime to fail CreateContainer when either is missing, and to refuse a read-write one.
    fn resolve_image_volume(
        &self,
        index: usize,
        mount: &mut crate::config::Mount,
    ) -> std::result::Result<(), String> {
        let Some(volume) = &mut mount.image else {
            return Ok(());
        };
        let at = mount.container_path.display();
        if !mount.readonly {
            return Err(format!(
                "mounts[{index}] ({at}): an image volume is read-only; readonly must be set"
            ));
        }
        let image = self
            .images
            .resolve(&volume.image)
            .map_err(|e| format!("mounts[{index}] ({at}): {e}"))?;
        // The sub path is looked for as the start will open it, in the image made a mount;
        // without one the mount is first made at the start.
        if !volume.sub_path.is_empty() {
            podlab_ns::mnt::detached::Detached::image(&image.lowerdirs, None)
                .map_err(|e| format!("mounts[{index}] ({at}): image {}: {e}", volume.image))?
                .sub_tree(std::path::Path::new(&volume.sub_path))
                .map_err(|e| {
                    format!(
                        "mounts[{index}] ({at}): sub path {:?} of image {}: {e}",
                        volume.sub_path, volume.image
                    )
                })?;
        }
        volume.image_id = image.id;
        volume.lowerdirs = image.lowerdirs;
        Ok(())
    }
}

/// containerd's `ensureShared` / `ensureSharedOrSlave`: an `rshared` volume needs a host path on
/// a shared mount, an `rslave` one a shared or slave mount, or nothing could travel; the
/// message is containerd's.
fn check_propagation_source(mount: &crate::config::Mount) -> std::result::Result<(), String> {
    use podlab_ns::mnt::Propagation;
    if mount.propagation.is_private() {
        return Ok(());
    }
    let path = mount.host_path.display();
    let holding = podlab_ns::mnt::mount_holding(&mount.host_path).map_err(|e| e.to_string())?;
    let kinds: Vec<&str> = holding.propagation.split(',').collect();
    let ok = match mount.propagation {
        Propagation::Shared => kinds.contains(&"shared"),
        _ => kinds.contains(&"shared") || kinds.contains(&"slave"),
    };
    if ok {
        return Ok(());
    }
    let wanted = match mount.propagation {
        Propagation::Shared => "a shared mount",
        _ => "a shared or slave mount",
    };
    Err(format!(
        "path {path:?} is mounted on {:?} but it is not {wanted}",
        holding.mount_point.display().to_string()
    ))
}
