//! Pulls from a real registry: Debian's `docker-registry` (the CNCF distribution registry),
//! started by each test on 127.0.0.1 on a free port, with TLS from a CA the test makes (openssl)
//! and htpasswd auth (apache2-utils' htpasswd) or a token server's tokens (`token`), images pushed by `skopeo copy` from OCI layouts
//! the test writes (so every byte of every layer is known). A small proxy in front of the
//! registry corrupts or cuts off one blob. Each test stops its registry and proxy when it ends,
//! failed or not. Needs root (whiteouts, chown in the snapshots).

mod kit;
#[path = "kit/token.rs"]
mod token;

use std::fs;
use std::sync::{mpsc, Arc, Mutex};

use kit::{Compression, Layout, Mischief, Proxy, Registry};
use podlab_image::credentials::Credentials;
use podlab_image::platform::Platform;
use podlab_image::pull::{pull, Progress, ProgressEvent, PullErrorKind, PullOptions};
use podlab_image::reference::Reference;
use podlab_image::{Digest, Store};

fn options(registry: &Registry) -> PullOptions {
    PullOptions {
        registry_config_dir: Some(registry.certs_d()),
        credentials: registry.credentials(),
        ..PullOptions::default()
    }
}

fn reference(text: &str) -> Reference {
    Reference::parse(text).unwrap()
}

/// The file `path` of the image's merged view: the top-most snapshot that has it.
fn read_in_image(store: &Store, name: &str, path: &str) -> Option<Vec<u8>> {
    let image = store.resolve(name).unwrap();
    store
        .lowerdirs(&image)
        .iter()
        .map(|dir| dir.join(path))
        .find(|p| p.exists())
        .map(|p| fs::read(p).unwrap())
}

