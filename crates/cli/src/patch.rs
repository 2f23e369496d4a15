//! `podlab patch` and `podlab edit`: kubectl's two ways of changing a stored object in place.
//! `patch` applies a strategic merge (the default), JSON merge or JSON patch
//! (`podlab_api::patch`) to the stored object; `edit` opens it as YAML in `$KUBE_EDITOR`,
//! `$EDITOR` or `vi`, and reopens it with the errors on top when the change is refused, as
//! kubectl does. Both send the result through [`update`]: the API server's decoding,
//! validation and defaulting of the kind, then its rules for an update (a pod's spec is fixed
//! but for its images, a ReplicaSet's or Deployment's selector is immutable, as is the data of
//! an `immutable` ConfigMap or Secret and a Secret's type), refused in the API server's words
//! (`The Pod "web" is invalid: spec: Forbidden: ...`). The resourceVersion read guards the
//! write: a patch starts again on a Conflict; an edit is sent as the two-way merge patch of
//! what the user changed onto the newest version, as kubectl edit's PATCH is.
//!
//! `--subresource resize` (pods only) sends the change to the pod's `resize` subresource
//! instead: of the result only the containers' `resources` and `resizePolicy` are kept, checked
//! by the API server's resize rules ([`podlab_api::resize`]); the node agent then admits and
//! actuates the resize in place (kubelet's in-place pod resize).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use podlab_api::patch::{create_merge_patch, json_patch, merge_patch, strategic_merge_patch};
use podlab_control::manifest::Manifest;
use podlab_control::Kind;
use serde_json::Value;

use crate::context::Ctx;
use crate::objects;

#[derive(clap::Args)]
pub struct PatchArgs {
    /// `TYPE NAME` or `TYPE/NAME`.
    #[arg(required = true)]
    args: Vec<String>,
    /// The patch, as JSON or YAML.
    #[arg(short = 'p', long = "patch", required_unless_present = "patch_file")]
    patch: Option<String>,
    /// A file holding the patch.
    #[arg(long = "patch-file", conflicts_with = "patch")]
    patch_file: Option<PathBuf>,
    /// strategic (kubectl's default), merge (RFC 7386) or json (RFC 6902).
    #[arg(long = "type", default_value = "strategic", value_parser = ["strategic", "merge", "json"])]
    patch_type: String,
    /// The subresource to patch: `resize` (a pod's cpu and memory, changed in place).
    #[arg(long = "subresource")]
    subresource: Option<String>,
    #[arg(short = 'n', long = "namespace", default_value = "default")]
    namespace: String,
}

#[derive(clap::Args)]
pub struct EditArgs {
    /// `TYPE NAME` or `TYPE/NAME`.
    #[arg(required = true)]
    args: Vec<String>,
    /// The format to edit in: yaml (the default) or json.
    #[arg(short = 'o', long = "output", default_value = "yaml", value_parser = ["yaml", "json"])]
    output: String,
    /// The subresource to edit: `resize` (a pod's cpu and memory, changed in place).
    #[arg(long = "subresource")]
    subresource: Option<String>,
    #[arg(short = 'n', long = "namespace", default_value = "default")]
    namespace: String,
}

/// Where an update goes: the object itself, or a subresource of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Object,
    /// A pod's `resize` subresource.
    Resize,
}

impl Target {
    /// kubectl's `--subresource` values; podlab serves `resize` (status and scale are written
    /// by the node agent and `podlab scale`).
    fn parse(subresource: Option<&str>, kind: Kind) -> Result<Target> {
        match subresource {
            None => Ok(Target::Object),
            Some("resize") if kind == Kind::Pod => Ok(Target::Resize),
            Some(s @ ("status" | "scale" | "resize")) => bail!(
                "Error from server (NotFound): the server could not find the requested resource: podlab serves the {s:?} subresource of {} through {}",
                objects::qualified(kind),
                match s {
                    "status" => "the node agent, which alone writes a pod's status",
                    "scale" => "`podlab scale`",
                    _ => "pods only",
                }
            ),
            Some(other) => bail!(
                "invalid subresource value: {other:?}. Must be one of [status scale resize]"
            ),
        }
    }
}

/// What an update did.
#[derive(Debug, PartialEq, Eq)]
pub enum Updated {
    Changed,
    Unchanged,
}

