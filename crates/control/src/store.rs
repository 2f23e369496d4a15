//! The object store: podlab's API server storage, shared by every podlab process on the host.
//!
//! Layout under the root folder (e.g. `$PODLAB_ROOT/store`):
//!
//! ```text
//! lock                               flock(2) target: writers take it exclusive, readers shared
//! head.json                          {"resourceVersion": N, "logLength": bytes}: the last commit
//! changes.log                        one JSON line per change: rv, ADDED/MODIFIED/DELETED, object
//! pods/<namespace>/<name>.json       the current objects, one file each
//! replicasets/<namespace>/<name>.json
//! events/<namespace>/<name>.json
//! ```
//!
//! A change is made under the exclusive lock, so changes from any number of processes are
//! serialised and numbered by one global resourceVersion counter, as etcd numbers revisions.
//! The log line is appended first: it is the commit (fsynced too with `PODLAB_STORE_FSYNC=1`,
//! see [`durable`] for what survives what). Then the object file is
//! replaced atomically and `head.json` records the commit. A writer killed half way leaves a
//! log longer than `head.json` says; the next locker redoes the missing tail (and drops a
//! half-written last line), so the files always match the log.
//!
//! The API server's rules are kept: `create` assigns `uid`, `creationTimestamp`,
//! `resourceVersion`, `generation: 1` and resolves `generateName`; `update` with a stale
//! `resourceVersion` is a Conflict; a plain update keeps the stored `status` and only
//! `update_status` changes it; a spec change bumps `generation`; an update that changes nothing
//! writes nothing.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::changelog::{EventType, LogReader, Record};
use crate::durable;
use crate::error::{Error, Result};
use crate::kind::{Kind, StoreObject};
use crate::names;
use crate::watch::Watch;

/// The namespace of an object that names none, as the API server defaults it.
pub const DEFAULT_NAMESPACE: &str = "default";

/// How many random names `generateName` tries before giving up, as the API server retries.
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// A handle on a store folder. Cheap to clone; every call takes the lock it needs.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    sync: durable::Sync,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    resource_version: u64,
    log_length: u64,
}

/// Conditions a delete must meet, as `metav1.Preconditions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// What a graceful pod delete did.
#[derive(Debug, Clone, PartialEq)]
pub enum PodDeletion {
    /// The pod is gone (it had no node, had finished, or the grace period was 0).
    Deleted(Pod),
    /// `deletionTimestamp` is set; the node agent stops the pod and then deletes it.
    Terminating(Pod),
}

/// Where a list was taken in the change log: a watch started here misses nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bookmark {
    pub resource_version: u64,
    pub log_offset: u64,
}

