//! RunPodSandbox, StopPodSandbox, RemovePodSandbox, PodSandboxStatus, ListPodSandbox.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::PodSandboxConfig;
use crate::etc_files;
use crate::id::SandboxId;
use crate::liveness::{now_ns, Pidfd};
use crate::network::{NetworkAttachment, PodNetwork, PreparedNetwork};
use crate::protocol::{Request, Response, ShimClient, ShimReady};
use crate::runtime::{remove_tree, Runtime};
use crate::shim::ShimArgs;
use crate::starting_shim::{Spawning, StartingShim};
use crate::state::{self, SandboxLock, SandboxPaths, SandboxRecord, ShimRecord};
use crate::status::{NetworkMode, SandboxFilter, SandboxState, SandboxStatus};
use crate::{Error, Result};

/// How long the runtime waits for a shim to exit after Shutdown, or for killed processes.
pub(crate) const EXIT_WAIT: Duration = Duration::from_secs(10);

/// containerd's mount options for the pod's /dev/shm.
const SHM_OPTIONS: &str = "nosuid,nodev,noexec,mode=1777,size=65536k";

impl Runtime {
    /// RunPodSandbox: a shim, a pause process in the pod's namespaces, the pins, `lo` up, the
    /// network plugin's attachment, the /etc files. A failure at any step removes everything
    /// made so far and returns the error (kubelet: `FailedCreatePodSandBox`).
    pub fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<SandboxId> {
        self.start_sandbox(config, None, None, false)
            .map(|(id, _)| id)
    }

    /// RunPodSandbox with a shim started ahead for this runtime's root
    /// ([`StartingShim::spawn`], by a caller with more to do before RunPodSandbox, as `run
    /// --rm`): the sandbox gets its id, folder and shim.
    pub fn run_pod_sandbox_with(
        &self,
        config: &PodSandboxConfig,
        starting: StartingShim,
    ) -> Result<SandboxId> {
        self.start_sandbox(config, Some(starting), None, false)
            .map(|(id, _)| id)
    }

    /// RunPodSandbox, then CreateContainer of `container` in it, as one call (`run --rm`'s
    /// pod): the container's image, process, folders and cgroup are made while the shim and
    /// pause start, on this thread, which would otherwise only wait for them; its record is
    /// written once the sandbox is Ready, under the same lock. The container's outcome is the
    /// second value: a container that cannot be made leaves the sandbox Ready, for the caller
    /// to remove, as CreateContainer after RunPodSandbox would.
    pub fn run_pod_sandbox_and_container(
        &self,
        config: &PodSandboxConfig,
        starting: Option<StartingShim>,
        container: &crate::config::ContainerConfig,
    ) -> Result<(SandboxId, Result<crate::id::ContainerId>)> {
        let (id, created) = self.start_sandbox(config, starting, Some(container), false)?;
        Ok((id, made_first(created).map(|first| first.id)))
    }

    /// [`Runtime::run_pod_sandbox_and_container`], then StartContainer with a Wait behind it
    /// ([`Runtime::start_container_and_wait`]): `run --rm`'s pod without stdin. Where the
    /// container's /etc files are final before the shim is ready (no network ADD runs while
    /// it starts), its record is written and its Start and Wait are sent on the shim's socket
    /// while the shim still starts: the shim takes them up as soon as the sandbox is ready,
    /// while this thread writes the sandbox's record. The second value is the container's
    /// creation (an error: a sandbox Ready without it), then its start.
    pub fn run_pod_sandbox_and_start(
        &self,
        config: &PodSandboxConfig,
        starting: Option<StartingShim>,
        container: &crate::config::ContainerConfig,
    ) -> Result<(SandboxId, Result<StartedFirst>)> {
        let (sandbox, created) = self.start_sandbox(config, starting, Some(container), true)?;
        let started = made_first(created).map(|first| {
            let waiter = match first.queued_start {
                Some(client) => crate::container::started(client, &sandbox, &first.id),
                None => self.start_container_and_wait(&first.id),
            };
            (first.id, waiter)
        });
        Ok((sandbox, started))
    }

