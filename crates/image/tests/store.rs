//! The image store against the real tools and the real kernel: layouts made by umoci, archives
//! made by skopeo, the built-in busybox, and overlay mounts of the snapshots in a forked child's
//! own mount namespace. Needs root (whiteout devices, trusted.* xattrs, mount).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use podlab_image::{layer, Error, Store};
use tempfile::TempDir;

/// A tool from PATH, or None with the reason printed (the test then checks nothing more).
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        eprintln!("SKIPPED: {name} is not installed (apt-get install {name})");
    }
    found
}

fn run(program: &Path, args: &[&str]) {
    check(
        Command::new(program).args(args),
        &format!("{} {args:?}", program.display()),
    );
}

fn check(command: &mut Command, what: &str) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{what}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `program` in a private mount namespace with a tmpfs over /var/lib: skopeo and podman keep a
/// blob cache in /var/lib/containers, which a test must not leave on the host.
fn confined(program: &Path) -> Command {
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount -t tmpfs podlab-test /var/lib && exec "$0" "$@""#)
        .arg(program);
    command
}

/// An OCI layout `DIR:t` made by umoci with two layers: the first adds `etc/hello`, the second
/// deletes it again and adds `x`.
fn umoci_layout(dir: &Path) -> Option<PathBuf> {
    let umoci = tool("umoci")?;
    let layout = dir.join("layout");
    let image = format!("{}:t", layout.display());
    let bundle = dir.join("bundle");
    run(&umoci, &["init", "--layout", layout.to_str().unwrap()]);
    run(&umoci, &["new", "--image", &image]);
    run(
        &umoci,
        &["unpack", "--image", &image, bundle.to_str().unwrap()],
    );
    fs::create_dir_all(bundle.join("rootfs/etc")).unwrap();
    fs::write(bundle.join("rootfs/etc/hello"), "hello from layer 1\n").unwrap();
    run(
        &umoci,
        &["repack", "--image", &image, bundle.to_str().unwrap()],
    );
    fs::remove_dir_all(&bundle).unwrap();
    run(
        &umoci,
        &["unpack", "--image", &image, bundle.to_str().unwrap()],
    );
    fs::remove_file(bundle.join("rootfs/etc/hello")).unwrap();
    fs::write(bundle.join("rootfs/x"), "x from layer 2\n").unwrap();
    run(
        &umoci,
        &["repack", "--image", &image, bundle.to_str().unwrap()],
    );
    fs::remove_dir_all(&bundle).unwrap();
    Some(layout)
}

/// `skopeo copy oci:LAYOUT:t DEST` (DEST like `oci-archive:F` or `docker-archive:F:name:t`).
fn skopeo_copy(layout: &Path, dest: &str, extra: &[&str]) -> Option<()> {
    let skopeo = tool("skopeo")?;
    let source = format!("oci:{}:t", layout.display());
    let mut args = vec!["copy", "-q"];
    args.extend(extra);
    args.extend([source.as_str(), dest]);
    check(confined(&skopeo).args(&args), &format!("skopeo {args:?}"));
    Some(())
}

/// podman, confined to `dir`: its storage (vfs: no mounts), run and tmp folders and network
/// config all live there, so nothing is left on the host.
struct Podman {
    program: PathBuf,
    dir: PathBuf,
}

impl Podman {
    fn new(dir: &Path) -> Option<Podman> {
        let program = tool("podman")?;
        let dir = dir.join("podman");
        let tmp = dir.join("tmp");
        fs::create_dir_all(&tmp).unwrap();
        let conf = format!(
            "[network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [\"/usr/lib/cni\"]\n\
             network_config_dir = \"{0}/net\"\n[engine]\ntmp_dir = \"{0}/libpod\"\n\
             events_logger = \"none\"\n",
            dir.display()
        );
        fs::write(dir.join("containers.conf"), conf).unwrap();
        Some(Podman { program, dir })
    }

    fn run(&self, args: &[&str]) {
        let root = self.dir.join("root");
        let runroot = self.dir.join("run");
        let mut command = confined(&self.program);
        command
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("TMPDIR", self.dir.join("tmp"))
            .arg("--root")
            .arg(&root)
            .arg("--runroot")
            .arg(&runroot)
            .args(["--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"])
            .args(args);
        check(&mut command, &format!("podman {args:?}"));
    }
}