impl Store {
    /// Opens (and on first use lays out) the store at `root`, redoing an interrupted commit.
    pub fn open(root: impl Into<PathBuf>) -> Result<Store> {
        let store = Store {
            root: root.into(),
            sync: durable::Sync::from_env(),
        };
        // 0700 and files 0600: the store holds Secrets and every pod's env values.
        std::os::unix::fs::DirBuilderExt::mode(fs::DirBuilder::new().recursive(true), 0o700)
            .create(&store.root)
            .map_err(|e| Error::io("mkdir", &store.root, e))?;
        let lock = store.lock(FlockArg::LockExclusive)?;
        if !store.log_path().exists() {
            std::os::unix::fs::OpenOptionsExt::mode(
                OpenOptions::new().write(true).create(true).truncate(true),
                0o600,
            )
            .open(store.log_path())
            .map_err(|e| Error::io("create", store.log_path(), e))?;
        }
        let (mut head, found) = match fs::read(store.head_path()) {
            Ok(bytes) => (parse_head(&bytes, &store.head_path())?, true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Head::default(), false),
            Err(e) => return Err(Error::io("read", store.head_path(), e)),
        };
        let before = head;
        store.recover(&mut head)?;
        // Every CLI command opens the store: only a new store or a repaired commit is written.
        if !found || head != before {
            store.write_head(head)?;
        }
        drop(lock);
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The resourceVersion of the last committed change.
    pub fn resource_version(&self) -> Result<u64> {
        Ok(self.read_view()?.head.resource_version)
    }

    pub fn create<T: StoreObject>(&self, mut object: T) -> Result<T> {
        let kind = T::STORE_KIND;
        let meta = object.metadata_mut();
        if meta
            .resource_version
            .as_deref()
            .is_some_and(|rv| !rv.is_empty())
        {
            return Err(Error::Invalid {
                kind: kind.name(),
                name: meta.name.clone().unwrap_or_default(),
                message: "resourceVersion should not be set on objects to be created".into(),
            });
        }
        let namespace = meta
            .namespace
            .get_or_insert_with(|| DEFAULT_NAMESPACE.to_string())
            .clone();
        check_namespace(kind, &namespace, meta.name.as_deref().unwrap_or_default())?;

        let mut txn = self.begin()?;
        let name = match meta.name.as_deref() {
            Some(name) if !name.is_empty() => {
                check_name(kind, name)?;
                if txn.exists(kind, &namespace, name) {
                    return Err(already_exists(kind, name));
                }
                name.to_string()
            }
            _ => match meta.generate_name.as_deref() {
                Some(base) if !base.is_empty() => {
                    txn.free_generated_name(kind, &namespace, base)?
                }
                _ => {
                    return Err(Error::Invalid {
                        kind: kind.name(),
                        name: String::new(),
                        message: "metadata.name: Required value: name or generateName is required"
                            .into(),
                    })
                }
            },
        };
        meta.name = Some(name);
        meta.uid = Some(names::new_uid());
        meta.creation_timestamp = Some(names::now());
        meta.resource_version = Some(txn.next_rv().to_string());
        meta.generation = kind.has_generation().then_some(1);
        meta.deletion_timestamp = None;
        meta.deletion_grace_period_seconds = None;

        let mut value = to_value(&object);
        reset_status_on_create(kind, &mut value);
        let object: T = from_value(value.clone(), kind)?;
        txn.commit(kind, EventType::Added, value)?;
        Ok(object)
    }

    pub fn get<T: StoreObject>(&self, namespace: &str, name: &str) -> Result<T> {
        let _view = self.read_view()?;
        self.read_object::<T>(namespace, name)?
            .ok_or_else(|| not_found(T::STORE_KIND, name))
    }

    /// Replaces the object (spec, metadata). A stale `metadata.resourceVersion` is a Conflict;
    /// none means "whatever is stored" (an unconditional update). Status is kept as stored.
    pub fn update<T: StoreObject>(&self, object: T) -> Result<T> {
        self.replace(object, Part::Object)
    }

    /// Replaces only `status`, as the `/status` subresource does.
    pub fn update_status<T: StoreObject>(&self, object: T) -> Result<T> {
        self.replace(object, Part::Status)
    }

    /// Removes the object now and returns it as it was.
    pub fn delete<T: StoreObject>(&self, namespace: &str, name: &str) -> Result<T> {
        self.delete_with(namespace, name, &Preconditions::default())
    }

    pub fn delete_with<T: StoreObject>(
        &self,
        namespace: &str,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<T> {
        let kind = T::STORE_KIND;
        let mut txn = self.begin()?;
        let current: T = txn
            .read(namespace, name)?
            .ok_or_else(|| not_found(kind, name))?;
        check_preconditions(kind, name, current.metadata(), preconditions)?;
        txn.commit(kind, EventType::Deleted, to_value(&current))?;
        Ok(current)
    }

    /// A pod delete as the API server does it: a pod that runs on a node gets a
    /// `deletionTimestamp` (now + grace) and is removed later by its node agent; a pod with no
    /// node, a finished pod, or grace 0 is removed at once. `grace_seconds` of `None` uses the
    /// pod's `terminationGracePeriodSeconds` (default 30). A second call may shorten the grace.
    pub fn delete_pod_gracefully(
        &self,
        namespace: &str,
        name: &str,
        grace_seconds: Option<i64>,
        preconditions: &Preconditions,
    ) -> Result<PodDeletion> {
        let kind = Kind::Pod;
        let mut txn = self.begin()?;
        let mut pod: Pod = txn
            .read(namespace, name)?
            .ok_or_else(|| not_found(kind, name))?;
        check_preconditions(kind, name, &pod.metadata, preconditions)?;
        let spec = pod.spec.as_ref();
        let on_node = spec
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let finished = matches!(phase, Some("Succeeded" | "Failed"));
        let grace = grace_seconds
            .or_else(|| spec.and_then(|s| s.termination_grace_period_seconds))
            .unwrap_or(podlab_api::defaults::DEFAULT_GRACE_SECONDS)
            .max(0);
        if grace == 0 || !on_node || finished {
            txn.commit(kind, EventType::Deleted, to_value(&pod))?;
            return Ok(PodDeletion::Deleted(pod));
        }
        let meta = &mut pod.metadata;
        if let Some(current) = meta.deletion_grace_period_seconds {
            if meta.deletion_timestamp.is_some() && grace >= current {
                return Ok(PodDeletion::Terminating(pod));
            }
        }
        let deadline = names::now().0 + SignedDuration::from_secs(grace);
        meta.deletion_timestamp = Some(Time(deadline));
        meta.deletion_grace_period_seconds = Some(grace);
        meta.generation = meta.generation.map(|g| g + 1);
        meta.resource_version = Some(txn.next_rv().to_string());
        txn.commit(kind, EventType::Modified, to_value(&pod))?;
        Ok(PodDeletion::Terminating(pod))
    }

    /// Every object of a kind (in one namespace, or all), sorted by namespace and name, and the
    /// resourceVersion they were read at: a watch from it sees every later change.
    pub fn list<T: StoreObject>(&self, namespace: Option<&str>) -> Result<(Vec<T>, u64)> {
        let (objects, bookmark) = self.list_with_bookmark(namespace)?;
        Ok((objects, bookmark.resource_version))
    }

    pub(crate) fn list_with_bookmark<T: StoreObject>(
        &self,
        namespace: Option<&str>,
    ) -> Result<(Vec<T>, Bookmark)> {
        let view = self.read_view()?;
        let kind_dir = self.root.join(T::STORE_KIND.resource());
        let namespaces = match namespace {
            Some(ns) => vec![ns.to_string()],
            None => sorted_entries(&kind_dir)?,
        };
        let mut objects = Vec::new();
        for ns in namespaces {
            for file in sorted_entries(&kind_dir.join(&ns))? {
                if let Some(name) = file.strip_suffix(".json") {
                    if let Some(object) = self.read_object(&ns, name)? {
                        objects.push(object);
                    }
                }
            }
        }
        let bookmark = Bookmark {
            resource_version: view.head.resource_version,
            log_offset: view.head.log_length,
        };
        Ok((objects, bookmark))
    }

    /// Changes of kind `T` after `from_rv`, from this and every other process, in order.
    pub fn watch<T: StoreObject>(&self, from_rv: u64) -> Result<Watch<T>> {
        Watch::new(LogReader::new(self.log_path(), 0), from_rv)
    }

    /// Changes of kind `T` from now on. Unlike `watch(resource_version()?)`, it starts reading
    /// the log where the last commit ends, so its cost does not grow with the log.
    pub fn watch_now<T: StoreObject>(&self) -> Result<Watch<T>> {
        let view = self.read_view()?;
        self.watch_from(Bookmark {
            resource_version: view.head.resource_version,
            log_offset: view.head.log_length,
        })
    }

    /// Every object of kind `T` (in `namespace`, or all), and a watch of the changes after
    /// that listing, which misses none: an informer's list + watch.
    pub fn list_and_watch<T: StoreObject>(
        &self,
        namespace: Option<&str>,
    ) -> Result<(Vec<T>, Watch<T>)> {
        let (objects, bookmark) = self.list_with_bookmark(namespace)?;
        Ok((objects, self.watch_from(bookmark)?))
    }

    pub(crate) fn watch_from<T: StoreObject>(&self, bookmark: Bookmark) -> Result<Watch<T>> {
        let reader = LogReader::new(self.log_path(), bookmark.log_offset);
        Watch::new(reader, bookmark.resource_version)
    }

    fn replace<T: StoreObject>(&self, object: T, part: Part) -> Result<T> {
        let kind = T::STORE_KIND;
        let meta = object.metadata();
        let name = meta.name.clone().unwrap_or_default();
        let namespace = meta
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let mut txn = self.begin()?;
        let current: T = txn
            .read(&namespace, &name)?
            .ok_or_else(|| not_found(kind, &name))?;
        let preconditions = Preconditions {
            uid: meta.uid.clone().filter(|u| !u.is_empty()),
            resource_version: meta.resource_version.clone().filter(|v| !v.is_empty()),
        };
        check_preconditions(kind, &name, current.metadata(), &preconditions)?;

        let stored = to_value(&current);
        let mut next = match part {
            Part::Status => {
                let mut next = stored.clone();
                set_or_remove(
                    &mut next,
                    "status",
                    to_value(&object).get("status").cloned(),
                );
                next
            }
            Part::Object => {
                let mut given = object;
                let m = given.metadata_mut();
                let c = current.metadata();
                m.namespace = Some(namespace.clone());
                m.uid = c.uid.clone();
                m.creation_timestamp = c.creation_timestamp.clone();
                m.deletion_timestamp = c.deletion_timestamp.clone();
                m.deletion_grace_period_seconds = c.deletion_grace_period_seconds;
                m.generation = c.generation;
                m.generate_name = c.generate_name.clone();
                let mut next = to_value(&given);
                if kind.has_status_subresource() {
                    set_or_remove(&mut next, "status", stored.get("status").cloned());
                }
                if kind.has_generation() && next.get("spec") != stored.get("spec") {
                    let generation = c.generation.unwrap_or(0) + 1;
                    next["metadata"]["generation"] = generation.into();
                }
                next
            }
        };
        next["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"].clone();
        if next == stored {
            return Ok(current); // nothing changed: no new resourceVersion, no event
        }
        next["metadata"]["resourceVersion"] = txn.next_rv().to_string().into();
        let updated: T = from_value(next.clone(), kind)?;
        txn.commit(kind, EventType::Modified, next)?;
        Ok(updated)
    }

    fn read_object<T: StoreObject>(&self, namespace: &str, name: &str) -> Result<Option<T>> {
        let path = self.object_path(T::STORE_KIND, namespace, name);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| Error::Corrupt {
                    path,
                    message: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("read", path, e)),
        }
    }

    fn lock_path(&self) -> PathBuf {
        self.root.join("lock")
    }

    fn head_path(&self) -> PathBuf {
        self.root.join("head.json")
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.root.join("changes.log")
    }

    fn object_path(&self, kind: Kind, namespace: &str, name: &str) -> PathBuf {
        self.root
            .join(kind.resource())
            .join(namespace)
            .join(format!("{name}.json"))
    }

    fn lock(&self, arg: FlockArg) -> Result<Flock<File>> {
        let path = self.lock_path();
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("open", &path, e))?;
        loop {
            match Flock::lock(file, arg) {
                Ok(lock) => return Ok(lock),
                Err((again, Errno::EINTR)) => file = again,
                Err((_, errno)) => return Err(Error::sys("flock", path, errno)),
            }
        }
    }

