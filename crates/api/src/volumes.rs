//! The API server's checks on `spec.volumes[*]` sources podlab implements (`emptyDir`,
//! `hostPath`) and on `volumeMounts[*].subPath|subPathExpr`, with its wording.

use k8s_openapi::api::core::v1::{Volume, VolumeMount};

use crate::FieldError;

/// `hostPath.type` values the API server accepts (`""` means no check).
pub const HOST_PATH_TYPES: &[&str] = &[
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
];

/// The problems of one volume's source (`path` is `spec.volumes[i]`).
pub fn validate_source(volume: &Volume, path: &str, errors: &mut Vec<FieldError>) {
    let mut sources = Vec::new();
    if let Some(empty_dir) = &volume.empty_dir {
        sources.push("emptyDir");
        let at = format!("{path}.emptyDir");
        match empty_dir.medium.as_deref().unwrap_or("") {
            "" | "Memory" => {}
            other => errors.push(FieldError::new(
                format!("{at}.medium"),
                format!("Unsupported value: {other:?}: supported values: \"\", \"Memory\""),
            )),
        }
        if let Some(limit) = &empty_dir.size_limit {
            match crate::quantity::bytes(&limit.0) {
                None => errors.push(FieldError::new(
                    format!("{at}.sizeLimit"),
                    format!("Invalid value: {:?}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'", limit.0),
                )),
                Some(n) if n < 0 => errors.push(FieldError::new(
                    format!("{at}.sizeLimit"),
                    format!("Invalid value: {:?}: must be greater than or equal to 0", limit.0),
                )),
                Some(_) => {}
            }
        }
    }
    if let Some(host_path) = &volume.host_path {
        sources.push("hostPath");
        let at = format!("{path}.hostPath");
        if host_path.path.is_empty() {
            errors.push(FieldError::new(format!("{at}.path"), "Required value"));
        } else if std::path::Path::new(&host_path.path)
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            errors.push(FieldError::new(
                format!("{at}.path"),
                format!("Invalid value: {:?}: must not contain '..'", host_path.path),
            ));
        }
        let kind = host_path.type_.as_deref().unwrap_or("");
        if !HOST_PATH_TYPES.contains(&kind) {
            let supported: Vec<String> = HOST_PATH_TYPES.iter().map(|t| format!("{t:?}")).collect();
            errors.push(FieldError::new(
                format!("{at}.type"),
                format!(
                    "Unsupported value: {kind:?}: supported values: {}",
                    supported.join(", ")
                ),
            ));
        }
    }
    if let Some(map) = &volume.config_map {
        sources.push("configMap");
        if map.name.is_empty() {
            errors.push(FieldError::new(
                format!("{path}.configMap.name"),
                "Required value",
            ));
        }
        let items = map.items.iter().flatten().map(|i| (&i.key, &i.path));
        key_to_paths(items, &format!("{path}.configMap"), errors);
    }
    if let Some(secret) = &volume.secret {
        sources.push("secret");
        if secret.secret_name.as_deref().unwrap_or("").is_empty() {
            errors.push(FieldError::new(
                format!("{path}.secret.secretName"),
                "Required value",
            ));
        }
        let items = secret.items.iter().flatten().map(|i| (&i.key, &i.path));
        key_to_paths(items, &format!("{path}.secret"), errors);
    }
    match sources.as_slice() {
        [] => errors.push(FieldError::new(
            path,
            "Required value: must specify a volume type",
        )),
        [_] => {}
        [_, extra, ..] => errors.push(FieldError::new(
            format!("{path}.{extra}"),
            "Forbidden: may not specify more than 1 volume type",
        )),
    }
}

/// `items[*]` of a configMap or secret volume: a key, and a relative path without `..`.
fn key_to_paths<'a>(
    items: impl Iterator<Item = (&'a String, &'a String)>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    for (i, (key, target)) in items.enumerate() {
        if key.is_empty() {
            errors.push(FieldError::new(
                format!("{path}.items[{i}].key"),
                "Required value",
            ));
        }
        if target.is_empty() {
            errors.push(FieldError::new(
                format!("{path}.items[{i}].path"),
                "Required value",
            ));
        } else {
            local_descending_path(target, &format!("{path}.items[{i}].path"), errors);
        }
    }
}

