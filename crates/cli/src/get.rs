//! `podlab get TYPE[,TYPE...] [NAME...]` and `podlab get TYPE/NAME...`: objects from the store
//! as kubectl prints them, with kubectl's output formats and queries. Several kinds print one
//! table each, a blank line between, their names as `kind.group/name` once more than one kind
//! was found; a name that is not there is reported after the others are printed, and the
//! command then exits 1. `-w` follows one kind (any of them) and shows each change as a row:
//! a pod being deleted shows `Terminating`.

use anyhow::{bail, Result};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use serde_json::Value;

use crate::columns::{human_duration, pod_row, POD_HEADERS, POD_WIDE_HEADERS};
use crate::context::Ctx;
use crate::output::{self, Format, Query};

/// The kinds `get` knows, by every name kubectl accepts for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Pods,
    Events,
    ReplicaSets,
    Deployments,
    ConfigMaps,
    /// Printed as kubectl prints them: a table without values, `-o yaml|json` with `data` in
    /// base64.
    Secrets,
    Images,
}

impl Resource {
    pub fn parse(name: &str) -> Result<Resource> {
        Ok(match name {
            "pod" | "pods" | "po" => Resource::Pods,
            "event" | "events" | "ev" => Resource::Events,
            "replicaset" | "replicasets" | "rs" | "replicasets.apps" => Resource::ReplicaSets,
            "deployment" | "deployments" | "deploy" | "deployments.apps" => Resource::Deployments,
            "configmap" | "configmaps" | "cm" => Resource::ConfigMaps,
            "secret" | "secrets" => Resource::Secrets,
            "image" | "images" => Resource::Images,
            other => bail!(
                "the server doesn't have a resource type {other:?} (podlab serves pods, events, replicasets, deployments, configmaps, secrets, images)"
            ),
        })
    }

    fn kind_name(self) -> &'static str {
        match self {
            Resource::Pods => "pods",
            Resource::Events => "events",
            Resource::ReplicaSets => "replicasets.apps",
            Resource::Deployments => "deployments.apps",
            Resource::ConfigMaps => "configmaps",
            Resource::Secrets => "secrets",
            Resource::Images => "images",
        }
    }
}

pub struct GetArgs {
    /// `TYPE[,TYPE...] [NAME...]` or `TYPE/NAME...`, as kubectl takes them.
    pub args: Vec<String>,
    pub format: Format,
    pub query: Query,
    pub watch: bool,
    /// `--index NAME=KEY`: answer from an informer index instead of listing (see `index`).
    pub index: Option<String>,
}

/// What one argument group asks for: a kind, and the names wanted (none: all of them).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub resource: Resource,
    pub names: Vec<String>,
}

/// kubectl's argument forms: `TYPE[,TYPE...] [NAME...]` (the names looked up in each type) or
/// `TYPE/NAME...` (one group per run of the same type, in the order given).
pub fn requests(args: &[String]) -> Result<Vec<Request>> {
    let Some(first) = args.first() else {
        bail!("You must specify the type of resource to get. Use \"podlab api-resources\" for a complete list of supported resources.");
    };
    if args.iter().any(|a| a.contains('/')) {
        let mut groups: Vec<Request> = Vec::new();
        for arg in args {
            let Some((kind, name)) = arg.split_once('/') else {
                bail!("there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (e.g. 'podlab get resource/<resource_name>' instead of 'podlab get resource resource/<resource_name>'");
            };
            let resource = Resource::parse(kind)?;
            match groups.last_mut() {
                Some(last) if last.resource == resource => last.names.push(name.into()),
                _ => groups.push(Request {
                    resource,
                    names: vec![name.into()],
                }),
            }
        }
        return Ok(groups);
    }
    let mut groups = Vec::new();
    for kind in first.split(',').filter(|k| !k.is_empty()) {
        let resource = Resource::parse(kind)?;
        if !groups.iter().any(|g: &Request| g.resource == resource) {
            groups.push(Request {
                resource,
                names: args[1..].to_vec(),
            });
        }
    }
    Ok(groups)
}