    fn start_sandbox(
        &self,
        config: &PodSandboxConfig,
        starting: Option<StartingShim>,
        first: Option<&crate::config::ContainerConfig>,
        start_first: bool,
    ) -> Result<(SandboxId, Option<Result<FirstContainer>>)> {
        check_user_namespace(config)?;
        let (id, paths, lock, waiting) = match starting {
            Some(mut starting) => {
                if !self.owns(&starting) {
                    return Err(Error::Invalid(format!(
                        "the shim started ahead for {} is not for this runtime's root {}",
                        starting.sandbox_dir().display(),
                        self.layout.root().display()
                    )));
                }
                let (id, paths) = (starting.id.clone(), starting.paths.clone());
                let (Some(lock), Some(waiting)) = (starting.lock.take(), starting.process.take())
                else {
                    return Err(Error::Invalid("a shim started ahead was used twice".into()));
                };
                starting.taken = true;
                (id, paths, lock, Some(waiting))
            }
            None => {
                let id = SandboxId::generate();
                let paths = self.layout.sandbox(&id);
                std::fs::create_dir(&paths.dir)
                    .map_err(|e| Error::io("creating", &paths.dir, e))?;
                let lock = match SandboxLock::acquire(&paths.lock()) {
                    Ok(lock) => lock,
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&paths.dir);
                        return Err(e);
                    }
                };
                (id, paths, lock, None)
            }
        };
        podlab_fault::point_reached("sandbox.after-folder");
        match self.make_sandbox(&id, &paths, config, waiting, first, start_first) {
            Ok(created) => {
                drop(lock);
                Ok((id, created))
            }
            Err(err) => {
                self.undo_sandbox(&id, &paths, config);
                drop(lock);
                Err(err)
            }
        }
    }

    fn make_sandbox(
        &self,
        id: &SandboxId,
        paths: &SandboxPaths,
        config: &PodSandboxConfig,
        waiting: Option<Spawning>,
        first: Option<&crate::config::ContainerConfig>,
        start_first: bool,
    ) -> Result<Option<Result<FirstContainer>>> {
        let created_at = now_ns();
        let network_mode = if config.host_network {
            NetworkMode::Node
        } else {
            NetworkMode::Pod
        };
        let trace = self.pod_trace(&config.metadata);
        let pause = self.helper("podlab-pause")?;
        // The shim is spawned now, on a thread of its own: its `vfork` holds that thread, not
        // this one, until the shim's `execve`, and the shim's start runs while this thread
        // takes or makes the network's namespace.
        let waiting = match waiting {
            Some(waiting) => waiting,
            None => Spawning::start(paths, id, &self.helper("podlab-shim")?, None),
        };
        // The pod's cgroup and the pause container's below it: named now, made while the shim
        // starts (below).
        let pod_cgroup = self.pod_cgroup(config);
        let placement = match (&self.cgroups, &pod_cgroup) {
            (Some(_), Some(pod)) => Some(crate::cgroups::Placement {
                cgroup: Some(pod.child(id.as_str())),
                oom_score_adj: Some(crate::cgroups::SANDBOX_OOM_SCORE_ADJ),
            }),
            _ => None,
        };

        // A namespace attached ahead of time, if the network has one (or, without a network,
        // an empty one made ahead): pause joins it.
        let prepared = match (&self.network, network_mode) {
            (Some(plugin), NetworkMode::Pod) => {
                plugin.take_prepared(&pod_network(id, config, &paths.ns(podlab_ns::NsKind::Net)))
            }
            (None, NetworkMode::Pod) => {
                self.empty_netns
                    .as_ref()
                    .and_then(|take| take())
                    .map(|netns| PreparedNetwork {
                        netns,
                        attachment: NetworkAttachment::default(),
                    })
            }
            _ => None,
        };
        if prepared.is_some() {
            trace.mark("warm network namespace taken");
        }
        let pin = paths.ns(podlab_ns::NsKind::Net);
        // Without one made ahead, the pod's network namespace is made and pinned here, so that
        // its ADD runs while the shim and pause start (pause joins it; the shim pins the rest
        // once the ADD is through). The pin is what `gc` finds and DELs through if this
        // process dies meanwhile, as after an ADD on a namespace the shim pinned.
        let attach_while_starting =
            prepared.is_none() && network_mode == NetworkMode::Pod && self.network.is_some();
        if attach_while_starting {
            std::fs::create_dir(paths.ns_dir())
                .map_err(|e| Error::io("creating", paths.ns_dir(), e))?;
            podlab_ns::net::new_pinned(&pin)?;
            trace.mark("network namespace (made, pinned)");
        }
        // The namespace pause joins instead of making one: a warm one, held by this process
        // until the shim has pinned it, or the one pinned just above.
        let joined_netns = prepared
            .as_ref()
            .map(|p| {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&p.netns);
                PathBuf::from(format!("/proc/{}/fd/{fd}", std::process::id()))
            })
            .or_else(|| attach_while_starting.then(|| pin.clone()));
        let make_cgroups = || -> Result<()> {
            if let (Some(node), Some(_)) = (&self.cgroups, &pod_cgroup) {
                // kubelet's values on the pod's, runc's device rules on the pause's.
                let pod = node.make_pod(&config.linux.cgroup_parent, &config.linux.resources)?;
                crate::cgroups::make_container(&pod, id.as_str(), &Default::default(), false)?;
            }
            trace.mark("shim spawned, cgroups (pod, pause)");
            Ok(())
        };
        let shim_args = ShimArgs {
            sandbox_dir: paths.dir.clone(),
            id: id.clone(),
            pause,
            hostname: config.hostname.clone(),
            domainname: config.domainname.clone(),
            share_pid: config.share_process_namespace && !config.host_pid,
            host_network: config.host_network,
            host_pid: config.host_pid,
            host_ipc: config.host_ipc,
            placement,
            sysctls: config.linux.sysctls.clone(),
            security: config.linux.security.clone(),
            // The shim opens the caller's descriptor of it while the caller waits for it.
            mount_template: self.mount_template.as_ref().map(|t| {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&t.fd());
                PathBuf::from(format!("/proc/{}/fd/{fd}", std::process::id()))
            }),
            // Always: a later command may trace the pod (`delete --trace`).
            trace: Some(crate::trace::path(
                self.layout.root(),
                &config.metadata.namespace,
                &config.metadata.name,
            )),
            netns: joined_netns.clone(),
            await_network: attach_while_starting,
        };
        // The ADD runs on a thread of its own from before the shim is spawned: the thread
        // only execs the plugins, and this one only spawns the shim, writes cgroup files and
        // makes the first container's folders meanwhile (nothing forks into namespace work
        // while it runs).
        let added_while_starting = std::sync::Mutex::new(None);
        let mut first_made = None;
        // A namespace made ahead has its addresses already: the /etc files get them at once.
        let prepared_ips: &[String] = prepared.as_ref().map_or(&[], |p| &p.attachment.ips);
        let template = self.mount_template_fds();
        let started = std::thread::scope(|scope| {
            let adding = self
                .network
                .as_ref()
                .filter(|_| attach_while_starting)
                .map(|plugin| {
                    scope.spawn(|| {
                        let added = plugin.set_up(&pod_network(id, config, &pin));
                        trace.mark("CNI ADD (while the shim starts)");
                        let attached = added.is_ok();
                        *added_while_starting
                            .lock()
                            .unwrap_or_else(|e| e.into_inner()) = Some(added);
                        podlab_fault::point_reached("sandbox.after-network");
                        attached
                    })
                });
            let attach = || adding.is_none_or(|thread| thread.join().unwrap_or(false));
            // What the shim and pause do not need, made while pause makes the namespaces.
            let meanwhile = || -> Result<()> {
                write_etc_files(paths, config, prepared_ips)?;
                std::fs::create_dir(paths.containers_dir())
                    .map_err(|e| Error::io("creating", paths.containers_dir(), e))?;
                std::fs::create_dir(paths.shm())
                    .map_err(|e| Error::io("creating", paths.shm(), e))?;
                podlab_ns::mnt::mount_tmpfs(&paths.shm(), SHM_OPTIONS)?;
                podlab_fault::point_reached("sandbox.after-shm");
                trace.mark("sandbox folder, etc files, shm");
                if let Some(container) = first {
                    let made = self.new_container(
                        id,
                        paths,
                        config,
                        pod_cgroup.as_ref(),
                        container,
                        crate::container::StartParts::Now,
                    );
                    trace.mark("container's folders, cgroup (ahead)");
                    // Its /etc files are final unless an ADD still runs: then it is recorded
                    // and started once the sandbox is Ready.
                    first_made = Some(match made {
                        Ok(record) if start_first && !attach_while_starting => self
                            .record_container(paths, config, record)
                            .map(|container| {
                                Made::Queued(FirstContainer {
                                    queued_start: queue_start(id, paths, &container, &template),
                                    id: container,
                                })
                            }),
                        made => made.map(|record| Made::New(Box::new(record))),
                    });
                }
                Ok(())
            };
            start_shim(
                id,
                paths,
                waiting,
                make_cgroups,
                attach,
                meanwhile,
                &shim_args,
            )
        });
        let added_while_starting = added_while_starting
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        if let (Err(_), Some(plugin)) = (&started, &self.network) {
            if prepared.is_some() {
                // No shim pinned it: the DEL goes to the namespace this process still holds
                // (and its ADD's record to the sandbox's folder, which the pin names).
                let pod = PodNetwork {
                    netns_now: joined_netns.as_deref(),
                    ..pod_network(id, config, &pin)
                };
                let _ = plugin.tear_down(&pod, None);
            } else if attach_while_starting {
                // An ADD that ran (failed or not) gets its DEL, through this process's pin.
                let _ = plugin.tear_down(&pod_network(id, config, &pin), None);
            }
        }
        let set_up_failed = |e: &dyn std::fmt::Display| Error::Network {
            id: id.to_string(),
            phase: "set-up",
            message: format!(
                "{}: {e}",
                self.network.as_ref().map_or("", |plugin| plugin.name())
            ),
        };
        if let (Err(_), Some(Err(e))) = (&started, added_while_starting.as_ref()) {
            // The shim failed because the ADD did: the ADD's error is the one to tell.
            return Err(set_up_failed(e));
        }
        started?;
        podlab_fault::point_reached("sandbox.after-shim");
        // A pod network's ADD ran while the shim started, or was made ahead; a failed ADD's
        // DEL is the sandbox's undo: the shim has pinned the namespace by now.
        let added = match (added_while_starting, prepared) {
            (Some(added), _) => added,
            (None, Some(prepared)) => {
                if self.network.is_some() {
                    trace.mark("CNI ADD (made ahead, joined)");
                }
                Ok(prepared.attachment)
            }
            (None, None) => Ok(NetworkAttachment::default()),
        };
        let attachment = added.map_err(|e| set_up_failed(&e))?;
        if !attach_while_starting {
            podlab_fault::point_reached("sandbox.after-network");
        }
        if attach_while_starting && !attachment.ips.is_empty() {
            write_etc_files(paths, config, &attachment.ips)?;
        }
        let sandbox = SandboxRecord {
            id: id.clone(),
            config: config.clone(),
            created_at,
            state: SandboxState::Ready,
            network_mode,
            ips: attachment.ips,
            network_result: attachment.result,
            cgroup: pod_cgroup,
        };
        state::write_record(&paths.record(), &sandbox)?;
        podlab_fault::point_reached("sandbox.after-record");
        trace.mark("sandbox ready (etc files, record)");
        // Made meanwhile whenever the shim started (`start_shim` runs it before answering).
        Ok(first_made.map(|made| {
            made.and_then(|made| match made {
                Made::Queued(first) => Ok(first),
                Made::New(record) => {
                    self.record_container(paths, config, *record)
                        .map(|id| FirstContainer {
                            id,
                            queued_start: None,
                        })
                }
            })
        }))
    }

    /// Takes down what a failed RunPodSandbox made: the network attachment (a DEL after a failed
    /// ADD too, as CNI wants), the shim and its pause, the pins, the shm mount, the folder.
    fn undo_sandbox(&self, id: &SandboxId, paths: &SandboxPaths, config: &PodSandboxConfig) {
        if let (Some(plugin), Some(shim)) = (&self.network, self.live_shim(paths).ok().flatten()) {
            if let Some(net) = shim
                .namespaces
                .iter()
                .find(|n| n.kind == podlab_ns::NsKind::Net)
            {
                let _ = plugin.tear_down(&pod_network(id, config, &net.path), None);
            }
        }
        let _ = self.shutdown_shim(id, paths);
        let _ = crate::gc::clean_sandbox_leftovers(paths);
        if let Some(pod) = self.pod_cgroup(config) {
            let _ = self.remove_cgroups(id, paths, &pod);
        }
        let _ = remove_tree(&paths.dir);
    }

    /// The pod's cgroup a sandbox config names, when the node has cgroups.
    fn pod_cgroup(&self, config: &PodSandboxConfig) -> Option<podlab_cgroups::Cgroup> {
        let node = self.cgroups.as_ref()?;
        (!config.linux.cgroup_parent.is_empty()).then(|| node.pod(&config.linux.cgroup_parent))
    }

    /// Removes the cgroups of a sandbox (its pause's and its containers', with anything left
    /// in them), then the pod's and those above it if they are left empty: another sandbox of
    /// the same pod keeps them.
    pub(crate) fn remove_cgroups(
        &self,
        id: &SandboxId,
        paths: &SandboxPaths,
        pod: &podlab_cgroups::Cgroup,
    ) -> Result<()> {
        for container in paths.container_ids().unwrap_or_default() {
            pod.child(container.as_str()).remove()?;
        }
        crate::cgroups::remove_with_pod(&pod.child(id.as_str()), self.pruned_above_pod())
    }

    /// StopPodSandbox: every container killed (the kubelet stopped them gracefully before), the
    /// network torn down, the pause process stopped, the namespaces unpinned. The records stay
    /// until RemovePodSandbox. Stopping a stopped sandbox is fine.
    pub fn stop_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        let paths = self.layout.sandbox(id);
        let _lock = self.lock_existing(id, &paths)?;
        let mut record = self.sandbox_record(id, &paths)?;
        if !self.stop_locked(&record, &paths)? {
            // No live shim took the pod down (it may have died long ago): whatever it left is
            // cleaned here, since the sandbox stays.
            crate::gc::clean_sandbox_leftovers(&paths)?;
        }
        if record.state != SandboxState::NotReady {
            record.state = SandboxState::NotReady;
            state::write_record(&paths.record(), &record)?;
        }
        // The namespace is gone: a DEL left to the cleaner may run now.
        self.start_deferred(id);
        Ok(())
    }

    /// What StopPodSandbox does, with the sandbox's lock held: true when a live shim took it all
    /// down itself (containers, pause, pins), false when there was no shim to ask.
    fn stop_locked(&self, record: &SandboxRecord, paths: &SandboxPaths) -> Result<bool> {
        let id = &record.id;
        let network_attached = record.state == SandboxState::Ready
            && self.network.is_some()
            && record.network_mode == NetworkMode::Pod;
        // The containers go before the network, as kubelet orders it. Without a network to
        // tear down, the shim's Shutdown is that order by itself (containers, then pause), and
        // one round trip fewer.
        let trace = self.pod_trace(&record.config.metadata);
        if network_attached {
            if let Ok(client) = self.shim(id) {
                expect_ok(id, client.call(&Request::StopContainers)?)?;
            }
            trace.mark("containers stopped");
            podlab_fault::point_reached("sandbox.stop.after-containers");
            if self.defer_network_teardown(record, paths)? {
                trace.mark("CNI DEL left to the cleaner");
            } else {
                self.tear_down_network(record, paths)?;
                trace.mark("CNI DEL");
            }
            podlab_fault::point_reached("sandbox.stop.after-network");
        }
        let shut_down = self.shutdown_shim(id, paths)?;
        if shut_down {
            trace.mark("shim exited");
        }
        Ok(shut_down)
    }

    /// The network plugin's teardown of the pod's network namespace (CNI DEL), while it is
    /// still pinned; true when there was one to do.
    pub(crate) fn tear_down_network(
        &self,
        record: &SandboxRecord,
        paths: &SandboxPaths,
    ) -> Result<bool> {
        if self.network.is_none() || record.network_mode != NetworkMode::Pod {
            return Ok(false);
        }
        if !podlab_ns::ops::is_pinned(&paths.ns(podlab_ns::NsKind::Net)) {
            return Ok(false);
        }
        self.network_del(record, paths)?;
        Ok(true)
    }

    /// The network plugin's DEL of `record`'s pod, from its folder `paths` (the sandbox's, or
    /// its entry in the trash, where the ADD's cached result went with it). Without the
    /// namespace (a stopped pod's, whose DEL was left to the cleaner) the plugins release
    /// what is outside it: the lease, the host's rules.
    pub(crate) fn network_del(&self, record: &SandboxRecord, paths: &SandboxPaths) -> Result<()> {
        let (Some(plugin), NetworkMode::Pod) = (&self.network, record.network_mode) else {
            return Ok(());
        };
        let netns = paths.ns(podlab_ns::NsKind::Net);
        plugin
            .tear_down(
                &pod_network(&record.id, &record.config, &netns),
                record.network_result.as_ref(),
            )
            .map_err(|e| Error::Network {
                id: record.id.to_string(),
                phase: "teardown",
                message: format!("{}: {e}", plugin.name()),
            })
    }

    /// What a sandbox whose maker died before recording it may have attached: the network
    /// plugin's ADD runs before the record is written. Its DEL needs no more than the sandbox
    /// id and the pinned namespace (CNI releases a lease by the id), so this record carries
    /// only those, for [`Runtime::tear_down_network`].
    pub(crate) fn unfinished_record(paths: &SandboxPaths) -> Option<SandboxRecord> {
        let id = SandboxId::parse(paths.dir.file_name()?.to_str()?).ok()?;
        Some(SandboxRecord {
            id,
            config: PodSandboxConfig::default(),
            created_at: 0,
            state: SandboxState::Ready,
            network_mode: NetworkMode::Pod,
            ips: Vec::new(),
            network_result: None,
            cgroup: None,
        })
    }

    /// Asks a live shim to shut down and waits for it to be gone; false when none was alive.
    fn shutdown_shim(&self, id: &SandboxId, paths: &SandboxPaths) -> Result<bool> {
        let Some(shim) = self.live_shim(paths)? else {
            return Ok(false);
        };
        let pidfd = shim.shim.open();
        let client = ShimClient::connect(&paths.socket(), id.as_str())?;
        expect_ok(id, client.call(&Request::Shutdown)?)?;
        if let Some(pidfd) = pidfd {
            if !pidfd.wait_exit(EXIT_WAIT) {
                pidfd.signal(libc::SIGKILL)?;
                pidfd.wait_exit(EXIT_WAIT);
            }
            pidfd.reap_if_child();
        }
        Ok(true)
    }

    /// RemovePodSandbox: stop it if needed (its containers are killed with it), then remove
    /// every trace. Removing a sandbox that is not there is fine, as in the CRI.
    pub fn remove_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        let paths = self.layout.sandbox(id);
        if !paths.dir.exists() {
            return Ok(());
        }
        let _lock = match SandboxLock::acquire(&paths.lock()) {
            Ok(lock) => lock,
            // Another remover was quicker.
            Err(_) if !paths.dir.exists() => return Ok(()),
            Err(e) => return Err(e),
        };
        let record = state::read_record::<SandboxRecord>(&paths.record())?;
        let shut_down = match &record {
            Some(record) => self.stop_locked(record, &paths)?,
            None => false,
        };
        if !shut_down {
            // No shim took the pod down: whatever of it still runs or is pinned goes now. A
            // shim alive here belongs to a sandbox that was never finished (no record to stop
            // it by): it goes first, so that nothing re-parents what is cleaned next.
            crate::gc::kill_shim(&paths)?;
            // Its maker may have died after a network ADD: the DEL comes before the unpin.
            let unfinished = record
                .is_none()
                .then(|| Self::unfinished_record(&paths))
                .flatten();
            if let Some(unfinished) = unfinished {
                self.tear_down_network(&unfinished, &paths)?;
            }
            crate::gc::clean_sandbox_leftovers(&paths)?;
        }
        podlab_fault::point_reached("sandbox.remove.before-folder");
        // The cgroups and the folder (with the pod's /dev/shm mount) go with the trash, now or
        // after the answer (crate::trash).
        self.forget_containers_of(id);
        self.discard(&paths.dir, "s-", id.as_str())?;
        // A pod removed without a stop first: its stop above may have left its DEL waiting.
        self.start_deferred(id);
        if let Some(record) = &record {
            self.pod_trace(&record.config.metadata)
                .mark("removal (cgroups, folder)");
        }
        Ok(())
    }

    /// The trace of the pod a sandbox is for (off unless a command traces it).
    pub(crate) fn pod_trace(
        &self,
        metadata: &crate::config::PodSandboxMetadata,
    ) -> crate::trace::PodTrace {
        crate::trace::PodTrace::open(self.layout.root(), &metadata.namespace, &metadata.name)
    }

    /// UpdatePodSandboxResources (CRI v1.33): new values for the pod's cgroup, written at once
    /// (fields left at 0 keep the current ones), and recorded in the sandbox's config, as
    /// kubelet reconfigures the pod cgroup of an in-place resize. Fails when the kernel refuses
    /// a value (a memory limit below what the pod uses now: EBUSY) or the sandbox has no
    /// cgroup.
    pub fn update_pod_sandbox_resources(
        &self,
        id: &SandboxId,
        resources: &podlab_cgroups::Resources,
    ) -> Result<()> {
        let paths = self.layout.sandbox(id);
        let _lock = SandboxLock::acquire(&paths.lock())?;
        let mut record = self.sandbox_record(id, &paths)?;
        let cgroup = record.cgroup.clone().ok_or_else(|| Error::InvalidConfig {
            name: record.config.metadata.name.clone(),
            message: "the pod has no cgroup (cgroups are off on this node)".into(),
        })?;
        resources.apply(&cgroup)?;
        let linux = &mut record.config.linux;
        linux.resources = linux.resources.merged(resources);
        state::write_record(&paths.record(), &record)
    }

    /// PodSandboxStatus, with the kernel's word on whether it is Ready: its shim and its pause
    /// process must still run.
    pub fn pod_sandbox_status(&self, id: &SandboxId) -> Result<SandboxStatus> {
        let paths = self.layout.sandbox(id);
        let record = self.sandbox_record(id, &paths)?;
        let shim = self.shim_records.read(&paths.shim_record())?;
        Ok(sandbox_status(record, shim.as_deref().cloned(), |who| {
            self.live.runs(who, &paths.dir)
        }))
    }

    /// The stored record of a sandbox (its config, network result, cgroup).
    pub fn pod_sandbox_record(&self, id: &SandboxId) -> Result<SandboxRecord> {
        self.sandbox_record(id, &self.layout.sandbox(id))
    }

    /// The pod cgroup of a sandbox (None when it has none), for its usage.
    pub fn pod_sandbox_cgroup(&self, id: &SandboxId) -> Result<Option<podlab_cgroups::Cgroup>> {
        let paths = self.layout.sandbox(id);
        Ok(self.sandbox_record(id, &paths)?.cgroup)
    }

    pub fn list_pod_sandboxes(&self) -> Result<Vec<SandboxStatus>> {
        self.list_pod_sandboxes_filtered(&SandboxFilter::default())
    }

    pub fn list_pod_sandboxes_filtered(
        &self,
        filter: &SandboxFilter,
    ) -> Result<Vec<SandboxStatus>> {
        let mut list = Vec::new();
        for id in self.layout.sandbox_ids()? {
            match self.pod_sandbox_status(&id) {
                Ok(status) if filter.matches(&status) => list.push(status),
                Ok(_) | Err(Error::SandboxNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        list.sort_by_key(|s| s.created_at);
        Ok(list)
    }

    pub(crate) fn sandbox_record(
        &self,
        id: &SandboxId,
        paths: &SandboxPaths,
    ) -> Result<SandboxRecord> {
        let record = self
            .sandbox_records
            .read(&paths.record())?
            .ok_or_else(|| Error::SandboxNotFound { id: id.to_string() })?;
        Ok(SandboxRecord::clone(&record))
    }

    /// The sandbox's lock, once it is known to exist (and still so after waiting for the lock).
    pub(crate) fn lock_existing(
        &self,
        id: &SandboxId,
        paths: &SandboxPaths,
    ) -> Result<SandboxLock> {
        if !paths.record().exists() {
            return Err(Error::SandboxNotFound { id: id.to_string() });
        }
        let lock = SandboxLock::acquire(&paths.lock())?;
        if !paths.record().exists() {
            return Err(Error::SandboxNotFound { id: id.to_string() });
        }
        Ok(lock)
    }
}

/// The sandbox's status from its records; `runs` says whether a recorded process still runs.
fn sandbox_status(
    record: SandboxRecord,
    shim: Option<ShimRecord>,
    runs: impl Fn(&crate::liveness::ProcessIdentity) -> bool,
) -> SandboxStatus {
    let shim_alive = shim.as_ref().is_some_and(|s| runs(&s.shim));
    let pause_alive = shim
        .as_ref()
        .and_then(|s| s.pause)
        .is_some_and(|p| runs(&p));
    let (state, reason) = match (record.state, shim_alive, pause_alive) {
        (SandboxState::NotReady, _, _) => (SandboxState::NotReady, Some("stopped".to_string())),
        (SandboxState::Ready, true, true) => (SandboxState::Ready, None),
        (SandboxState::Ready, false, _) => {
            (SandboxState::NotReady, Some("its shim is gone".to_string()))
        }
        (SandboxState::Ready, true, false) => (
            SandboxState::NotReady,
            Some("its pause process has exited".to_string()),
        ),
    };
    let mut ips = record.ips.into_iter();
    SandboxStatus {
        id: record.id,
        metadata: record.config.metadata,
        state,
        created_at: record.created_at,
        network_mode: record.network_mode,
        ip: ips.next(),
        additional_ips: ips.collect(),
        hostname: record.config.hostname,
        pause_pid: shim
            .as_ref()
            .and_then(|s| s.pause)
            .filter(|_| pause_alive)
            .map(|p| p.pid),
        shim_pid: shim.as_ref().filter(|_| shim_alive).map(|s| s.shim.pid),
        namespaces: shim.map(|s| s.namespaces).unwrap_or_default(),
        labels: record.config.labels,
        annotations: record.config.annotations,
        log_directory: record.config.log_directory,
        reason,
    }
}

fn pod_network<'a>(
    id: &'a SandboxId,
    config: &'a PodSandboxConfig,
    netns: &'a Path,
) -> PodNetwork<'a> {
    PodNetwork {
        sandbox_id: id,
        metadata: &config.metadata,
        netns,
        netns_now: None,
        labels: &config.labels,
        annotations: &config.annotations,
        port_mappings: &config.port_mappings,
    }
}

