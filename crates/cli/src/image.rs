//! `podlab image ls|import|inspect|rm`: the image store (containerd's content store and
//! snapshotter twin), as `crictl images` / `ctr images` show it. There is no registry: images
//! come from `oci-archive` / `docker-archive` tarballs and OCI layout folders, and the built-in
//! `busybox` is assembled from the host's busybox-static.

use std::path::Path;

use anyhow::Result;

use crate::context::Ctx;
use crate::output::{Format, Query};

pub fn import(path: &Path, name: Option<&str>) -> Result<()> {
    let ctx = Ctx::open()?;
    for image in ctx.images()?.import(path, name)? {
        println!(
            "imported {} ({}, {} layers)",
            image.name, image.digest, image.layers
        );
    }
    Ok(())
}

pub fn inspect(name: &str) -> Result<()> {
    let ctx = Ctx::open()?;
    let details = ctx.images()?.inspect(name)?;
    println!("{}", serde_json::to_string_pretty(&details)?);
    Ok(())
}

pub fn remove(names: &[String]) -> Result<()> {
    let ctx = Ctx::open()?;
    let store = ctx.images()?;
    for name in names {
        store.remove(name)?;
        println!(
            "Deleted: {}",
            podlab_image::reference::normalize(name).unwrap_or_else(|_| name.clone())
        );
    }
    Ok(())
}

/// `podlab image ls` and `podlab get images`: the built-in busybox is made on first use.
pub fn list(ctx: &Ctx, format: &Format, query: &Query) -> Result<()> {
    let store = ctx.images()?;
    store.ensure_builtin_busybox()?;
    let images = store.list()?;
    if !format.is_table() {
        let items: Vec<serde_json::Value> = images
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        print!("{}", crate::output::render(format, &items, false)?);
        return Ok(());
    }
    let headers: Vec<String> = ["IMAGE", "TAG", "IMAGE ID", "LAYERS", "SIZE"]
        .map(String::from)
        .to_vec();
    let rows: Vec<Vec<String>> = images
        .iter()
        .map(|i| {
            // A pull by digest names the image REPO@sha256:…: no tag, as crictl shows it.
            let (repo, tag) = match i.name.split_once('@') {
                Some((repo, _)) => (repo, "<none>"),
                None => i.name.rsplit_once(':').unwrap_or((&i.name, "latest")),
            };
            let id = i.id.to_string();
            let short = id.trim_start_matches("sha256:").chars().take(13).collect();
            vec![
                repo.to_string(),
                tag.to_string(),
                short,
                i.layers.to_string(),
                human_size(i.size),
            ]
        })
        .collect();
    print!(
        "{}",
        crate::output::align(&headers, &rows, query.no_headers)
    );
    Ok(())
}

pub fn ls(format: Option<&str>, no_headers: bool) -> Result<()> {
    let ctx = Ctx::open()?;
    let query = Query {
        no_headers,
        ..Query::default()
    };
    list(&ctx, &Format::parse(format)?, &query)
}

/// Makes the built-in busybox image when `image` names it and the store lacks it.
pub fn ensure_builtin_if_busybox(ctx: &Ctx, image: &str) -> Result<()> {
    let normal = podlab_image::reference::normalize(image).unwrap_or_default();
    if normal == "docker.io/library/busybox:latest" {
        ctx.images()?.ensure_builtin_busybox()?;
    }
    Ok(())
}

/// Sizes as crictl prints them: `1.23MB`, in powers of 1000.
fn human_size(bytes: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut size = bytes as f64;
    let mut unit = 0;
    while size >= 1000.0 && unit < units.len() - 1 {
        size /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes}B")
    } else {
        format!("{size:.3}{}", units[unit]).replace(".000", "")
    }
}
