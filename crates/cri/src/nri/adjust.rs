//! NRI plugins' adjustments to a container being created, merged as containerd/nri's
//! adaptation merges them, and the container's record changed to match before its start.
//!
//! Plugins are asked one after the other; each is shown the container with the adjustments
//! of those before it. A field (an environment variable, an annotation, a mount's
//! destination, the args, a resource) belongs to the first plugin that sets it, and another
//! plugin that sets it too fails the creation. A key prefixed with `-` removes the field
//! (`-NAME` for a variable, `-/path` for a mount), whoever set it; it then belongs to the
//! plugin that removed it. These are containerd/nri's owners rules.
//!
//! podlab applies what its containers have: environment, args, annotations, bind mounts,
//! `oom_score_adj`, and the memory limit, CPU shares, quota and period, pids limit and huge
//! page limits of the container's cgroup. Anything else a plugin asks for (OCI hooks, devices,
//! rlimits, sysctls, namespaces, seccomp, scheduling, RDT, ...) fails the creation, naming
//! the field: nothing is dropped silently.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use podlab_runtime::config::{Mount, Propagation};
use podlab_runtime::state::ContainerRecord;

use super::api;

/// Why a plugin's adjustment cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A field podlab does not apply, as NRI names it (`linux.sysctl`).
    Unsupported(String),
    /// Another plugin set `what` first.
    Conflict { other: String, what: String },
    /// A value podlab cannot take (a mount it cannot make, empty args).
    Invalid(String),
}

/// The adjustments merged so far, and the container as the next plugin sees it.
pub struct Merge {
    pub container: api::Container,
    /// What the plugins asked for, merged: containerd's pending adjustment, which validators
    /// are shown.
    pub pending: api::ContainerAdjustment,
    /// (field, key) → the plugin that set it, or `-plugin` where that plugin removed it; the
    /// key is empty for a field without keys.
    owners: BTreeMap<(api::Field, String), String>,
}

const REMOVE: char = '-';

/// A field's name in refusals.
fn field_name(field: api::Field) -> &'static str {
    use api::Field;
    match field {
        Field::Annotations => "annotation",
        Field::Mounts => "mount",
        Field::Env => "env",
        Field::Args => "args",
        Field::MemLimit => "memory limit",
        Field::CpuShares => "CPU shares",
        Field::CpuQuota => "CPU quota",
        Field::CpuPeriod => "CPU period",
        Field::PidsLimit => "pids limit",
        Field::HugepageLimits => "hugepage limit",
        Field::OomScoreAdj => "oom_score_adj",
        other => other.as_str_name(),
    }
}

impl Merge {
    pub fn new(container: api::Container) -> Merge {
        Merge {
            container,
            pending: api::ContainerAdjustment::default(),
            owners: BTreeMap::new(),
        }
    }

    /// Whether any plugin asked for a change.
    pub fn changed(&self) -> bool {
        self.pending != api::ContainerAdjustment::default()
    }

    fn claim(&mut self, field: api::Field, key: &str, plugin: &str) -> Result<(), Refusal> {
        let slot = (field, key.to_string());
        if let Some(owner) = self.owners.get(&slot) {
            let other = owner.strip_prefix(REMOVE).unwrap_or(owner);
            if other != plugin {
                return Err(Refusal::Conflict {
                    other: other.to_string(),
                    what: format!("{} {key}", field_name(field)).trim().to_string(),
                });
            }
        }
        self.owners.insert(slot, plugin.to_string());
        Ok(())
    }

    fn clear(&mut self, field: api::Field, key: &str, plugin: &str) {
        self.owners
            .insert((field, key.to_string()), format!("{REMOVE}{plugin}"));
    }

    /// Who set what, as containerd/nri's `OwningPlugins` tells validators: fields with keys
    /// are compound, the others simple.
    pub fn owners(&self) -> api::OwningPlugins {
        let mut fields = api::FieldOwners::default();
        for ((field, key), owner) in &self.owners {
            if key.is_empty() {
                fields.simple.insert(*field as i32, owner.clone());
            } else {
                fields
                    .compound
                    .entry(*field as i32)
                    .or_default()
                    .owners
                    .insert(key.clone(), owner.clone());
            }
        }
        api::OwningPlugins {
            owners: [(self.container.id.clone(), fields)].into(),
        }
    }

