//! The node's image manager (kubelet's `imageManager` + `serialImagePuller`) and its image
//! garbage collector (`realImageGCManager`), on podlab-image's store or through a CRI
//! runtime's ImageService (`ImageFsInfo`, `ListImages`, `RemoveImage`): the rules are
//! [`crate::images`]'; here are the pulls, the pod's `imagePullSecrets` read from the store, the
//! `statfs` of the image filesystem and the removals.
//!
//! Pulls are serialized, as kubelet's `--serialize-image-pulls` default: one at a time on the
//! node, the time waiting for the one before is the "including waiting" of the `Pulled` event.
//! Credentials come from the pod's Secrets of type `kubernetes.io/dockerconfigjson` (or the old
//! `kubernetes.io/dockercfg`): the first that has an entry for the image's registry is used for
//! the pull, else the node's docker config (`$REGISTRY_AUTH_FILE`, `~/.docker/config.json`).
//! They are handed to podlab-image's puller and never printed, logged or put in an event.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Pod, Secret};
use podlab_image::credentials::{Credentials, DockerConfig};
use podlab_image::pull::PullOptions;
use podlab_image::reference::Reference;

use crate::images::{FsStats, GcImage, GcPlan, GcPolicy};

use super::remote::RemoteRuntime;

/// Secret types that hold registry credentials, and their data key.
const DOCKER_CONFIG_JSON: (&str, &str) = ("kubernetes.io/dockerconfigjson", ".dockerconfigjson");
const DOCKER_CFG: (&str, &str) = ("kubernetes.io/dockercfg", ".dockercfg");

/// The node's images: the store containers are made from, and the one puller.
pub struct ImageManager {
    /// podlab-image's store in this process, or the CRI runtime's ImageService.
    backend: Backend,
    /// kubelet's serialImagePuller: one pull at a time.
    serial: Mutex<()>,
    /// When GC first saw each image (by name and digest): kubelet's `firstDetected`.
    first_detected: Mutex<HashMap<(String, String), SystemTime>>,
    /// A CRI runtime's images by id: when GC last saw each in use (kubelet's `lastUsed`).
    last_used: Mutex<HashMap<String, SystemTime>>,
}

/// Where the images are.
enum Backend {
    Store(podlab_image::Store),
    /// kubelet's way: ImageStatus and PullImage of the CRI runtime.
    Cri(Arc<RemoteRuntime>),
}

impl std::fmt::Debug for ImageManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.backend {
            Backend::Store(store) => write!(f, "ImageManager({})", store.root().display()),
            Backend::Cri(remote) => write!(f, "ImageManager(CRI {})", remote.socket().display()),
        }
    }
}

/// What a finished pull tells the events.
#[derive(Debug)]
pub struct Pulled {
    /// The image's size in bytes (kubelet's "Image size").
    pub size: u64,
    /// The pull itself.
    pub pulling: Duration,
    /// With the wait for the pull before it.
    pub including_waiting: Duration,
}

/// The pod's pull credentials, and the names of the Secrets it lists that are not there.
#[derive(Default)]
pub struct PullSecrets {
    configs: Vec<DockerConfig>,
    pub missing: Vec<String>,
}

impl std::fmt::Debug for PullSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullSecrets")
            .field("configs", &self.configs)
            .field("missing", &self.missing)
            .finish()
    }
}

impl PullSecrets {
    /// The first credentials any of the Secrets has for `domain`.
    fn credentials_for(&self, domain: &str) -> Option<Credentials> {
        self.configs
            .iter()
            .find_map(|c| c.credentials_for(domain).cloned())
    }
}

impl ImageManager {
    pub fn open(root: &Path) -> Result<ImageManager, podlab_image::Error> {
        Ok(ImageManager::with(Backend::Store(
            podlab_image::Store::open(root)?,
        )))
    }

    /// The images of a CRI runtime (its ImageService on the same socket).
    pub fn remote(runtime: Arc<RemoteRuntime>) -> ImageManager {
        ImageManager::with(Backend::Cri(runtime))
    }

    fn with(backend: Backend) -> ImageManager {
        ImageManager {
            backend,
            serial: Mutex::new(()),
            first_detected: Mutex::new(HashMap::new()),
            last_used: Mutex::new(HashMap::new()),
        }
    }