/// No layer unpacked while it downloaded is left in `ingest/` (the commit took it or threw it away).
fn assert_no_unpacked_layers_left(store_dir: &tempfile::TempDir) {
    let left: Vec<String> = fs::read_dir(store_dir.path().join("ingest"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.contains(".unpack"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

fn assert_consistent(store: &Store) {
    let report = store.verify_all().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// Records every progress event.
#[derive(Default)]
struct Recorder(Mutex<Vec<ProgressEvent>>);

impl Progress for Recorder {
    fn report(&self, event: &ProgressEvent) {
        self.0.lock().unwrap().push(event.clone());
    }
}

#[test]
fn a_multi_platform_image_is_pulled_over_tls_with_htpasswd_auth() {
    let Some(registry) = Registry::start(true, true) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut layout = Layout::new(&dir.path().join("layout"));
    let amd64 = layout.image(
        &[
            &[("etc/os", b"amd64 base\n")],
            &[("etc/os", b"amd64 top\n"), ("bin/tool", b"#!/bin/sh\n")],
        ],
        Compression::Gzip,
        "amd64",
    );
    let arm64 = layout.image(
        &[&[("etc/os", b"arm64 zstd\n")]],
        Compression::Zstd,
        "arm64",
    );
    let index = layout.index(&[amd64.clone(), arm64.clone()]);
    layout.tag(&index, "multi");
    layout.save();
    registry.push(&layout, "multi", "demo/multi:1");
    let store_dir = tempfile::tempdir().unwrap();
    let store = Store::open(store_dir.path()).unwrap();
    let name = format!("{}/demo/multi:1", registry.host());

    // Without credentials: the registry's 401, naming the image; no password in any message.
    let anonymous = PullOptions {
        credentials: None,
        ..options(&registry)
    };
    let err = pull(&store, &reference(&name), &anonymous).unwrap_err();
    assert!(err.is_unauthorized(), "{err}");
    assert!(err.to_string().contains(&name), "{err}");
    let wrong = PullOptions {
        credentials: Some(Credentials::Basic {
            username: "podlab".into(),
            password: "not-the-password".into(),
        }),
        ..options(&registry)
    };
    let err = pull(&store, &reference(&name), &wrong).unwrap_err();
    assert!(err.is_unauthorized(), "{err}");
    assert!(
        !format!("{err} {err:?}").contains("not-the-password"),
        "{err:?}"
    );

    // This machine's platform (the test images are amd64 and arm64).
    let host = Platform::host();
    let (expected, wanted) = match host.architecture.as_str() {
        "arm64" => (&arm64, "arm64 zstd\n"),
        _ => (&amd64, "amd64 top\n"),
    };
    let recorder = Arc::new(Recorder::default());
    let pulled = pull(
        &store,
        &reference(&name),
        &PullOptions {
            progress: Some(recorder.clone()),
            ..options(&registry)
        },
    )
    .unwrap();
    assert_eq!(pulled.name, name);
    assert_eq!(pulled.manifest_digest, expected.digest);
    assert_eq!(pulled.index_digest, Some(index.digest.clone()));
    assert_eq!(pulled.host, format!("https://{}", registry.host()));
    assert_eq!(
        read_in_image(&store, &name, "etc/os").as_deref(),
        Some(wanted.as_bytes())
    );
    let events = recorder.0.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ProgressEvent::Resolved { manifest, .. } if manifest == &expected.digest)),
        "{events:?}"
    );
    let fetched: u64 = expected.blob_sizes();
    assert_eq!(pulled.downloaded, fetched, "config and layers, once each");
    // The bottom layer was unpacked as it streamed. The tars of the kit leave their folders
    // out: a layer above the bottom one takes theirs from below, so it is unpacked at the commit.
    let unpacked_as_it_arrived = |layer: &Digest| {
        events.iter().any(|e| {
            matches!(e, ProgressEvent::BlobDone { digest, unpacked: true, .. } if digest == layer)
        })
    };
    let as_they_arrived: Vec<bool> = expected.layers.iter().map(unpacked_as_it_arrived).collect();
    let mut wanted_ahead = vec![false; expected.layers.len()];
    wanted_ahead[0] = true;
    assert_eq!(as_they_arrived, wanted_ahead, "{events:?}");
    assert_no_unpacked_layers_left(&store_dir);

    // Pulled again: nothing is downloaded.
    let again = pull(&store, &reference(&name), &options(&registry)).unwrap();
    assert_eq!(again.downloaded, 0);

    // The other platform, with its zstd layer.
    let arm = pull(
        &store,
        &reference(&format!("{}/demo/multi:arm", registry.host())),
        &options(&registry),
    );
    assert!(arm.unwrap_err().is_not_found(), "no tag arm was pushed");
    let by_digest = format!("{}/demo/multi@{}", registry.host(), index.digest);
    let pulled = pull(
        &store,
        &reference(&by_digest),
        &PullOptions {
            platform: Some(Platform::parse("linux/arm64/v8").unwrap()),
            ..options(&registry)
        },
    )
    .unwrap();
    assert_eq!(pulled.name, by_digest);
    assert_eq!(pulled.manifest_digest, arm64.digest);
    assert_eq!(
        read_in_image(&store, &by_digest, "etc/os").as_deref(),
        Some(&b"arm64 zstd\n"[..])
    );
    assert_eq!(store.resolve(&by_digest).unwrap().architecture, "arm64");

    // A tag and a digest: fetched by the digest, named by the tag.
    let tag_and_digest = format!("{}/demo/multi:1@{}", registry.host(), index.digest);
    let pulled = pull(&store, &reference(&tag_and_digest), &options(&registry)).unwrap();
    assert_eq!(pulled.name, name);
    let wrong_digest = format!(
        "{}/demo/multi:1@{}",
        registry.host(),
        Digest::of(b"nothing")
    );
    let err = pull(&store, &reference(&wrong_digest), &options(&registry)).unwrap_err();
    assert!(err.is_not_found(), "{err}");

    let err = pull(
        &store,
        &reference(&name),
        &PullOptions {
            platform: Some(Platform::parse("linux/s390x").unwrap()),
            ..options(&registry)
        },
    )
    .unwrap_err();
    match &err.kind {
        PullErrorKind::NoMatchingPlatform { wanted, offered } => {
            assert_eq!(wanted, "linux/s390x");
            assert_eq!(offered, &["linux/amd64", "linux/arm64"]);
        }
        other => panic!("{other}"),
    }
    assert_consistent(&store);
}

#[test]
fn an_anonymous_pull_fetches_a_token_only_after_the_registry_asked_for_one() {
    // Docker Hub's way: even anonymous pulls need a token, which the registry's 401 says where
    // to get. containerd asks without one first; so does podlab since it stopped probing
    // `GET /v2/` before every request.
    let Some(openssl) = kit::tool("openssl", "openssl") else {
        return;
    };
    let tokens = token::TokenServer::start(&openssl);
    let Some(registry) = Registry::start_with_tokens(&tokens.auth()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    registry.push_image(
        dir.path(),
        &[&[("hello", b"from behind a token\n")]],
        "demo/tokens:1",
    );
    let store_dir = tempfile::tempdir().unwrap();
    let store = Store::open(store_dir.path()).unwrap();
    let name = format!("{}/demo/tokens:1", registry.host());
    let asked_since = |served: usize| -> Vec<String> {
        registry.requests()[served..]
            .iter()
            .map(|line| {
                let words: Vec<&str> = line.split(' ').collect();
                format!("{} {} {}", words[0], words[1], words[words.len() - 1])
            })
            .collect()
    };

    let (served, issued) = (registry.requests().len(), tokens.issued());
    pull(&store, &reference(&name), &options(&registry)).unwrap();
    assert_eq!(
        read_in_image(&store, &name, "hello").as_deref(),
        Some(&b"from behind a token\n"[..])
    );
    let asked = asked_since(served);
    assert_eq!(
        asked.first().map(String::as_str),
        Some("GET /v2/demo/tokens/manifests/1 401"),
        "the manifest is asked for first, without a token: {asked:#?}"
    );
    assert!(tokens.issued() > issued, "a token was fetched: {asked:#?}");
    assert!(
        asked
            .iter()
            .any(|r| r == "GET /v2/demo/tokens/manifests/1 200"),
        "then the manifest came with it: {asked:#?}"
    );

    // The process remembers that this host wants tokens, and keeps the token: the next pull
    // is answered at once.
    store.remove(&name).unwrap();
    let served = registry.requests().len();
    pull(&store, &reference(&name), &options(&registry)).unwrap();
    let asked = asked_since(served);
    assert!(
        asked.iter().all(|r| !r.ends_with(" 401")),
        "no 401 once the host is known to want tokens: {asked:#?}"
    );
    assert_eq!(asked.len(), 3, "manifest, config, layer: {asked:#?}");
    assert_consistent(&store);
}

#[test]
fn plain_http_is_used_only_for_hosts_configured_so_and_docker_schema2_pulls() {
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut layout = Layout::new(&dir.path().join("layout"));
    let image = layout.image(
        &[&[("hello", b"docker v2.2\n")]],
        Compression::Gzip,
        "amd64",
    );
    layout.tag(&image, "t");
    layout.save();
    registry.push_with(&layout, "t", "demo/docker:1", &["--format", "v2s2"]);
    let store_dir = tempfile::tempdir().unwrap();
    let store = Store::open(store_dir.path()).unwrap();
    let name = format!("{}/demo/docker:1", registry.host());

    let unconfigured = PullOptions {
        registry_config_dir: Some(dir.path().join("no-certs.d")),
        ..PullOptions::default()
    };
    let err = pull(&store, &reference(&name), &unconfigured).unwrap_err();
    assert!(
        matches!(&err.kind, PullErrorKind::Unreachable { host, .. } if host.starts_with("https://")),
        "HTTPS unless configured: {err}"
    );

    // A single-platform image is checked against the wanted platform too, as containerd does.
    let served = registry.requests().len();
    let err = pull(
        &store,
        &reference(&name),
        &PullOptions {
            platform: Some(Platform::parse("linux/arm64").unwrap()),
            ..options(&registry)
        },
    )
    .unwrap_err();
    assert!(
        matches!(&err.kind, PullErrorKind::NoMatchingPlatform { offered, .. } if offered == &["linux/amd64"]),
        "{err}"
    );
    assert!(store.list().unwrap().is_empty());
    // An open registry is asked for the manifest and the blobs alone: no `GET /v2/` probe
    // before each, as containerd asks for a token only after a 401.
    let asked: Vec<String> = registry.requests()[served..]
        .iter()
        .map(|line| line.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert!(
        asked.iter().all(|r| r.starts_with("GET /v2/demo/docker/")),
        "{asked:#?}"
    );
    assert_eq!(asked.len(), 3, "manifest, config, layer: {asked:#?}");

    let pulled = pull(&store, &reference(&name), &options(&registry)).unwrap();
    let details = store.inspect(&name).unwrap();
    assert_eq!(
        details
            .manifest
            .media_type()
            .as_ref()
            .map(|m| m.to_string())
            .as_deref(),
        Some("application/vnd.docker.distribution.manifest.v2+json"),
        "skopeo converted it to Docker schema 2"
    );
    assert_ne!(pulled.manifest_digest, image.digest, "a new manifest");
    assert_eq!(
        read_in_image(&store, &name, "hello").as_deref(),
        Some(&b"docker v2.2\n"[..])
    );
    assert_consistent(&store);
}

#[test]
fn a_pull_unpacked_while_downloading_commits_without_a_staging_folder() {
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut layout = Layout::new(&dir.path().join("layout"));
    // Every layer unpacked whole while it downloads.
    let ready = layout.image(
        &[&[("bottom", b"1\n")], &[("top", b"2\n")]],
        Compression::Gzip,
        "amd64",
    );
    layout.tag(&ready, "ready");
    // Its upper layer leaves out a folder it writes in (`sub/`), whose attributes come from
    // below: not kept unpacked ahead, it is unpacked at the commit, in a staging folder.
    let staged = layout.image(
        &[&[("bottom", b"3\n")], &[("sub/top", b"4\n")]],
        Compression::Gzip,
        "amd64",
    );
    layout.tag(&staged, "staged");
    layout.save();
    registry.push(&layout, "ready", "demo/commit:ready");
    registry.push(&layout, "staged", "demo/commit:staged");
    let store_dir = tempfile::tempdir().unwrap();
    let store = Store::open(store_dir.path()).unwrap();
    // The staging folders' parent made a file: a commit that needs one fails.
    let tmp = store_dir.path().join("tmp");
    let _ = fs::remove_dir_all(&tmp);
    fs::write(&tmp, b"").unwrap();

    let name = format!("{}/demo/commit:ready", registry.host());
    pull(&store, &reference(&name), &options(&registry)).expect("committed from ingest/");
    assert_eq!(
        read_in_image(&store, &name, "top").as_deref(),
        Some(&b"2\n"[..])
    );
    assert_no_unpacked_layers_left(&store_dir);

    let name = format!("{}/demo/commit:staged", registry.host());
    let err = pull(&store, &reference(&name), &options(&registry)).unwrap_err();
    assert!(store.resolve(&name).is_err(), "not named after {err}");
    fs::remove_file(&tmp).unwrap();
    fs::create_dir(&tmp).unwrap();
    pull(&store, &reference(&name), &options(&registry)).expect("committed through staging");
    assert_eq!(
        read_in_image(&store, &name, "sub/top").as_deref(),
        Some(&b"4\n"[..])
    );
    assert_no_unpacked_layers_left(&store_dir);
    assert_consistent(&store);
}

#[test]
fn mirrors_are_tried_in_order_and_a_dead_one_is_skipped() {
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    registry.push_image(
        dir.path(),
        &[&[("m", b"from the mirror\n")]],
        "library/app:1",
    );
    // registry.example has no address; its mirrors do: a closed port first, then the registry.
    let certs = dir.path().join("certs.d");
    fs::create_dir_all(certs.join("registry.example")).unwrap();
    fs::write(
        certs.join("registry.example/hosts.toml"),
        format!(
            "server = \"https://registry.example\"\n\
             [host.\"http://127.0.0.1:{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n\
             [host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            kit::closed_port(),
            registry.host()
        ),
    )
    .unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = Store::open(store_dir.path()).unwrap();
    let pulled = pull(
        &store,
        &reference("registry.example/library/app:1"),
        &PullOptions {
            registry_config_dir: Some(certs),
            ..PullOptions::default()
        },
    )
    .unwrap();
    assert_eq!(pulled.host, format!("http://{}", registry.host()));
    assert_eq!(pulled.name, "registry.example/library/app:1");
    assert_eq!(
        read_in_image(&store, "registry.example/library/app:1", "m").as_deref(),
        Some(&b"from the mirror\n"[..])
    );
}

#[test]
fn a_corrupted_blob_is_refused_naming_the_layer_and_nothing_is_imported() {
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let image = registry.push_image(
        dir.path(),
        &[&[("a", b"bottom\n")], &[("b", &[7u8; 20_000][..])]],
        "demo/corrupt:1",
    );
    let top = image.layers[1].clone();
    let proxy = Proxy::start(&registry, Mischief::Corrupt(top.clone()));
    let store_dir = tempfile::tempdir().unwrap();
    let store = Store::open(store_dir.path()).unwrap();
    let name = format!("{}/demo/corrupt:1", proxy.host());
    let err = pull(&store, &reference(&name), &proxy.options()).unwrap_err();
    assert_eq!(err.layer.as_ref(), Some(&top), "{err}");
    assert!(
        matches!(err.kind, PullErrorKind::DigestMismatch { .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&name) && text.contains(&top.to_string()),
        "{text}"
    );
    assert!(store.list().unwrap().is_empty(), "nothing is named");
    assert!(
        !store_dir
            .path()
            .join(format!("ingest/{}.partial", top.hex()))
            .exists(),
        "a corrupt download is not kept for resuming"
    );
    let unpacked_corrupt = fs::read_dir(store_dir.path().join("ingest"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&format!("{}.unpack", top.hex())))
        .collect::<Vec<_>>();
    assert!(
        unpacked_corrupt.is_empty(),
        "what the corrupt layer unpacked to as it streamed is gone: {unpacked_corrupt:?}"
    );
    assert_consistent(&store);
}

#[test]
fn a_cut_off_download_is_kept_and_resumed_by_the_next_pull() {
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let image = registry.push_image(dir.path(), &[&[("big", &big[..])]], "demo/cut:1");
    let layer = image.layers[0].clone();
    const CUT: usize = 10_000;
    let proxy = Proxy::start(&registry, Mischief::CutOff(layer.clone(), CUT));
    let store_dir = tempfile::tempdir().unwrap();
    let store = Store::open(store_dir.path()).unwrap();
    let via_proxy = format!("{}/demo/cut:1", proxy.host());
    let err = pull(&store, &reference(&via_proxy), &proxy.options()).unwrap_err();
    assert_eq!(err.layer.as_ref(), Some(&layer), "{err}");
    assert!(err.to_string().contains("broke off"), "{err}");
    let partial = store_dir
        .path()
        .join(format!("ingest/{}.partial", layer.hex()));
    let kept = fs::metadata(&partial).unwrap().len();
    assert_eq!(
        kept,
        3 * CUT as u64,
        "each of three attempts resumed where the last ended"
    );
    assert!(store.list().unwrap().is_empty());
    assert_no_unpacked_layers_left(&store_dir);
    assert_consistent(&store);

    // The same blob from the registry itself: the download goes on from the partial file.
    let recorder = Arc::new(Recorder::default());
    let direct = format!("{}/demo/cut:1", registry.host());
    let pulled = pull(
        &store,
        &reference(&direct),
        &PullOptions {
            progress: Some(recorder.clone()),
            ..options(&registry)
        },
    )
    .unwrap();
    let events = recorder.0.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| matches!(e,
            ProgressEvent::BlobStarted { digest, from, .. } if digest == &layer && *from == kept)),
        "{events:?}"
    );
    assert_eq!(
        pulled.downloaded,
        image.layer_sizes[0] - kept,
        "the rest of the layer only (the config came whole the first time)"
    );
    assert!(!partial.exists());
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, ProgressEvent::BlobDone { unpacked: true, .. })),
        "a resumed layer is unpacked from its file at the commit: {events:?}"
    );
    assert_no_unpacked_layers_left(&store_dir);
    assert_eq!(read_in_image(&store, &direct, "big").unwrap(), big);
    assert_consistent(&store);
}

