//! The plugin chain runner, libcni's `AddNetworkList` / `DelNetworkList` / `CheckNetworkList`.
//!
//! ADD runs the conflist's plugins in order, each given the previous one's result as
//! `prevResult`; the last result is the attachment's, and is cached with the configuration.
//! A failed ADD is followed by a DEL of the plugins that ran (the spec: every ADD is eventually
//! DELeted, also failed ones), so that a half-made veth or a lease does not stay behind.
//! DEL runs the plugins in reverse order with the cached result; it passes an empty CNI_NETNS
//! when the namespace is gone (allowed for DEL), and removes the cache once every plugin
//! agreed. CHECK runs them in order with the cached result.
//!
//! As containerd does, `lo` is brought up by running the `loopback` plugin as a network of its
//! own (`cni-loopback`) before the pod's network, unless that is switched off.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::cache::{self, CachedAttachment};
use crate::conf::{ConfList, PORT_MAPPINGS};
use crate::exec::{is_netns, Command, Invocation, PluginRunner};
use crate::result::CniResult;
use crate::{Attachment, Error, NetworkStatus, PodNetwork, PodlabNet, Result};

/// Environment variable naming the folder of the user's own conflists.
pub const CONF_DIR_ENV: &str = "PODLAB_CNI_CONF_DIR";
/// Environment variable with the plugin folders (`:`-separated), like CNI_PATH.
pub const BIN_DIRS_ENV: &str = "PODLAB_CNI_PATH";
/// Where Debian (and then the usual upstream place) installs the plugins.
pub const DEFAULT_BIN_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];
/// How long one plugin run may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

const LOOPBACK_CONFLIST: &str =
    r#"{"cniVersion": "1.0.0", "name": "cni-loopback", "plugins": [{"type": "loopback"}]}"#;

/// Where the network comes from and how plugins are run.
#[derive(Debug, Clone)]
pub struct CniConfig {
    /// The folder whose first configuration file (in name order) is the network.
    pub conf_dir: PathBuf,
    /// A file to use instead of the folder's first.
    pub conf_file: Option<PathBuf>,
    /// CNI_PATH.
    pub bin_dirs: Vec<PathBuf>,
    /// The deadline of each plugin run.
    pub timeout: Duration,
    /// Run the `loopback` plugin for `lo` first, as containerd does.
    pub loopback: bool,
    /// Written to `conf_dir` as the default conflist when that folder has none.
    pub default_net: Option<PodlabNet>,
}

impl CniConfig {
    /// Plugins from `bin_dirs`, the network from `conf_dir`, loopback on, default timeout.
    pub fn new(conf_dir: &Path, bin_dirs: &[PathBuf]) -> CniConfig {
        CniConfig {
            conf_dir: conf_dir.to_owned(),
            conf_file: None,
            bin_dirs: bin_dirs.to_vec(),
            timeout: DEFAULT_TIMEOUT,
            loopback: true,
            default_net: None,
        }
    }

    /// podlab's defaults under its root: the conflists in `$PODLAB_CNI_CONF_DIR`, or else in
    /// `<root>/cni/net.d` where the default conflist is written on first use; the plugins in
    /// `$PODLAB_CNI_PATH`, or else `/usr/lib/cni:/opt/cni/bin`.
    pub fn podlab(root: &Path) -> CniConfig {
        let bin_dirs: Vec<PathBuf> = match std::env::var(BIN_DIRS_ENV) {
            Ok(path) if !path.is_empty() => std::env::split_paths(&path).collect(),
            _ => DEFAULT_BIN_DIRS.iter().map(PathBuf::from).collect(),
        };
        match std::env::var_os(CONF_DIR_ENV) {
            Some(dir) if !dir.is_empty() => CniConfig::new(Path::new(&dir), &bin_dirs),
            _ => {
                let mut config = CniConfig::new(&root.join("cni").join("net.d"), &bin_dirs);
                config.default_net = Some(PodlabNet::podlab(root));
                config
            }
        }
    }
}

/// A network made by real CNI plugins.
#[derive(Debug, Clone)]
pub struct CniNetwork {
    config: CniConfig,
    runner: PluginRunner,
}

