//! `apps/v1` ReplicaSet manifests (and the dispatch to [`crate::deployment::manifest`]), decoded, checked and defaulted as the API server does, with
//! podlab-api's rules for the Pod template (what podlab's kubelet can run) and its error type.
//!
//! The steps: type-decode (a wrong type is reported at its path, an unknown field too), refuse
//! what podlab does not implement, validate (`ValidateReplicaSet`: name, replicas, selector, the
//! selector matching the template's labels, `restartPolicy: Always`, the template as a Pod),
//! default (`replicas: 1`, the template's Pod defaults). [`decode`] takes a file of Pods and
//! ReplicaSets, so `podlab apply -f` can take either.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use podlab_api::{FieldError, ManifestError};
use serde_json::Value;

use crate::selector::{validate_label_selector, validate_labels, Selector};
use crate::store::DEFAULT_NAMESPACE;

/// A decoded object of a kind podlab serves.
#[derive(Debug, Clone, PartialEq)]
pub enum Manifest {
    Pod(Box<Pod>),
    ReplicaSet(Box<ReplicaSet>),
    Deployment(Box<k8s_openapi::api::apps::v1::Deployment>),
    ConfigMap(Box<k8s_openapi::api::core::v1::ConfigMap>),
    Secret(Box<k8s_openapi::api::core::v1::Secret>),
}

/// Decodes every document of `text` (YAML or JSON, `---`-separated). `source` names the input.
pub fn decode(text: &str, source: &str) -> Result<Vec<Manifest>, ManifestError> {
    Ok(decode_warned(text, source)?
        .into_iter()
        .map(|(manifest, _)| manifest)
        .collect())
}

/// [`decode`], each object with the warnings the API server answers its create with
/// (a Pod's: [`podlab_api::manifest::decode_pod_value_warned`]).
pub fn decode_warned(
    text: &str,
    source: &str,
) -> Result<Vec<(Manifest, Vec<String>)>, ManifestError> {
    podlab_api::manifest::documents(text, source)?
        .into_iter()
        .map(|value| decode_value(value, source))
        .collect()
}

/// Decodes a manifest that must hold exactly one ReplicaSet.
pub fn decode_replicaset(text: &str, source: &str) -> Result<ReplicaSet, ManifestError> {
    let mut objects = decode(text, source)?;
    match (objects.len(), objects.pop()) {
        (1, Some(Manifest::ReplicaSet(rs))) => Ok(*rs),
        (n, _) => Err(other(
            source,
            format!("expected one ReplicaSet, found {n} objects"),
        )),
    }
}

fn decode_value(value: Value, source: &str) -> Result<(Manifest, Vec<String>), ManifestError> {
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    let manifest = match (api_version, kind) {
        ("v1", "Pod") => {
            let (pod, warnings) =
                podlab_api::manifest::decode_pod_value_warned(value, source)?;
            return Ok((Manifest::Pod(Box::new(pod)), warnings));
        }
        ("v1", "ConfigMap") => crate::config_data::decode_config_map_value(value, source)
            .map(|m| Manifest::ConfigMap(Box::new(m))),
        ("v1", "Secret") => crate::config_data::decode_secret_value(value, source)
            .map(|s| Manifest::Secret(Box::new(s))),
        ("apps/v1", "ReplicaSet") => {
            decode_replicaset_value(value, source).map(|rs| Manifest::ReplicaSet(Box::new(rs)))
        }
        ("apps/v1", "Deployment") => {
            crate::deployment::manifest::decode_deployment_value(value, source)
                .map(|d| Manifest::Deployment(Box::new(d)))
        }
        (_, "") => Err(other(source, "kind: Required value".into())),
        ("", _) => Err(other(source, "apiVersion: Required value".into())),
        (version, kind) => Err(other(
            source,
            format!("no kind {kind:?} in version {version:?} that podlab serves (podlab serves v1 Pod, ConfigMap, Secret and apps/v1 ReplicaSet, Deployment)"),
        )),
    };
    manifest.map(|m| (m, Vec::new()))
}

/// `value` decoded as a `T`, with the paths of the fields `T` has no place for (the API
/// server's strict decoding: each becomes an "unknown field" error of the caller's).
pub(crate) fn deserialize_tracked<T: serde::de::DeserializeOwned>(
    value: &Value,
    source: &str,
) -> Result<(T, Vec<String>), ManifestError> {
    let mut unknown = Vec::new();
    let mut note_unknown = |path: serde_ignored::Path| unknown.push(field_path(&path));
    let tracked = serde_ignored::Deserializer::new(value, &mut note_unknown);
    let decoded = serde_path_to_error::deserialize(tracked).map_err(|err| ManifestError::Type {
        input: source.into(),
        path: err.path().to_string(),
        message: err.inner().to_string(),
    })?;
    Ok((decoded, unknown))
}

