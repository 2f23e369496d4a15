//! `podlab-fuzz TARGET`: a coverage-less mutation fuzzer for the targets of `podlab_fuzz`.
//!
//! Why not cargo-fuzz: libFuzzer's coverage needs `-Zsanitizer`/nightly flags for the useful
//! setups, and only stable Rust is available here. This fuzzer instead starts from each
//! target's seed corpus, stacks 1–8 byte-level and dictionary mutations (bit flips, byte sets,
//! inserts, deletes, duplicated or spliced ranges, syntax tokens, edge numbers), and keeps the
//! inputs the parser *accepted* as new starting points: the parser's own verdict is the only
//! feedback. Every input runs under a watchdog: one running longer than `--hang-ms` is a hang.
//! A panic or a hang writes the input to `target/fuzz/TARGET/` and exits non-zero.
//!
//! `--seconds N` and `--inputs N` bound the run (whichever comes first); `--seed S` replays a
//! run's exact sequence. Targets that write files (`layer-tar`) run in a private mount
//! namespace, chrooted into a fresh tmpfs, so a path escaping its folder cannot reach the host.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use podlab_fuzz::{Scratch, Target, TARGETS};

/// The input being run, for the panic hook and the watchdog to save.
static CURRENT: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// Milliseconds since the run began at which the current input started; 0 between inputs.
static STARTED_MS: AtomicU64 = AtomicU64::new(0);
static FINISHED: AtomicBool = AtomicBool::new(false);

struct Options {
    target: &'static Target,
    seconds: u64,
    inputs: u64,
    seed: u64,
    max_len: usize,
    hang_ms: u64,
    out: PathBuf,
}

fn main() -> std::process::ExitCode {
    match parse_args().and_then(run) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podlab-fuzz: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn usage() -> String {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    format!(
        "usage: podlab-fuzz TARGET [--seconds N] [--inputs N] [--seed S] [--max-len N] [--hang-ms N] [--out DIR]\ntargets: {}",
        names.join(", ")
    )
}

fn parse_args() -> Result<Options> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(name) = args.first() else {
        bail!("{}", usage());
    };
    let target = podlab_fuzz::target(name)
        .with_context(|| format!("no fuzz target {name:?}\n{}", usage()))?;
    let mut options = Options {
        target,
        seconds: 60,
        inputs: u64::MAX,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        max_len: 4096,
        hang_ms: 2000,
        out: PathBuf::from("target/fuzz").join(name),
    };
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        let value = rest
            .next()
            .with_context(|| format!("{flag} needs a value\n{}", usage()))?;
        let number = || -> Result<u64> {
            value
                .parse()
                .with_context(|| format!("{flag} {value:?}: expected a number"))
        };
        match flag.as_str() {
            "--seconds" => options.seconds = number()?,
            "--inputs" => options.inputs = number()?,
            "--seed" => options.seed = number()?,
            "--max-len" => options.max_len = number()? as usize,
            "--hang-ms" => options.hang_ms = number()?,
            "--out" => options.out = PathBuf::from(value),
            other => bail!("unknown option {other}\n{}", usage()),
        }
    }
    Ok(options)
}

