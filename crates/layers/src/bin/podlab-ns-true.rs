//! `podlab-ns-true PROGRAM [ARGS...]`: runs a program in a new namespace set (uts, ipc, net, pid,
//! mnt) with podlab-ns, the way `unshare --uts --ipc --net --pid --fork --mount PROGRAM` does:
//! one `clone(2)` with the five flags, the mount tree made private (as unshare's default
//! `--propagation private`), `execv` of the program as PID 1, and its exit status passed on.
//!
//! The podlab side of `cargo xtask peers`' first comparison until podlab has a command for it.

use std::ffi::CString;
use std::path::Path;

use podlab_ns::NsKind;

fn main() -> std::process::ExitCode {
    let args: Vec<CString> = std::env::args()
        .skip(1)
        .filter_map(|a| CString::new(a).ok())
        .collect();
    if args.is_empty() {
        eprintln!("usage: podlab-ns-true PROGRAM [ARGS...]");
        return std::process::ExitCode::from(2);
    }
    let kinds = [
        NsKind::Uts,
        NsKind::Ipc,
        NsKind::Net,
        NsKind::Pid,
        NsKind::Mnt,
    ];
    let spawned = podlab_ns::ops::spawn_with_clone(&kinds, || {
        if let Err(err) = podlab_ns::mnt::make_rprivate(Path::new("/")) {
            eprintln!("podlab-ns-true: {err}");
            return 125;
        }
        let err = nix::unistd::execv(&args[0], &args).unwrap_err();
        eprintln!("podlab-ns-true: execv {:?}: {err}", args[0]);
        127
    });
    let child = match spawned {
        Ok(pid) => pid,
        Err(err) => {
            eprintln!("podlab-ns-true: {err}");
            return std::process::ExitCode::from(125);
        }
    };
    match podlab_ns::child::wait_for(child) {
        Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => {
            std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
        Ok(other) => {
            eprintln!("podlab-ns-true: {}", podlab_ns::child::describe(other));
            std::process::ExitCode::from(1)
        }
        Err(err) => {
            eprintln!("podlab-ns-true: {err}");
            std::process::ExitCode::from(125)
        }
    }
}