    /// podlab-image's store, when the images are in this process.
    pub fn store(&self) -> Option<&podlab_image::Store> {
        match &self.backend {
            Backend::Store(store) => Some(store),
            Backend::Cri(_) => None,
        }
    }

    /// Whether `image` is podlab's built-in busybox: made from the host's busybox, in no
    /// registry, so it is never pulled whatever the policy (it is made when missing).
    pub fn is_builtin(image: &str) -> bool {
        podlab_image::reference::normalize(image).ok().as_deref()
            == Some(podlab_image::busybox::NAME)
    }

    /// The built-in busybox, made if the store lacks it (a CRI runtime has its own images).
    pub fn ensure_builtin(&self) -> Result<(), podlab_image::Error> {
        match &self.backend {
            Backend::Store(store) => store.ensure_builtin_busybox().map(drop),
            Backend::Cri(_) => Ok(()),
        }
    }

    /// Whether the store has `image` (kubelet asks the runtime's ImageStatus).
    pub fn present(&self, image: &str) -> bool {
        match &self.backend {
            Backend::Store(store) => store.config(image).is_ok(),
            Backend::Cri(remote) => remote.image_status(image).is_ok_and(|i| i.is_some()),
        }
    }

    /// Pulls `image` with the pod's credentials, after the pull before it ended.
    pub fn pull(&self, image: &str, secrets: &PullSecrets) -> Result<Pulled, String> {
        let asked = Instant::now();
        let reference = Reference::parse(image).map_err(|e| e.to_string())?;
        let _turn = self.serial.lock().unwrap_or_else(|e| e.into_inner());
        let started = Instant::now();
        let credentials = secrets.credentials_for(&reference.domain);
        let size = match &self.backend {
            Backend::Store(store) => {
                let options = PullOptions {
                    credentials,
                    ..PullOptions::default()
                };
                podlab_image::pull::pull(store, &reference, &options)
                    .map_err(|e| e.to_string())?
                    .size
            }
            Backend::Cri(remote) => {
                remote
                    .pull_image(image, credentials.as_ref(), None)
                    .map_err(|e| e.to_string())?;
                remote
                    .image_status(image)
                    .ok()
                    .flatten()
                    .map_or(0, |i| i.size)
            }
        };
        Ok(Pulled {
            size,
            pulling: started.elapsed(),
            including_waiting: asked.elapsed(),
        })
    }

    /// One image GC run: `statfs` of the image filesystem, and at or above the high threshold
    /// the unused images removed, least recently used first, down to the low threshold. `used`
    /// are the images of every container the runtime has (running or not). Returns the plan
    /// and the images actually removed.
    pub fn collect_garbage(
        &self,
        policy: GcPolicy,
        used: &[String],
    ) -> Result<(GcPlan, Vec<String>), String> {
        let store = match &self.backend {
            Backend::Store(store) => store,
            Backend::Cri(remote) => return self.collect_through_cri(remote, policy, used),
        };
        let fs = image_fs(store.root())?;
        let used: Vec<String> = used.iter().map(|u| normalized(u)).collect();
        let now = SystemTime::now();
        let usage = store.usage().map_err(|e| e.to_string())?;
        let images: Vec<GcImage> = {
            // kubelet's detectImages: an image seen for the first time is detected now.
            let mut detected = self
                .first_detected
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let keys: Vec<(String, String)> = usage
                .iter()
                .map(|u| (u.name.clone(), u.digest.to_string()))
                .collect();
            detected.retain(|key, _| keys.contains(key));
            usage
                .into_iter()
                .zip(keys)
                .map(|(u, key)| GcImage {
                    in_use: u.in_use || used.contains(&u.name),
                    first_detected: *detected.entry(key).or_insert(now),
                    name: u.name,
                    size: u.size,
                    last_used: u.last_used,
                })
                .collect()
        };
        let plan = crate::images::gc_plan(policy, fs, &images, now);
        let mut removed = Vec::new();
        if let GcPlan::Free { remove, .. } = &plan {
            for name in remove {
                match store.remove(name) {
                    Ok(()) => removed.push(name.clone()),
                    Err(e) => {
                        eprintln!("podlab node: image garbage collection: removing {name}: {e}")
                    }
                }
            }
        }
        Ok((plan, removed))
    }
}