    fn read_head(&self) -> Result<Head> {
        let path = self.head_path();
        let bytes = fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
        parse_head(&bytes, &path)
    }

    fn write_head(&self, head: Head) -> Result<()> {
        let bytes = serde_json::to_vec(&head).expect("head encodes");
        durable::replace_file(&self.head_path(), &bytes, self.sync)
    }

    fn log_length(&self) -> Result<u64> {
        let path = self.log_path();
        fs::metadata(&path)
            .map(|m| m.len())
            .map_err(|e| Error::io("stat", path, e))
    }

    /// Redoes the commits that the log holds past `head` (a writer died after appending its
    /// line) and cuts a half-written last line. Needs the exclusive lock.
    fn recover(&self, head: &mut Head) -> Result<()> {
        let length = self.log_length()?;
        if length == head.log_length {
            return Ok(());
        }
        if length < head.log_length {
            return Err(Error::Corrupt {
                path: self.log_path(),
                message: format!(
                    "the log has {length} bytes but head.json records {}",
                    head.log_length
                ),
            });
        }
        let mut reader = LogReader::new(self.log_path(), head.log_length);
        let log_path = self.log_path();
        let mut redo = Vec::new();
        reader.read_lines(None, |line| {
            redo.push(Record::parse(line, &log_path)?);
            Ok(())
        })?;
        for record in &redo {
            self.apply(record)?;
            head.resource_version = record.rv;
        }
        head.log_length = reader.offset();
        if reader.offset() < length {
            let log = OpenOptions::new()
                .write(true)
                .open(&log_path)
                .map_err(|e| Error::io("open", &log_path, e))?;
            log.set_len(reader.offset())
                .and_then(|()| log.sync_all())
                .map_err(|e| Error::io("truncate", &log_path, e))?;
        }
        self.write_head(*head)
    }