/// `hostname`, `hosts` and `resolv.conf` in the sandbox folder, as kubelet and containerd
/// write them. Plain writes: they are rewritten whole before any container can see them.
/// A user namespace of the pod's own is refused where the pod shares one of the node's
/// namespaces (Kubernetes' validation of `hostUsers: false`: the node's network, pids or ipc
/// belong to the node's root, not the pod's), or where its maps are not what containerd takes.
fn check_user_namespace(config: &PodSandboxConfig) -> Result<()> {
    let Some(user) = &config.linux.security.user_namespace else {
        return Ok(());
    };
    let invalid = |message: String| Error::InvalidConfig {
        name: config.metadata.name.clone(),
        message: format!("user namespace: {message}"),
    };
    user.check().map_err(invalid)?;
    for (shared, what) in [
        (config.host_network, "the node's network"),
        (config.host_pid, "the node's pid namespace"),
        (config.host_ipc, "the node's ipc namespace"),
    ] {
        if shared {
            return Err(invalid(format!(
                "a pod with a user namespace of its own cannot share {what}"
            )));
        }
    }
    Ok(())
}

/// The first container of a sandbox made in the same call, and the connection its Start and
/// Wait were sent on while the shim started, if they were.
pub(crate) struct FirstContainer {
    pub(crate) id: crate::id::ContainerId,
    pub(crate) queued_start: Option<ShimClient>,
}