fn run(options: Options) -> Result<()> {
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("creating {}", options.out.display()))?;
    let out = std::fs::canonicalize(&options.out)?;
    let target = options.target;
    // The sandbox first: unshare needs a single-threaded process.
    let (scratch, out) = if target.writes_files {
        private_scratch(&out)?
    } else {
        let none = Scratch {
            dir: PathBuf::from("/nonexistent"),
        };
        (none, out)
    };
    let out_for_hook = out.clone();
    let name = target.name;
    std::panic::set_hook(Box::new(move |info| {
        let input = CURRENT.lock().map(|c| c.clone()).unwrap_or_default();
        let path = save(&out_for_hook, "crash", &input);
        eprintln!("podlab-fuzz: {name}: PANIC on the input saved as {path}: {info}");
    }));
    let hang_ms = options.hang_ms;
    let out_for_watchdog = out.clone();
    let begin = Instant::now();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(50));
        if FINISHED.load(Ordering::Relaxed) {
            return;
        }
        let started = STARTED_MS.load(Ordering::Relaxed);
        let now = begin.elapsed().as_millis() as u64;
        if started != 0 && now.saturating_sub(started) > hang_ms {
            // The main thread holds no lock while it runs an input.
            let input = CURRENT.lock().map(|c| c.clone()).unwrap_or_default();
            let path = save(&out_for_watchdog, "hang", &input);
            eprintln!("podlab-fuzz: {name}: HANG: an input ran over {hang_ms} ms; saved as {path}");
            std::process::exit(3);
        }
    });

    let mut rng = fastrand::Rng::with_seed(options.seed);
    let seeds = (target.seeds)();
    let mut corpus: Vec<Vec<u8>> = seeds.clone();
    let mut accepted = 0u64;
    let mut count = 0u64;
    let deadline = begin + Duration::from_secs(options.seconds);
    let mut input = Vec::with_capacity(options.max_len);
    println!(
        "podlab-fuzz: {} ({}), seed {}, {} seeds, up to {} s / {} inputs",
        target.name,
        target.what,
        options.seed,
        seeds.len(),
        options.seconds,
        options.inputs
    );
    while count < options.inputs {
        if count.is_multiple_of(1024) && Instant::now() >= deadline {
            break;
        }
        input.clear();
        input.extend_from_slice(&corpus[rng.usize(..corpus.len())]);
        mutate(
            &mut input,
            &mut rng,
            &corpus,
            target.dictionary,
            options.max_len,
        );
        {
            let mut current = CURRENT.lock().unwrap();
            current.clear();
            current.extend_from_slice(&input);
        }
        STARTED_MS.store(begin.elapsed().as_millis() as u64 | 1, Ordering::Relaxed);
        let ok = (target.run)(&input, &scratch);
        STARTED_MS.store(0, Ordering::Relaxed);
        count += 1;
        if ok {
            accepted += 1;
            // Accepted inputs become starting points (a few, so seeds keep their weight).
            if corpus.len() < 4096 && rng.u32(..64) == 0 {
                corpus.push(input.clone());
            }
        }
        if count.is_multiple_of(1_000_000) {
            let secs = begin.elapsed().as_secs_f64();
            println!(
                "  {count} inputs in {secs:.0} s ({:.0}/s), {accepted} accepted, corpus {}",
                count as f64 / secs,
                corpus.len()
            );
        }
    }
    FINISHED.store(true, Ordering::Relaxed);
    let secs = begin.elapsed().as_secs_f64();
    println!(
        "podlab-fuzz: {}: {count} inputs in {secs:.1} s ({:.0} inputs/s), {accepted} accepted by the parser, corpus {} (from {} seeds), 0 panics, 0 hangs over {} ms",
        target.name,
        count as f64 / secs,
        corpus.len(),
        seeds.len(),
        options.hang_ms
    );
    Ok(())
}

/// Numbers at the edges of what parsers handle.
const EDGE_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "255",
    "256",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483649",
    "4294967296",
    "9223372036854775807",
    "18446744073709551616",
    "1e308",
    "1e999",
    "-0",
    "0.1",
    "NaN",
    "Infinity",
];