/// Decodes, checks, validates and defaults one ReplicaSet document.
pub fn decode_replicaset_value(value: Value, source: &str) -> Result<ReplicaSet, ManifestError> {
    decode_checked(
        value,
        source,
        "ReplicaSet",
        |rs: &ReplicaSet| rs.metadata.name.clone(),
        validate_replicaset,
        default_replicaset,
    )
}

/// Decodes one document of `kind` strictly: unknown fields, then fields podlab does not
/// support, then `validate`'s errors are refused with their field paths; then `default` fills
/// in what the API server would.
pub(crate) fn decode_checked<T: serde::de::DeserializeOwned>(
    value: Value,
    source: &str,
    kind: &str,
    name: impl Fn(&T) -> Option<String>,
    validate: impl Fn(&T) -> Vec<FieldError>,
    default: impl Fn(&mut T),
) -> Result<T, ManifestError> {
    let (mut decoded, unknown): (T, _) = deserialize_tracked(&value, source)?;
    let invalid = |errors: Vec<FieldError>| ManifestError::Invalid {
        input: source.into(),
        kind: kind.into(),
        name: name(&decoded).unwrap_or_default(),
        errors,
    };
    let mut errors: Vec<FieldError> = unknown
        .into_iter()
        .map(|path| FieldError::new(path, "unknown field: Kubernetes has no such field"))
        .collect();
    if errors.is_empty() {
        check_supported(&value, &mut errors);
    }
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    let errors = validate(&decoded);
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    default(&mut decoded);
    Ok(decoded)
}

/// The API server's `ValidateObjectMeta` for a namespaced object: its name (a DNS subdomain)
/// and namespace (a DNS label).
pub(crate) fn validate_object_meta(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match meta.name.as_deref() {
        None | Some("") => errors.push(FieldError::new(
            "metadata.name",
            "Required value: name or generateName is required",
        )),
        Some(name) => {
            if let Some(why) = podlab_api::validation::dns1123_subdomain(name) {
                errors.push(FieldError::new(
                    "metadata.name",
                    format!("Invalid value: {name:?}: {why}"),
                ));
            }
        }
    }
    if let Some(ns) = meta.namespace.as_deref() {
        if let Some(why) = podlab_api::validation::dns1123_label(ns) {
            errors.push(FieldError::new(
                "metadata.namespace",
                format!("Invalid value: {ns:?}: {why}"),
            ));
        }
    }
    errors
}

/// `ValidateReplicaSet`, with the template checked by podlab-api's Pod validation.
pub fn validate_replicaset(rs: &ReplicaSet) -> Vec<FieldError> {
    let meta = &rs.metadata;
    let mut errors = validate_object_meta(meta);
    if let Some(labels) = &meta.labels {
        errors.extend(validate_labels(labels, "metadata.labels"));
    }
    let Some(spec) = &rs.spec else {
        errors.push(FieldError::new("spec", "Required value"));
        return errors;
    };
    for (path, value) in [
        ("spec.replicas", spec.replicas),
        ("spec.minReadySeconds", spec.min_ready_seconds),
    ] {
        if let Some(v) = value.filter(|v| *v < 0) {
            errors.push(FieldError::new(
                path,
                format!("Invalid value: {v}: must be greater than or equal to 0"),
            ));
        }
    }

    let selector = &spec.selector;
    let selector_errors = validate_label_selector(selector, "spec.selector");
    let no_terms = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    if no_terms {
        errors.push(FieldError::new(
            "spec.selector",
            "Invalid value: {}: empty selector is invalid for deployment",
        ));
    }
    let parsed = if selector_errors.is_empty() {
        Selector::from_label_selector(Some(selector), "spec.selector").ok()
    } else {
        errors.extend(selector_errors);
        None
    };

    let Some(template) = &spec.template else {
        errors.push(FieldError::new("spec.template", "Required value"));
        return errors;
    };
    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    if let Some(labels) = labels {
        errors.extend(validate_labels(labels, "spec.template.metadata.labels"));
    }
    if let Some(selector) = parsed.filter(|s| !s.is_empty()) {
        if !selector.matches(labels) {
            errors.push(FieldError::new(
                "spec.template.metadata.labels",
                format!(
                    "Invalid value: {}: `selector` does not match template `labels`",
                    go_string_map(labels)
                ),
            ));
        }
    }
    let Some(pod_spec) = &template.spec else {
        errors.push(FieldError::new("spec.template.spec", "Required value"));
        return errors;
    };
    let policy = pod_spec.restart_policy.as_deref().unwrap_or("Always");
    if policy != "Always" {
        errors.push(FieldError::new(
            "spec.template.spec.restartPolicy",
            format!("Unsupported value: {policy:?}: supported values: \"Always\""),
        ));
    }
    let pod = template_pod(rs);
    for error in podlab_api::validation::validate_pod(&pod) {
        if error.path == "spec.restartPolicy" {
            continue; // reported above, with the ReplicaSet's narrower rule
        }
        errors.push(FieldError::new(
            format!("spec.template.{}", error.path),
            error.message,
        ));
    }
    errors
}