/// `run_pod_sandbox_and_start`'s first container and how its start went.
pub type StartedFirst = (crate::id::ContainerId, Result<crate::container::ExitWaiter>);

/// The first container a sandbox's start was asked to make, which it always made or failed to.
fn made_first(created: Option<Result<FirstContainer>>) -> Result<FirstContainer> {
    created.unwrap_or_else(|| Err(Error::Invalid("no container was made".into())))
}

/// What the sandbox's start made of its first container meanwhile.
enum Made {
    /// Made, to be recorded once the sandbox is Ready.
    New(Box<crate::state::ContainerRecord>),
    /// Recorded, its start sent ahead (or not, when the socket could not be reached).
    Queued(FirstContainer),
}

/// Sends StartContainer and Wait for `container` on the socket of the shim that is starting
/// sandbox `id`: the shim binds its socket before it forks pause and reads its connections
/// once the sandbox is ready. None when the socket cannot be reached yet (the container is
/// then started once the sandbox is Ready, as StartContainer would).
fn queue_start(
    id: &SandboxId,
    paths: &SandboxPaths,
    container: &crate::id::ContainerId,
    template: &[std::os::fd::RawFd],
) -> Option<ShimClient> {
    let client = ShimClient::connect(&paths.socket(), id.as_str()).ok()?;
    crate::container::send_start(&client, container, template, true).ok()?;
    Some(client)
}

