//! `v1` ConfigMap and Secret manifests, decoded, validated and defaulted as the API server
//! does: names, keys (`[-._a-zA-Z0-9]+`), a key in both `data` and `binaryData`, Secret's
//! `stringData` folded into `data` and its `type` defaulted to `Opaque`.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::ByteString;
use podlab_api::{FieldError, ManifestError};
use serde_json::Value;

use crate::store::DEFAULT_NAMESPACE;

/// Decodes one ConfigMap document.
pub fn decode_config_map_value(value: Value, source: &str) -> Result<ConfigMap, ManifestError> {
    let mut map: ConfigMap = typed(value, source)?;
    let mut errors = crate::manifest::validate_object_meta(&map.metadata);
    let data = map.data.iter().flatten().map(|(k, _)| k);
    key_errors("data", data, &mut errors);
    let binary = map.binary_data.iter().flatten().map(|(k, _)| k);
    key_errors("binaryData", binary, &mut errors);
    for key in map.binary_data.iter().flatten().map(|(k, _)| k) {
        if map.data.as_ref().is_some_and(|d| d.contains_key(key)) {
            errors.push(FieldError::new(
                format!("data[{key}]"),
                format!("Invalid value: {key:?}: duplicate of key present in binaryData"),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(invalid("ConfigMap", &map.metadata, source, errors));
    }
    map.metadata
        .namespace
        .get_or_insert_with(|| DEFAULT_NAMESPACE.into());
    Ok(map)
}

/// Decodes one Secret document; `stringData` is written into `data` (it wins on a shared key).
pub fn decode_secret_value(value: Value, source: &str) -> Result<Secret, ManifestError> {
    let mut secret: Secret = typed(value, source)?;
    let mut errors = crate::manifest::validate_object_meta(&secret.metadata);
    let data = secret.data.iter().flatten().map(|(k, _)| k);
    key_errors("data", data, &mut errors);
    let strings = secret.string_data.iter().flatten().map(|(k, _)| k);
    key_errors("stringData", strings, &mut errors);
    if !errors.is_empty() {
        return Err(invalid("Secret", &secret.metadata, source, errors));
    }
    if let Some(strings) = secret.string_data.take() {
        let data = secret.data.get_or_insert_with(Default::default);
        for (key, value) in strings {
            data.insert(key, ByteString(value.into_bytes()));
        }
    }
    secret.type_.get_or_insert_with(|| "Opaque".into());
    let errors = docker_config_errors(&secret);
    if !errors.is_empty() {
        return Err(invalid("Secret", &secret.metadata, source, errors));
    }
    secret
        .metadata
        .namespace
        .get_or_insert_with(|| DEFAULT_NAMESPACE.into());
    Ok(secret)
}

fn typed<T: serde::de::DeserializeOwned>(value: Value, source: &str) -> Result<T, ManifestError> {
    serde_path_to_error::deserialize(value).map_err(|err| ManifestError::Type {
        input: source.into(),
        path: err.path().to_string(),
        message: err.inner().to_string(),
    })
}

/// The API server's `IsConfigMapKey`.
fn key_errors<'a>(
    field: &str,
    keys: impl Iterator<Item = &'a String>,
    errors: &mut Vec<FieldError>,
) {
    for key in keys {
        let valid = !key.is_empty()
            && key.len() <= 253
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
            && key != "."
            && key != ".."
            && !key.starts_with("..");
        if !valid {
            errors.push(FieldError::new(
                format!("{field}[{key}]"),
                format!("Invalid value: {key:?}: a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"),
            ));
        }
    }
}

/// The API server's `ValidateSecret` for `kubernetes.io/dockerconfigjson` (and the old
/// `kubernetes.io/dockercfg`): its key is required and must be JSON. The value is never quoted
/// back: it holds registry passwords.
fn docker_config_errors(secret: &Secret) -> Vec<FieldError> {
    let key = match secret.type_.as_deref() {
        Some("kubernetes.io/dockerconfigjson") => ".dockerconfigjson",
        Some("kubernetes.io/dockercfg") => ".dockercfg",
        _ => return Vec::new(),
    };
    let field = format!("data[{key}]");
    match secret.data.as_ref().and_then(|d| d.get(key)) {
        None => vec![FieldError::new(field, "Required value".to_string())],
        Some(value) => match serde_json::from_slice::<Value>(&value.0) {
            Ok(_) => Vec::new(),
            Err(e) => vec![FieldError::new(
                field,
                format!(
                    "Invalid value: \"<secret contents redacted>\": not JSON (line {}, column {})",
                    e.line(),
                    e.column()
                ),
            )],
        },
    }
}

fn invalid(
    kind: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    source: &str,
    errors: Vec<FieldError>,
) -> ManifestError {
    ManifestError::Invalid {
        input: source.into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_data_goes_into_data_and_type_defaults_to_opaque() {
        let secret = decode_secret_value(
            serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                "data": {"a": "eA=="}, "stringData": {"b": "plain"}}),
            "t",
        )
        .unwrap();
        let data = secret.data.unwrap();
        assert_eq!(data["a"].0, b"x");
        assert_eq!(data["b"].0, b"plain");
        assert!(secret.string_data.is_none());
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));
        assert_eq!(secret.metadata.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn docker_config_secrets_need_their_key_as_json_and_never_quote_it() {
        let secret = |data: serde_json::Value| {
            decode_secret_value(
                serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "r"},
                    "type": "kubernetes.io/dockerconfigjson", "stringData": data}),
                "t",
            )
        };
        assert!(secret(serde_json::json!({".dockerconfigjson": "{\"auths\": {}}"})).is_ok());
        let missing = secret(serde_json::json!({"other": "x"}))
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("data[.dockerconfigjson]: Required value"),
            "{missing}"
        );
        let bad = secret(serde_json::json!({".dockerconfigjson": "hunter2"}))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("<secret contents redacted>"), "{bad}");
        assert!(!bad.contains("hunter2"), "{bad}");
    }

    #[test]
    fn bad_keys_are_refused_with_their_path() {
        let err = decode_config_map_value(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                "data": {"a b": "x"}}),
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("t: ConfigMap \"c\" is invalid: data[a b]: Invalid value: \"a b\": a valid config key"),
            "{err}"
        );
    }
}