/// `subPath` and `subPathExpr` (`path` is `…volumeMounts[j]`): relative, without `..`, not both.
pub fn validate_sub_path(mount: &VolumeMount, path: &str, errors: &mut Vec<FieldError>) {
    let sub_path = mount.sub_path.as_deref().unwrap_or("");
    let expr = mount.sub_path_expr.as_deref().unwrap_or("");
    if !sub_path.is_empty() {
        local_descending_path(sub_path, &format!("{path}.subPath"), errors);
    }
    if !expr.is_empty() {
        if !sub_path.is_empty() {
            errors.push(FieldError::new(
                format!("{path}.subPathExpr"),
                format!("Invalid value: {expr:?}: subPathExpr and subPath are mutually exclusive"),
            ));
        }
        local_descending_path(expr, &format!("{path}.subPathExpr"), errors);
    }
}

/// The API server's `validateLocalDescendingPath`.
fn local_descending_path(value: &str, path: &str, errors: &mut Vec<FieldError>) {
    if value.starts_with('/') {
        errors.push(FieldError::new(
            path,
            format!("Invalid value: {value:?}: must be a relative path"),
        ));
    }
    if value.split('/').any(|part| part == "..") {
        errors.push(FieldError::new(
            path,
            format!("Invalid value: {value:?}: must not contain '..'"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(volume: serde_json::Value) -> Vec<String> {
        let volume: Volume = serde_json::from_value(volume).unwrap();
        let mut errors = Vec::new();
        validate_source(&volume, "spec.volumes[0]", &mut errors);
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_bad_host_path_type_is_refused_at_its_field() {
        let got =
            errors(serde_json::json!({"name": "v", "hostPath": {"path": "/x", "type": "Dir"}}));
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with("spec.volumes[0].hostPath.type: Unsupported value: \"Dir\": supported values: \"\", \"BlockDevice\""),
            "{got:?}"
        );
    }

    #[test]
    fn host_path_needs_a_path_without_dot_dot() {
        let got = errors(serde_json::json!({"name": "v", "hostPath": {"path": ""}}));
        assert_eq!(got, ["spec.volumes[0].hostPath.path: Required value"]);
        let got = errors(serde_json::json!({"name": "v", "hostPath": {"path": "/a/../etc"}}));
        assert_eq!(got, ["spec.volumes[0].hostPath.path: Invalid value: \"/a/../etc\": must not contain '..'"]);
    }

    #[test]
    fn empty_dir_medium_and_size_limit() {
        assert!(errors(
            serde_json::json!({"name": "v", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}})
        )
        .is_empty());
        assert_eq!(
            errors(serde_json::json!({"name": "v", "emptyDir": {"sizeLimit": "-1Mi"}})),
            ["spec.volumes[0].emptyDir.sizeLimit: Invalid value: \"-1Mi\": must be greater than or equal to 0"]
        );
        assert_eq!(
            errors(serde_json::json!({"name": "v", "emptyDir": {"medium": "Disk"}})),
            ["spec.volumes[0].emptyDir.medium: Unsupported value: \"Disk\": supported values: \"\", \"Memory\""]
        );
    }

    #[test]
    fn sub_paths_are_relative_descending_and_not_both() {
        let check = |mount: serde_json::Value| {
            let mount: VolumeMount = serde_json::from_value(mount).unwrap();
            let mut errors = Vec::new();
            validate_sub_path(&mount, "m", &mut errors);
            errors.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert!(
            check(serde_json::json!({"name": "v", "mountPath": "/x", "subPath": "a/b"})).is_empty()
        );
        assert_eq!(
            check(serde_json::json!({"name": "v", "mountPath": "/x", "subPath": "/etc"})),
            ["m.subPath: Invalid value: \"/etc\": must be a relative path"]
        );
        assert_eq!(
            check(serde_json::json!({"name": "v", "mountPath": "/x", "subPathExpr": "a/../../b"})),
            ["m.subPathExpr: Invalid value: \"a/../../b\": must not contain '..'"]
        );
        assert_eq!(
            check(serde_json::json!({"name": "v", "mountPath": "/x", "subPath": "a", "subPathExpr": "b"})),
            ["m.subPathExpr: Invalid value: \"b\": subPathExpr and subPath are mutually exclusive"]
        );
    }

    #[test]
    fn one_source_only() {
        assert_eq!(
            errors(serde_json::json!({"name": "v"})),
            ["spec.volumes[0]: Required value: must specify a volume type"]
        );
        assert_eq!(
            errors(serde_json::json!({"name": "v", "emptyDir": {}, "hostPath": {"path": "/x"}})),
            ["spec.volumes[0].hostPath: Forbidden: may not specify more than 1 volume type"]
        );
    }
}
