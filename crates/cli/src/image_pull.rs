//! `podlab image pull|prune|verify`: images from OCI registries (`ctr image pull`, `crictl
//! pull`), removing the images no container has (`crictl rmi --prune`), and checking the
//! store's consistency. The registry client is `podlab_image::pull`; this module only shows its
//! progress: a bar per blob on a terminal (indicatif), one plain line per step otherwise.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Result};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use podlab_image::platform::Platform;
use podlab_image::pull::{pull, Progress, ProgressEvent, PullOptions};
use podlab_image::reference::Reference;

use crate::context::Ctx;
use crate::UsageError;

#[derive(Args)]
pub struct PullArgs {
    /// The image: `busybox`, `REGISTRY[:PORT]/REPO:TAG`, `REPO@sha256:…`, `REPO:TAG@sha256:…`.
    pub reference: String,
    /// The platform to pick from a multi-platform image (default: this machine's).
    #[arg(long, value_name = "OS/ARCH[/VARIANT]")]
    pub platform: Option<String>,
    /// Print only the image's digest when done.
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn run_pull(args: &PullArgs) -> Result<()> {
    let reference = Reference::parse(&args.reference).map_err(|e| UsageError(e.to_string()))?;
    let platform = args
        .platform
        .as_deref()
        .map(Platform::parse)
        .transpose()
        .map_err(UsageError)?;
    let ctx = Ctx::open()?;
    let store = ctx.images()?;
    let progress: Option<Arc<dyn Progress>> = if args.quiet {
        None
    } else if std::io::stderr().is_terminal() {
        Some(Arc::new(Bars::default()))
    } else {
        Some(Arc::new(Lines))
    };
    let options = PullOptions {
        platform,
        progress,
        ..PullOptions::default()
    };
    let pulled = pull(&store, &reference, &options)?;
    if args.quiet {
        println!("{}", pulled.manifest_digest);
    } else {
        println!(
            "{}: pulled {} ({} layers, {} bytes, {} downloaded) in {:.1}s",
            pulled.name,
            pulled.manifest_digest,
            pulled.layers,
            pulled.size,
            pulled.downloaded,
            pulled.elapsed.as_secs_f64()
        );
    }
    Ok(())
}

/// Plain lines on stderr, for logs and pipes: one per step, none per chunk.
struct Lines;

impl Progress for Lines {
    fn report(&self, event: &ProgressEvent) {
        match event {
            ProgressEvent::Resolved {
                manifest,
                host,
                layers,
            } => eprintln!("resolved {manifest} on {host} ({layers} layers)"),
            ProgressEvent::BlobStarted { digest, size, from } if *from > 0 => {
                eprintln!("{}: resuming at {from} of {size} bytes", digest.short())
            }
            ProgressEvent::BlobWaiting { digest } => {
                eprintln!("{}: another pull is fetching it; waiting", digest.short())
            }
            ProgressEvent::BlobDone {
                digest,
                size,
                fetched,
                unpacked,
            } => {
                let how = match (fetched, unpacked) {
                    (true, true) => "done, unpacked as it arrived",
                    (true, false) => "done",
                    (false, _) => "exists",
                };
                eprintln!("{}: {how} ({size} bytes)", digest.short())
            }
            ProgressEvent::Unpacking => eprintln!("unpacking"),
            _ => {}
        }
    }
}

/// A bar per blob on the terminal.
#[derive(Default)]
struct Bars {
    multi: MultiProgress,
    bars: Mutex<HashMap<String, ProgressBar>>,
}

impl Bars {
    fn bar(&self, digest: &str, size: u64) -> ProgressBar {
        let mut bars = self.bars.lock().unwrap_or_else(|p| p.into_inner());
        bars.entry(digest.to_owned())
            .or_insert_with(|| {
                let bar = self.multi.add(ProgressBar::new(size));
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix} {bar:30} {bytes:>10}/{total_bytes:<10} {msg}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.set_prefix(digest.to_owned());
                bar
            })
            .clone()
    }
}

impl Progress for Bars {
    fn report(&self, event: &ProgressEvent) {
        match event {
            ProgressEvent::Resolved { manifest, host, .. } => {
                self.multi.set_draw_target(ProgressDrawTarget::stderr());
                let _ = self.multi.println(format!("resolved {manifest} on {host}"));
            }
            ProgressEvent::BlobStarted { digest, size, from } => {
                let bar = self.bar(digest.short(), *size);
                bar.set_position(*from);
                bar.set_message(if *from > 0 { "resuming" } else { "downloading" });
            }
            ProgressEvent::BlobProgress { digest, done, size } => {
                self.bar(digest.short(), *size).set_position(*done);
            }
            ProgressEvent::BlobWaiting { digest } => {
                self.bar(digest.short(), 0)
                    .set_message("waiting for another pull");
            }
            ProgressEvent::BlobDone {
                digest,
                size,
                fetched,
                unpacked,
            } => {
                let bar = self.bar(digest.short(), *size);
                bar.set_position(*size);
                bar.finish_with_message(match (fetched, unpacked) {
                    (true, true) => "done, unpacked",
                    (true, false) => "done",
                    (false, _) => "exists",
                });
            }
            ProgressEvent::Unpacking => {
                let _ = self.multi.println("unpacking");
            }
            ProgressEvent::Holding => {}
        }
    }
}

pub fn run_prune() -> Result<()> {
    let ctx = Ctx::open()?;
    // As crictl rmi --prune: an image any container has (running or exited) is kept.
    let keep: Vec<String> = ctx
        .runtime()?
        .list_containers(&podlab_runtime::status::ContainerFilter::default())?
        .into_iter()
        .map(|c| c.image)
        .collect();
    let report = ctx.images()?.prune(&keep)?;
    for name in &report.removed {
        println!("Deleted: {name}");
    }
    println!(
        "{} images, {} blobs, {} snapshots, {} partial downloads removed",
        report.removed.len(),
        report.gc.blobs_removed,
        report.gc.snapshots_removed,
        report.partial_downloads_removed
    );
    Ok(())
}

pub fn run_verify() -> Result<()> {
    let ctx = Ctx::open()?;
    let report = ctx.images()?.verify_all()?;
    for problem in &report.problems {
        eprintln!("{problem}");
    }
    if !report.problems.is_empty() {
        bail!("the image store has {} problems", report.problems.len());
    }
    println!(
        "ok: {} images, {} blobs, {} snapshots",
        report.images, report.blobs, report.snapshots
    );
    Ok(())
}
