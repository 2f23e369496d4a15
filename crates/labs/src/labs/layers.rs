//! Lab 15, image layers and whiteouts: an image is a stack of read-only layers, and overlayfs
//! merges them. A file deleted by an upper layer is not gone from the lower one: the upper
//! layer holds a whiteout (a character device 0/0 of the same name) that hides it. The student
//! mounts the built-in busybox image's two layers by hand and finds where the deleted file
//! still is. The check reads `/proc/self/mountinfo`, the merged tree, the snapshots and the
//! answer file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use podlab_runtime::config::RuntimeConfig;

use crate::env::Env;
use crate::{Lab, Level, Verdict};

const MERGED: &str = "merged";
const ANSWER: &str = "answer.txt";
const DELETED: &str = podlab_image::busybox::WHITED_OUT;
const MARKER: &str = podlab_image::busybox::MARKER;

pub static LAB: Lab = Lab {
    number: 15,
    name: "layers",
    title: "Image layers and whiteouts, mounted by hand",
    level: Level::Advanced,
    minutes: 15,
    goal: "podlab's built-in busybox image has two layers; the top one deletes /etc/issue.
1. Mount the image's layers yourself, read-only, with overlayfs at {work}/merged (the layer
   folders are in `podlab image inspect busybox`), so that it shows what a container sees:
   /etc/podlab-layer there, /etc/issue gone.
2. /etc/issue is not really gone. Write into {work}/answer.txt the layer folder that still
   holds it.",
    hints: &[
        "`podlab image inspect busybox` lists the layers, each unpacked into a snapshot folder. \
An overlay mount with only lower folders (`-o lowerdir=A:B`) is read-only; the FIRST folder is \
the TOP layer.",
        "In the top layer, /etc/issue is a whiteout: `ls -l SNAPSHOT/etc/issue` shows a character \
device 0, 0. overlayfs hides whatever lies below a whiteout, but only if the whiteout's layer \
is above.",
        "TOP=<snapshot of the 2nd layer>; BASE=<snapshot of the 1st layer>\n\
mount -t overlay overlay -o lowerdir=$TOP:$BASE {work}/merged\n\
ls {work}/merged/etc; echo $BASE > {work}/answer.txt",
    ],
    not_yet: "nothing is mounted at",
    mistake_story: "the layers in the wrong order (`lowerdir=BASE:TOP`): the whiteout is below \
the file it should hide",
    scene,
    check,
    solve,
    mistake,
    reset,
};

/// The busybox image's snapshot folders, top layer first (overlayfs's lowerdir order).
fn lowerdirs() -> Result<Vec<PathBuf>> {
    let store = podlab_image::Store::open(&RuntimeConfig::from_env().image_root)?;
    store.ensure_builtin_busybox()?;
    let image = store.resolve("busybox")?;
    Ok(store.lowerdirs(&image))
}

/// The overlay mounted at `target`, as mountinfo shows it: its lowerdir folders.
fn overlay_at(target: &Path) -> Result<Option<Vec<PathBuf>>> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let target = target.display().to_string();
    let mut found = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.get(4) != Some(&target.as_str()) {
            continue;
        }
        if fields.get(dash + 1) != Some(&"overlay") {
            found = Some(Vec::new());
            continue;
        }
        let options = fields.get(dash + 3).copied().unwrap_or_default();
        let lower = options
            .split(',')
            .find_map(|o| o.strip_prefix("lowerdir="))
            .unwrap_or_default();
        // The last mount on a path is the one seen.
        found = Some(lower.split(':').map(PathBuf::from).collect());
    }
    Ok(found)
}

fn scene(env: &Env) -> Result<()> {
    std::fs::create_dir_all(env.work_dir()?.join(MERGED))?;
    lowerdirs()?;
    env.podlab(&["image", "ls"])?;
    env.say(format!(
        "An empty folder to mount on: {}",
        env.file(MERGED).display()
    ));
    Ok(())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let layers = lowerdirs()?;
    let merged = env.file(MERGED);
    match overlay_at(&merged)? {
        None => verdict.missing(format!("nothing is mounted at {}", merged.display())),
        Some(lower) if lower.is_empty() => verdict.missing(format!(
            "what is mounted at {} is not an overlay",
            merged.display()
        )),
        Some(lower) => {
            let mut sorted = lower.clone();
            sorted.sort();
            let mut want = layers.clone();
            want.sort();
            verdict.part(
                sorted == want,
                format!(
                    "an overlay of busybox's {} layers is mounted at {}",
                    layers.len(),
                    merged.display()
                ),
                format!(
                    "the overlay at {} has lowerdir {lower:?}, not busybox's layers",
                    merged.display()
                ),
            );
            let issue = merged.join(DELETED);
            let marker = merged.join(MARKER);
            verdict.part(
                std::fs::symlink_metadata(&issue).is_err() && marker.exists(),
                format!("/{DELETED} is hidden, /{MARKER} is there: what a container sees"),
                if marker.exists() {
                    format!(
                        "/{DELETED} is visible in the overlay: the layer holding its whiteout must be \
ABOVE (listed first in lowerdir)"
                    )
                } else {
                    format!("/{MARKER} is missing from the overlay")
                },
            );
        }
    }
    let holder = layers
        .iter()
        .find(|l| std::fs::symlink_metadata(l.join(DELETED)).is_ok_and(|m| m.is_file()))
        .context("no busybox layer holds /etc/issue as a file")?;
    let answer = std::fs::read_to_string(env.file(ANSWER)).unwrap_or_default();
    let answer = answer.trim().trim_end_matches('/');
    verdict.part(
        Path::new(answer) == holder.as_path(),
        format!("the answer is the layer that still holds /{DELETED}"),
        if answer.is_empty() {
            format!("{} names no layer folder yet", env.file(ANSWER).display())
        } else {
            format!("{answer} is not the layer folder that holds /{DELETED}")
        },
    );
    Ok(verdict)
}

fn mount(env: &Env, layers: &[PathBuf]) -> Result<()> {
    let lower: Vec<String> = layers.iter().map(|l| l.display().to_string()).collect();
    let options = format!("lowerdir={}", lower.join(":"));
    let merged = env.file(MERGED).display().to_string();
    env.run(
        "mount",
        &["-t", "overlay", "overlay", "-o", &options, &merged],
    )?;
    env.run("ls", &[&format!("{merged}/etc")])?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    let layers = lowerdirs()?;
    mount(env, &layers)?;
    let base = layers.last().context("busybox has no layer")?;
    env.say(format!(
        "$ echo {} > {}",
        base.display(),
        env.file(ANSWER).display()
    ));
    env.write(ANSWER, &format!("{}\n", base.display()))?;
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    let mut layers = lowerdirs()?;
    layers.reverse();
    mount(env, &layers)
}

fn reset(env: &Env) -> Result<()> {
    let merged = env.file(MERGED);
    while overlay_at(&merged)?.is_some() {
        env.run("umount", &[&merged.display().to_string()])?;
    }
    Ok(())
}
