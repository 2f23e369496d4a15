//! Lab 13, an ephemeral debug container into a pod without a shell. The scene builds a
//! "distroless" image (one static binary, nothing else: no shell, no ls, no cat), runs it, and
//! leaves a token in the app's root. `podlab exec` has nothing to run there; `podlab debug
//! --target app` adds an ephemeral container with busybox that shares app's pid namespace, and
//! through `/proc/1/root` it reads app's files. The check reads the pod's ephemeral container
//! statuses, the runtime's record of the debug container's pid namespace, and the answer file.

use std::path::Path;

use anyhow::{Context, Result};
use podlab_image::Digest;
use podlab_ns::NsKind;
use serde_json::json;

use crate::env::Env;
use crate::kit::{pods, procs};
use crate::{Lab, Level, Verdict};

const POD: &str = "noshell";
const IMAGE: &str = "lab/noshell:1";
const TOKEN_FILE: &str = "token";
const ANSWER: &str = "token.txt";

pub static LAB: Lab = Lab {
    number: 13,
    name: "debug",
    title: "An ephemeral debug container into a pod without a shell",
    level: Level::Intermediate,
    minutes: 15,
    goal: "Pod noshell runs container app from a \"distroless\" image: one static binary, no
shell, no cat. app keeps a secret in the file /token of its root. Read it from inside the pod
with an ephemeral debug container that shares app's process namespace, and write it into
{work}/token.txt.",
    hints: &[
        "Try `podlab exec noshell -c app -- sh` first: there is nothing to exec. `podlab debug \
POD --image busybox` adds an ephemeral container to a running pod; `--target CONTAINER` puts it \
in that container's pid namespace.",
        "In app's pid namespace app's process is PID 1, and /proc/1/root is app's root as app \
sees it (the kernel checks ptrace rights: same user, no more capabilities than yours).",
        "podlab debug noshell --image busybox --target app -- cat /proc/1/root/token > {work}/token.txt",
    ],
    not_yet: "no ephemeral container targets app",
    mistake_story: "a debug container without --target: it has a pid namespace of its own, \
where PID 1 is itself, so /proc/1/root is busybox's root",
    scene,
    check,
    solve,
    mistake,
    reset,
};

fn manifest() -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {POD}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {IMAGE}
"
    )
}

fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Writes an OCI image layout with one layer holding `/app` (the pause binary: static, no
/// libc) into `dir`.
fn build_image(env: &Env, dir: &Path) -> Result<()> {
    let binary = std::fs::read(env.pause_binary()?)?;
    let mut layer = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(binary.len() as u64);
    header.set_mode(0o755);
    header.set_uid(0);
    header.set_gid(0);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mtime(946_684_800);
    header.set_cksum();
    layer.append_data(&mut header, "app", binary.as_slice())?;
    let layer = layer.into_inner()?;
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs)?;
    let put = |bytes: &[u8]| -> Result<(String, usize)> {
        let digest = Digest::of(bytes);
        std::fs::write(blobs.join(digest.hex()), bytes)?;
        Ok((format!("sha256:{}", digest.hex()), bytes.len()))
    };
    let (layer_digest, layer_size) = put(&layer)?;
    let config = serde_json::to_vec(&json!({
        "architecture": architecture(),
        "os": "linux",
        "config": {"Entrypoint": ["/app"]},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }))?;
    let (config_digest, config_size) = put(&config)?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": layer_size}],
    }))?;
    let (manifest_digest, manifest_size) = put(&manifest)?;
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "digest": manifest_digest, "size": manifest_size,
                           "annotations": {"org.opencontainers.image.ref.name": "1"}}],
        }))?,
    )?;
    Ok(())
}