pub fn patch(args: PatchArgs) -> Result<()> {
    let text = match (&args.patch, &args.patch_file) {
        (Some(text), _) => text.clone(),
        (None, Some(file)) => {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        }
        (None, None) => bail!("must specify -p to patch"),
    };
    let patch = parse(&text).map_err(|e| anyhow!("unable to parse {text:?}: {e}"))?;
    let (_, named) = objects::targets(&args.args)?;
    if named.is_empty() {
        bail!("one or more resources must be specified as <resource> <name> or <resource>/<name>");
    }
    let ctx = Ctx::open()?;
    for (kind, name) in named {
        let target = Target::parse(args.subresource.as_deref(), kind)?;
        let mut attempts = 0;
        let outcome = loop {
            let current = objects::fetch(&ctx, kind, &args.namespace, &name)?;
            let patched = match args.patch_type.as_str() {
                "json" => json_patch(&current, &patch),
                "merge" => Ok(merge_patch(&current, &patch)),
                _ => strategic_merge_patch(&current, &patch),
            }
            .map_err(|e| match args.patch_type.as_str() {
                "strategic" => anyhow!("{e}"),
                _ => anyhow!("The request is invalid: {e}"),
            })?;
            match update(&ctx, kind, target, &current, patched) {
                Err(e) if attempts < 10 && is_conflict(&e) => attempts += 1,
                other => break other?,
            }
        };
        let what = format!("{}/{name}", objects::qualified(kind));
        match outcome {
            Updated::Changed => println!("{what} patched"),
            Updated::Unchanged => println!("{what} patched (no change)"),
        }
    }
    Ok(())
}

/// A patch in JSON or YAML.
fn parse(text: &str) -> Result<Value> {
    if let Ok(value) = serde_json::from_str(text) {
        return Ok(value);
    }
    let mut documents = podlab_api::manifest::documents(text, "patch")?;
    match documents.len() {
        1 => Ok(documents.remove(0)),
        _ => bail!("a patch is one document"),
    }
}

fn is_conflict(e: &anyhow::Error) -> bool {
    e.downcast_ref::<podlab_control::Error>()
        .is_some_and(|e| e.is_conflict())
}