fn write_etc_files(paths: &SandboxPaths, config: &PodSandboxConfig, ips: &[String]) -> Result<()> {
    // With a user namespace of the pod's own, its root owns them, as the node's root owns a
    // pod's without one (containerd's chown of them).
    let owner = config.linux.security.user_namespace.as_ref().map(|user| {
        let (uid, gid) = user.host_root();
        (
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )
    });
    let write = |path: std::path::PathBuf, text: String| {
        std::fs::write(&path, text).map_err(|e| Error::io("writing", &path, e))?;
        match owner {
            Some((uid, gid)) => nix::unistd::chown(&path, uid, gid).map_err(|errno| Error::Sys {
                call: "chown",
                target: path.display().to_string(),
                errno,
            }),
            None => Ok(()),
        }
    };
    let hostname = if config.host_network {
        podlab_ns::uts::hostname()?
    } else {
        config.hostname.clone()
    };
    write(paths.hostname(), etc_files::render_hostname(&hostname))?;
    let hosts = if config.host_network {
        let node = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        etc_files::render_host_network_hosts(&node, &config.hosts)
    } else {
        etc_files::render_hosts(&config.hostname, ips, &config.hosts)
    };
    write(paths.hosts(), hosts)?;
    let resolv = match &config.dns {
        Some(dns) => etc_files::render_resolv_conf(dns),
        None => std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
    };
    write(paths.resolv_conf(), resolv)
}