#[test]
#[allow(clippy::result_large_err)] // a thread's error is only unwrapped
fn two_pulls_of_one_image_fetch_each_blob_once() {
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let image = registry.push_image(
        dir.path(),
        &[&[("one", b"1")], &[("two", b"2")], &[("three", b"3")]],
        "demo/twice:1",
    );
    let store_dir = tempfile::tempdir().unwrap();
    let store = Store::open(store_dir.path()).unwrap();
    let name = format!("{}/demo/twice:1", registry.host());
    // Hold the top layer's download lock, as a pull in another process would: both pulls
    // must wait for it, whatever the timing.
    let top = image.layers[2].clone();
    fs::create_dir_all(store_dir.path().join("ingest")).unwrap();
    let lock = kit::hold_lock(&store_dir.path().join(format!("ingest/{}.lock", top.hex())));
    let (waiting_tx, waiting_rx) = mpsc::channel();
    let pulls: Vec<_> = (0..2)
        .map(|_| {
            let (store, name, tx) = (store.clone(), name.clone(), waiting_tx.clone());
            let mut options = options(&registry);
            options.progress = Some(Arc::new(Waiting(Mutex::new(tx), top.clone())));
            std::thread::spawn(move || pull(&store, &reference(&name), &options))
        })
        .collect();
    for _ in 0..2 {
        waiting_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("both pulls wait for the held blob");
    }
    drop(lock);
    let pulled: Vec<_> = pulls
        .into_iter()
        .map(|p| p.join().unwrap().unwrap())
        .collect();
    assert_eq!(
        pulled.iter().map(|p| p.downloaded).sum::<u64>(),
        image.blob_sizes(),
        "every blob was downloaded by one of the two"
    );
    assert_eq!(pulled[0].manifest_digest, pulled[1].manifest_digest);
    assert_consistent(&store);
}

