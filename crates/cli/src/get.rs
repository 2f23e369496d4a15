//! `podlab get pods|events|replicasets|configmaps|secrets|images [NAME]`: objects from the store as kubectl
//! prints them, with kubectl's output formats and queries.

use anyhow::{bail, Result};
use k8s_openapi::api::apps::v1::ReplicaSet;
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
            "configmap" | "configmaps" | "cm" => Resource::ConfigMaps,
            "secret" | "secrets" => Resource::Secrets,
            "image" | "images" => Resource::Images,
            other => bail!(
                "the server doesn't have a resource type {other:?} (podlab serves pods, events, replicasets, configmaps, secrets, images)"
            ),
        })
    }

    fn kind_name(self) -> &'static str {
        match self {
            Resource::Pods => "pods",
            Resource::Events => "events",
            Resource::ReplicaSets => "replicasets.apps",
            Resource::ConfigMaps => "configmaps",
            Resource::Secrets => "secrets",
            Resource::Images => "images",
        }
    }
}

pub struct GetArgs {
    pub resource: Resource,
    pub name: Option<String>,
    pub format: Format,
    pub query: Query,
    pub watch: bool,
    /// `--index NAME=KEY`: answer from an informer index instead of listing (see `index`).
    pub index: Option<String>,
}

pub fn run(args: GetArgs) -> Result<()> {
    let ctx = Ctx::open()?;
    if args.resource == Resource::Images {
        return crate::image::list(&ctx, &args.format, &args.query);
    }
    print_once(&ctx, &args)?;
    if args.watch {
        watch(&ctx, &args)?;
    }
    Ok(())
}

fn objects(ctx: &Ctx, args: &GetArgs) -> Result<Vec<Value>> {
    let ns = args.query.namespace();
    let mut values: Vec<Value> = match args.resource {
        Resource::Pods => match &args.index {
            Some(index) => crate::index::pods_by_index(ctx, index, ns)?,
            None => to_values(ctx.store.list::<Pod>(ns)?.0)?,
        },
        Resource::Events => to_values(ctx.store.list::<Event>(ns)?.0)?,
        Resource::ReplicaSets => to_values(ctx.store.list::<ReplicaSet>(ns)?.0)?,
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

fn print_once(ctx: &Ctx, args: &GetArgs) -> Result<()> {
    let mut items = objects(ctx, args)?;
    if let Some(name) = &args.name {
        items.retain(|o| o["metadata"]["name"].as_str() == Some(name.as_str()));
        if items.is_empty() {
            bail!(
                "Error from server (NotFound): {} {name:?} not found",
                args.resource.kind_name()
            );
        }
    }
    let mut items = args.query.filter(kind_of(args.resource), items)?;
    args.query.sort(&mut items, args.format.is_table())?;
    if items.is_empty() && args.name.is_none() && args.format.is_table() {
        match args.query.namespace() {
            Some(ns) => eprintln!("No resources found in {ns} namespace."),
            None => eprintln!("No resources found"),
        }
        return Ok(());
    }
    let text = match args.format.is_table() {
        true => table(args.resource, &items, &args.format, &args.query)?,
        false => output::render(&args.format, &items, args.name.is_some())?,
    };
    print!("{text}");
    Ok(())
}

/// `-w`: the listing, then one line per change, as `kubectl get -w` prints them.
fn watch(ctx: &Ctx, args: &GetArgs) -> Result<()> {
    if args.resource != Resource::Pods {
        bail!("podlab get -w watches pods");
    }
    let events = ctx.store.watch_now::<Pod>()?;
    let mut query = args.query.clone();
    query.no_headers = true;
    for event in events {
        let event = event?;
        let value = serde_json::to_value(&event.object)?;
        if let Some(name) = &args.name {
            if value["metadata"]["name"].as_str() != Some(name) {
                continue;
            }
        }
        let items = query.filter("Pod", vec![value])?;
        if items.is_empty() {
            continue;
        }
        let text = match args.format.is_table() {
            true => table(Resource::Pods, &items, &args.format, &query)?,
            false => output::render(&args.format, &items, true)?,
        };
        print!("{text}");
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
        Resource::ConfigMaps => "ConfigMap",
        Resource::Secrets => "Secret",
        Resource::Images => "Image",
    }
}

fn table(resource: Resource, items: &[Value], format: &Format, query: &Query) -> Result<String> {
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