fn store_in(dir: &Path) -> Store {
    Store::open(&dir.join("store")).unwrap()
}

/// Every path under `root` with its kind and size: what "the store's folders are unchanged" means.
fn tree(root: &Path) -> BTreeMap<PathBuf, (String, u64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = fs::symlink_metadata(entry.path()).unwrap();
            let kind = format!("{:?}", meta.file_type());
            if meta.is_dir() {
                stack.push(entry.path());
            }
            let size = if meta.is_file() { meta.len() } else { 0 };
            out.insert(
                entry.path().strip_prefix(root).unwrap().to_owned(),
                (kind, size),
            );
        }
    }
    out
}

#[test]
fn an_umoci_layout_imports_with_its_layers_and_whiteout() {
    let dir = TempDir::new().unwrap();
    let Some(layout) = umoci_layout(dir.path()) else {
        return;
    };
    let store = store_in(dir.path());

    let err = store.import(&layout, None).unwrap_err();
    assert!(
        matches!(err, Error::Unnamed { .. }),
        "a bare tag names no image: {err}"
    );
    assert!(err.to_string().contains("podlab image import"), "{err}");

    let summaries = store.import(&layout, Some("umoci-test:t")).unwrap();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].name, "docker.io/library/umoci-test:t");
    assert_eq!(summaries[0].layers, 2);

    let image = store.resolve("umoci-test:t").unwrap();
    assert_eq!(image.manifest_digest, summaries[0].digest);
    assert_eq!(image.architecture, "amd64");
    let [bottom, top] = &image.layers[..] else {
        panic!("two layers: {:?}", image.layers)
    };
    assert_eq!(
        fs::read_to_string(bottom.snapshot.join("etc/hello")).unwrap(),
        "hello from layer 1\n"
    );
    assert!(
        layer::is_whiteout(&top.snapshot.join("etc/hello")),
        "umoci's etc/.wh.hello is an overlay whiteout in the top snapshot"
    );
    assert_eq!(
        fs::read_to_string(top.snapshot.join("x")).unwrap(),
        "x from layer 2\n"
    );
    assert_eq!(
        store.lowerdirs(&image),
        vec![top.snapshot.clone(), bottom.snapshot.clone()]
    );
    assert!(top.snapshot.starts_with(store.snapshots_dir()));
    assert!(
        top.snapshot.ends_with(top.chain_id.hex()),
        "snapshots are named by chain id"
    );
    assert_ne!(top.chain_id, top.diff_id);
    assert_eq!(bottom.chain_id, bottom.diff_id);

    // A second image in the layout: a name then has to pick one by its tag.
    let umoci = tool("umoci").unwrap();
    run(
        &umoci,
        &["new", "--image", &format!("{}:empty", layout.display())],
    );
    let err = store.import(&layout, Some("pick:nope")).unwrap_err();
    assert!(matches!(err, Error::Ambiguous { .. }), "{err}");
    let picked = store.import(&layout, Some("pick:t")).unwrap();
    assert_eq!(
        picked[0].digest, summaries[0].digest,
        "tag t picks the image tagged t"
    );
    let empty = store.import(&layout, Some("nothing:empty")).unwrap();
    assert_eq!(empty[0].layers, 0);
    let empty = store.resolve("nothing:empty").unwrap();
    let lowers = store.lowerdirs(&empty);
    assert_eq!(
        lowers.len(),
        1,
        "overlayfs needs a lower folder even for no layers"
    );
    assert_eq!(fs::read_dir(&lowers[0]).unwrap().count(), 0);

    // The name index is an OCI layout that umoci itself can read.
    let listed = Command::new(umoci)
        .args(["ls", "--layout"])
        .arg(store.root())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("docker.io/library/umoci-test:t"),
        "{listed:?}"
    );
}