/// `ValidateReplicaSetUpdate`: the selector of an apps/v1 ReplicaSet cannot change.
pub fn validate_replicaset_update(old: &ReplicaSet, new: &ReplicaSet) -> Vec<FieldError> {
    let mut errors = validate_replicaset(new);
    let old_selector = old.spec.as_ref().map(|s| &s.selector);
    let new_selector = new.spec.as_ref().map(|s| &s.selector);
    if old_selector != new_selector {
        errors.push(FieldError::new(
            "spec.selector",
            format!(
                "Invalid value: {}: field is immutable",
                new_selector
                    .and_then(|s| serde_json::to_string(s).ok())
                    .unwrap_or_default()
            ),
        ));
    }
    errors
}

/// `SetDefaults_ReplicaSet` (apps/v1) and the template's Pod defaults.
pub fn default_replicaset(rs: &mut ReplicaSet) {
    rs.metadata
        .namespace
        .get_or_insert_with(|| DEFAULT_NAMESPACE.to_string());
    let mut pod = template_pod(rs);
    podlab_api::defaults::default_pod(&mut pod);
    let Some(spec) = rs.spec.as_mut() else {
        return;
    };
    spec.replicas.get_or_insert(1);
    if let Some(template) = spec.template.as_mut() {
        template.spec = pod.spec;
    }
}

/// The template as a Pod, named as a pod of this ReplicaSet would be, for Pod validation.
fn template_pod(rs: &ReplicaSet) -> Pod {
    let template = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let mut metadata = template.metadata.unwrap_or_default();
    let base = rs
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or("replicaset");
    metadata.name = Some(format!("{base}-xxxxx"));
    metadata.namespace = rs.metadata.namespace.clone();
    Pod {
        metadata,
        spec: template.spec,
        status: None,
    }
}

/// The fields podlab implements: the ReplicaSet's metadata under the Pod metadata rules, and
/// the template under podlab-api's Pod rules.
pub(crate) fn check_supported(value: &Value, errors: &mut Vec<FieldError>) {
    let metadata =
        serde_json::json!({"metadata": value.get("metadata").cloned().unwrap_or(Value::Null)});
    podlab_api::supported::check_pod(&metadata, errors);
    let template = &value["spec"]["template"];
    if template.is_object() {
        let pod = serde_json::json!({"metadata": template["metadata"], "spec": template["spec"]});
        let mut template_errors = Vec::new();
        podlab_api::supported::check_pod(&pod, &mut template_errors);
        errors.extend(
            template_errors
                .into_iter()
                .map(|e| FieldError::new(format!("spec.template.{}", e.path), e.message)),
        );
    }
}

/// A field path as the API server writes it: `spec.template.spec.containers[0].imagee`.
pub(crate) fn field_path(path: &serde_ignored::Path) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        Path::Map { parent, key } => match field_path(parent) {
            p if p.is_empty() => key.clone(),
            p => format!("{p}.{key}"),
        },
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => field_path(parent),
    }
}

/// A label map as Go's `%#v` prints it in API errors: `map[string]string{"app":"web"}`.
fn go_string_map(labels: Option<&BTreeMap<String, String>>) -> String {
    match labels {
        None => "map[string]string(nil)".into(),
        Some(labels) => {
            let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k:?}:{v:?}")).collect();
            format!("map[string]string{{{}}}", pairs.join(", "))
        }
    }
}