impl ImageManager {
    /// [`ImageManager::collect_garbage`] of a CRI runtime's images, as kubelet's
    /// `realImageGCManager` does it: the image filesystem is the mount point `ImageFsInfo`
    /// names, the images are `ListImages`' (by id; in use when a container's image or image
    /// ref names it by id, tag or digest, or the runtime pins it), and each removal is a
    /// `RemoveImage` of the id. The runtime tells no image's last use: as in kubelet, an image
    /// seen in use at a GC run was last used then.
    fn collect_through_cri(
        &self,
        remote: &RemoteRuntime,
        policy: GcPolicy,
        used: &[String],
    ) -> Result<(GcPlan, Vec<String>), String> {
        let mountpoint = remote
            .image_fs_mountpoint()
            .map_err(|e| e.to_string())?
            .ok_or("ImageFsInfo named no image filesystem")?;
        let fs = image_fs(&mountpoint)?;
        let listed = remote.list_images().map_err(|e| e.to_string())?;
        let used: Vec<String> = used.iter().map(|u| normalized(u)).collect();
        let now = SystemTime::now();
        let images: Vec<GcImage> = {
            let mut detected = self
                .first_detected
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let mut last_used = self.last_used.lock().unwrap_or_else(|e| e.into_inner());
            let key = |image: &podlab_cri::proto::Image| (image.id.clone(), image.id.clone());
            detected.retain(|k, _| listed.iter().any(|i| key(i) == *k));
            last_used.retain(|id, _| listed.iter().any(|i| i.id == *id));
            listed
                .iter()
                .map(|image| {
                    let names = std::iter::once(&image.id)
                        .chain(&image.repo_tags)
                        .chain(&image.repo_digests);
                    let in_use =
                        image.pinned || names.map(|n| normalized(n)).any(|n| used.contains(&n));
                    if in_use {
                        last_used.insert(image.id.clone(), now);
                    }
                    GcImage {
                        name: image.id.clone(),
                        size: image.size,
                        last_used: last_used.get(&image.id).copied(),
                        in_use,
                        first_detected: *detected.entry(key(image)).or_insert(now),
                    }
                })
                .collect()
        };
        let plan = crate::images::gc_plan(policy, fs, &images, now);
        let mut removed = Vec::new();
        if let GcPlan::Free { remove, .. } = &plan {
            for id in remove {
                let shown = listed
                    .iter()
                    .find(|i| i.id == *id)
                    .and_then(|i| i.repo_tags.first())
                    .map_or_else(|| id.clone(), |tag| format!("{tag} ({id})"));
                match remote.remove_image(id) {
                    Ok(()) => removed.push(shown),
                    Err(e) => {
                        eprintln!("podlab node: image garbage collection: removing {shown}: {e}")
                    }
                }
            }
        }
        Ok((plan, removed))
    }
}

/// The image filesystem's size and free bytes, as cadvisor reports them to kubelet.
pub fn image_fs(path: &Path) -> Result<FsStats, String> {
    let stat =
        nix::sys::statvfs::statvfs(path).map_err(|e| format!("statfs {}: {e}", path.display()))?;
    let block = stat.fragment_size() as u64;
    Ok(FsStats {
        capacity: stat.blocks() as u64 * block,
        available: stat.blocks_available() as u64 * block,
    })
}

fn normalized(name: &str) -> String {
    Reference::parse(name)
        .map(|r| r.to_string())
        .unwrap_or_else(|_| name.to_string())
}

/// The pod's `imagePullSecrets` read from the store (`getPullSecretsForPod`): Secrets of the
/// docker config types are parsed; a Secret that is not there is listed in `missing`, one of
/// another type or unreadable is skipped, as kubelet does.
pub fn pull_secrets(store: &podlab_control::Store, pod: &Pod) -> PullSecrets {
    let mut secrets = PullSecrets::default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let names = pod
        .spec
        .iter()
        .flat_map(|s| s.image_pull_secrets.iter().flatten())
        .map(|r| r.name.as_str())
        .filter(|n| !n.is_empty());
    for name in names {
        let Ok(secret) = store.get::<Secret>(namespace, name) else {
            secrets.missing.push(name.to_string());
            continue;
        };
        if let Some(config) = docker_config_of(&secret) {
            secrets.configs.push(config);
        }
    }
    secrets
}