pub fn run(args: GetArgs) -> Result<()> {
    let groups = requests(&args.args)?;
    let ctx = Ctx::open()?;
    if let [Request {
        resource: Resource::Images,
        names,
    }] = groups.as_slice()
    {
        if !names.is_empty() {
            bail!("podlab get images lists every image; see `podlab image inspect NAME`");
        }
        return crate::image::list(&ctx, &args.format, &args.query);
    }
    if groups.iter().any(|g| g.resource == Resource::Images) {
        bail!("images are listed alone: podlab get images");
    }
    if args.watch && groups.len() > 1 {
        bail!(
            "watch is only supported on individual resources and resource collections, but {} resources were found",
            groups.len()
        );
    }
    let missing = print_once(&ctx, &args, &groups)?;
    if args.watch {
        watch(&ctx, &args, &groups[0])?;
    }
    if !missing.is_empty() {
        bail!("{}", missing.join("\n"));
    }
    Ok(())
}

fn objects(ctx: &Ctx, resource: Resource, args: &GetArgs) -> Result<Vec<Value>> {
    let ns = args.query.namespace();
    let mut values: Vec<Value> = match resource {
        Resource::Pods => match &args.index {
            Some(index) => crate::index::pods_by_index(ctx, index, ns)?,
            None => to_values(ctx.store.list::<Pod>(ns)?.0)?,
        },
        Resource::Events => to_values(ctx.store.list::<Event>(ns)?.0)?,
        Resource::ReplicaSets => to_values(ctx.store.list::<ReplicaSet>(ns)?.0)?,
        Resource::Deployments => to_values(ctx.store.list::<Deployment>(ns)?.0)?,
        Resource::ConfigMaps => to_values(ctx.store.list::<ConfigMap>(ns)?.0)?,
        Resource::Secrets => to_values(ctx.store.list::<Secret>(ns)?.0)?,
        Resource::Images => unreachable!("images are listed from the image store"),
    };
    // The API server lists in the order of its storage keys, `<namespace>/<name>` byte by
    // byte (`sbx` before `sbx-never`).
    values.sort_by(|a, b| {
        let key = |o: &Value| {
            (
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                o["metadata"]["name"].as_str().unwrap_or("").to_string(),
            )
        };
        key(a).cmp(&key(b))
    });
    Ok(values)
}

fn to_values<T: serde::Serialize>(items: Vec<T>) -> Result<Vec<Value>> {
    items
        .into_iter()
        .map(|i| Ok(serde_json::to_value(i)?))
        .collect()
}

/// Prints every group; returns the NotFound lines of the names that are not there.
fn print_once(ctx: &Ctx, args: &GetArgs, groups: &[Request]) -> Result<Vec<String>> {
    let mut missing = Vec::new();
    let mut found: Vec<(Resource, Vec<Value>)> = Vec::new();
    for group in groups {
        let mut items = objects(ctx, group.resource, args)?;
        if !group.names.is_empty() {
            // In the order named, as kubectl fetches them one by one.
            let mut named = Vec::new();
            for name in &group.names {
                match items
                    .iter()
                    .find(|o| o["metadata"]["name"].as_str() == Some(name.as_str()))
                {
                    Some(item) => named.push(item.clone()),
                    None => missing.push(format!(
                        "Error from server (NotFound): {} {name:?} not found",
                        group.resource.kind_name()
                    )),
                }
            }
            items = named;
        }
        let mut items = args.query.filter(kind_of(group.resource), items)?;
        args.query.sort(&mut items, args.format.is_table())?;
        if !items.is_empty() {
            found.push((group.resource, items));
        }
    }
    let named = groups.iter().any(|g| !g.names.is_empty());
    if found.is_empty() {
        if !named && args.format.is_table() {
            match args.query.namespace() {
                Some(ns) => eprintln!("No resources found in {ns} namespace."),
                None => eprintln!("No resources found"),
            }
        } else if !named {
            print!("{}", output::render(&args.format, &[], false)?);
        }
        return Ok(missing);
    }
    if !args.format.is_table() {
        let all: Vec<Value> = found.into_iter().flat_map(|(_, items)| items).collect();
        let single = named && groups.len() == 1 && groups[0].names.len() == 1;
        print!("{}", output::render(&args.format, &all, single)?);
        return Ok(missing);
    }
    let with_kind = found.len() > 1;
    let mut text = String::new();
    for (i, (resource, items)) in found.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        text.push_str(&table_of(
            *resource,
            items,
            &args.format,
            &args.query,
            with_kind,
        )?);
    }
    print!("{text}");
    Ok(missing)
}

