//! Manifest text → typed Kubernetes objects, with the field path of every problem.
//!
//! The steps are the API server's: parse (YAML or JSON, several `---` documents allowed), check
//! `apiVersion`/`kind`, decode into the typed object (a wrong type is reported at its path), find
//! fields that Kubernetes does not know (decode, re-encode, and compare: whatever did not survive
//! the round trip is unknown), refuse fields podlab does not implement, validate, default.
//! Nothing is created by a manifest that fails any step.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::{defaults, supported, validation, FieldError, ManifestError};

/// A decoded, validated and defaulted object.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Pod(Box<Pod>),
}

/// Decodes every document in `text`. `source` names the input in error messages (a file name).
pub fn decode(text: &str, source: &str) -> Result<Vec<Object>, ManifestError> {
    documents(text, source)?
        .into_iter()
        .map(|value| decode_value(value, source))
        .collect()
}

/// The documents of a YAML or JSON text (`---`-separated), empty ones skipped, plain scalars
/// read as YAML 1.1 reads them where kubectl's reading matters ([`crate::yaml`]); a syntax
/// error names the line. At least one document is required. The first step of every decoder,
/// podlab-control's for ReplicaSets too.
pub fn documents(text: &str, source: &str) -> Result<Vec<Value>, ManifestError> {
    let mut values = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        // YAML 1.1's octal `0644`, as kubectl reads it (see `crate::yaml`).
        let value = serde::de::DeserializeSeed::deserialize(crate::yaml::Yaml11 { text }, document)
            .map_err(|err| ManifestError::Syntax {
                input: source.to_string(),
                message: err.to_string(),
            })?;
        if !value.is_null() {
            values.push(value); // a null one is an empty document, e.g. a trailing `---`
        }
    }
    if values.is_empty() {
        return Err(ManifestError::Other {
            input: source.into(),
            message: "no objects in the manifest".into(),
        });
    }
    Ok(values)
}

/// Decodes a manifest that must hold exactly one Pod.
pub fn decode_pod(text: &str, source: &str) -> Result<Pod, ManifestError> {
    let mut objects = decode(text, source)?;
    if objects.len() != 1 {
        return Err(ManifestError::Other {
            input: source.into(),
            message: format!("expected one Pod, found {} objects", objects.len()),
        });
    }
    match objects.remove(0) {
        Object::Pod(pod) => Ok(*pod),
    }
}

