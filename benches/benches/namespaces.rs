//! Namespace operations, each next to its baselines measured in the same run.
//!
//! Every sample runs in a forked single-threaded driver (see `podlab_benches::time_in_child`).
//! Creating a namespace is measured as fork + unshare + exit + wait, so that its cost is read
//! as a ratio to the `baseline/fork` row (fork + exit + wait) of the same run; `baseline/fork-exec`
//! adds an exec of `/bin/true`, which is what a `unshare` or `nsenter` command line pays on top.

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion};
use podlab_benches::{fork_wait, or_die, time_in_child};
use podlab_ns::{ops, NsKind};

const POD_KINDS: [NsKind; 5] = [
    NsKind::Uts,
    NsKind::Ipc,
    NsKind::Net,
    NsKind::Pid,
    NsKind::Mnt,
];

fn baselines(c: &mut Criterion) {
    let mut group = c.benchmark_group("baseline");
    group.bench_function("fork", |b| {
        b.iter_custom(|n| time_in_child(n, || (), |_| fork_wait(|| ())))
    });
    group.bench_function("fork-exec", |b| {
        b.iter_custom(|n| {
            time_in_child(
                n,
                || (),
                |_| {
                    let status = std::process::Command::new("/bin/true")
                        .status()
                        .expect("exec /bin/true");
                    assert!(status.success());
                },
            )
        })
    });
    group.finish();
}

fn create(c: &mut Criterion) {
    let mut group = c.benchmark_group("unshare");
    for kind in NsKind::ALL.into_iter().filter(|k| k.supported()) {
        group.bench_function(kind.proc_name(), |b| {
            b.iter_custom(|n| {
                time_in_child(n, || (), |_| fork_wait(|| or_die(ops::create(&[kind]))))
            })
        });
    }
    group.bench_function("pod-set", |b| {
        b.iter_custom(|n| {
            time_in_child(n, || (), |_| fork_wait(|| or_die(ops::create(&POD_KINDS))))
        })
    });
    group.finish();

    let mut group = c.benchmark_group("clone");
    group.bench_function("none", |b| {
        b.iter_custom(|n| time_in_child(n, || (), |_| clone_wait(&[])))
    });
    group.bench_function("pod-set", |b| {
        b.iter_custom(|n| time_in_child(n, || (), |_| clone_wait(&POD_KINDS)))
    });
    group.finish();
}

fn clone_wait(kinds: &[NsKind]) {
    let pid = or_die(ops::spawn_with_clone(kinds, || 0));
    or_die(nix::sys::wait::waitpid(pid, None));
}

fn join(c: &mut Criterion) {
    let holder = ops::Holder::spawn(&[NsKind::Net, NsKind::Ipc, NsKind::Uts], || Ok(()))
        .expect("namespace holder");
    let holder_pid = holder.pid.as_raw();
    let mut group = c.benchmark_group("setns");
    for kind in [NsKind::Net, NsKind::Ipc, NsKind::Uts] {
        group.bench_function(format!("{kind}-there-and-back"), |b| {
            b.iter_custom(|n| {
                time_in_child(
                    n,
                    || {
                        (
                            or_die(ops::open_pid(holder_pid, kind)),
                            or_die(ops::open_pid(std::process::id() as i32, kind)),
                        )
                    },
                    |(there, back)| {
                        use std::os::fd::AsFd;
                        or_die(ops::join(there.as_fd(), kind));
                        or_die(ops::join(back.as_fd(), kind));
                    },
                )
            })
        });
    }
    group.finish();

    let pin_dir = std::env::temp_dir().join(format!("podlab-bench-pin-{}", std::process::id()));
    std::fs::create_dir_all(&pin_dir).expect("pin folder");
    let mut group = c.benchmark_group("pin");
    group.bench_function("net-pin-unpin", |b| {
        b.iter_custom(|n| {
            time_in_child(
                n,
                || {
                    // A private mount namespace: the pins never reach the host's mount table.
                    or_die(ops::create(&[NsKind::Mnt]));
                    or_die(podlab_ns::mnt::make_rprivate(std::path::Path::new("/")));
                    pin_dir.join("net")
                },
                |path: &mut PathBuf| {
                    or_die(ops::pin(holder_pid, NsKind::Net, path));
                    or_die(ops::unpin(path));
                },
            )
        })
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&pin_dir);
    drop(holder);
}

criterion_group!(benches, baselines, create, join);
criterion_main!(benches);