/// kubectl's NAME once several kinds are printed: `pod/web`, `replicaset.apps/web`.
fn kind_prefix(resource: Resource) -> &'static str {
    match resource {
        Resource::ReplicaSets => "replicaset.apps/",
        Resource::Deployments => "deployment.apps/",
        Resource::Pods => "pod/",
        Resource::Events => "event/",
        Resource::ConfigMaps => "configmap/",
        Resource::Secrets => "secret/",
        Resource::Images => "image/",
    }
}

/// `-w`: one line per change after the listing, as `kubectl get -w` prints them.
fn watch(ctx: &Ctx, args: &GetArgs, group: &Request) -> Result<()> {
    match group.resource {
        Resource::Pods => watch_kind::<Pod>(ctx, args, group),
        Resource::Events => watch_kind::<Event>(ctx, args, group),
        Resource::ReplicaSets => watch_kind::<ReplicaSet>(ctx, args, group),
        Resource::Deployments => watch_kind::<Deployment>(ctx, args, group),
        Resource::ConfigMaps => watch_kind::<ConfigMap>(ctx, args, group),
        Resource::Secrets => watch_kind::<Secret>(ctx, args, group),
        Resource::Images => bail!("podlab get -w watches objects of the store, not images"),
    }
}

fn watch_kind<T: podlab_control::kind::StoreObject>(
    ctx: &Ctx,
    args: &GetArgs,
    group: &Request,
) -> Result<()> {
    let events = ctx.store.watch_now::<T>()?;
    let mut query = args.query.clone();
    query.no_headers = true;
    let namespace = args.query.namespace();
    for event in events {
        let event = event?;
        let value = serde_json::to_value(&event.object)?;
        let name = value["metadata"]["name"].as_str().unwrap_or_default();
        if !group.names.is_empty() && !group.names.iter().any(|n| n == name) {
            continue;
        }
        if namespace.is_some_and(|ns| value["metadata"]["namespace"].as_str() != Some(ns)) {
            continue;
        }
        let items = query.filter(kind_of(group.resource), vec![value])?;
        if items.is_empty() {
            continue;
        }
        let text = match args.format.is_table() {
            true => table(group.resource, &items, &args.format, &query)?,
            false => output::render(&args.format, &items, true)?,
        };
        print!("{text}");
        use std::io::Write;
        std::io::stdout().flush()?;
    }
    Ok(())
}

/// The `podlab get pods` table of a namespace, as the command prints it (for the demos).
pub fn pods_table(ctx: &Ctx, namespace: &str) -> Result<String> {
    let query = Query {
        namespace: Some(namespace.to_string()),
        ..Query::default()
    };
    let (pods, _) = ctx.store.list::<Pod>(Some(namespace))?;
    let mut items = to_values(pods)?;
    items.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    table(Resource::Pods, &items, &Format::Table, &query)
}

fn kind_of(resource: Resource) -> &'static str {
    match resource {
        Resource::Pods => "Pod",
        Resource::Events => "Event",
        Resource::ReplicaSets => "ReplicaSet",
        Resource::Deployments => "Deployment",
        Resource::ConfigMaps => "ConfigMap",
        Resource::Secrets => "Secret",
        Resource::Images => "Image",
    }
}

fn table(resource: Resource, items: &[Value], format: &Format, query: &Query) -> Result<String> {
    table_of(resource, items, format, query, false)
}

