//! Stored objects of any kind as JSON, the way kubectl's generic verbs (`label`, `annotate`,
//! `patch`, `edit`, `scale`, `delete -l`) see them through the API server's dynamic client: a
//! kind resolved from any of kubectl's names for it, `TYPE NAME...` and `TYPE/NAME` arguments,
//! and get, list and update by kind.

use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use podlab_control::Kind;
use serde_json::Value;

use crate::context::Ctx;

/// Calls `$body` with `$T` bound to the Rust type of `$kind`.
macro_rules! with_type {
    ($kind:expr, $T:ident => $body:expr) => {
        match $kind {
            Kind::Pod => {
                type $T = Pod;
                $body
            }
            Kind::ReplicaSet => {
                type $T = ReplicaSet;
                $body
            }
            Kind::Deployment => {
                type $T = Deployment;
                $body
            }
            Kind::Event => {
                type $T = Event;
                $body
            }
            Kind::ConfigMap => {
                type $T = ConfigMap;
                $body
            }
            Kind::Secret => {
                type $T = Secret;
                $body
            }
        }
    };
}

/// A kind from any name kubectl takes for it; an unknown one in kubectl's words.
pub fn kind(word: &str) -> Result<Kind> {
    Kind::parse(word).ok_or_else(|| {
        anyhow!(
            "the server doesn't have a resource type {word:?} (podlab serves pods, replicasets, deployments, configmaps, secrets, events)"
        )
    })
}

/// kubectl's `resource.group/name` prefix of its messages: `pod`, `replicaset.apps`.
pub fn qualified(kind: Kind) -> String {
    let singular = kind.name().to_ascii_lowercase();
    match kind.api_version().split_once('/') {
        Some((group, _)) => format!("{singular}.{group}"),
        None => singular,
    }
}

/// A lone `TYPE`'s kind, and the named objects.
pub type Targets = (Option<Kind>, Vec<(Kind, String)>);

/// The objects a verb acts on, from kubectl's argument forms: `TYPE NAME...` or
/// `TYPE/NAME...`; a lone `TYPE` (for `-l` and `--all`) comes back as its kind with no names.
pub fn targets(args: &[String]) -> Result<Targets> {
    let mut found = Vec::new();
    let mut kind_word: Option<Kind> = None;
    for arg in args {
        if let Some((word, name)) = arg.split_once('/') {
            if kind_word.is_some() {
                bail!("there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (e.g. 'podlab get resource/<resource_name>' instead of 'podlab get resource resource/<resource_name>'");
            }
            found.push((kind(word)?, name.to_string()));
        } else if let Some(k) = kind_word {
            found.push((k, arg.clone()));
        } else if found.is_empty() {
            kind_word = Some(kind(arg)?);
        } else {
            bail!("arguments in resource/name form must have a single resource and name");
        }
    }
    Ok((kind_word, found))
}

pub fn get(
    ctx: &Ctx,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Value, podlab_control::Error> {
    with_type!(kind, T => ctx.store.get::<T>(namespace, name).map(to_value))
}

/// [`get`], with a missing object worded as kubectl prints the API server's 404.
pub fn fetch(ctx: &Ctx, kind: Kind, namespace: &str, name: &str) -> Result<Value> {
    get(ctx, kind, namespace, name).map_err(|e| match e.is_not_found() {
        true => anyhow!("Error from server (NotFound): {e}"),
        false => e.into(),
    })
}

/// Every object of `kind` in `namespace` (every namespace for `None`).
pub fn list(ctx: &Ctx, kind: Kind, namespace: Option<&str>) -> Result<Vec<Value>> {
    with_type!(kind, T => Ok(ctx.store.list::<T>(namespace)?.0.into_iter().map(to_value).collect()))
}

/// Replaces the object (its stored resourceVersion guards against a lost update).
pub fn update(ctx: &Ctx, kind: Kind, value: Value) -> Result<Value> {
    with_type!(kind, T => {
        let object: T = serde_json::from_value(value)
            .map_err(|e| anyhow!("{} is invalid: {e}", kind.name()))?;
        Ok(ctx.store.update(object).map(to_value)?)
    })
}

/// Deletes the object at once (pods go through [`crate::delete`], gracefully).
pub fn delete(ctx: &Ctx, kind: Kind, namespace: &str, name: &str) -> Result<()> {
    with_type!(kind, T => ctx.store.delete::<T>(namespace, name).map(|_| ()))?;
    Ok(())
}

// kubectl's flags that pick objects by label or all at once, and the namespace.
#[derive(clap::Args)]
pub struct Selection {
    /// Every object of the type that matches this label selector.
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// Every object of the type in the namespace.
    #[arg(long)]
    pub all: bool,
    #[arg(short = 'n', long = "namespace", default_value = "default")]
    pub namespace: String,
}

impl Selection {
    /// The objects named by `args` (`TYPE NAME...`, `TYPE/NAME`) or, with `-l`/`--all`, those
    /// of the lone `TYPE` that match; `verb` names the command in kubectl's messages.
    pub fn resolve(&self, ctx: &Ctx, args: &[String], verb: &str) -> Result<Vec<(Kind, String)>> {
        let (kind_alone, named) = targets(args)?;
        if self.selector.is_none() && !self.all {
            if named.is_empty() {
                bail!("one or more resources must be specified as <resource> <name> or <resource>/<name>");
            }
            return Ok(named);
        }
        let Some(kind) = kind_alone.filter(|_| named.is_empty()) else {
            bail!("name cannot be provided when a selector is specified");
        };
        let items = list(ctx, kind, Some(&self.namespace))?;
        let query = crate::output::Query {
            namespace: Some(self.namespace.clone()),
            selector: self.selector.clone(),
            ..Default::default()
        };
        let selected: Vec<(Kind, String)> = query
            .filter(kind.name(), items)?
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .map(|name| (kind, name.to_string()))
            .collect();
        if selected.is_empty() {
            bail!("no objects passed to {verb}");
        }
        Ok(selected)
    }
}

/// Reads the object, lets `change` edit it, and writes it back if `change` says it changed;
/// on a Conflict (another writer came in between) it starts again from a fresh read, as
/// client-go's `RetryOnConflict`. Returns what `change` returned last.
pub fn modify<R>(
    ctx: &Ctx,
    kind: Kind,
    namespace: &str,
    name: &str,
    mut change: impl FnMut(&mut Value) -> Result<(bool, R)>,
) -> Result<R> {
    let mut attempts = 0;
    loop {
        let mut object = fetch(ctx, kind, namespace, name)?;
        let (changed, result) = change(&mut object)?;
        if !changed {
            return Ok(result);
        }
        match update(ctx, kind, object) {
            Err(e) if attempts < 10 && is_conflict(&e) => attempts += 1,
            Err(e) => return Err(e),
            Ok(_) => return Ok(result),
        }
    }
}

fn is_conflict(e: &anyhow::Error) -> bool {
    e.downcast_ref::<podlab_control::Error>()
        .is_some_and(|e| e.is_conflict())
}

/// Whether the error is the API server's NotFound.
pub fn is_not_found(e: &anyhow::Error) -> bool {
    e.to_string().starts_with("Error from server (NotFound)")
        || e.downcast_ref::<podlab_control::Error>()
            .is_some_and(|e| e.is_not_found())
}

fn to_value<T: serde::Serialize>(object: T) -> Value {
    serde_json::to_value(object).expect("a stored object serializes")
}