    /// `plugin`'s adjustment, on top of those before it; all of it or, refused, none.
    pub fn apply(
        &mut self,
        plugin: &str,
        adjust: &api::ContainerAdjustment,
    ) -> Result<(), Refusal> {
        if *adjust == api::ContainerAdjustment::default() {
            return Ok(());
        }
        refuse_unsupported(adjust)?;
        self.all_or_nothing(|next| next.apply_all(plugin, adjust))
    }

    /// `change` made to a copy, kept only if it succeeds.
    fn all_or_nothing(
        &mut self,
        change: impl FnOnce(&mut Merge) -> Result<(), Refusal>,
    ) -> Result<(), Refusal> {
        let mut next = Merge {
            container: self.container.clone(),
            pending: self.pending.clone(),
            owners: self.owners.clone(),
        };
        change(&mut next)?;
        *self = next;
        Ok(())
    }

    fn apply_all(
        &mut self,
        plugin: &str,
        adjust: &api::ContainerAdjustment,
    ) -> Result<(), Refusal> {
        use api::Field;
        let mut annotations: Vec<_> = adjust.annotations.iter().collect();
        annotations.sort(); // removals ("-key") first, as a map gives them in no order
        for (key, value) in annotations {
            match key.strip_prefix(REMOVE) {
                Some(name) => {
                    self.clear(Field::Annotations, name, plugin);
                    self.container.annotations.remove(name);
                    let pending = &mut self.pending.annotations;
                    pending.remove(name);
                    pending.insert(key.clone(), String::new());
                }
                None => {
                    self.claim(Field::Annotations, key, plugin)?;
                    self.container
                        .annotations
                        .insert(key.clone(), value.clone());
                    let pending = &mut self.pending.annotations;
                    pending.remove(&format!("{REMOVE}{key}"));
                    pending.insert(key.clone(), value.clone());
                }
            }
        }
        for mount in &adjust.mounts {
            let (destination, removed) = match mount.destination.strip_prefix(REMOVE) {
                Some(destination) => (destination, true),
                None => (mount.destination.as_str(), false),
            };
            if removed {
                self.clear(Field::Mounts, destination, plugin);
            } else {
                self.claim(Field::Mounts, destination, plugin)?;
                bind_mount(mount)?;
            }
            self.container
                .mounts
                .retain(|m| m.destination != destination);
            self.pending
                .mounts
                .retain(|m| m.destination.trim_start_matches(REMOVE) != destination);
            if !removed {
                self.container.mounts.push(mount.clone());
            }
            self.pending.mounts.push(mount.clone());
        }
        for variable in &adjust.env {
            let (name, removed) = match variable.key.strip_prefix(REMOVE) {
                Some(name) => (name, true),
                None => (variable.key.as_str(), false),
            };
            if removed {
                self.clear(Field::Env, name, plugin);
            } else {
                self.claim(Field::Env, name, plugin)?;
            }
            let prefix = format!("{name}=");
            self.container
                .env
                .retain(|e| !e.starts_with(&prefix) && e != name);
            self.pending
                .env
                .retain(|e| e.key.trim_start_matches(REMOVE) != name);
            if !removed {
                self.container
                    .env
                    .push(format!("{name}={}", variable.value));
            }
            self.pending.env.push(variable.clone());
        }
        if !adjust.args.is_empty() {
            let args = match adjust.args.split_first() {
                Some((first, rest)) if first.is_empty() => {
                    self.clear(Field::Args, "", plugin);
                    rest
                }
                _ => &adjust.args[..],
            };
            if args.is_empty() {
                return Err(Refusal::Invalid(
                    "args: a process needs at least one".into(),
                ));
            }
            self.claim(Field::Args, "", plugin)?;
            self.container.args = args.to_vec();
            self.pending.args = args.to_vec();
        }
        let Some(linux) = &adjust.linux else {
            return Ok(());
        };
        if let Some(oom) = linux.oom_score_adj {
            self.claim(Field::OomScoreAdj, "", plugin)?;
            let adjusted = self.container.linux.get_or_insert_with(Default::default);
            adjusted.oom_score_adj = Some(oom);
            let pending = self.pending.linux.get_or_insert_with(Default::default);
            pending.oom_score_adj = Some(oom);
        }
        if let Some(wanted) = &linux.resources {
            self.adjust_resources(wanted, plugin)?;
            let pending = self.pending.linux.get_or_insert_with(Default::default);
            overlay(
                pending.resources.get_or_insert_with(Default::default),
                wanted,
            );
        }
        Ok(())
    }