/// Regression: a pull found its blobs in the store, a garbage collection (after the image's
/// other name was removed, as a CRI server runs one after RemoveImage's answer) took them before
/// the pull's commit, and the pull failed with "blob … is missing". It fetches them again now.
#[test]
fn regression_a_pull_whose_blobs_are_collected_before_its_commit_fetches_them_again() {
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let two = TwoNames::pulled_once(&registry, "collected", 2);
    let (image, store, first, second) = (two.image, two.store, two.first, two.second);
    let mut racing = options(&registry);
    racing.progress = Some(Arc::new(CollectBeforeCommit {
        store: store.clone(),
        name: first.clone(),
        done: std::sync::atomic::AtomicBool::new(false),
        when: Box::new(|event| matches!(event, ProgressEvent::Unpacking)),
    }));
    let pulled = pull(&store, &reference(&second), &racing).unwrap();
    assert_eq!(
        pulled.downloaded,
        image.blob_sizes(),
        "what the collection took was fetched again"
    );
    assert_eq!(read_in_image(&store, &second, "two").unwrap(), b"2");
    assert!(store.resolve(&first).is_err());
    assert_consistent(&store);
}

/// Regression: critest's image benchmark (RemoveImage, then the same pull at once) failed with
/// "reading …/ingest/<config>: No such file or directory": the pull found the config in the
/// store, the collection after the RemoveImage took it, and the platform check, reading it
/// next, found it nowhere. It is missing now, and the pull fetches it again.
#[test]
fn regression_a_pull_whose_config_is_collected_before_its_platform_check_fetches_it_again() {
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let two = TwoNames::pulled_once(&registry, "config", 1);
    let (store, first, second) = (two.store, two.first, two.second);
    let layers = two.image.layers.clone();
    let mut racing = options(&registry);
    racing.progress = Some(Arc::new(CollectBeforeCommit {
        store: store.clone(),
        name: first.clone(),
        done: std::sync::atomic::AtomicBool::new(false),
        when: Box::new(move |event| {
            matches!(event, ProgressEvent::BlobDone { digest, fetched: false, .. }
                if !layers.contains(digest))
        }),
    }));
    let pulled = pull(&store, &reference(&second), &racing).unwrap();
    assert!(
        pulled.downloaded > 0,
        "what the collection took was fetched again"
    );
    assert_eq!(read_in_image(&store, &second, "one").unwrap(), b"1");
    assert_consistent(&store);
}