#[test]
fn oci_and_docker_archives_of_one_layout_share_content_and_snapshots() {
    let dir = TempDir::new().unwrap();
    let Some(layout) = umoci_layout(dir.path()) else {
        return;
    };
    let oci_archive = dir.path().join("image-oci.tar");
    let docker_archive = dir.path().join("image-docker.tar");
    let dest = format!("oci-archive:{}", oci_archive.display());
    let Some(()) = skopeo_copy(&layout, &dest, &[]) else {
        return;
    };
    let dest = format!("docker-archive:{}:example/app:v1", docker_archive.display());
    skopeo_copy(&layout, &dest, &[]).unwrap();
    let store = store_in(dir.path());

    let from_layout = store.import(&layout, Some("layout:t")).unwrap().remove(0);
    let from_oci = store
        .import(&oci_archive, Some("oci-archive:t"))
        .unwrap()
        .remove(0);
    assert_eq!(
        from_oci.digest, from_layout.digest,
        "skopeo copied the manifest as it is"
    );

    let from_docker = store.import(&docker_archive, None).unwrap();
    assert_eq!(from_docker.len(), 1);
    assert_eq!(
        from_docker[0].name, "docker.io/example/app:v1",
        "named by the archive's RepoTags"
    );
    assert_eq!(from_docker[0].id, from_layout.id, "the same config");
    let docker = store.resolve("example/app:v1").unwrap();
    let oci = store.resolve("layout:t").unwrap();
    let chains = |i: &podlab_image::Image| {
        i.layers
            .iter()
            .map(|l| l.chain_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        chains(&docker),
        chains(&oci),
        "uncompressed docker layers, same DiffIDs, same snapshots"
    );
    assert_ne!(
        docker.layers[0].digest, oci.layers[0].digest,
        "docker-archive layers are plain tars"
    );
    assert_eq!(
        docker.layers[0].media_type,
        "application/vnd.oci.image.layer.v1.tar"
    );
    let snapshots = fs::read_dir(store.snapshots_dir()).unwrap().count();
    assert_eq!(snapshots, 2 + 1, "two layer snapshots and the empty one");

    // Removing names only frees what no other name needs.
    store.remove("layout:t").unwrap();
    assert!(
        oci.layers.iter().all(|l| l.snapshot.is_dir()),
        "oci-archive:t still needs them"
    );
    store.remove("oci-archive:t").unwrap();
    assert!(
        oci.layers.iter().all(|l| l.snapshot.is_dir()),
        "example/app:v1 still needs them"
    );
    assert!(!store
        .root()
        .join("blobs/sha256")
        .join(oci.layers[0].digest.hex())
        .exists());
    store.remove("docker.io/example/app:v1").unwrap();
    assert!(store.list().unwrap().is_empty());
    assert_eq!(
        fs::read_dir(store.root().join("blobs/sha256"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        fs::read_dir(store.snapshots_dir()).unwrap().count(),
        1,
        "only the empty snapshot"
    );
    let trash = store.root().join("trash");
    assert_eq!(
        fs::read_dir(&trash).unwrap().count(),
        0,
        "the snapshots and blobs taken away are deleted once the lock is let go, not kept in \
         the trash"
    );
    // A collection killed after it took a snapshot and a blob away, before it deleted them:
    // the next does.
    fs::create_dir_all(trash.join("left-by-a-killed-collection/bin")).unwrap();
    fs::write(trash.join("left-by-a-killed-collection/bin/sh"), b"x").unwrap();
    fs::write(trash.join(format!("blob-{}-1-0", "cd".repeat(32))), b"x").unwrap();
    // And a pull killed while it unpacked a layer as it downloaded; its resumable download
    // stays for the next pull (`image prune` takes it).
    let ingest = store.root().join("ingest");
    let hex = "ab".repeat(32);
    fs::create_dir_all(ingest.join(format!("{hex}.unpacking/bin"))).unwrap();
    // One killed between making its folder under a name of its own and renaming it.
    let unnamed = format!("{}.unpacking.4242-0-123", "ef".repeat(32));
    fs::create_dir(ingest.join(&unnamed)).unwrap();
    fs::write(ingest.join(format!("{hex}.partial")), b"half").unwrap();
    store.gc().unwrap();
    assert_eq!(fs::read_dir(&trash).unwrap().count(), 0);
    assert!(!ingest.join(format!("{hex}.unpacking")).exists());
    assert!(!ingest.join(&unnamed).exists());
    assert!(ingest.join(format!("{hex}.partial")).exists());
    let err = store.remove("example/app:v1").unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

#[test]
fn zstd_layers_import() {
    let dir = TempDir::new().unwrap();
    let Some(layout) = umoci_layout(dir.path()) else {
        return;
    };
    let zstd_layout = dir.path().join("zstd");
    let dest = format!("oci:{}:t", zstd_layout.display());
    let Some(()) = skopeo_copy(&layout, &dest, &["--dest-compress-format", "zstd"]) else {
        return;
    };
    let store = store_in(dir.path());
    store.import(&zstd_layout, Some("zstd:t")).unwrap();
    let image = store.resolve("zstd:t").unwrap();
    assert_eq!(
        image.layers[1].media_type,
        "application/vnd.oci.image.layer.v1.tar+zstd"
    );
    assert!(layer::is_whiteout(
        &image.layers[1].snapshot.join("etc/hello")
    ));
}

#[test]
fn a_broken_import_leaves_the_store_as_it_was() {
    let dir = TempDir::new().unwrap();
    let store = store_in(dir.path());
    store.ensure_builtin_busybox().unwrap();
    let Some(layout) = umoci_layout(dir.path()) else {
        return;
    };
    let before_list = store.list().unwrap();
    let before_tree = tree(store.root());

    // A truncated oci-archive.
    let archive = dir.path().join("image.tar");
    let dest = format!("oci-archive:{}", archive.display());
    let Some(()) = skopeo_copy(&layout, &dest, &[]) else {
        return;
    };
    let bytes = fs::read(&archive).unwrap();
    let truncated = dir.path().join("truncated.tar");
    fs::write(&truncated, &bytes[..bytes.len() / 2 + 100]).unwrap();
    let err = store.import(&truncated, Some("broken:t")).unwrap_err();
    eprintln!("truncated archive: {err}");
    assert!(
        matches!(err, Error::Format { .. } | Error::BlobMissing { .. }),
        "{err}"
    );

    // A layout whose layer blob has one byte flipped.
    let manifest: serde_json::Value = {
        let index: serde_json::Value =
            serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap();
        let digest = index["manifests"][0]["digest"].as_str().unwrap().to_owned();
        let path = layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"));
        serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
    };
    let layer_digest = manifest["layers"][1]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    let blob = layout.join("blobs/sha256").join(layer_digest);
    let mut content = fs::read(&blob).unwrap();
    let middle = content.len() / 2;
    content[middle] ^= 0x01;
    fs::write(&blob, &content).unwrap();
    let err = store.import(&layout, Some("broken:t")).unwrap_err();
    match &err {
        Error::DigestMismatch { expected, path, .. } => {
            assert_eq!(
                expected.hex(),
                layer_digest,
                "the error names the blob: {err}"
            );
            assert!(path.ends_with(layer_digest), "{err}");
        }
        other => panic!("expected a digest mismatch, got {other}"),
    }

    // Not an image at all.
    let junk = dir.path().join("junk");
    fs::write(
        &junk,
        "no tar here, just text that is long enough to be read as a header...",
    )
    .unwrap();
    assert!(store.import(&junk, None).is_err());

    assert_eq!(store.list().unwrap(), before_list);
    assert_eq!(
        tree(store.root()),
        before_tree,
        "no blob, snapshot or staging folder is left"
    );
}

#[test]
fn corrupt_blobs_are_found_on_read() {
    let dir = TempDir::new().unwrap();
    let store = store_in(dir.path());
    store.ensure_builtin_busybox().unwrap();
    let image = store.resolve("busybox").unwrap();
    let blobs = store.root().join("blobs/sha256");

    let flip = |path: &Path| {
        let mut content = fs::read(path).unwrap();
        content[10] ^= 0x20;
        fs::write(path, content).unwrap();
    };
    let config = blobs.join(image.config_digest.hex());
    flip(&config);
    let err = store.resolve("busybox").unwrap_err();
    match &err {
        Error::DigestMismatch { expected, .. } => {
            assert_eq!(expected, &image.config_digest, "{err}")
        }
        other => panic!("expected a digest mismatch, got {other}"),
    }
    assert!(
        err.to_string().contains(&image.config_digest.to_string()),
        "{err}"
    );
    flip(&config); // back as it was

    let top = &image.layers[1];
    flip(&blobs.join(top.digest.hex()));
    let err = store.verify("busybox").unwrap_err();
    assert!(
        matches!(&err, Error::DigestMismatch { expected, .. } if expected == &top.digest),
        "{err}"
    );
    // A lost snapshot is unpacked again from its blob, which is then found corrupt.
    fs::remove_dir_all(&top.snapshot).unwrap();
    let err = store.resolve("busybox").unwrap_err();
    assert!(
        matches!(&err, Error::DigestMismatch { expected, .. } if expected == &top.digest),
        "{err}"
    );
    assert!(
        !top.snapshot.exists(),
        "no half-unpacked snapshot is left under its name"
    );

    // An image that cannot even be read can still be removed, and its content goes with it.
    flip(&config);
    assert!(store.list().is_err(), "listing reads every config");
    store.remove("busybox").unwrap();
    assert!(store.list().unwrap().is_empty());
    assert_eq!(fs::read_dir(&blobs).unwrap().count(), 0);
    assert_eq!(
        fs::read_dir(store.snapshots_dir()).unwrap().count(),
        1,
        "only the empty snapshot"
    );
}

#[test]
fn the_builtin_busybox_is_two_real_stable_layers() {
    let dir = TempDir::new().unwrap();
    let store = Store::open(&dir.path().join("a")).unwrap();
    let first = store.ensure_builtin_busybox().unwrap();
    assert_eq!(
        store.ensure_builtin_busybox().unwrap(),
        first,
        "the second call only looks it up"
    );
    let other = Store::open(&dir.path().join("b")).unwrap();
    let rebuilt = other.ensure_builtin_busybox().unwrap();
    assert_eq!(
        rebuilt.digest, first.digest,
        "deterministic: same busybox, same manifest digest"
    );
    assert_eq!(rebuilt.id, first.id);
    assert_eq!(first.layers, 2);
    assert_eq!(first.name, "docker.io/library/busybox:latest");

    for name in [
        "busybox",
        "busybox:latest",
        "docker.io/library/busybox:latest",
        &first.digest.to_string(),
    ] {
        assert_eq!(
            store.resolve(name).unwrap().manifest_digest,
            first.digest,
            "{name}"
        );
    }
    let image = store.resolve("busybox").unwrap();
    assert_eq!(image.config.cmd, vec!["sh"]);
    assert_eq!(image.config.working_dir, "/");
    assert!(image
        .config
        .env
        .iter()
        .any(|e| e.starts_with("PATH=") && e.contains("/bin")));
    let lowers = store.lowerdirs(&image);
    assert_eq!(
        lowers,
        vec![
            image.layers[1].snapshot.clone(),
            image.layers[0].snapshot.clone()
        ],
        "top first"
    );
    let base = &image.layers[0].snapshot;
    let top = &image.layers[1].snapshot;
    assert_eq!(
        fs::read(base.join("bin/busybox")).unwrap(),
        fs::read("/bin/busybox").unwrap()
    );
    assert_eq!(
        fs::read_link(base.join("bin/sh")).unwrap(),
        PathBuf::from("/bin/busybox")
    );
    assert!(fs::read_to_string(base.join("etc/passwd"))
        .unwrap()
        .contains("nobody:x:65534"));
    assert_eq!(
        fs::symlink_metadata(base.join("tmp")).unwrap().mode() & 0o7777,
        0o1777
    );
    assert!(top.join("etc/podlab-layer").is_file());
    assert!(layer::is_whiteout(&top.join("etc/issue")));
    assert!(
        !top.join("bin").exists(),
        "the top layer holds only its own files"
    );

    let details = store.inspect("busybox").unwrap();
    assert_eq!(details.layers, image.layers);
    let json = serde_json::to_value(&details).unwrap();
    assert_eq!(json["config"]["config"]["Cmd"][0], "sh");

    let err = store.resolve("nothere").unwrap_err();
    assert!(err.is_not_found());
    assert!(
        err.to_string().contains("podlab image import FILE"),
        "{err}"
    );
}

#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct Seen {
    busybox: bool,
    marker: bool,
    issue: bool,
    passwd: bool,
    remove_refused: String,
}

/// Mounts an overlay of `lowers` in a forked child's own mount namespace and runs `look` on
/// the merged folder; the mount goes away with the child.
#[test]
fn only_a_busybox_name_builds_the_builtin_image() {
    let dir = TempDir::new().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    store.ensure_builtin_if_named("alpine:3.20").unwrap();
    store.ensure_builtin_if_named("not a reference!").unwrap();
    assert!(
        store.list().unwrap().is_empty(),
        "nothing built for other names"
    );
    store.ensure_builtin_if_named("busybox").unwrap();
    let built = store.list().unwrap();
    assert_eq!(built.len(), 1);
    assert_eq!(built[0].name, "docker.io/library/busybox:latest");
    let before = tree(&dir.path().join("store"));
    store
        .ensure_builtin_if_named("docker.io/library/busybox:latest")
        .unwrap();
    assert_eq!(tree(&dir.path().join("store")), before, "built once");
}

fn in_overlay<T, F>(dir: &Path, lowers: &[PathBuf], look: F) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned,
    F: FnOnce(&Path) -> T,
{
    use nix::mount::{mount, MsFlags};
    let (upper, work, merged) = (dir.join("upper"), dir.join("work"), dir.join("merged"));
    for d in [&upper, &work, &merged] {
        fs::create_dir_all(d).unwrap();
    }
    let lowerdir = lowers
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let options = format!(
        "lowerdir={lowerdir},upperdir={},workdir={}",
        upper.display(),
        work.display()
    );
    let fail = |what: &str, e: nix::Error| podlab_ns::Error::Invalid(format!("{what}: {e}"));
    podlab_ns::child::run_in_child(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).map_err(|e| fail("unshare", e))?;
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(|e| fail("making / private", e))?;
        mount(
            Some("overlay"),
            &merged,
            Some("overlay"),
            MsFlags::empty(),
            Some(options.as_str()),
        )
        .map_err(|e| fail("mounting the overlay", e))?;
        Ok(look(&merged))
    })
    .unwrap()
}

#[test]
fn an_overlay_of_the_busybox_snapshots_is_its_root_filesystem() {
    let dir = TempDir::new().unwrap();
    let store = store_in(dir.path());
    store.ensure_builtin_busybox().unwrap();
    let image = store.resolve("busybox").unwrap();
    let lowers = store.lowerdirs(&image);

    let seen: Seen = in_overlay(dir.path(), &lowers, |merged| Seen {
        busybox: merged.join("bin/busybox").is_file(),
        marker: merged.join("etc/podlab-layer").is_file(),
        issue: fs::symlink_metadata(merged.join("etc/issue")).is_ok(),
        passwd: merged.join("etc/passwd").is_file(),
        // The kernel shows this namespace's overlay in /proc/self/mountinfo: the image is in use.
        remove_refused: match store.remove("busybox") {
            Err(e @ Error::InUse { .. }) => e.to_string(),
            other => format!("not refused: {other:?}"),
        },
    });
    assert!(seen.busybox, "bin/busybox from the base layer");
    assert!(seen.marker, "etc/podlab-layer from the top layer");
    assert!(
        !seen.issue,
        "the top layer's whiteout hides the base layer's etc/issue"
    );
    assert!(seen.passwd);
    assert!(
        seen.remove_refused.contains("in use"),
        "{}",
        seen.remove_refused
    );

    // The child and its mount namespace are gone: now the image can go, and its content with it.
    assert!(
        store.list().unwrap().len() == 1,
        "the refused remove changed nothing"
    );
    store.remove("busybox").unwrap();
    assert!(!lowers[0].exists() && !lowers[1].exists());
    let gc = store.gc().unwrap();
    assert_eq!(
        (gc.blobs_removed, gc.snapshots_removed),
        (0, 0),
        "remove already collected"
    );
}

/// The CRI's RemoveImage (`Store::untag_until_collected`, the collection after it making the
/// name's removal durable) is not refused while a container uses the image, as containerd's is
/// not; the garbage collection after it keeps what an overlay has mounted.
#[test]
fn untag_of_a_mounted_image_leaves_its_snapshots_to_gc_until_unmounted() {
    let dir = TempDir::new().unwrap();
    let store = store_in(dir.path());
    store.ensure_builtin_busybox().unwrap();
    let image = store.resolve("busybox").unwrap();
    let lowers = store.lowerdirs(&image);
    let work = dir.path().join("work-area");
    fs::create_dir_all(&work).unwrap();

    let (untagged, kept_while_mounted) = in_overlay(&work, &lowers, |_merged| {
        let untagged = store
            .untag_until_collected("busybox")
            .map_err(|e| e.to_string());
        let gc = store.gc().map(|_| ()).map_err(|e| e.to_string());
        (untagged.and(gc), lowers.iter().all(|lower| lower.is_dir()))
    });
    assert_eq!(untagged, Ok(()));
    assert!(store.list().unwrap().is_empty(), "the name is gone");
    assert!(
        kept_while_mounted,
        "gc keeps the snapshots an overlay has mounted"
    );

    // The overlay's mount namespace is gone with its child: the next gc takes the snapshots.
    let gc = store.gc().unwrap();
    assert_eq!(gc.snapshots_removed, 2, "{gc:?}");
    assert!(!lowers[0].exists() && !lowers[1].exists());
}

#[test]
fn an_opaque_folder_hides_the_lower_folder_in_the_overlay() {
    let dir = TempDir::new().unwrap();
    let lower = dir.path().join("lower");
    let upper_layer = dir.path().join("upper-layer");
    let tar = |entries: &[(&str, &[u8])]| {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_mode(0o644);
            header.set_uid(0);
            header.set_gid(0);
            header.set_mtime(0);
            header.set_size(data.len() as u64);
            builder.append_data(&mut header, name, *data).unwrap();
        }
        builder.into_inner().unwrap()
    };
    fs::create_dir(&lower).unwrap();
    layer::unpack(
        &tar(&[("d/a", b"a"), ("d/b", b"b"), ("kept", b"k")])[..],
        &lower,
        &[],
        "lower",
    )
    .unwrap();
    fs::create_dir(&upper_layer).unwrap();
    let top = tar(&[("d/.wh..wh..opq", b""), ("d/c", b"c"), (".wh.kept", b"")]);
    layer::unpack(
        &top[..],
        &upper_layer,
        std::slice::from_ref(&lower),
        "upper",
    )
    .unwrap();

    let names: (Vec<String>, bool) = in_overlay(
        dir.path(),
        &[upper_layer.clone(), lower.clone()],
        |merged| {
            let mut names: Vec<String> = fs::read_dir(merged.join("d"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            (names, merged.join("kept").exists())
        },
    );
    assert_eq!(
        names.0,
        vec!["c"],
        "the opaque d shows only the upper layer's files"
    );
    assert!(!names.1, "the whiteout hides kept");
    assert!(fs::symlink_metadata(upper_layer.join("kept"))
        .unwrap()
        .file_type()
        .is_char_device());
}

#[test]
fn podman_saves_in_both_formats_import() {
    let dir = TempDir::new().unwrap();
    let Some(podman) = Podman::new(dir.path()) else {
        return;
    };
    let rootfs = dir.path().join("rootfs");
    fs::create_dir_all(rootfs.join("bin")).unwrap();
    fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    fs::write(rootfs.join("hello"), "from podman\n").unwrap();
    let rootfs_tar = dir.path().join("rootfs.tar");
    run(
        Path::new("/bin/tar"),
        &[
            "-C",
            rootfs.to_str().unwrap(),
            "-cf",
            rootfs_tar.to_str().unwrap(),
            ".",
        ],
    );
    podman.run(&["import", rootfs_tar.to_str().unwrap(), "pmtest:v1"]);
    let oci = dir.path().join("oci.tar");
    let docker = dir.path().join("docker.tar");
    podman.run(&[
        "save",
        "--format",
        "oci-archive",
        "-o",
        oci.to_str().unwrap(),
        "pmtest:v1",
    ]);
    podman.run(&[
        "save",
        "--format",
        "docker-archive",
        "-o",
        docker.to_str().unwrap(),
        "pmtest:v1",
    ]);

    let store = store_in(dir.path());
    let from_oci = store.import(&oci, None).unwrap();
    assert_eq!(
        from_oci[0].name, "localhost/pmtest:v1",
        "podman's ref.name is a full name"
    );
    let from_docker = store.import(&docker, Some("pmtest:docker")).unwrap();
    assert_eq!(from_docker[0].id, from_oci[0].id, "one config");
    for name in ["localhost/pmtest:v1", "pmtest:docker"] {
        let image = store.resolve(name).unwrap();
        let snapshot = &image.layers[0].snapshot;
        assert_eq!(
            fs::read_to_string(snapshot.join("hello")).unwrap(),
            "from podman\n",
            "{name}"
        );
        assert!(snapshot.join("bin/busybox").is_file());
    }
}
