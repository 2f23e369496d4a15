//! Reliability: a full disk under the state root. The root is a small tmpfs (mounted in the
//! test sandbox's own mount namespace); once it is filled, `apply` fails whole with an error
//! that names what could not be written, nothing already stored is corrupt (the running pod
//! stays, every command still reads the store), the failed pod never appears, and it all works
//! again once space returns.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::pods::{running, Root};

const LIMIT: Duration = Duration::from_secs(60);

fn pod(name: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "trap 'exit 0' TERM; sleep 1000 & wait"]
"#
    )
}

/// Unmounts the tmpfs (after the root's own cleanup, which runs first: declared later).
struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fills the filesystem of `dir` with one file until the kernel says ENOSPC; its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 64 * 1024];
    loop {
        match file.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    // The last few bytes a partial write could not take.
    while file.write(&block[..1]).is_ok_and(|n| n == 1) {}
    path
}

#[test]
fn a_full_disk_under_the_state_root_fails_the_apply_whole_corrupts_nothing_and_heals() {
    let dir = std::env::temp_dir().join(format!("podlab-it-full-disk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &dir,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=48m"),
    )
    .unwrap();
    let _tmpfs = Tmpfs(dir.clone());
    let root = Root::new("full-disk");
    assert_eq!(root.dir, dir);

    let out = root.apply(&pod("before"));
    assert_eq!(out.code, Some(0), "{out:?}");
    let before = root.wait_pod("before", "running", LIMIT, running);

    let filler = fill(&dir);
    let refused = root.apply(&pod("during"));
    assert_ne!(
        refused.code,
        Some(0),
        "apply on a full disk succeeded: {refused:?}"
    );
    assert!(
        refused.stderr.contains("No space left on device")
            && refused.stderr.contains(&*dir.to_string_lossy()),
        "the error does not say which file could not be written for want of space: {}",
        refused.stderr
    );
    // Nothing corrupt: the store reads, the pod that ran still runs, unchanged.
    let listed = root.run(&["get", "pods", "-o", "name"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    assert_eq!(listed.stdout, "pod/before\n", "{listed:?}");
    let still = root.pod("before").unwrap();
    assert_eq!(still.metadata.uid, before.metadata.uid);
    assert!(running(&still));

    // Space returns: everything works again, the new pod runs, the old one is untouched.
    std::fs::remove_file(&filler).unwrap();
    let out = root.apply(&pod("after"));
    assert_eq!(out.code, Some(0), "{out:?}");
    root.wait_pod("after", "running", LIMIT, running);
    // The apply that failed must not have been committed after all (it was: its log line was
    // written before the object file that failed, and the next reader redid it).
    assert!(
        root.pod("during").is_none(),
        "the pod whose apply failed on the full disk appeared once space returned"
    );
    let old = root.wait_pod("before", "running", LIMIT, running);
    assert_eq!(
        crate::pods::container(&old, "app").container_id,
        crate::pods::container(&before, "app").container_id
    );
    for name in ["before", "after"] {
        let deleted = root.run(&["delete", "pod", name]);
        assert_eq!(deleted.code, Some(0), "{deleted:?}");
    }
    // Nothing left but the test's own tmpfs (assert_nothing_left would count that mount).
    let mounts: Vec<_> = podlab_ns::mnt::mounts_below(&dir)
        .unwrap()
        .into_iter()
        .filter(|m| m.mount_point != dir)
        .collect();
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    let processes = crate::pods::processes_of(&dir);
    assert!(processes.is_empty(), "processes left: {processes:?}");
    for folder in ["sandboxes", "pods", "logs"] {
        let left: Vec<_> = std::fs::read_dir(dir.join(folder))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{folder}/ still holds {left:?}");
    }
}