/// The API server's handling of an update of `current` to `next`: decoded, validated and
/// defaulted as its kind is, checked against the kind's update rules, written with the
/// resourceVersion `next` carries (a Conflict when another writer came in between).
pub fn update(
    ctx: &Ctx,
    kind: Kind,
    target: Target,
    current: &Value,
    mut next: Value,
) -> Result<Updated> {
    let name = current["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let invalid = |errors: Vec<String>| {
        anyhow!(
            "The {} {name:?} is invalid: {}",
            kind.name(),
            errors.join(", ")
        )
    };
    for field in ["name", "namespace"] {
        if next["metadata"][field] != current["metadata"][field] {
            return Err(invalid(vec![format!(
                "metadata.{field}: Invalid value: {}: field is immutable",
                next["metadata"][field]
            )]));
        }
    }
    if next["kind"] != current["kind"] || next["apiVersion"] != current["apiVersion"] {
        bail!(
            "the kind of an object cannot change: {} {name:?} is {}",
            objects::qualified(kind),
            current["kind"]
        );
    }
    // What the API server keeps itself: identity, history, and the status subresource.
    for field in [
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        match current["metadata"].get(field) {
            Some(value) => next["metadata"][field] = value.clone(),
            None => {
                if let Some(meta) = next["metadata"].as_object_mut() {
                    meta.remove(field);
                }
            }
        }
    }
    if next["metadata"].get("resourceVersion").is_none() {
        next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    }
    if kind.has_status_subresource() {
        match current.get("status") {
            Some(status) => next["status"] = status.clone(),
            None => {
                if let Some(object) = next.as_object_mut() {
                    object.remove("status");
                }
            }
        }
    }
    if target == Target::Resize {
        next = take_resize(current, next).map_err(invalid)?;
    }
    let decoded = decode(kind, &next).map_err(|e| match e {
        podlab_api::ManifestError::Invalid { errors, .. } => {
            invalid(errors.iter().map(|e| e.to_string()).collect())
        }
        podlab_api::ManifestError::Type { path, message, .. } => {
            anyhow!("The {} {name:?} is invalid: {path}: {message}", kind.name())
        }
        other => anyhow!("{other}"),
    })?;
    let errors = match &decoded {
        Manifest::Pod(new) if target == Target::Resize => {
            let old: Pod = serde_json::from_value(current.clone())?;
            podlab_api::resize::validate_pod_resize(&old, new)
                .iter()
                .map(|e| e.to_string())
                .collect()
        }
        Manifest::Pod(new) => {
            let old: Pod = serde_json::from_value(current.clone())?;
            let old_spec = old.spec.clone().unwrap_or_default();
            let mut new_spec = new.spec.clone().unwrap_or_default();
            // Ephemeral containers have their own subresource (`podlab debug`).
            new_spec.ephemeral_containers = old_spec.ephemeral_containers.clone();
            podlab_api::update::validate_pod_spec_update(&old_spec, &new_spec)
                .iter()
                .map(|e| e.to_string())
                .collect()
        }
        Manifest::ReplicaSet(new) => {
            let old: ReplicaSet = serde_json::from_value(current.clone())?;
            podlab_control::manifest::validate_replicaset_update(&old, new)
                .iter()
                .map(|e| e.to_string())
                .collect()
        }
        Manifest::Deployment(new) => {
            let old: Deployment = serde_json::from_value(current.clone())?;
            podlab_control::deployment::manifest::validate_deployment_update(&old, new)
                .iter()
                .map(|e| e.to_string())
                .collect()
        }
        Manifest::ConfigMap(new) => {
            let old: ConfigMap = serde_json::from_value(current.clone())?;
            immutable_data(
                old.immutable,
                (&old.data, &old.binary_data, old.immutable)
                    != (&new.data, &new.binary_data, new.immutable),
            )
        }
        Manifest::Secret(new) => {
            let old: Secret = serde_json::from_value(current.clone())?;
            let mut errors = immutable_data(
                old.immutable,
                (&old.data, old.immutable) != (&new.data, new.immutable),
            );
            if old.type_ != new.type_ {
                errors.push(format!(
                    "type: Invalid value: {:?}: field is immutable",
                    new.type_.clone().unwrap_or_default()
                ));
            }
            errors
        }
    };
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    let new = match decoded {
        Manifest::Pod(o) => serde_json::to_value(o)?,
        Manifest::ReplicaSet(o) => serde_json::to_value(o)?,
        Manifest::Deployment(o) => serde_json::to_value(o)?,
        Manifest::ConfigMap(o) => serde_json::to_value(o)?,
        Manifest::Secret(o) => serde_json::to_value(o)?,
    };
    if without_version(&new) == without_version(current) {
        return Ok(Updated::Unchanged);
    }
    objects::update(ctx, kind, new)?;
    Ok(Updated::Changed)
}

/// The resize subresource's view of an update: the stored pod with only the containers'
/// `resources` and `resizePolicy` of `next` (what else `next` changed is dropped, as the API
/// server drops it); renamed or reordered containers are refused first.
fn take_resize(current: &Value, next: Value) -> Result<Value, Vec<String>> {
    let spec = |value: &Value| -> Result<k8s_openapi::api::core::v1::PodSpec, Vec<String>> {
        serde_json::from_value(value["spec"].clone()).map_err(|e| vec![format!("spec: {e}")])
    };
    let (old, new) = (spec(current)?, spec(&next)?);
    let errors = podlab_api::resize::validate_container_order(&old, &new);
    if !errors.is_empty() {
        return Err(errors.iter().map(ToString::to_string).collect());
    }
    let mut taken = current.clone();
    taken["spec"] = serde_json::to_value(podlab_api::resize::take_resize(&old, &new))
        .expect("a pod spec serializes");
    if let Some(version) = next["metadata"].get("resourceVersion") {
        taken["metadata"]["resourceVersion"] = version.clone();
    }
    Ok(taken)
}

fn without_version(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
    }
    object
}

/// `ValidateConfigMapUpdate` / `ValidateSecretUpdate`: nothing of an immutable object's data
/// may change.
fn immutable_data(immutable: Option<bool>, changed: bool) -> Vec<String> {
    match immutable == Some(true) && changed {
        true => vec!["data: Forbidden: field is immutable when `immutable` is set".into()],
        false => Vec::new(),
    }
}

/// The API server's decoding of the kind (events are not kept through this path).
fn decode(kind: Kind, object: &Value) -> Result<Manifest, podlab_api::ManifestError> {
    if kind == Kind::Event {
        return Err(podlab_api::ManifestError::Other {
            input: "update".into(),
            message: "podlab does not change events; they are written by their sources".into(),
        });
    }
    let text = serde_json::to_string(object).expect("a JSON value serializes");
    let mut decoded = podlab_control::manifest::decode(&text, "update")?;
    Ok(decoded.remove(0))
}