fn other(source: &str, message: String) -> ManifestError {
    ManifestError::Other {
        input: source.into(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RS: &str = r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web, tier: front}
    spec:
      containers:
      - name: app
        image: busybox
        command: ["sleep", "3600"]
"#;

    fn err(text: &str) -> String {
        decode(text, "rs.yaml").unwrap_err().to_string()
    }

    #[test]
    fn a_good_replicaset_decodes_and_is_defaulted() {
        let rs = decode_replicaset(RS, "rs.yaml").unwrap();
        assert_eq!(rs.metadata.namespace.as_deref(), Some("default"));
        let spec = rs.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        let pod_spec = spec.template.unwrap().spec.unwrap();
        assert_eq!(pod_spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(pod_spec.termination_grace_period_seconds, Some(30));
        let one = decode_replicaset(&RS.replace("  replicas: 3\n", ""), "rs.yaml").unwrap();
        assert_eq!(one.spec.unwrap().replicas, Some(1));
    }

    #[test]
    fn a_selector_that_misses_the_template_labels_is_refused_like_the_api_server() {
        let e = err(&RS.replace("matchLabels: {app: web}", "matchLabels: {app: api}"));
        assert_eq!(
            e,
            "rs.yaml: ReplicaSet \"web\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\", \"tier\":\"front\"}: `selector` does not match template `labels`"
        );
    }

    #[test]
    fn an_empty_selector_and_a_bad_operator_are_refused() {
        let e = err(&RS.replace("    matchLabels: {app: web}\n", "    {}\n"));
        assert!(
            e.contains("spec.selector: Invalid value: {}: empty selector is invalid"),
            "{e}"
        );
        let e = err(&RS.replace(
            "matchLabels: {app: web}",
            "matchExpressions: [{key: app, operator: Near, values: [web]}]",
        ));
        assert!(
            e.contains("spec.selector.matchExpressions[0].operator: Invalid value: \"Near\""),
            "{e}"
        );
    }

    #[test]
    fn unknown_and_mistyped_fields_name_their_paths() {
        let e = err(&RS.replace("image: busybox", "image: busybox\n        imagee: typo"));
        assert!(
            e.contains("spec.template.spec.containers[0].imagee: unknown field"),
            "{e}"
        );
        let e = err(&RS.replace("replicas: 3", "replicas: three"));
        assert!(e.contains("spec.replicas"), "{e}");
        let e = err(&RS.replace("  replicas: 3\n", "  replicas: 3\n  paused: true\n"));
        assert!(e.contains("spec.paused: unknown field"), "{e}");
    }

    #[test]
    fn the_template_is_held_to_podlabs_pod_rules() {
        let e = err(&RS.replace(
            "    spec:\n      containers:",
            "    spec:\n      restartPolicy: Never\n      containers:",
        ));
        assert!(
            e.contains("spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""),
            "{e}"
        );
        let e = err(&RS.replace("        image: busybox\n", ""));
        assert!(
            e.contains("spec.template.spec.containers[0].image: Required value"),
            "{e}"
        );
        let e = err(&RS.replace(
            "image: busybox",
            "image: busybox\n        resources: {limits: {cpu: 1, nvidia.com/gpu: 1}}",
        ));
        assert!(
            e.contains("spec.template.spec.containers[0].resources.limits.nvidia.com/gpu")
                && e.contains("not supported by podlab"),
            "{e}"
        );
        let e = err(&RS.replace("replicas: 3", "replicas: -1"));
        assert!(
            e.contains("spec.replicas: Invalid value: -1: must be greater than or equal to 0"),
            "{e}"
        );
    }

    #[test]
    fn a_file_may_mix_pods_and_replicasets() {
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: solo}\nspec:\n  containers: [{name: a, image: busybox}]\n";
        let objects = decode(&format!("{pod}---{RS}"), "all.yaml").unwrap();
        assert!(
            matches!(&objects[0], Manifest::Pod(p) if p.metadata.name.as_deref() == Some("solo"))
        );
        assert!(matches!(&objects[1], Manifest::ReplicaSet(_)));
        let e = err("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: d}\n");
        assert!(e.contains("no kind \"StatefulSet\""), "{e}");
    }

    #[test]
    fn the_selector_cannot_change() {
        let old = decode_replicaset(RS, "rs.yaml").unwrap();
        let mut new = old.clone();
        new.spec.as_mut().unwrap().selector.match_labels = Some(BTreeMap::from([
            ("app".into(), "web".into()),
            ("tier".into(), "front".into()),
        ]));
        let errors = validate_replicaset_update(&old, &new);
        assert!(
            errors
                .iter()
                .any(|e| e.path == "spec.selector" && e.message.ends_with("field is immutable")),
            "{errors:?}"
        );
    }
}