    /// `plugin`'s update of the container's resources (an UpdateContainer answer for the
    /// container being updated), on top of those before it; all of it or, refused, none.
    pub fn update_resources(
        &mut self,
        plugin: &str,
        wanted: &api::LinuxResources,
    ) -> Result<(), Refusal> {
        cgroup_resources(wanted)?;
        self.all_or_nothing(|next| next.adjust_resources(wanted, plugin))
    }

    /// The container's resources as merged so far.
    pub fn resources(&self) -> api::LinuxResources {
        self.container
            .linux
            .as_ref()
            .and_then(|linux| linux.resources.clone())
            .unwrap_or_default()
    }

    fn adjust_resources(
        &mut self,
        wanted: &api::LinuxResources,
        plugin: &str,
    ) -> Result<(), Refusal> {
        use api::Field;
        let memory = wanted.memory.unwrap_or_default();
        let cpu = wanted.cpu.clone().unwrap_or_default();
        let simple = [
            (Field::MemLimit, memory.limit.is_some()),
            (Field::CpuShares, cpu.shares.is_some()),
            (Field::CpuQuota, cpu.quota.is_some()),
            (Field::CpuPeriod, cpu.period.is_some()),
            (Field::PidsLimit, wanted.pids.is_some()),
        ];
        for (field, _) in simple.iter().filter(|(_, set)| *set) {
            self.claim(*field, "", plugin)?;
        }
        for limit in &wanted.hugepage_limits {
            self.claim(Field::HugepageLimits, &limit.page_size, plugin)?;
        }
        let linux = self.container.linux.get_or_insert_with(Default::default);
        overlay(linux.resources.get_or_insert_with(Default::default), wanted);
        Ok(())
    }

    /// The record changed as the merged adjustments say, for
    /// [`podlab_runtime::Runtime::adjust_created_container`]. A mount described from the record
    /// and left as it was stays the record's own (an image volume keeps its image).
    pub fn apply_to(&self, record: &mut ContainerRecord) -> Result<(), String> {
        let container = &self.container;
        record.process.env = container.env.clone();
        record.process.argv = container.args.clone();
        let annotations: BTreeMap<String, String> = container
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if annotations != record.config.annotations {
            record.spec_annotations = Some(annotations);
        }
        let mut mounts = Vec::new();
        for mount in &container.mounts {
            let same = record
                .config
                .mounts
                .iter()
                .find(|original| describe_mount(original) == *mount);
            match same {
                Some(original) => mounts.push(original.clone()),
                None => mounts.push(bind_mount(mount).map_err(|r| refusal_text(&r))?),
            }
        }
        record.config.mounts = mounts;
        let linux = container.linux.clone().unwrap_or_default();
        record.config.resources.oom_score_adj = linux
            .oom_score_adj
            .map(|o| i32::try_from(o.value))
            .transpose()
            .map_err(|_| "oom_score_adj out of range".to_string())?;
        record.config.resources.cgroup =
            cgroup_resources(&linux.resources.unwrap_or_default()).map_err(|r| refusal_text(&r))?;
        Ok(())
    }
}

/// The fields set in `wanted` (those podlab applies) written over `resources`.
fn overlay(resources: &mut api::LinuxResources, wanted: &api::LinuxResources) {
    if let Some(limit) = wanted.memory.and_then(|m| m.limit) {
        resources.memory.get_or_insert_with(Default::default).limit = Some(limit);
    }
    if let Some(cpu) = &wanted.cpu {
        let target = resources.cpu.get_or_insert_with(Default::default);
        target.shares = cpu.shares.or(target.shares);
        target.quota = cpu.quota.or(target.quota);
        target.period = cpu.period.or(target.period);
    }
    if wanted.pids.is_some() {
        resources.pids = wanted.pids;
    }
    for limit in &wanted.hugepage_limits {
        resources
            .hugepage_limits
            .retain(|l| l.page_size != limit.page_size);
        resources.hugepage_limits.push(limit.clone());
    }
}