/// A garbage collection after RemoveImage (a CRI server's cleaner runs one right after the
/// answer, while the client pulls again) waits for the pull in progress, so it never deletes
/// what the pull found in the store: the pull reuses it all, and the collection takes nothing
/// the pulled image needs.
#[test]
fn a_collection_waits_for_the_pull_in_progress_and_takes_nothing_it_found() {
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let two = TwoNames::pulled_once(&registry, "waits", 2);
    let (store, first, second) = (two.store, two.first, two.second);
    let collector = Arc::new(Mutex::new(None));
    let mut racing = options(&registry);
    racing.progress = Some(Arc::new(CollectAside {
        store: store.clone(),
        name: first.clone(),
        collector: collector.clone(),
    }));
    let pulled = pull(&store, &reference(&second), &racing).unwrap();
    assert_eq!(pulled.downloaded, 0, "the pull reused what it found");
    let collected = collector
        .lock()
        .unwrap()
        .take()
        .expect("the collection was started")
        .join()
        .unwrap();
    assert_eq!(collected.blobs_removed, 0, "{collected:?}");
    assert!(store.resolve(&first).is_err());
    assert_eq!(read_in_image(&store, &second, "two").unwrap(), b"2");
    assert_consistent(&store);
}

/// Removes the name `name` and starts a garbage collection on a thread of its own once the
/// pull holds the store, as another process's RemoveImage and its cleaner would. (A collection
/// started before that, at `Resolved`, may take the lock first and run to its end: the pull then
/// fetches again what it took, the regression tests above; this one failed in CI that way.)
struct CollectAside {
    store: Store,
    name: String,
    collector: Arc<Mutex<Option<std::thread::JoinHandle<podlab_image::GcReport>>>>,
}