    /// Makes the object file say what a log record says.
    fn apply(&self, record: &Record) -> Result<()> {
        self.prepare(record)?.finish()
    }

    /// What applying `record` writes, written beside the object file (or nothing, for a
    /// delete): the part of a change that needs space, done before the change is committed.
    fn prepare(&self, record: &Record) -> Result<Prepared> {
        let kind = Kind::from_name(&record.kind).ok_or_else(|| Error::Corrupt {
            path: self.log_path(),
            message: format!("rv {}: unknown kind {:?}", record.rv, record.kind),
        })?;
        let meta = &record.object["metadata"];
        let namespace = meta["namespace"].as_str().unwrap_or(DEFAULT_NAMESPACE);
        let name = meta["name"].as_str().unwrap_or_default();
        let path = self.object_path(kind, namespace, name);
        Ok(match record.event_type {
            EventType::Deleted => Prepared::Remove(path, self.sync),
            EventType::Added | EventType::Modified => {
                let bytes = serde_json::to_vec(&record.object).expect("a value encodes");
                Prepared::Write(durable::stage_file(&path, &bytes, self.sync)?)
            }
        })
    }

    /// A shared lock and a head that matches the log (recovering first if it does not).
    fn read_view(&self) -> Result<View> {
        let lock = self.lock(FlockArg::LockShared)?;
        let head = self.read_head()?;
        if self.log_length()? == head.log_length {
            return Ok(View { _lock: lock, head });
        }
        drop(lock);
        let txn = self.begin()?;
        Ok(View {
            _lock: txn.lock,
            head: txn.head,
        })
    }