pub fn refusal_text(refusal: &Refusal) -> String {
    match refusal {
        Refusal::Unsupported(field) => format!("asks for {field}, which podlab does not apply"),
        Refusal::Conflict { other, what } => {
            format!("sets {what}, which plugin {other:?} set first")
        }
        Refusal::Invalid(message) => message.clone(),
    }
}

/// The fields of an adjustment that podlab does not apply, the first one named.
fn refuse_unsupported(adjust: &api::ContainerAdjustment) -> Result<(), Refusal> {
    let hooks = adjust
        .hooks
        .as_ref()
        .is_some_and(|h| *h != api::Hooks::default());
    let mut asked = vec![
        ("hooks", hooks),
        ("rlimits", !adjust.rlimits.is_empty()),
        ("CDI_devices", !adjust.cdi_devices.is_empty()),
    ];
    if let Some(linux) = &adjust.linux {
        asked.extend([
            ("linux.devices", !linux.devices.is_empty()),
            ("linux.cgroups_path", !linux.cgroups_path.is_empty()),
            ("linux.io_priority", linux.io_priority.is_some()),
            ("linux.seccomp_policy", linux.seccomp_policy.is_some()),
            ("linux.namespaces", !linux.namespaces.is_empty()),
            ("linux.sysctl", !linux.sysctl.is_empty()),
            ("linux.net_devices", !linux.net_devices.is_empty()),
            ("linux.scheduler", linux.scheduler.is_some()),
            ("linux.rdt", linux.rdt.is_some()),
            ("linux.memory_policy", linux.memory_policy.is_some()),
        ]);
        if let Some(resources) = &linux.resources {
            cgroup_resources(resources)?;
        }
    }
    match asked.into_iter().find(|(_, set)| *set) {
        Some((field, _)) => Err(Refusal::Unsupported(field.to_string())),
        None => Ok(()),
    }
}

/// NRI's resources as a cgroup's, or the first field podlab's cgroups do not set.
pub fn cgroup_resources(
    resources: &api::LinuxResources,
) -> Result<podlab_cgroups::Resources, Refusal> {
    let unsupported = |field: &str| Err(Refusal::Unsupported(format!("linux.resources.{field}")));
    let memory = resources.memory.unwrap_or_default();
    let cpu = resources.cpu.clone().unwrap_or_default();
    let others = [
        ("memory.reservation", memory.reservation.is_some()),
        ("memory.swap", memory.swap.is_some()),
        ("memory.kernel", memory.kernel.is_some()),
        ("memory.kernel_tcp", memory.kernel_tcp.is_some()),
        ("memory.swappiness", memory.swappiness.is_some()),
        (
            "memory.disable_oom_killer",
            memory.disable_oom_killer.is_some(),
        ),
        ("memory.use_hierarchy", memory.use_hierarchy.is_some()),
        ("cpu.realtime_runtime", cpu.realtime_runtime.is_some()),
        ("cpu.realtime_period", cpu.realtime_period.is_some()),
        ("cpu.cpus", !cpu.cpus.is_empty()),
        ("cpu.mems", !cpu.mems.is_empty()),
        ("blockio_class", resources.blockio_class.is_some()),
        ("rdt_class", resources.rdt_class.is_some()),
        ("unified", !resources.unified.is_empty()),
        ("devices", !resources.devices.is_empty()),
    ];
    if let Some((field, _)) = others.iter().find(|(_, set)| *set) {
        return unsupported(field);
    }
    let hugepage_limits = resources
        .hugepage_limits
        .iter()
        .map(|l| podlab_cgroups::hugetlb::HugepageLimit {
            page_size: l.page_size.clone(),
            limit: l.limit,
        })
        .collect();
    Ok(podlab_cgroups::Resources {
        cpu_shares: cpu.shares.map_or(0, |v| v.value),
        cpu_quota: cpu.quota.map_or(0, |v| v.value),
        cpu_period: cpu.period.map_or(0, |v| v.value),
        memory_limit_in_bytes: memory.limit.map_or(0, |v| v.value),
        pids_limit: resources.pids.map_or(0, |p| p.limit),
        hugepage_limits,
    })
}