fn decode_value(value: Value, source: &str) -> Result<Object, ManifestError> {
    let other = |message: String| ManifestError::Other {
        input: source.into(),
        message,
    };
    let Value::Object(map) = &value else {
        return Err(other(format!(
            "expected an object with apiVersion and kind, got {}",
            kind_of(&value)
        )));
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    match (api_version, kind) {
        ("v1", "Pod") => decode_pod_value(value, source).map(|pod| Object::Pod(Box::new(pod))),
        (_, "") => Err(other("kind: Required value".into())),
        ("", _) => Err(other("apiVersion: Required value".into())),
        (version, kind) => Err(other(format!(
            "no kind {kind:?} in version {version:?} that podlab serves (podlab serves v1 Pod)"
        ))),
    }
}

/// One document already parsed, that must be a v1 Pod (apiVersion and kind checked by the
/// caller): type errors, unknown and unsupported fields, validation, defaults.
pub fn decode_pod_value(value: Value, source: &str) -> Result<Pod, ManifestError> {
    decode_pod_value_warned(value, source).map(|(pod, _)| pod)
}

/// [`decode_pod_value`], with the warnings the API server answers a create of that Pod with
/// (kubectl prints each as `Warning: ...` on stderr): those of `applyAppArmorVersionSkew`
/// (a deprecated AppArmor annotation) first, then `GetWarningsForPod`'s
/// ([`crate::warnings::pod`]).
pub fn decode_pod_value_warned(
    value: Value,
    source: &str,
) -> Result<(Pod, Vec<String>), ManifestError> {
    let mut pod: Pod =
        serde_path_to_error::deserialize(&value).map_err(|err| ManifestError::Type {
            input: source.into(),
            path: err.path().to_string(),
            message: err.inner().to_string(),
        })?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let invalid = |errors: Vec<FieldError>| ManifestError::Invalid {
        input: source.into(),
        kind: "Pod".into(),
        name: name.clone(),
        errors,
    };

    let round_trip = serde_json::to_value(&pod).expect("a decoded Pod encodes");
    let mut errors = Vec::new();
    unknown_fields(&value, &round_trip, String::new(), &mut errors);
    if errors.is_empty() {
        supported::check_pod(&value, &mut errors);
    }
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    let errors = validation::validate_pod(&pod);
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    // PrepareForCreate, then the strategy's WarningsOnCreate, as the API server runs them.
    let mut warnings = crate::security::sync_app_armor_annotations(&mut pod);
    defaults::default_pod(&mut pod);
    warnings.extend(crate::warnings::pod(&pod));
    Ok((pod, warnings))
}

/// Every field of `given` that is absent from `known` (its decoded-and-encoded twin).
fn unknown_fields(given: &Value, known: &Value, path: String, errors: &mut Vec<FieldError>) {
    match (given, known) {
        (Value::Object(given), Value::Object(known)) => {
            for (key, value) in given {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match known.get(key) {
                    _ if value.is_null() => {}
                    None => errors.push(FieldError::new(
                        child,
                        "unknown field: Kubernetes has no such field",
                    )),
                    Some(twin) => unknown_fields(value, twin, child, errors),
                }
            }
        }
        (Value::Array(given), Value::Array(known)) => {
            for (i, (value, twin)) in given.iter().zip(known).enumerate() {
                unknown_fields(value, twin, format!("{path}[{i}]"), errors);
            }
        }
        _ => {}
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", "echo hi"]
"#;

    fn err(text: &str) -> String {
        decode(text, "pod.yaml").unwrap_err().to_string()
    }

    #[test]
    fn a_good_pod_decodes_and_is_defaulted() {
        let pod = decode_pod(GOOD, "pod.yaml").unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn host_users_false_is_taken_and_refused_beside_the_nodes_network() {
        let own = GOOD.replace("spec:\n", "spec:\n  hostUsers: false\n");
        let pod = decode_pod(&own, "pod.yaml").unwrap();
        assert_eq!(pod.spec.unwrap().host_users, Some(false));
        let e = err(&own.replace("spec:\n", "spec:\n  hostNetwork: true\n"));
        assert!(
            e.contains("spec.hostNetwork: Forbidden: when `pod.Spec.HostUsers` is false"),
            "{e}"
        );
    }

    #[test]
    fn yaml_syntax_error_names_the_line() {
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: [\n");
        assert!(e.contains("YAML syntax") && e.contains("line"), "{e}");
    }

    #[test]
    fn wrong_type_names_the_field_path() {
        let e = err(&GOOD.replace("command: [\"sh\", \"-c\", \"echo hi\"]", "command: 42"));
        assert!(e.contains("spec.containers[0].command"), "{e}");
    }

    #[test]
    fn unknown_field_names_the_field_path() {
        let e = err(&GOOD.replace("image: busybox", "image: busybox\n    imagee: typo"));
        assert!(
            e.contains("spec.containers[0].imagee: unknown field"),
            "{e}"
        );
    }

    #[test]
    fn unsupported_field_is_rejected_not_ignored() {
        let e = err(&GOOD.replace(
            "image: busybox",
            "image: busybox\n    resources: {claims: [{name: gpu}]}",
        ));
        assert!(
            e.contains("spec.containers[0].resources.claims[0].name")
                && e.contains("not supported by podlab"),
            "{e}"
        );
    }

    #[test]
    fn ephemeral_storage_is_checked_defaulted_and_leaves_the_qos_class_alone() {
        let pod = decode_pod(
            &GOOD.replace(
                "image: busybox",
                "image: busybox\n    resources: {limits: {ephemeral-storage: 1Mi}}",
            ),
            "pod.yaml",
        )
        .unwrap();
        let resources = pod.spec.as_ref().unwrap().containers[0]
            .resources
            .clone()
            .unwrap();
        assert_eq!(
            resources.requests.unwrap()["ephemeral-storage"].0,
            "1Mi",
            "the request defaults to the limit"
        );
        assert_eq!(crate::resources::pod_qos(&pod), "BestEffort");
        let e = err(&GOOD.replace(
            "image: busybox",
            "image: busybox\n    resources: {limits: {ephemeral-storage: 1Mi}, requests: {ephemeral-storage: 2Mi}}",
        ));
        assert!(
            e.contains("spec.containers[0].resources.requests[ephemeral-storage]: Invalid value: \"2Mi\": must be less than or equal to ephemeral-storage limit of 1Mi"),
            "{e}"
        );
        let e = err(&GOOD.replace(
            "image: busybox",
            "image: busybox\n    resources: {limits: {ephemeral-storage: 1Mb}}",
        ));
        assert!(
            e.contains("spec.containers[0].resources.limits[ephemeral-storage]: Invalid value: \"1Mb\": quantities must match the regular expression"),
            "{e}"
        );
    }

    #[test]
    fn bad_quantities_and_limits_below_requests_are_refused_at_their_paths() {
        let e = err(&GOOD.replace(
            "image: busybox",
            "image: busybox\n    resources: {limits: {cpu: 1x, memory: 64Mi}, requests: {memory: 128Mi}}",
        ));
        assert!(
            e.contains("spec.containers[0].resources.limits[cpu]: Invalid value: \"1x\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
            "{e}"
        );
        assert!(
            e.contains("spec.containers[0].resources.requests[memory]: Invalid value: \"128Mi\": must be less than or equal to memory limit of 64Mi"),
            "{e}"
        );
        let e = err(&GOOD.replace(
            "image: busybox",
            "image: busybox\n    resources: {requests: {cpu: '-1'}}",
        ));
        assert!(
            e.contains("spec.containers[0].resources.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"),
            "{e}"
        );
    }

    #[test]
    fn duplicate_container_names_are_rejected() {
        let text = GOOD.replace(
            "    command: [\"sh\", \"-c\", \"echo hi\"]\n",
            "  - name: app\n    image: busybox\n",
        );
        let e = err(&text);
        assert!(
            e.contains("spec.containers[1].name: Duplicate value: \"app\""),
            "{e}"
        );
    }

    #[test]
    fn missing_image_is_required() {
        let e = err(&GOOD.replace("    image: busybox\n", ""));
        assert!(
            e.contains("spec.containers[0].image: Required value"),
            "{e}"
        );
    }

    #[test]
    fn another_kind_is_refused() {
        let e = err("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n");
        assert!(e.contains("no kind \"Service\""), "{e}");
    }

    #[test]
    fn status_and_null_timestamps_from_kubectl_output_are_accepted() {
        let text = GOOD.replace("  name: web\n", "  name: web\n  creationTimestamp: null\n")
            + "status:\n  phase: Running\n";
        decode_pod(&text, "pod.yaml").unwrap();
    }

    #[test]
    fn octal_file_modes_read_as_kubectl_reads_them_and_a_quoted_one_is_a_type_error() {
        let volumes = "  volumes:\n  - name: cfg\n    configMap:\n      name: settings\n      defaultMode: 0644\n      items:\n      - {key: a, path: a, mode: 0400}\n";
        let pod = decode_pod(&format!("{GOOD}{volumes}"), "pod.yaml").unwrap();
        let source = pod.spec.unwrap().volumes.unwrap()[0]
            .config_map
            .clone()
            .unwrap();
        assert_eq!(source.default_mode, Some(0o644));
        assert_eq!(source.items.unwrap()[0].mode, Some(0o400));
        let quoted = volumes.replace("0644", "'0644'");
        let e = err(&format!("{GOOD}{quoted}"));
        assert!(
            e.contains("spec.volumes[0].configMap.defaultMode: invalid type: string \"0644\""),
            "{e}"
        );
        let too_big = volumes.replace("0644", "01000");
        let e = err(&format!("{GOOD}{too_big}"));
        assert!(
            e.contains("spec.volumes[0].configMap.defaultMode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive"),
            "{e}"
        );
    }
}