/// A token nobody can guess: 16 random bytes in hex.
fn new_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn scene(env: &Env) -> Result<()> {
    let layout = env.work_dir()?.join("noshell-image");
    build_image(env, &layout)?;
    env.podlab(&[
        "image",
        "import",
        &layout.display().to_string(),
        "--name",
        IMAGE,
    ])?;
    env.apply("noshell.yaml", &manifest())?;
    let pod = pods::wait_running(env, POD)?;
    let pid = pods::container_pid(env, &pod, "app")?.context("app has no process")?;
    // The secret lives only in app's root (its overlay's upper layer), not in the image or
    // the pod's spec.
    let token = new_token()?;
    std::fs::write(format!("/proc/{pid}/root/{TOKEN_FILE}"), &token)
        .context("writing the token into app's root")?;
    env.write(".token", &token)?;
    let (code, _, err) = env.podlab_quiet(&["exec", POD, "-c", "app", "--", "sh"])?;
    env.say(format!(
        "$ podlab exec {POD} -c app -- sh\n  (exit {code}) {}",
        err.trim()
    ));
    Ok(())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(pod) = pods::get(env, POD)? else {
        verdict.missing(format!("there is no pod {POD}"));
        return Ok(verdict);
    };
    let targeted: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.ephemeral_containers.iter().flatten())
        .filter(|c| c.target_container_name.as_deref() == Some("app"))
        .map(|c| c.name.clone())
        .collect();
    if targeted.is_empty() {
        verdict.missing("no ephemeral container targets app yet (podlab debug ... --target app)");
    } else {
        verdict.met(format!("ephemeral container(s) {targeted:?} target app"));
        // The runtime's record of each debug container: the pid namespace it was made to
        // join (CRI NamespaceMode TARGET) is app's; while it runs, its process's namespace is
        // app's too.
        let container_id = |name: &str| {
            pods::container(&pod, name)
                .and_then(|c| c.container_id)
                .and_then(|id| {
                    podlab_runtime::ContainerId::parse(id.trim_start_matches("podlab://")).ok()
                })
        };
        let app_id = container_id("app");
        let app_pid_ns = pods::container_pid(env, &pod, "app")?
            .and_then(|pid| procs::read(pid)?.ns(NsKind::Pid));
        let runtime = env.runtime()?;
        let shared = targeted
            .iter()
            .filter_map(|name| container_id(name))
            .any(|id| {
                let joined = runtime.container_record(&id).ok().is_some_and(|r| {
                    r.config.target_container.is_some() && r.config.target_container == app_id
                });
                let live = runtime
                    .container_status(&id)
                    .ok()
                    .and_then(|s| s.namespaces.get(&NsKind::Pid).copied());
                joined && live.is_none_or(|ns| Some(ns) == app_pid_ns)
            });
        verdict.part(
            shared,
            "a debug container ran in app's pid namespace",
            "no debug container's process was in app's pid namespace",
        );
    }
    let token = std::fs::read_to_string(env.file(".token")).unwrap_or_default();
    let answer = std::fs::read_to_string(env.file(ANSWER)).unwrap_or_default();
    verdict.part(
        !token.is_empty() && answer.trim() == token.trim(),
        "token.txt holds app's secret",
        if answer.trim().is_empty() {
            format!("{} is empty or missing", env.file(ANSWER).display())
        } else {
            format!("{} does not hold app's secret", env.file(ANSWER).display())
        },
    );
    Ok(verdict)
}

fn debug_cat(env: &Env, target: bool) -> Result<()> {
    let mut args = vec!["debug", POD, "--image", "busybox"];
    if target {
        args.extend(["--target", "app"]);
    }
    args.extend(["--", "cat", "/proc/1/root/token"]);
    let (code, out, err) = env.podlab_quiet(&args)?;
    env.say(format!(
        "$ podlab {} > {}\n  (exit {code}) {}",
        crate::env::shell_line(&args),
        env.file(ANSWER).display(),
        err.trim()
    ));
    env.write(ANSWER, &out)?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    debug_cat(env, true)
}

fn mistake(env: &Env) -> Result<()> {
    debug_cat(env, false)
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])?;
    // Asked of the store itself: `podlab image ls` would make the built-in busybox first.
    let image_root = podlab_runtime::config::RuntimeConfig::from_env().image_root;
    if image_root.exists()
        && podlab_image::Store::open(&image_root)?
            .resolve(IMAGE)
            .is_ok()
    {
        env.podlab(&["image", "rm", IMAGE])?;
    }
    Ok(())
}