/// A cgroup's resources as NRI describes them: only what is set.
pub fn describe_resources(resources: &podlab_cgroups::Resources) -> api::LinuxResources {
    let int = |v: i64| (v != 0).then_some(api::OptionalInt64 { value: v });
    let uint = |v: u64| (v != 0).then_some(api::OptionalUInt64 { value: v });
    api::LinuxResources {
        memory: Some(api::LinuxMemory {
            limit: int(resources.memory_limit_in_bytes),
            ..Default::default()
        }),
        cpu: Some(api::LinuxCpu {
            shares: uint(resources.cpu_shares),
            quota: int(resources.cpu_quota),
            period: uint(resources.cpu_period),
            ..Default::default()
        }),
        hugepage_limits: resources
            .hugepage_limits
            .iter()
            .map(|l| api::HugepageLimit {
                page_size: l.page_size.clone(),
                limit: l.limit,
            })
            .collect(),
        pids: (resources.pids_limit != 0).then_some(api::LinuxPids {
            limit: resources.pids_limit,
        }),
        ..Default::default()
    }
}

/// A container's volume as NRI describes a mount: runc's bind mount, its options as
/// containerd writes them; an image volume is of type `image`, its source the image.
pub fn describe_mount(mount: &Mount) -> api::Mount {
    let (kind, source) = match &mount.image {
        Some(volume) => ("image", volume.image.clone()),
        None => ("bind", mount.host_path.display().to_string()),
    };
    let mut options = vec![
        "rbind".to_string(),
        mount.propagation.as_str().to_string(),
        if mount.readonly { "ro" } else { "rw" }.to_string(),
    ];
    if mount.recursive_readonly {
        options.push("rro".into());
    }
    api::Mount {
        destination: mount.container_path.display().to_string(),
        r#type: kind.to_string(),
        source,
        options,
    }
}

