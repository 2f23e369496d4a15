//! The API server's checks on `env[*].valueFrom` (`ValidateEnv`): one source per variable, a
//! `fieldRef` path the downward API serves, a `resourceFieldRef` resource it knows, and the
//! name and key of a ConfigMap or Secret reference.

use k8s_openapi::api::core::v1::EnvVar;

use crate::FieldError;

/// `fieldRef.fieldPath` values for env (and, without the status ones, downwardAPI volumes).
pub const FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// `resourceFieldRef.resource` values podlab serves (sorted, as the API server lists them).
pub const RESOURCES: &[&str] = &[
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

/// Whether `path` is a `metadata.labels['k']` or `metadata.annotations['k']` subscript.
pub fn is_subscript(path: &str) -> bool {
    ["metadata.labels['", "metadata.annotations['"]
        .iter()
        .any(|p| {
            path.strip_prefix(p)
                .is_some_and(|rest| rest.len() > 2 && rest.ends_with("']"))
        })
}

fn supported(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The problems of `env[j]` (`path` is `…env[j]`).
pub fn validate_env_var(var: &EnvVar, path: &str, errors: &mut Vec<FieldError>) {
    let Some(from) = &var.value_from else {
        return;
    };
    let at = format!("{path}.valueFrom");
    if var.value.as_deref().is_some_and(|v| !v.is_empty()) {
        errors.push(FieldError::new(
            &at,
            "Invalid value: \"\": may not be specified when `value` is not empty",
        ));
    }
    let count = [
        from.field_ref.is_some(),
        from.resource_field_ref.is_some(),
        from.config_map_key_ref.is_some(),
        from.secret_key_ref.is_some(),
    ]
    .into_iter()
    .filter(|b| *b)
    .count();
    if count == 0 {
        errors.push(FieldError::new(&at, "Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"));
    } else if count > 1 {
        errors.push(FieldError::new(
            &at,
            "Invalid value: \"\": may not have more than one field specified at a time",
        ));
    }
    if let Some(f) = &from.field_ref {
        let p = &f.field_path;
        if p.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.fieldRef.fieldPath"),
                "Required value",
            ));
        } else if !FIELD_PATHS.contains(&p.as_str()) && !is_subscript(p) {
            errors.push(FieldError::new(
                format!("{at}.fieldRef.fieldPath"),
                format!(
                    "Unsupported value: {p:?}: supported values: {}",
                    supported(FIELD_PATHS)
                ),
            ));
        }
    }
    if let Some(r) = &from.resource_field_ref {
        if !RESOURCES.contains(&r.resource.as_str()) {
            errors.push(FieldError::new(
                format!("{at}.resourceFieldRef.resource"),
                format!(
                    "Unsupported value: {:?}: supported values: {}",
                    r.resource,
                    supported(RESOURCES)
                ),
            ));
        }
    }
    let references = [
        (
            "configMapKeyRef",
            from.config_map_key_ref.as_ref().map(|k| (&k.name, &k.key)),
        ),
        (
            "secretKeyRef",
            from.secret_key_ref.as_ref().map(|k| (&k.name, &k.key)),
        ),
    ];
    for (field, reference) in references {
        let Some((name, key)) = reference else {
            continue;
        };
        if name.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.{field}.name"),
                "Required value",
            ));
        }
        if key.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.{field}.key"),
                "Required value",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(var: serde_json::Value) -> Vec<String> {
        let var: EnvVar = serde_json::from_value(var).unwrap();
        let mut errors = Vec::new();
        validate_env_var(&var, "env[0]", &mut errors);
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn field_paths_and_resources_are_checked() {
        assert!(errors(serde_json::json!({"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}})).is_empty());
        let got = errors(
            serde_json::json!({"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}}),
        );
        assert!(got[0].starts_with("env[0].valueFrom.fieldRef.fieldPath: Unsupported value: \"spec.hostname\": supported values: \"metadata.name\""), "{got:?}");
        let got = errors(
            serde_json::json!({"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.gpu"}}}),
        );
        assert!(
            got[0].starts_with(
                "env[0].valueFrom.resourceFieldRef.resource: Unsupported value: \"limits.gpu\""
            ),
            "{got:?}"
        );
        let got = errors(
            serde_json::json!({"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": ""}}}),
        );
        assert_eq!(
            got,
            ["env[0].valueFrom.configMapKeyRef.key: Required value"]
        );
    }
}
