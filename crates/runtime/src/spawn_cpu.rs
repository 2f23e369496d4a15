//! Where a freshly spawned shim starts: on a CPU other than its caller's; and where a
//! container's process starts: on a CPU other than the shim's (`leave_cpu`).
//!
//! A spawn's child `execve`s while its caller waits in `vfork`, on the caller's CPU, and the
//! kernel's balancing at `execve` often leaves it there. The caller then wakes and goes on with
//! its own work (the stores, the pod's folders and cgroups) on that same CPU, and the shim's
//! start (its `execve` and glibc's, about a millisecond on this VM) waits behind it, while the
//! other CPU is idle: measured in one `run --rm` of three, pause's namespaces came 1.2–1.5 ms
//! later when caller and shim shared a CPU (docs/benchmarks.md, session 26). So right after the
//! spawn the caller's CPU (that of the thread that goes on working, when a thread of its own
//! spawns) is taken out of the shim's affinity, which moves the shim at once if it is still
//! there. The shim puts back the caller's affinity (passed in [`ENV_CPUS`]) once
//! it has read its arguments, which the caller sends after the hint, and before it forks
//! anything: pause and the containers inherit the caller's affinity, as they would without the
//! hint. A caller allowed on one CPU only (`taskset -c 0`) gives no hint.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The caller's affinity, for the shim to take back: CPU numbers separated by commas.
pub const ENV_CPUS: &str = "PODLAB_SHIM_CPUS";

/// The caller's affinity when it allows more than one CPU (else there is no other CPU to
/// start a child on).
pub(crate) fn caller_cpus() -> Option<CpuSet> {
    let cpus = sched_getaffinity(Pid::from_raw(0)).ok()?;
    (allowed(&cpus).len() > 1).then_some(cpus)
}

/// The caller's affinity and `cpu` (its working thread's) for a spawn kept off that CPU; None
/// when there is no CPU or no other CPU.
pub(crate) fn hint(cpu: Option<usize>) -> Option<(CpuSet, usize)> {
    Some((caller_cpus()?, cpu?))
}

/// `cpus` as [`ENV_CPUS`] carries it.
pub(crate) fn encode(cpus: &CpuSet) -> String {
    allowed(cpus)
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn decode(text: &str) -> Option<CpuSet> {
    let mut cpus = CpuSet::new();
    for cpu in text.split(',') {
        cpus.set(cpu.trim().parse().ok()?).ok()?;
    }
    Some(cpus)
}

fn allowed(cpus: &CpuSet) -> Vec<usize> {
    (0..CpuSet::count())
        .filter(|&cpu| cpus.is_set(cpu).unwrap_or(false))
        .collect()
}

/// `cpus` less `cpu`; None when no other CPU is left (or `cpu` is beyond the set).
fn without(cpus: &CpuSet, cpu: usize) -> Option<CpuSet> {
    let mut others = *cpus;
    others.unset(cpu).ok()?;
    (!allowed(&others).is_empty()).then_some(others)
}

/// The CPU the calling thread runs on now.
pub(crate) fn this_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// A thread just made that cannot end before this is dropped (or [`HeldThread::release`]d),
/// so that its creator can still change its affinity: `pthread_setaffinity_np` names a thread
/// by the kernel id that its exit clears, and on an ended thread it set the *caller's*
/// affinity (the id 0), which pinned the caller to the other CPU for good.
pub(crate) struct HeldThread<T> {
    thread: std::thread::JoinHandle<T>,
    hold: Option<std::sync::mpsc::Sender<()>>,
}

impl<T: Send + 'static> HeldThread<T> {
    /// Runs `work` on a new thread named `name`, which waits at its end until released.
    pub(crate) fn spawn(
        name: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<HeldThread<T>> {
        let (hold, held) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let result = work();
                // Returns once the sender is dropped: released.
                let _ = held.recv();
                result
            })?;
        Ok(HeldThread {
            thread,
            hold: Some(hold),
        })
    }

    /// Takes `cpu` (the creator's) out of the thread's affinity (`cpus`, the creator's), so
    /// that it runs on another CPU at once: a new thread starts on its creator's CPU here and
    /// waited there behind it (0.6 ms, sched tracepoints) while the other CPU was idle.
    pub(crate) fn move_off_cpu(&self, cpus: &CpuSet, cpu: usize) {
        let Some(others) = without(cpus, cpu) else {
            return;
        };
        // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET stays within its size.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for other in allowed(&others) {
            unsafe { libc::CPU_SET(other, &mut set) };
        }
        let thread = std::os::unix::thread::JoinHandleExt::as_pthread_t(&self.thread);
        // SAFETY: the thread is alive: it waits for `hold`, which this still has. Best effort.
        unsafe { libc::pthread_setaffinity_np(thread, std::mem::size_of_val(&set), &set) };
    }

    /// Lets the thread end once its work is done.
    pub(crate) fn release(mut self) -> std::thread::JoinHandle<T> {
        self.hold = None;
        self.thread
    }
}

/// Takes `cpu` (the caller's: the CPU of the thread that goes on working meanwhile) out of
/// `child`'s affinity (`cpus`, the caller's), so the kernel moves it to another one now. Best
/// effort: a hint, never an error.
pub(crate) fn move_off_cpu(child: u32, cpus: &CpuSet, cpu: usize) {
    let Some(others) = without(cpus, cpu) else {
        return;
    };
    if let Ok(pid) = i32::try_from(child) {
        let _ = sched_setaffinity(Pid::from_raw(pid), &others);
    }
}

