//! `podlab image pull|verify|prune` against a real registry (the kit of podlab-image's registry
//! tests: docker-registry with TLS from a test CA and htpasswd auth, images pushed by skopeo):
//! credentials from `$REGISTRY_AUTH_FILE`, then `~/.docker/config.json`, never printed; plain
//! progress lines when stderr is not a terminal; `--quiet`; exit codes.

use std::path::Path;
use std::process::Output;

use crate::support::podlab;

use crate::kit;

fn auth_file(path: &Path, host: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        path,
        format!(
            r#"{{"auths":{{"{host}":{{"username":"{}","password":"{}"}}}}}}"#,
            kit::USER,
            kit::PASSWORD
        ),
    )
    .unwrap();
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn image_pull_uses_the_auth_file_then_docker_config_and_prune_and_verify_follow() {
    let Some(registry) = kit::Registry::start(true, true) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut layout = kit::Layout::new(&dir.path().join("layout"));
    let image = layout.image(
        &[&[("etc/motd", b"pulled by the cli\n")], &[("bin/x", b"x")]],
        kit::Compression::Gzip,
        "amd64",
    );
    layout.tag(&image, "t");
    layout.save();
    registry.push(&layout, "t", "demo/cli:1");
    let name = format!("{}/demo/cli:1", registry.host());
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let certs = registry.certs_d();
    let cli = |args: &[&str], auth: Option<&Path>| {
        let mut command = podlab();
        command
            .args(args)
            .env("PODLAB_ROOT", dir.path().join("root"))
            .env("PODLAB_REGISTRY_CONFIG", &certs)
            .env("HOME", &home)
            .env_remove("REGISTRY_AUTH_FILE");
        if let Some(auth) = auth {
            command.env("REGISTRY_AUTH_FILE", auth);
        }
        command.output().unwrap()
    };

    let denied = cli(&["image", "pull", &name], None);
    let (_, stderr) = text(&denied);
    assert_eq!(denied.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("401 Unauthorized") && stderr.contains(&name),
        "{stderr}"
    );

    let auth = dir.path().join("auth.json");
    auth_file(&auth, &registry.host());
    let pulled = cli(&["image", "pull", &name], Some(&auth));
    let (stdout, stderr) = text(&pulled);
    assert!(pulled.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!("{name}: pulled {}", image.digest)),
        "{stdout}"
    );
    assert!(
        stderr.contains("resolved") && stderr.contains("done"),
        "plain lines: {stderr}"
    );
    assert!(!format!("{stdout}{stderr}").contains(kit::PASSWORD));

    // ~/.docker/config.json when REGISTRY_AUTH_FILE is not set; --quiet prints the digest.
    auth_file(&home.join(".docker/config.json"), &registry.host());
    let quiet = cli(&["image", "pull", "--quiet", &name], None);
    let (stdout, stderr) = text(&quiet);
    assert!(quiet.status.success(), "{stderr}");
    assert_eq!(stdout, format!("{}\n", image.digest));
    assert_eq!(stderr, "");

    let verify = cli(&["image", "verify"], None);
    let (stdout, stderr) = text(&verify);
    assert!(verify.status.success(), "{stderr}");
    assert!(stdout.starts_with("ok: 1 images"), "{stdout}");

    let bad = cli(&["image", "pull", "--platform", "linux", &name], None);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad).1);

    let prune = cli(&["image", "prune"], None);
    let (stdout, stderr) = text(&prune);
    assert!(prune.status.success(), "{stderr}");
    assert!(stdout.contains(&format!("Deleted: {name}")), "{stdout}");
    let ls = cli(&["image", "ls"], None);
    assert!(!text(&ls).0.contains("demo/cli"), "{}", text(&ls).0);
    let verify = cli(&["image", "verify"], None);
    assert!(verify.status.success(), "{}", text(&verify).1);
}