/// A plugin's mount as a container volume: a bind mount, with the options podlab's volumes
/// have. Any other type or option is refused, naming it.
pub fn bind_mount(mount: &api::Mount) -> Result<Mount, Refusal> {
    let invalid = |what: String| {
        Err(Refusal::Invalid(format!(
            "mount {}: {what}",
            mount.destination
        )))
    };
    if !matches!(mount.r#type.as_str(), "bind" | "rbind" | "") {
        return invalid(format!(
            "type {:?}: podlab makes bind mounts only",
            mount.r#type
        ));
    }
    if !Path::new(&mount.destination).is_absolute() || !Path::new(&mount.source).is_absolute() {
        return invalid(format!(
            "its source {:?} and destination must be absolute paths",
            mount.source
        ));
    }
    let mut made = Mount {
        host_path: PathBuf::from(&mount.source),
        container_path: PathBuf::from(&mount.destination),
        ..Default::default()
    };
    let mut bind = !mount.r#type.is_empty();
    for option in &mount.options {
        match option.as_str() {
            "bind" | "rbind" => bind = true,
            "ro" => made.readonly = true,
            "rw" => made.readonly = false,
            "rro" => (made.readonly, made.recursive_readonly) = (true, true),
            "rprivate" | "private" => made.propagation = Propagation::Private,
            "rslave" | "slave" => made.propagation = Propagation::Slave,
            "rshared" | "shared" => made.propagation = Propagation::Shared,
            other => {
                return invalid(format!(
                    "option {other:?}: podlab's volumes take bind, rbind, ro, rw, rro and a propagation"
                ))
            }
        }
    }
    if !bind {
        return invalid("no type and no bind option: podlab makes bind mounts only".into());
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container() -> api::Container {
        api::Container {
            id: "c".into(),
            args: vec!["sh".into()],
            env: vec!["PATH=/bin".into(), "HOME=/root".into()],
            annotations: [("kept".to_string(), "1".to_string())].into(),
            ..Default::default()
        }
    }

    fn env(key: &str, value: &str) -> api::KeyValue {
        api::KeyValue {
            key: key.into(),
            value: value.into(),
        }
    }

    fn bind(source: &str, destination: &str, options: &[&str]) -> api::Mount {
        api::Mount {
            destination: destination.into(),
            r#type: "bind".into(),
            source: source.into(),
            options: options.iter().map(|o| o.to_string()).collect(),
        }
    }

    #[test]
    fn each_plugin_sees_the_container_as_those_before_it_left_it() {
        let mut merge = Merge::new(container());
        let first = api::ContainerAdjustment {
            env: vec![env("FROM", "first"), env("-HOME", "")],
            args: vec!["sleep".into(), "1".into()],
            ..Default::default()
        };
        merge.apply("first", &first).unwrap();
        assert_eq!(merge.container.env, ["PATH=/bin", "FROM=first"]);
        assert_eq!(merge.container.args, ["sleep", "1"]);
        let second = api::ContainerAdjustment {
            env: vec![env("HOME", "/home")],
            annotations: [("added".to_string(), "2".to_string())].into(),
            ..Default::default()
        };
        // A removal claims the variable too (containerd/nri's owners): only the plugin that
        // removed it may set it again.
        assert_eq!(
            merge.apply("second", &second),
            Err(Refusal::Conflict {
                other: "first".into(),
                what: "env HOME".into()
            })
        );
        assert_eq!(
            merge.container.annotations.len(),
            1,
            "a refused adjustment is not applied"
        );
        merge.apply("first", &second).unwrap();
        assert_eq!(
            merge.container.env,
            ["PATH=/bin", "FROM=first", "HOME=/home"]
        );
        assert_eq!(merge.container.annotations.len(), 2);
        assert!(merge.changed());
        // What validators are shown: the merged requests, removals kept as such, and owners.
        let pending: Vec<&str> = merge.pending.env.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(pending, ["FROM", "HOME"]);
        let owners = &merge.owners().owners["c"];
        assert_eq!(owners.simple[&(api::Field::Args as i32)], "first");
        assert_eq!(
            owners.compound[&(api::Field::Env as i32)].owners["HOME"],
            "first"
        );
    }

    #[test]
    fn two_plugins_setting_one_field_fail_naming_the_first() {
        let mut merge = Merge::new(container());
        let set = |value: &str| api::ContainerAdjustment {
            env: vec![env("SHARED", value)],
            ..Default::default()
        };
        merge.apply("first", &set("1")).unwrap();
        assert_eq!(
            merge.apply("second", &set("2")),
            Err(Refusal::Conflict {
                other: "first".into(),
                what: "env SHARED".into()
            })
        );
        let limit = |value: i64| api::ContainerAdjustment {
            linux: Some(api::LinuxContainerAdjustment {
                resources: Some(api::LinuxResources {
                    memory: Some(api::LinuxMemory {
                        limit: Some(api::OptionalInt64 { value }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        merge.apply("first", &limit(1 << 20)).unwrap();
        let refused = merge.apply("second", &limit(2 << 20)).unwrap_err();
        assert_eq!(
            refusal_text(&refused),
            "sets memory limit, which plugin \"first\" set first"
        );
    }

    #[test]
    fn what_podlab_does_not_apply_is_refused_by_name() {
        let mut merge = Merge::new(container());
        let sysctl = api::ContainerAdjustment {
            linux: Some(api::LinuxContainerAdjustment {
                sysctl: [("net.ipv4.ip_forward".to_string(), "1".to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            merge.apply("p", &sysctl),
            Err(Refusal::Unsupported("linux.sysctl".into()))
        );
        let cpuset = api::ContainerAdjustment {
            linux: Some(api::LinuxContainerAdjustment {
                resources: Some(api::LinuxResources {
                    cpu: Some(api::LinuxCpu {
                        cpus: "0".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            merge.apply("p", &cpuset),
            Err(Refusal::Unsupported("linux.resources.cpu.cpus".into()))
        );
        let tmpfs = api::ContainerAdjustment {
            mounts: vec![api::Mount {
                destination: "/scratch".into(),
                r#type: "tmpfs".into(),
                source: "tmpfs".into(),
                options: Vec::new(),
            }],
            ..Default::default()
        };
        assert!(
            matches!(merge.apply("p", &tmpfs), Err(Refusal::Invalid(m)) if m.contains("tmpfs"))
        );
        let nosuid = api::ContainerAdjustment {
            mounts: vec![bind("/srv", "/srv", &["rbind", "nosuid"])],
            ..Default::default()
        };
        assert!(
            matches!(merge.apply("p", &nosuid), Err(Refusal::Invalid(m)) if m.contains("nosuid"))
        );
        assert!(!merge.changed(), "nothing refused was applied");
        assert_eq!(merge.container, container());
    }

    #[test]
    fn a_mount_replaces_the_one_at_its_destination_and_an_unchanged_one_stays_the_records() {
        let original = Mount {
            host_path: "/var/lib/data".into(),
            container_path: "/data".into(),
            readonly: true,
            ..Default::default()
        };
        let kept = Mount {
            host_path: "/var/lib/logs".into(),
            container_path: "/logs".into(),
            ..Default::default()
        };
        let mut described = container();
        described.mounts = vec![describe_mount(&original), describe_mount(&kept)];
        let mut merge = Merge::new(described);
        let adjustment = api::ContainerAdjustment {
            mounts: vec![bind("/srv/other", "/data", &["rbind", "rslave", "rw"])],
            ..Default::default()
        };
        merge.apply("p", &adjustment).unwrap();
        let mut record = ContainerRecord {
            id: podlab_runtime::ContainerId::generate(),
            sandbox_id: podlab_runtime::SandboxId::generate(),
            config: Default::default(),
            image: Default::default(),
            process: Default::default(),
            log_path: PathBuf::new(),
            pid_mode: podlab_runtime::state::PidMode::Container,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            state: podlab_runtime::status::ContainerState::Created,
            exit_code: None,
            reason: None,
            message: None,
            pid: None,
            namespaces: Default::default(),
            start_trace: Vec::new(),
            cgroup: None,
            user: None,
            spec_annotations: None,
        };
        record.config.mounts = vec![original, kept.clone()];
        merge.apply_to(&mut record).unwrap();
        let replaced = Mount {
            host_path: "/srv/other".into(),
            container_path: "/data".into(),
            propagation: Propagation::Slave,
            ..Default::default()
        };
        assert_eq!(record.config.mounts, [kept, replaced]);
        assert_eq!(record.process.env, ["PATH=/bin", "HOME=/root"]);
        assert_eq!(
            record.spec_annotations.as_ref().map(|a| a.len()),
            Some(1),
            "the CRI's annotations are kept apart from the plugins' view"
        );
    }

    #[test]
    fn an_update_is_changed_by_each_plugin_in_turn_and_one_limit_has_one_owner() {
        let requested = describe_resources(&podlab_cgroups::Resources {
            memory_limit_in_bytes: 64 << 20,
            ..Default::default()
        });
        let mut merge = Merge::new(api::Container {
            linux: Some(api::LinuxContainer {
                resources: Some(requested),
                ..Default::default()
            }),
            ..Default::default()
        });
        let pids = |limit| api::LinuxResources {
            pids: Some(api::LinuxPids { limit }),
            ..Default::default()
        };
        merge.update_resources("first", &pids(80)).unwrap();
        let merged = cgroup_resources(&merge.resources()).unwrap();
        assert_eq!(
            (merged.memory_limit_in_bytes, merged.pids_limit),
            (64 << 20, 80)
        );
        assert!(matches!(
            merge.update_resources("second", &pids(90)),
            Err(Refusal::Conflict { other, .. }) if other == "first"
        ));
        let cpuset = api::LinuxResources {
            cpu: Some(api::LinuxCpu {
                mems: "0".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            merge.update_resources("third", &cpuset),
            Err(Refusal::Unsupported("linux.resources.cpu.mems".into()))
        );
        assert_eq!(cgroup_resources(&merge.resources()).unwrap().pids_limit, 80);
    }

    #[test]
    fn resources_round_trip_through_their_description() {
        let resources = podlab_cgroups::Resources {
            cpu_shares: 512,
            cpu_quota: 50_000,
            cpu_period: 100_000,
            memory_limit_in_bytes: 64 << 20,
            pids_limit: 100,
            hugepage_limits: Vec::new(),
        };
        assert_eq!(
            cgroup_resources(&describe_resources(&resources)).unwrap(),
            resources
        );
    }
}