/// The registry credentials a Secret holds, if it is of a docker config type.
fn docker_config_of(secret: &Secret) -> Option<DockerConfig> {
    let kind = secret.type_.as_deref()?;
    let data = secret.data.as_ref()?;
    if kind == DOCKER_CONFIG_JSON.0 {
        DockerConfig::parse(&data.get(DOCKER_CONFIG_JSON.1)?.0).ok()
    } else if kind == DOCKER_CFG.0 {
        // The old format is the `auths` map alone.
        let auths: serde_json::Value = serde_json::from_slice(&data.get(DOCKER_CFG.1)?.0).ok()?;
        let wrapped = serde_json::json!({ "auths": auths });
        DockerConfig::parse(&serde_json::to_vec(&wrapped).ok()?).ok()
    } else {
        None
    }
}

/// The image and `imagePullPolicy` of the pod's container `name` (any kind).
pub fn container_image(pod: &Pod, name: &str) -> Option<(String, Option<String>)> {
    let spec = pod.spec.as_ref()?;
    let found = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .map(|c| (c.image.clone(), c.image_pull_policy.clone()))
        .or_else(|| {
            spec.ephemeral_containers
                .iter()
                .flatten()
                .find(|c| c.name == name)
                .map(|c| (c.image.clone(), c.image_pull_policy.clone()))
        })?;
    Some((found.0.unwrap_or_default(), found.1))
}

/// The image volumes container `name` of `pod` mounts: each volume's reference and
/// `pullPolicy`, in the order of its volumeMounts.
pub fn image_volumes(pod: &Pod, name: &str) -> Vec<(String, Option<String>)> {
    let mut images: Vec<(String, Option<String>)> = Vec::new();
    for mount in crate::subpath::volume_mounts(pod, name) {
        let Some(source) = crate::volume::image_of(pod, &mount.name) else {
            continue;
        };
        if let Some(reference) = &source.reference {
            if !images.iter().any(|(r, _)| r == reference) {
                images.push((reference.clone(), source.pull_policy.clone()));
            }
        }
    }
    images
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(kind: &str, key: &str, json: &str) -> Secret {
        Secret {
            type_: Some(kind.into()),
            data: Some([(key.to_string(), ByteString(json.as_bytes().to_vec()))].into()),
            ..Secret::default()
        }
    }

    #[test]
    fn docker_config_secrets_give_credentials_for_their_registry() {
        let json = r#"{"auths":{"127.0.0.1:5000":{"username":"u","password":"p"}}}"#;
        let config =
            docker_config_of(&secret(DOCKER_CONFIG_JSON.0, DOCKER_CONFIG_JSON.1, json)).unwrap();
        assert!(config.credentials_for("127.0.0.1:5000").is_some());
        assert!(config.credentials_for("docker.io").is_none());
        let cfg = r#"{"127.0.0.1:5000":{"username":"u","password":"p"}}"#;
        let old = docker_config_of(&secret(DOCKER_CFG.0, DOCKER_CFG.1, cfg)).unwrap();
        assert!(old.credentials_for("127.0.0.1:5000").is_some());
        assert!(docker_config_of(&secret("Opaque", DOCKER_CONFIG_JSON.1, json)).is_none());
        let secrets = PullSecrets {
            configs: vec![config],
            missing: vec![],
        };
        assert!(!format!("{secrets:?}").contains("\"p\""));
    }

    #[test]
    fn the_builtin_busybox_is_known_by_any_of_its_names() {
        assert!(ImageManager::is_builtin("busybox"));
        assert!(ImageManager::is_builtin("docker.io/library/busybox:latest"));
        assert!(!ImageManager::is_builtin("busybox:1.36"));
        assert!(!ImageManager::is_builtin("127.0.0.1:5000/busybox"));
    }
}