    fn begin(&self) -> Result<Txn<'_>> {
        let lock = self.lock(FlockArg::LockExclusive)?;
        let mut head = self.read_head()?;
        self.recover(&mut head)?;
        Ok(Txn {
            store: self,
            lock,
            head,
        })
    }
}

enum Part {
    Object,
    Status,
}

struct View {
    _lock: Flock<File>,
    head: Head,
}

/// The exclusive lock held for one change.
struct Txn<'a> {
    store: &'a Store,
    lock: Flock<File>,
    head: Head,
}

impl Txn<'_> {
    fn next_rv(&self) -> u64 {
        self.head.resource_version + 1
    }

    fn read<T: StoreObject>(&self, namespace: &str, name: &str) -> Result<Option<T>> {
        self.store.read_object(namespace, name)
    }

    fn exists(&self, kind: Kind, namespace: &str, name: &str) -> bool {
        self.store.object_path(kind, namespace, name).exists()
    }

    fn free_generated_name(&self, kind: Kind, namespace: &str, base: &str) -> Result<String> {
        let mut name = String::new();
        for _ in 0..GENERATE_NAME_ATTEMPTS {
            name = names::generate_name(base);
            check_name(kind, &name)?;
            if !self.exists(kind, namespace, &name) {
                return Ok(name);
            }
        }
        Err(already_exists(kind, &name))
    }

    fn commit(&mut self, kind: Kind, event_type: EventType, object: Value) -> Result<()> {
        let record = Record {
            rv: self.next_rv(),
            event_type,
            kind: kind.name().to_string(),
            object,
        };
        let line = record.to_line();
        // The object's new file is written before the log line that commits it: on a full
        // disk the change fails whole, rather than failing for the client and then being
        // redone from the log by the next reader (a create that said it failed, appearing).
        let prepared = self.store.prepare(&record)?;
        let log = self.store.log_path();
        if let Err(e) = durable::append_line(&log, &line, self.store.sync) {
            prepared.discard();
            let _ = durable::truncate(&log, self.head.log_length);
            return Err(e);
        }
        self.head.resource_version = record.rv;
        self.head.log_length += line.len() as u64;
        // Committed. A rename or a head that cannot be written now is redone from the log by
        // the next reader (the head then lags the log), so the change is not reported failed.
        if prepared.finish().is_ok() {
            let _ = self.store.write_head(self.head);
        }
        Ok(())
    }
}