/// In a container's process just forked by the shim: if it still runs on `shim_cpu` (the
/// shim's when it forked), moves it to another CPU of its affinity and gives it back the
/// affinity it inherited, which does not move it again. The shim goes on working right after
/// the fork and again once the container's program has started (its record, its answer to
/// the Start, then the command's own work on the answer), and a fork starts on its parent's
/// CPU: sched tracepoints showed the container's program, the shim and the command all on one
/// CPU of two while the other was idle, the program waiting 0.3 ms behind the shim and its
/// exit 0.2 ms behind the command (docs/benchmarks.md, session 30). The program keeps the
/// affinity it would have had; only where it starts differs. Only for a Start whose caller
/// waits for the exit (`run --rm`): a CRI Start's answer is all its caller waits for, and
/// there the wake-ups across CPUs cost more than the overlap gains. Best effort: a hint,
/// never an error.
pub(crate) fn leave_cpu(shim_cpu: usize) {
    if this_cpu() != Some(shim_cpu) {
        return;
    }
    let Ok(inherited) = sched_getaffinity(Pid::from_raw(0)) else {
        return;
    };
    let Some(others) = without(&inherited, shim_cpu) else {
        return;
    };
    if sched_setaffinity(Pid::from_raw(0), &others).is_ok() {
        let _ = sched_setaffinity(Pid::from_raw(0), &inherited);
    }
}

/// In the shim, once its arguments are read (the hint is set by then) and before it forks:
/// takes back the caller's affinity from [`ENV_CPUS`] (and removes the variable), so that
/// nothing the shim starts keeps the hint.
pub fn restore_caller_cpus() {
    let Some(text) = std::env::var_os(ENV_CPUS) else {
        return;
    };
    // SAFETY: the shim calls it before it forks or starts a thread: it has one thread.
    unsafe { std::env::remove_var(ENV_CPUS) };
    if let Some(cpus) = text.to_str().and_then(decode) {
        let _ = sched_setaffinity(Pid::from_raw(0), &cpus);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_affinity_goes_through_the_variable_unchanged() {
        let mut cpus = CpuSet::new();
        for cpu in [0, 1, 5, 63, 64] {
            cpus.set(cpu).unwrap();
        }
        let text = encode(&cpus);
        assert_eq!(text, "0,1,5,63,64");
        assert_eq!(allowed(&decode(&text).unwrap()), [0, 1, 5, 63, 64]);
    }

    #[test]
    fn a_garbled_variable_is_no_affinity() {
        assert!(decode("0,x").is_none());
        assert!(decode("").is_none());
        assert!(decode("99999").is_none(), "beyond the set's size");
    }

    #[test]
    fn regression_a_thread_that_ended_before_its_move_pinned_its_creator() {
        let Some(cpus) = caller_cpus() else {
            eprintln!("skipped: this process may run on one CPU only");
            return;
        };
        for _ in 0..20 {
            let cpu = this_cpu().expect("sched_getcpu");
            let thread = HeldThread::spawn("quick", || ()).unwrap();
            // The work is long done by now: only the hold keeps the thread.
            std::thread::sleep(std::time::Duration::from_millis(1));
            thread.move_off_cpu(&cpus, cpu);
            thread.release().join().unwrap();
            let mine = sched_getaffinity(Pid::from_raw(0)).unwrap();
            assert_eq!(allowed(&mine), allowed(&cpus), "the creator's CPUs");
        }
    }

    #[test]
    fn a_held_thread_is_moved_off_its_creators_cpu() {
        let Some(cpus) = caller_cpus() else {
            eprintln!("skipped: this process may run on one CPU only");
            return;
        };
        let cpu = this_cpu().expect("sched_getcpu");
        let (moved, when_moved) = std::sync::mpsc::channel::<()>();
        let thread = HeldThread::spawn("moved", move || {
            when_moved.recv().unwrap();
            allowed(&sched_getaffinity(Pid::from_raw(0)).unwrap())
        })
        .unwrap();
        thread.move_off_cpu(&cpus, cpu);
        moved.send(()).unwrap();
        let theirs = thread.release().join().unwrap();
        let all = allowed(&cpus);
        assert_eq!(theirs.len(), all.len() - 1, "{theirs:?} of {all:?}");
        assert!(!theirs.contains(&cpu), "{theirs:?} still has {cpu}");
    }

    #[test]
    fn a_child_is_moved_off_the_callers_cpu() {
        let Some(cpus) = caller_cpus() else {
            eprintln!("skipped: this process may run on one CPU only");
            return;
        };
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let mine = this_cpu().expect("sched_getcpu");
        move_off_cpu(child.id(), &cpus, mine);
        let theirs = sched_getaffinity(Pid::from_raw(child.id() as i32)).unwrap();
        let (theirs, all) = (allowed(&theirs), allowed(&cpus));
        let _ = child.kill();
        let _ = child.wait();
        // The caller's CPU then: the child's set is the caller's less that one.
        assert_eq!(theirs.len(), all.len() - 1, "{theirs:?} of {all:?}");
        assert!(theirs.iter().all(|cpu| all.contains(cpu) && *cpu != mine));
    }
}