impl Progress for CollectAside {
    fn report(&self, event: &ProgressEvent) {
        let mut collector = self.collector.lock().unwrap();
        if matches!(event, ProgressEvent::Holding) && collector.is_none() {
            self.store.untag(&self.name).unwrap();
            let store = self.store.clone();
            *collector = Some(std::thread::spawn(move || store.gc().unwrap()));
        }
    }
}

/// One image pushed as `demo/REPO:1` and `demo/REPO:2`, the first pulled into a new store:
/// the scene of a RemoveImage of one name racing a pull of the other.
struct TwoNames {
    image: kit::Written,
    store: Store,
    first: String,
    second: String,
    /// The image's layout and the store, removed with the scene.
    _folders: (tempfile::TempDir, tempfile::TempDir),
}

impl TwoNames {
    /// Its layers hold the files `one`, `two`, … (`layers` of them) with contents "1", "2", ….
    fn pulled_once(registry: &Registry, repo: &str, layers: usize) -> TwoNames {
        let (dir, store_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let files = [("one", b"1"), ("two", b"2")];
        let layer_files: Vec<[(&str, &[u8]); 1]> = files[..layers]
            .iter()
            .map(|(name, data)| [(*name, &data[..])])
            .collect();
        let layer_refs: Vec<&[(&str, &[u8])]> = layer_files.iter().map(|l| &l[..]).collect();
        let mut layout = Layout::new(&dir.path().join("layout"));
        let image = layout.image(&layer_refs, Compression::Gzip, "amd64");
        layout.tag(&image, "t");
        layout.save();
        registry.push(&layout, "t", &format!("demo/{repo}:1"));
        registry.push(&layout, "t", &format!("demo/{repo}:2"));
        let store = Store::open(store_dir.path()).unwrap();
        let first = format!("{}/demo/{repo}:1", registry.host());
        let second = format!("{}/demo/{repo}:2", registry.host());
        pull(&store, &reference(&first), &options(registry)).unwrap();
        TwoNames {
            image,
            store,
            first,
            second,
            _folders: (dir, store_dir),
        }
    }
}

/// Removes the image `name` with its content at the first event `when` takes (the first time
/// only): what another process's `podlab image rm` does then. (A garbage collection would wait
/// for the pull: see the next test.)
struct CollectBeforeCommit {
    store: Store,
    name: String,
    done: std::sync::atomic::AtomicBool,
    when: Box<dyn Fn(&ProgressEvent) -> bool + Send + Sync>,
}

impl Progress for CollectBeforeCommit {
    fn report(&self, event: &ProgressEvent) {
        if (self.when)(event) && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.store.remove(&self.name).unwrap();
        }
    }
}