/// Takes the shim once spawned (or the one started ahead), gives it its arguments, makes the
/// sandbox's cgroups (`make_cgroups`) while it starts the pod, and reads its one line: the
/// sandbox is up, or why not. With a placement, the pause process waits for one byte on the
/// shim's stdin once it has made the pod's namespaces, and then enters those cgroups; when they
/// could not be made it reads the end of the pipe instead and the start fails, with their error
/// as the one returned. The cgroups' folders and values (about half a millisecond) are so made
/// during the shim's start and the pause's namespaces, on the other core, instead of before
/// them.
///
/// With `args.await_network`, `attach` (the network's ADD) runs next, while the shim goes on
/// starting, and one more byte tells the shim it may pin and answer; `attach` returning false
/// closes the pipe without it, and the shim kills pause and fails.
fn start_shim(
    id: &SandboxId,
    paths: &SandboxPaths,
    waiting: Spawning,
    make_cgroups: impl FnOnce() -> Result<()>,
    attach: impl FnOnce() -> bool,
    meanwhile: impl FnOnce() -> Result<()>,
    args: &ShimArgs,
) -> Result<ShimRecord> {
    let failed = |message: String| Error::SandboxStart {
        id: id.to_string(),
        message,
    };
    let shim_log = || std::fs::read_to_string(paths.shim_log()).unwrap_or_default();
    let mut waiting = waiting.wait()?;
    let (Some(mut child), Some(pipe)) = (waiting.child.take(), waiting.pipe.take()) else {
        return Err(failed("the shim started for it is gone".into()));
    };
    // The arguments go down the pipe that then carries the gate's bytes, if it has a gate.
    if let Err(e) = crate::starting_shim::send_args(&pipe, &args.to_args()) {
        drop(pipe);
        let _ = child.wait();
        return Err(failed(format!(
            "sending the shim its arguments: {e}; its log says: {}",
            shim_log().trim()
        )));
    }
    let gate_write = (args.placement.is_some() || args.await_network).then_some(pipe);
    let made = make_cgroups();
    podlab_fault::point_reached("sandbox.after-cgroups");
    if let (Ok(()), Some(gate), Some(_)) = (&made, &gate_write, &args.placement) {
        // A shim that died already is seen in its answer below.
        let _ = nix::unistd::write(gate, b"+");
    }
    // Before the network's wait: an ADD's plugins take longer than anything done meanwhile.
    let prepared = match &made {
        Ok(()) => meanwhile(),
        Err(_) => Ok(()),
    };
    if made.is_ok() && prepared.is_ok() && args.await_network {
        if let (true, Some(gate)) = (attach(), &gate_write) {
            let _ = nix::unistd::write(gate, b"+");
        }
    }
    drop(gate_write);
    let mut answer = Vec::new();
    let read = child
        .stdout
        .take()
        .map(|mut out| out.read_to_end(&mut answer));
    // The first process only forks the daemon and exits.
    let _ = child.wait();
    made?;
    prepared?;
    if let Some(Err(e)) = read {
        return Err(failed(format!("reading the shim's answer: {e}")));
    }
    match serde_json::from_slice::<ShimReady>(answer.trim_ascii()) {
        Ok(ShimReady::Ready(record)) => Ok(record),
        Ok(ShimReady::Failed { message }) => Err(failed(message)),
        Err(_) => Err(failed(format!(
            "the shim exited without answering; its log says: {}",
            shim_log().trim()
        ))),
    }
}

pub(crate) fn expect_ok(id: &SandboxId, response: Response) -> Result<()> {
    match response {
        Response::Ok => Ok(()),
        other => Err(unexpected(id, None, "the request", other)),
    }
}

/// The error a response stands for when it is not the answer asked for: a start failure of
/// `container`, the shim's own error, or an answer that does not fit `request`.
pub(crate) fn unexpected(
    sandbox: &SandboxId,
    container: Option<&crate::id::ContainerId>,
    request: &str,
    response: Response,
) -> Error {
    match (response, container) {
        (Response::StartFailed(failure), Some(id)) => Error::StartFailed {
            id: id.to_string(),
            failure,
        },
        (Response::Error { message }, _) => Error::Shim {
            id: sandbox.to_string(),
            message,
        },
        (other, _) => Error::Shim {
            id: sandbox.to_string(),
            message: format!("unexpected answer to {request}: {other:?}"),
        },
    }
}

/// Used by gc: a pidfd for each still-running process of a record.
pub(crate) fn open_alive(
    identities: impl IntoIterator<Item = crate::liveness::ProcessIdentity>,
) -> Vec<Pidfd> {
    identities.into_iter().filter_map(|p| p.open()).collect()
}