fn mutate(
    input: &mut Vec<u8>,
    rng: &mut fastrand::Rng,
    corpus: &[Vec<u8>],
    dictionary: &[&str],
    max_len: usize,
) {
    for _ in 0..1 + rng.usize(..8) {
        let len = input.len();
        let at = |rng: &mut fastrand::Rng| rng.usize(..=len);
        match rng.u8(..10) {
            0 if len > 0 => {
                let i = rng.usize(..len);
                input[i] ^= 1 << rng.u8(..8);
            }
            1 if len > 0 => {
                let i = rng.usize(..len);
                input[i] = rng.u8(..);
            }
            2 => {
                let i = at(rng);
                input.insert(i, rng.u8(..));
            }
            3 if len > 0 => {
                let start = rng.usize(..len);
                let end = (start + 1 + rng.usize(..16)).min(len);
                input.drain(start..end);
            }
            4 if len > 0 => {
                let start = rng.usize(..len);
                let end = (start + 1 + rng.usize(..32)).min(len);
                let copy = input[start..end].to_vec();
                let i = at(rng);
                input.splice(i..i, copy);
            }
            5 | 6 if !dictionary.is_empty() => {
                let word = dictionary[rng.usize(..dictionary.len())].as_bytes();
                let i = at(rng);
                if rng.bool() || i + word.len() > len {
                    input.splice(i..i, word.iter().copied());
                } else {
                    input[i..i + word.len()].copy_from_slice(word);
                }
            }
            7 => {
                let other = &corpus[rng.usize(..corpus.len())];
                if !other.is_empty() {
                    let start = rng.usize(..other.len());
                    let end = (start + 1 + rng.usize(..64)).min(other.len());
                    let i = at(rng);
                    input.splice(i..i, other[start..end].iter().copied());
                }
            }
            8 => {
                let number = EDGE_NUMBERS[rng.usize(..EDGE_NUMBERS.len())].as_bytes();
                let i = at(rng);
                input.splice(i..i, number.iter().copied());
            }
            _ if len > 1 => input.truncate(rng.usize(1..len)),
            _ => {}
        }
    }
    input.truncate(max_len);
}

/// Writes `input` under `dir` named by its kind and a hash; returns the path.
fn save(dir: &Path, kind: &str, input: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    input.hash(&mut hasher);
    let path = dir.join(format!("{kind}-{:016x}", hasher.finish()));
    let _ = std::fs::write(&path, input);
    path.display().to_string()
}

/// A private mount namespace chrooted into a fresh tmpfs: a layer that escapes its folder can
/// only reach that tmpfs, which goes with this process. Needs root (or a user namespace).
///
/// The tmpfs is mounted over the temporary folder itself, in the private namespace only: a
/// mount point made for it (`/tmp/podlab-fuzz-PID`) would be a folder on the host's file system
/// that nothing could remove from inside (a mount point is busy in the namespace that has the
/// mount, and the chroot hides it), and it stayed after every run. So nothing is made outside,
/// and Ctrl-C or a crash has nothing to clean up either.
fn private_scratch(out: &Path) -> Result<(Scratch, PathBuf)> {
    use nix::mount::{mount, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    use std::os::fd::AsRawFd;
    let root = nix::unistd::geteuid().is_root();
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let flags = if root {
        CloneFlags::CLONE_NEWNS
    } else {
        CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUSER
    };
    unshare(flags).context("unshare: a private mount namespace for the scratch folder")?;
    if !root {
        std::fs::write("/proc/self/setgroups", "deny")?;
        std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))?;
        std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    }
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("making / private")?;
    // The output folder may lie below the folder the tmpfs covers: held open, it is bound in
    // through /proc/self/fd once the tmpfs hides its path.
    let out_dir = nix::fcntl::open(
        out,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .with_context(|| format!("opening {}", out.display()))?;
    let dir = std::env::temp_dir();
    mount(
        Some("tmpfs"),
        &dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("size=64m"),
    )
    .with_context(|| {
        format!(
            "mounting the scratch tmpfs on {} (privately)",
            dir.display()
        )
    })?;
    // Crashes and hangs are saved below `out`: it is bound into the tmpfs before the chroot.
    let inner_out = dir.join("out");
    std::fs::create_dir_all(&inner_out)?;
    let out_source = PathBuf::from(format!("/proc/self/fd/{}", out_dir.as_raw_fd()));
    mount(
        Some(&out_source),
        &inner_out,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .context("binding the output folder into the scratch tmpfs")?;
    drop(out_dir);
    nix::unistd::chroot(&dir).context("chroot into the scratch tmpfs")?;
    nix::unistd::chdir("/")?;
    std::fs::create_dir_all("/work")?;
    Ok((
        Scratch {
            dir: PathBuf::from("/work"),
        },
        PathBuf::from("/out"),
    ))
}