/// Tells the test when the pull waits for `digest`./// Tells the test when the pull waits for `digest`.
struct Waiting(Mutex<mpsc::Sender<()>>, Digest);

impl Progress for Waiting {
    fn report(&self, event: &ProgressEvent) {
        if matches!(event, ProgressEvent::BlobWaiting { digest } if digest == &self.1) {
            let _ = self.0.lock().unwrap().send(());
        }
    }
}

#[test]
fn missing_images_unknown_hosts_artifacts_and_escaping_layers_are_clear_errors() {
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let store_dir = tempfile::tempdir().unwrap();
    let store = Store::open(store_dir.path()).unwrap();
    let host = registry.host();

    let err = pull(
        &store,
        &reference(&format!("{host}/no/such:1")),
        &options(&registry),
    )
    .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(
        err.to_string().contains(&format!("{host}/no/such:1")),
        "{err}"
    );

    let refused = format!("127.0.0.1:{}/a:1", kit::closed_port());
    let err = pull(&store, &reference(&refused), &PullOptions::default()).unwrap_err();
    assert!(
        matches!(err.kind, PullErrorKind::Unreachable { .. }),
        "{err}"
    );

    let unknown = "no-such-registry.invalid/a:1";
    let err = pull(&store, &reference(unknown), &PullOptions::default()).unwrap_err();
    assert!(
        matches!(err.kind, PullErrorKind::Unreachable { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("no-such-registry.invalid"),
        "{err}"
    );

    // An artifact: a manifest whose config is not an image config.
    let dir = tempfile::tempdir().unwrap();
    let mut layout = Layout::new(&dir.path().join("layout"));
    let artifact = layout.artifact("application/vnd.example.thing.config.v1+json");
    layout.tag(&artifact, "art");
    let escaping = layout.image(
        &[&[("ok", b"fine"), ("../../escaped", b"out")]],
        Compression::Gzip,
        "amd64",
    );
    layout.tag(&escaping, "escape");
    layout.save();
    registry.push(&layout, "art", "demo/artifact:1");
    registry.push(&layout, "escape", "demo/escape:1");
    let err = pull(
        &store,
        &reference(&format!("{host}/demo/artifact:1")),
        &options(&registry),
    )
    .unwrap_err();
    assert!(matches!(err.kind, PullErrorKind::Unsupported(_)), "{err}");
    assert!(
        err.to_string()
            .contains("application/vnd.example.thing.config.v1+json"),
        "{err}"
    );

    let err = pull(
        &store,
        &reference(&format!("{host}/demo/escape:1")),
        &options(&registry),
    )
    .unwrap_err();
    assert_eq!(err.layer.as_ref(), Some(&escaping.layers[0]), "{err}");
    assert!(err.to_string().contains("escaped"), "{err}");
    assert!(!store_dir.path().parent().unwrap().join("escaped").exists());
    assert!(store.list().unwrap().is_empty());
    assert_consistent(&store);
}

#[test]
fn a_full_disk_fails_the_pull_whole_and_the_store_stays_consistent() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: mounting a small tmpfs needs root");
        return;
    }
    let Some(registry) = Registry::start(false, false) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Compresses to a few kB, unpacks to 4 MB: the download fits, the snapshot does not.
    let zeros = vec![0u8; 4 << 20];
    let image = registry.push_image(
        dir.path(),
        &[&[("small", b"s")], &[("zeros", &zeros[..])]],
        "demo/full:1",
    );
    let tmpfs = kit::Tmpfs::mount(&dir.path().join("small"), "2m");
    let store = Store::open(&tmpfs.path().join("store")).unwrap();
    let name = format!("{}/demo/full:1", registry.host());
    let err = pull(&store, &reference(&name), &options(&registry)).unwrap_err();
    assert_eq!(err.layer.as_ref(), Some(&image.layers[1]), "{err}");
    assert!(err.to_string().contains("No space left on device"), "{err}");
    assert!(store.list().unwrap().is_empty());
    assert_consistent(&store);
}