impl CniNetwork {
    /// Writes the default conflist if the configuration asks for it and the folder has none.
    /// The conflist itself is read at every operation, so that a fixed file is picked up.
    pub fn new(config: CniConfig) -> Result<CniNetwork> {
        if let (Some(net), None) = (&config.default_net, &config.conf_file) {
            net.write_if_missing(&config.conf_dir)?;
        }
        let runner = PluginRunner {
            bin_dirs: config.bin_dirs.clone(),
            timeout: config.timeout,
        };
        Ok(CniNetwork { config, runner })
    }

    /// The network configuration, read and checked now.
    pub fn conflist(&self) -> Result<ConfList> {
        match &self.config.conf_file {
            Some(file) => ConfList::load_file(file),
            None => ConfList::load_dir(&self.config.conf_dir),
        }
    }

    /// libcni's `ValidateNetworkList`: the conflist reads, every plugin is installed, and each
    /// says (VERSION) that it speaks the list's version.
    pub fn validate(&self) -> Result<ConfList> {
        let list = self.conflist()?;
        for plugin in &list.plugins {
            let stdin = format!(r#"{{"cniVersion": "{}"}}"#, list.cni_version);
            let out = self.runner.run(
                &plugin.plugin_type,
                Command::Version,
                &Invocation::default(),
                stdin.as_bytes(),
            )?;
            let versions: Vec<String> = serde_json::from_slice::<Value>(&out)
                .ok()
                .and_then(|v| serde_json::from_value(v["supportedVersions"].clone()).ok())
                .unwrap_or_default();
            if !versions.contains(&list.cni_version) {
                return Err(Error::conf(
                    &list.path,
                    format!(
                        "plugin {:?} does not speak cniVersion {} (it speaks {})",
                        plugin.plugin_type,
                        list.cni_version,
                        versions.join(", ")
                    ),
                ));
            }
        }
        Ok(list)
    }

    fn loopback_list() -> ConfList {
        ConfList::from_bytes(
            Path::new("<built-in loopback>"),
            LOOPBACK_CONFLIST.as_bytes(),
            true,
        )
        .expect("the loopback conflist is valid")
    }

    /// Runs ADD for `plugins` of `list` in order; on failure, DELs the ones that ran.
    fn add_list(&self, list: &ConfList, inv: &Invocation<'_>, a: &Attachment) -> Result<Value> {
        let mut prev: Option<Value> = None;
        for (index, plugin) in list.plugins.iter().enumerate() {
            if list.idle(index, &a.capability_args) {
                continue;
            }
            let stdin = list.plugin_stdin(index, prev.as_ref(), &a.capability_args);
            let ran = self
                .runner
                .run(&plugin.plugin_type, Command::Add, inv, &stdin)
                .and_then(|out| parse_result(&plugin.plugin_type, &out));
            match ran {
                Ok(result) => prev = Some(result),
                Err(error) => {
                    let ran_so_far = if matches!(error, Error::PluginNotFound { .. }) {
                        index
                    } else {
                        index + 1
                    };
                    let cleanup = self.del_list(list, ran_so_far, inv, None, a);
                    let error = if plugin.plugin_type == "portmap" {
                        Error::HostPorts {
                            network: list.name.clone(),
                            cause: Box::new(error),
                        }
                    } else {
                        error
                    };
                    return Err(with_cleanup(error, cleanup));
                }
            }
        }
        prev.ok_or_else(|| Error::conf(&list.path, "no plugin gave a result"))
    }

    /// Runs DEL for the first `count` plugins of `list`, in reverse; goes on past failures
    /// (best effort) and returns the first.
    fn del_list(
        &self,
        list: &ConfList,
        count: usize,
        inv: &Invocation<'_>,
        prev: Option<&Value>,
        a: &Attachment,
    ) -> Result<()> {
        let prev = prev.filter(|_| list.has_check());
        let mut first_error = None;
        for index in (0..count).rev() {
            if list.idle(index, &a.capability_args) {
                continue;
            }
            let stdin = list.plugin_stdin(index, prev, &a.capability_args);
            let plugin = &list.plugins[index].plugin_type;
            if let Err(error) = self.runner.run(plugin, Command::Del, inv, &stdin) {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn cache_path(&self, network: &str, a: &Attachment) -> PathBuf {
        cache::cache_path(&a.cache_dir, network, &a.container_id, &a.ifname)
    }
}

impl PodNetwork for CniNetwork {
    fn setup(&self, a: &Attachment) -> Result<NetworkStatus> {
        a.check()?;
        if !is_netns(&a.netns_path) {
            return Err(Error::Invalid(format!(
                "{} is not a network namespace",
                a.netns_path.display()
            )));
        }
        let list = self.conflist()?;
        let offered = |capability: &str| {
            a.capability_args
                .get(capability)
                .is_some_and(|v| v.as_array().is_none_or(|items| !items.is_empty()))
        };
        if offered(PORT_MAPPINGS) && !list.declares(PORT_MAPPINGS) {
            // containerd would drop them silently; a pod's host port must not vanish.
            return Err(Error::NoCapability {
                network: list.name.clone(),
                path: list.path.clone(),
                capability: PORT_MAPPINGS,
            });
        }
        let cache_file = self.cache_path(&list.name, a);
        if cache_file.exists() {
            // A second ADD would fail in the plugin, and the DEL after that failure would tear
            // down the first attachment.
            return Err(Error::Invalid(format!(
                "{} ({}) is already attached to network {:?} (result cached at {}): DEL it first",
                a.container_id,
                a.ifname,
                list.name,
                cache_file.display()
            )));
        }
        let args = a.cni_args()?;
        let netns = a.netns_path.display().to_string();
        let inv = invocation(a, &netns, &args);
        let loopback = self.config.loopback.then(CniNetwork::loopback_list);
        let lo_inv = Invocation {
            ifname: "lo",
            ..inv.clone()
        };
        if let Some(lo) = &loopback {
            self.add_list(lo, &lo_inv, a)?;
        }
        let undo_loopback = |error: Error| match &loopback {
            Some(lo) => with_cleanup(error, self.del_list(lo, lo.plugins.len(), &lo_inv, None, a)),
            None => error,
        };
        let raw = self.add_list(&list, &inv, a).map_err(undo_loopback)?;
        let finish = || -> Result<NetworkStatus> {
            let result: CniResult =
                serde_json::from_value(raw.clone()).map_err(|e| Error::BadResult {
                    plugin: (0..list.plugins.len())
                        .rev()
                        .find(|&i| !list.idle(i, &a.capability_args))
                        .map(|i| list.plugins[i].plugin_type.clone())
                        .unwrap_or_default(),
                    command: Command::Add,
                    problem: e.to_string(),
                })?;
            cache::store(
                &cache_file,
                &CachedAttachment {
                    kind: CachedAttachment::KIND.to_owned(),
                    container_id: a.container_id.clone(),
                    ifname: a.ifname.clone(),
                    network_name: list.name.clone(),
                    netns: netns.clone(),
                    cni_args: args.clone(),
                    capability_args: a.capability_args.clone(),
                    config: list.raw.clone(),
                    result: raw.clone(),
                },
            )?;
            Ok(NetworkStatus::of(
                &list.name,
                &a.ifname,
                result,
                raw.to_string(),
            ))
        };
        finish().map_err(|error| {
            let cleanup = self.del_list(&list, list.plugins.len(), &inv, Some(&raw), a);
            undo_loopback(with_cleanup(error, cleanup))
        })
    }

    fn teardown(&self, a: &Attachment) -> Result<()> {
        a.check()?;
        let (list, prev, cache_file, cached_capabilities) = self.conflist_for_cache(a)?;
        // The ADD's capability arguments (its port mappings) when the caller has none to give
        // (`podlab gc` after the record was lost): portmap's DEL removes only the mappings it
        // is told of, as libcni's cached `capabilityArgs` serve it.
        let with_cached;
        let a = if a.capability_args.is_empty() && !cached_capabilities.is_empty() {
            with_cached = Attachment {
                capability_args: cached_capabilities,
                ..a.clone()
            };
            &with_cached
        } else {
            a
        };
        let args = a.cni_args()?;
        // The spec lets DEL go without a namespace; plugins then release what is not in it
        // (the lease) and skip the rest. A stale path that is no namespace any more would be
        // refused by some (bridge: "unknown FS magic"), so it is not passed on.
        let netns = if is_netns(&a.netns_path) {
            a.netns_path.display().to_string()
        } else {
            String::new()
        };
        let inv = invocation(a, &netns, &args);
        let deleted = self.del_list(&list, list.plugins.len(), &inv, prev.as_ref(), a);
        let lo_deleted = if self.config.loopback && !netns.is_empty() {
            let lo = CniNetwork::loopback_list();
            let lo_inv = Invocation {
                ifname: "lo",
                ..inv.clone()
            };
            self.del_list(&lo, lo.plugins.len(), &lo_inv, None, a)
        } else {
            Ok(())
        };
        deleted.and(lo_deleted)?;
        cache::remove(&cache_file)
    }

    fn check(&self, a: &Attachment) -> Result<()> {
        a.check()?;
        let (list, prev, cache_file, _) = self.conflist_for_cache(a)?;
        let problem = |problem: String| Error::Check {
            network: list.name.clone(),
            problem,
        };
        let Some(prev) = prev else {
            return Err(problem(format!(
                "no cached ADD result for {} ({}) at {}",
                a.container_id,
                a.ifname,
                cache_file.display()
            )));
        };
        if !list.has_check() {
            return Err(problem(format!(
                "cniVersion {} has no CHECK (0.4.0 and later have)",
                list.cni_version
            )));
        }
        if list.disable_check {
            return Ok(());
        }
        if !is_netns(&a.netns_path) {
            return Err(problem(format!(
                "{} is not a network namespace (any more)",
                a.netns_path.display()
            )));
        }
        let args = a.cni_args()?;
        let netns = a.netns_path.display().to_string();
        let inv = invocation(a, &netns, &args);
        for (index, plugin) in list.plugins.iter().enumerate() {
            if list.idle(index, &a.capability_args) {
                continue;
            }
            let stdin = list.plugin_stdin(index, Some(&prev), &a.capability_args);
            self.runner
                .run(&plugin.plugin_type, Command::Check, &inv, &stdin)?;
        }
        Ok(())
    }

    fn name(&self) -> String {
        self.conflist().map(|list| list.name).unwrap_or_default()
    }
}

/// An ADD's configuration, its cached result (if any), the cache file's path and the ADD's
/// capability arguments.
type CachedAdd = (ConfList, Option<Value>, PathBuf, Map<String, Value>);

impl CniNetwork {
    /// The configuration and result of the ADD of `a` when it is cached, else the current
    /// conflist and no result; with the cache file's path and the ADD's capability arguments.
    fn conflist_for_cache(&self, a: &Attachment) -> Result<CachedAdd> {
        let current = self.conflist();
        // The network's name is needed to find the cache; with a broken conflist, the folder
        // is searched for a record of this container instead.
        let cache_file = match &current {
            Ok(list) => Some(self.cache_path(&list.name, a)),
            Err(_) => find_cached(&a.cache_dir, &a.container_id, &a.ifname),
        };
        let record = match &cache_file {
            Some(path) => cache::load(path)?,
            None => None,
        };
        match (record, cache_file) {
            (Some(record), Some(path)) => {
                let bytes = serde_json::to_vec(&record.config).expect("JSON serializes");
                let list = ConfList::from_bytes(&path, &bytes, true)?;
                Ok((list, Some(record.result), path, record.capability_args))
            }
            (_, path) => {
                let list = current?;
                let path = path.unwrap_or_else(|| self.cache_path(&list.name, a));
                Ok((list, None, path, Map::new()))
            }
        }
    }
}

/// The CNI_* values of attachment `a`.
fn invocation<'a>(a: &'a Attachment, netns: &'a str, args: &'a str) -> Invocation<'a> {
    Invocation {
        container_id: &a.container_id,
        netns,
        ifname: &a.ifname,
        args,
    }
}

/// A cache record of (`container_id`, `ifname`) in `dir`, whatever its network.
fn find_cached(dir: &Path, container_id: &str, ifname: &str) -> Option<PathBuf> {
    let suffix = format!("-{container_id}-{ifname}");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(&suffix) && !n.starts_with("cni-loopback-"))
        })
}

/// A plugin's stdout as a checked result (kept as the raw JSON, which goes on as prevResult).
fn parse_result(plugin: &str, stdout: &[u8]) -> Result<Value> {
    let bad = |problem: String| Error::BadResult {
        plugin: plugin.to_owned(),
        command: Command::Add,
        problem,
    };
    CniResult::parse(stdout).map_err(bad)?;
    serde_json::from_slice(stdout).map_err(|e| bad(e.to_string()))
}

fn with_cleanup(error: Error, cleanup: Result<()>) -> Error {
    match cleanup {
        Ok(()) => error,
        Err(cleanup) => Error::CleanupFailed {
            error: Box::new(error),
            cleanup: Box::new(cleanup),
        },
    }
}