/// A change's object file, written and waiting for its commit.
enum Prepared {
    Write(durable::Staged),
    Remove(PathBuf, durable::Sync),
}

impl Prepared {
    fn finish(self) -> Result<()> {
        match self {
            Prepared::Write(staged) => staged.install(),
            Prepared::Remove(path, sync) => durable::remove_file(&path, sync),
        }
    }

    fn discard(self) {
        if let Prepared::Write(staged) = self {
            staged.discard();
        }
    }
}

/// The API server resets status on create: a Pod starts `Pending` with its QoS class, a
/// ReplicaSet with an empty status.
fn reset_status_on_create(kind: Kind, value: &mut Value) {
    match kind {
        Kind::Pod => {
            let pod: Pod = serde_json::from_value(value.clone()).expect("a Pod decodes");
            let status = PodStatus {
                phase: Some("Pending".into()),
                qos_class: Some(podlab_api::resources::pod_qos(&pod).into()),
                ..Default::default()
            };
            value["status"] = to_value(&status);
        }
        Kind::ReplicaSet => value["status"] = serde_json::json!({"replicas": 0}),
        Kind::Deployment => value["status"] = serde_json::json!({}),
        Kind::Event | Kind::ConfigMap | Kind::Secret => {}
    }
}

fn check_preconditions(
    kind: Kind,
    name: &str,
    current: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    preconditions: &Preconditions,
) -> Result<()> {
    if let Some(uid) = &preconditions.uid {
        let actual = current.uid.clone().unwrap_or_default();
        if *uid != actual {
            return Err(Error::UidMismatch {
                resource: kind.resource(),
                name: name.to_string(),
                expected: uid.clone(),
                actual,
            });
        }
    }
    if let Some(rv) = &preconditions.resource_version {
        if Some(rv) != current.resource_version.as_ref() {
            return Err(Error::Conflict {
                resource: kind.resource(),
                name: name.to_string(),
            });
        }
    }
    Ok(())
}

fn check_name(kind: Kind, name: &str) -> Result<()> {
    match podlab_api::validation::dns1123_subdomain(name) {
        None => Ok(()),
        Some(why) => Err(Error::Invalid {
            kind: kind.name(),
            name: name.to_string(),
            message: format!("metadata.name: Invalid value: {name:?}: {why}"),
        }),
    }
}

fn check_namespace(kind: Kind, namespace: &str, name: &str) -> Result<()> {
    match podlab_api::validation::dns1123_label(namespace) {
        None => Ok(()),
        Some(why) => Err(Error::Invalid {
            kind: kind.name(),
            name: name.to_string(),
            message: format!("metadata.namespace: Invalid value: {namespace:?}: {why}"),
        }),
    }
}

fn not_found(kind: Kind, name: &str) -> Error {
    Error::NotFound {
        resource: kind.resource(),
        name: name.to_string(),
    }
}

fn already_exists(kind: Kind, name: &str) -> Error {
    Error::AlreadyExists {
        resource: kind.resource(),
        name: name.to_string(),
    }
}

fn parse_head(bytes: &[u8], path: &Path) -> Result<Head> {
    serde_json::from_slice(bytes).map_err(|e| Error::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

fn to_value<T: Serialize>(object: &T) -> Value {
    serde_json::to_value(object).expect("Kubernetes objects encode")
}

fn from_value<T: StoreObject>(value: Value, kind: Kind) -> Result<T> {
    serde_json::from_value(value).map_err(|e| Error::Invalid {
        kind: kind.name(),
        name: String::new(),
        message: e.to_string(),
    })
}

fn set_or_remove(object: &mut Value, key: &str, value: Option<Value>) {
    let map = object.as_object_mut().expect("objects encode as maps");
    match value {
        Some(value) => map.insert(key.to_string(), value),
        None => map.remove(key),
    };
}

/// Names in a folder, sorted, without dot-files; a missing folder is empty.
fn sorted_entries(dir: &Path) -> Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("readdir", dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("readdir", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}
