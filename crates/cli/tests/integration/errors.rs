//! Integration tests: errors as people read them, each thing said once, in one line, naming
//! the path and what was expected.

use std::path::PathBuf;

use crate::pods::Root;

/// Issue 13, defect 9: errors were printed twice over (`lchown X: EPERM: EPERM`): every
/// library error put its cause (the errno, the I/O error) in its message and returned it as
/// its `source()` too, and anyhow's `{:#}`, as `podlab` prints an error, says both. Each typed
/// error that carries a cause, through anyhow as `main` prints it, says the cause once.
#[test]
fn defect_9_an_error_and_its_cause_are_printed_once() {
    let io = || std::io::Error::from_raw_os_error(libc::EEXIST);
    let path = || PathBuf::from("/run/podlab/x");
    let errors: Vec<anyhow::Error> = vec![
        podlab_ns::Error::io("reading", path(), io()).into(),
        podlab_ns::Error::sys("setns", nix::Error::EEXIST).into(),
        podlab_image::Error::io("reading", path(), io()).into(),
        podlab_image::Error::sys("lchown", path(), nix::Error::EEXIST).into(),
        podlab_runtime::Error::io("reading", path(), io()).into(),
        podlab_runtime::Error::sys("kill", "pid 1", nix::Error::EEXIST).into(),
        podlab_runtime::Error::Ns(podlab_ns::Error::io("reading", path(), io())).into(),
        podlab_control::Error::Io {
            op: "mkdir",
            path: path(),
            cause: io(),
        }
        .into(),
        podlab_cni::Error::Io {
            what: "reading",
            path: path(),
            cause: io(),
        }
        .into(),
        podlab_kubelet::node::NodeError::from(podlab_runtime::Error::io("reading", path(), io()))
            .into(),
        podlab_kubelet::node::NodeError::from(podlab_control::Error::Io {
            op: "mkdir",
            path: path(),
            cause: io(),
        })
        .into(),
        podlab_layers::Error::io("reading", path(), io()).into(),
    ];
    for error in errors {
        let error = error.context("opening the thing");
        let printed = format!("{error:#}");
        for cause in ["File exists", "EEXIST"] {
            assert!(
                printed.matches(cause).count() <= 1,
                "said twice over: {printed}"
            );
        }
        assert!(
            printed.contains("EEXIST") || printed.contains("File exists"),
            "the cause is said: {printed}"
        );
    }

    // And as the command prints one: a state root whose store is a file.
    let root = Root::new("error-once");
    std::fs::write(root.dir.join("store"), "").unwrap();
    let out = root.run(&["get", "pods"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(
        out.stderr,
        format!(
            "podlab: opening the object store: mkdir {}: File exists (os error 17)\n",
            root.dir.join("store").display()
        )
    );
    std::fs::remove_file(root.dir.join("store")).unwrap();
}

/// Issue 13, defect 9: `image import /etc/passwd` printed the file's content in its error.
/// It says the file is not an image archive, naming the path and what was expected.
#[test]
fn defect_9_image_import_of_a_file_that_is_no_archive_names_it_without_its_content() {
    let root = Root::new("import-passwd");
    let out = root.run(&["image", "import", "/etc/passwd"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.starts_with(
            "podlab: /etc/passwd: not an image archive: expected an oci-archive or docker-archive"
        ) && out.stderr.contains("OCI image layout folder")
            && out.stderr.lines().count() == 1,
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("root:x:0:0"), "{}", out.stderr);
}