/// The table of one kind; `with_kind` names each object as `kind.group/name` (not events,
/// whose table has no NAME column).
fn table_of(
    resource: Resource,
    items: &[Value],
    format: &Format,
    query: &Query,
    with_kind: bool,
) -> Result<String> {
    let now = crate::columns::now();
    let wide = matches!(format, Format::Wide);
    let mut headers: Vec<&str> = Vec::new();
    let mut rows: Vec<(Vec<String>, &Value)> = Vec::new();
    match resource {
        Resource::Pods => {
            headers.extend(POD_HEADERS);
            if wide {
                headers.extend(POD_WIDE_HEADERS);
            }
            for item in items {
                let pod: Pod = serde_json::from_value(item.clone())?;
                rows.push((pod_row(&pod, now, wide), item));
            }
        }
        Resource::Events => {
            headers.extend(["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
            for item in items {
                let event: Event = serde_json::from_value(item.clone())?;
                let seen = event
                    .last_timestamp
                    .as_ref()
                    .or(event.first_timestamp.as_ref())
                    .map(|t| human_duration(now, t.0))
                    .or_else(|| event.event_time.as_ref().map(|t| human_duration(now, t.0)))
                    .unwrap_or_else(|| "<unknown>".into());
                let object = format!(
                    "{}/{}",
                    event
                        .involved_object
                        .kind
                        .clone()
                        .unwrap_or_default()
                        .to_lowercase(),
                    event.involved_object.name.clone().unwrap_or_default()
                );
                let cells = vec![
                    seen,
                    event.type_.clone().unwrap_or_default(),
                    event.reason.clone().unwrap_or_default(),
                    object,
                    event.message.clone().unwrap_or_default(),
                ];
                rows.push((cells, item));
            }
        }
        Resource::ReplicaSets => {
            headers.extend(["NAME", "DESIRED", "CURRENT", "READY", "AGE"]);
            for item in items {
                let rs: ReplicaSet = serde_json::from_value(item.clone())?;
                let status = rs.status.clone().unwrap_or_default();
                let cells = vec![
                    rs.metadata.name.clone().unwrap_or_default(),
                    rs.spec
                        .as_ref()
                        .and_then(|s| s.replicas)
                        .unwrap_or(1)
                        .to_string(),
                    status.replicas.to_string(),
                    status.ready_replicas.unwrap_or(0).to_string(),
                    rs.metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| human_duration(now, t.0))
                        .unwrap_or_default(),
                ];
                rows.push((cells, item));
            }
        }
        Resource::Deployments => {
            headers.extend(["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
            if wide {
                headers.extend(["CONTAINERS", "IMAGES", "SELECTOR"]);
            }
            for item in items {
                let d: Deployment = serde_json::from_value(item.clone())?;
                rows.push((deployment_row(&d, now, wide), item));
            }
        }
        Resource::ConfigMaps => {
            headers.extend(["NAME", "DATA", "AGE"]);
            for item in items {
                let map: ConfigMap = serde_json::from_value(item.clone())?;
                let count =
                    map.data.map_or(0, |d| d.len()) + map.binary_data.map_or(0, |d| d.len());
                let cells = vec![
                    map.metadata.name.clone().unwrap_or_default(),
                    count.to_string(),
                    age(now, &map.metadata),
                ];
                rows.push((cells, item));
            }
        }
        Resource::Secrets => {
            headers.extend(["NAME", "TYPE", "DATA", "AGE"]);
            for item in items {
                let secret: Secret = serde_json::from_value(item.clone())?;
                let cells = vec![
                    secret.metadata.name.clone().unwrap_or_default(),
                    secret.type_.clone().unwrap_or_default(),
                    secret.data.map_or(0, |d| d.len()).to_string(),
                    age(now, &secret.metadata),
                ];
                rows.push((cells, item));
            }
        }
        Resource::Images => unreachable!("images are listed from the image store"),
    }
    if with_kind && resource != Resource::Events {
        for (cells, _) in &mut rows {
            cells[0] = format!("{}{}", kind_prefix(resource), cells[0]);
        }
    }
    Ok(output::table(&headers, rows, query))
}

fn age(
    now: k8s_openapi::jiff::Timestamp,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> String {
    meta.creation_timestamp
        .as_ref()
        .map(|t| human_duration(now, t.0))
        .unwrap_or_default()
}

/// kubectl's Deployment row: READY is ready/desired, then up-to-date, available, age; wide
/// adds the containers, their images and the selector.
fn deployment_row(d: &Deployment, now: k8s_openapi::jiff::Timestamp, wide: bool) -> Vec<String> {
    let status = d.status.clone().unwrap_or_default();
    let spec = d.spec.clone().unwrap_or_default();
    let mut cells = vec![
        d.metadata.name.clone().unwrap_or_default(),
        format!(
            "{}/{}",
            status.ready_replicas.unwrap_or(0),
            spec.replicas.unwrap_or(1)
        ),
        status.updated_replicas.unwrap_or(0).to_string(),
        status.available_replicas.unwrap_or(0).to_string(),
        age(now, &d.metadata),
    ];
    if wide {
        let containers = spec.template.spec.map(|s| s.containers).unwrap_or_default();
        let names: Vec<String> = containers.iter().map(|c| c.name.clone()).collect();
        let images: Vec<String> = containers.iter().filter_map(|c| c.image.clone()).collect();
        cells.push(names.join(","));
        cells.push(images.join(","));
        cells.push(
            podlab_control::Selector::from_label_selector(Some(&spec.selector), "spec.selector")
                .map(|s| s.to_string())
                .unwrap_or_default(),
        );
    }
    cells
}