/// kubectl's header of the file it opens.
const HEADER: &str =
    "# Please edit the object below. Lines beginning with a '#' will be ignored,\n\
# and an empty file will abort the edit. If an error occurs while saving this file will be\n\
# reopened with the relevant failures.\n#\n";

pub fn edit(args: EditArgs) -> Result<()> {
    let (_, named) = objects::targets(&args.args)?;
    let [(kind, name)] = named.as_slice() else {
        bail!("podlab edit takes one object: TYPE NAME or TYPE/NAME");
    };
    let target = Target::parse(args.subresource.as_deref(), *kind)?;
    let ctx = Ctx::open()?;
    let current = objects::fetch(&ctx, *kind, &args.namespace, name)?;
    let json = args.output == "json";
    let original = render(&current, json)?;
    let path = std::env::temp_dir().join(format!(
        "podlab-edit-{}.{}",
        std::process::id(),
        if json { "json" } else { "yaml" }
    ));
    let mut text = original.clone();
    let mut problems: Option<String> = None;
    let mut last_attempt: Option<String> = None;
    let result = loop {
        let mut header = HEADER.to_string();
        if let Some(problems) = &problems {
            header.push_str(&format!(
                "# {} {name:?} was not valid:\n# * {problems}\n#\n",
                kind.resource()
            ));
        }
        write_file(&path, &format!("{header}{text}"))?;
        run_editor(&path)?;
        let edited = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let edited: String = edited
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .map(|line| format!("{line}\n"))
            .collect();
        if edited.trim().is_empty() || edited == original {
            eprintln!("Edit cancelled, no changes made.");
            break Ok(());
        }
        if last_attempt.as_deref() == Some(&edited) {
            let _ = std::fs::remove_file(&path);
            break Err(anyhow!("Edit cancelled, no valid changes were saved."));
        }
        // As kubectl edit: the change is sent as a patch onto the newest version, so what
        // others wrote meanwhile (a controller's status, a label) neither conflicts nor is lost;
        // a Conflict only when the edit itself set a resourceVersion that is no longer current.
        let outcome = parse(&edited).and_then(|next| {
            let change = create_merge_patch(&current, &next);
            let mut attempts = 0;
            loop {
                let newest = objects::fetch(&ctx, *kind, &args.namespace, name)?;
                match update(&ctx, *kind, target, &newest, merge_patch(&newest, &change)) {
                    Err(e) if attempts < 10 && is_conflict(&e) && !sets_version(&change) => {
                        attempts += 1
                    }
                    other => break other,
                }
            }
        });
        match outcome {
            Ok(Updated::Unchanged) => {
                eprintln!("Edit cancelled, no changes made.");
                break Ok(());
            }
            Ok(Updated::Changed) => {
                println!("{}/{name} edited", objects::qualified(*kind));
                break Ok(());
            }
            Err(e) if is_conflict(&e) => {
                eprintln!(
                    "A copy of your changes has been stored to {:?}",
                    path.display()
                );
                return Err(anyhow!(
                    "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                    kind.resource()
                ));
            }
            Err(e) => {
                problems = Some(format!("{e:#}"));
                last_attempt = Some(edited.clone());
                text = edited;
            }
        }
    };
    let _ = std::fs::remove_file(&path);
    result
}

/// Whether an edit wrote a resourceVersion of its own (then a Conflict is the answer).
fn sets_version(change: &Value) -> bool {
    change["metadata"].get("resourceVersion").is_some()
}

fn render(object: &Value, json: bool) -> Result<String> {
    let format = crate::output::Format::parse(Some(if json { "json" } else { "yaml" }))?;
    crate::output::render(&format, std::slice::from_ref(object), true)
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// kubectl's editor: `$KUBE_EDITOR`, else `$EDITOR`, else `vi`, run by the shell with the
/// file's path after it.
fn run_editor(path: &Path) -> Result<()> {
    let editor = ["KUBE_EDITOR", "EDITOR"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "vi".into());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(path)
        .status()
        .with_context(|| format!("running the editor {editor:?}"))?;
    if !status.success() {
        bail!("there was a problem with the editor {editor:?}");
    }
    Ok(())
}
