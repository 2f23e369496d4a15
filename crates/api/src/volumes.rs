//! The API server's checks on `spec.volumes[*]` sources podlab implements (`emptyDir`,
//! `hostPath`, `configMap`, `secret`, `downwardAPI`, `image`) and on `volumeMounts[*].subPath|subPathExpr`,
//! with its wording.

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
        let modes = map.items.iter().flatten().map(|i| i.mode);
        file_modes(
            map.default_mode,
            modes,
            &format!("{path}.configMap"),
            errors,
        );
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
        let modes = secret.items.iter().flatten().map(|i| i.mode);
        file_modes(
            secret.default_mode,
            modes,
            &format!("{path}.secret"),
            errors,
        );
    }
    if let Some(downward) = &volume.downward_api {
        sources.push("downwardAPI");
        validate_downward_api(downward, &format!("{path}.downwardAPI"), errors);
    }
    if let Some(image) = &volume.image {
        sources.push("image");
        if image.reference.as_deref().unwrap_or("").is_empty() {
            errors.push(FieldError::new(
                format!("{path}.image.reference"),
                "Required value",
            ));
        }
        let policy = image.pull_policy.as_deref().unwrap_or("");
        if !["", "Always", "IfNotPresent", "Never"].contains(&policy) {
            errors.push(FieldError::new(
                format!("{path}.image.pullPolicy"),
                format!("Unsupported value: {policy:?}: supported values: \"Always\", \"IfNotPresent\", \"Never\""),
            ));
        }
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

/// The API server's file mode rule: `defaultMode` and each item's `mode` within 0..=0777.
fn file_modes(
    default_mode: Option<i32>,
    item_modes: impl Iterator<Item = Option<i32>>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let check = |mode: Option<i32>, at: String, errors: &mut Vec<FieldError>| {
        if let Some(mode) = mode.filter(|m| !(0..=0o777).contains(m)) {
            errors.push(FieldError::new(
                at,
                format!(
                    "Invalid value: {mode}: must be a number between 0 and 0777 (octal), both inclusive"
                ),
            ));
        }
    };
    check(default_mode, format!("{path}.defaultMode"), errors);
    for (i, mode) in item_modes.enumerate() {
        check(mode, format!("{path}.items[{i}].mode"), errors);
    }
}

/// `fieldRef.fieldPath` values a downwardAPI volume serves (and their subscripts).
pub const VOLUME_FIELD_PATHS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
];

/// The API server's `validateDownwardAPIVolumeSource` (`path` is `…downwardAPI`): modes, and
/// for each item a path, and exactly one of a volume field or a named container's resource.
fn validate_downward_api(
    source: &k8s_openapi::api::core::v1::DownwardAPIVolumeSource,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let modes = source.items.iter().flatten().map(|i| i.mode);
    file_modes(source.default_mode, modes, path, errors);
    let quoted = |values: &[&str]| {
        values
            .iter()
            .map(|v| format!("{v:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (i, item) in source.items.iter().flatten().enumerate() {
        let at = format!("{path}.items[{i}]");
        if item.path.is_empty() {
            errors.push(FieldError::new(format!("{at}.path"), "Required value"));
        } else {
            local_descending_path(&item.path, &format!("{at}.path"), errors);
            if item.path.starts_with("..") {
                errors.push(FieldError::new(
                    format!("{at}.path"),
                    format!("Invalid value: {:?}: must not start with '..'", item.path),
                ));
            }
        }
        match (&item.field_ref, &item.resource_field_ref) {
            (Some(_), Some(_)) => errors.push(FieldError::new(
                &at,
                "Invalid value: \"resource\": fieldRef and resourceFieldRef can not be specified simultaneously",
            )),
            (None, None) => errors.push(FieldError::new(
                &at,
                "Required value: one of fieldRef and resourceFieldRef is required",
            )),
            (Some(field), None) => {
                let p = field.field_path.as_str();
                if p.is_empty() {
                    errors.push(FieldError::new(
                        format!("{at}.fieldRef.fieldPath"),
                        "Required value",
                    ));
                } else if !VOLUME_FIELD_PATHS.contains(&p) && !crate::env::is_subscript(p) {
                    errors.push(FieldError::new(
                        format!("{at}.fieldRef.fieldPath"),
                        format!(
                            "Unsupported value: {p:?}: supported values: {}",
                            quoted(VOLUME_FIELD_PATHS)
                        ),
                    ));
                }
            }
            (None, Some(resource)) => {
                if resource.container_name.as_deref().unwrap_or("").is_empty() {
                    errors.push(FieldError::new(
                        format!("{at}.resourceFieldRef.containerName"),
                        "Required value",
                    ));
                }
                if !crate::env::RESOURCES.contains(&resource.resource.as_str()) {
                    errors.push(FieldError::new(
                        format!("{at}.resourceFieldRef.resource"),
                        format!(
                            "Unsupported value: {:?}: supported values: {}",
                            resource.resource,
                            quoted(crate::env::RESOURCES)
                        ),
                    ));
                }
            }
        }
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
    fn an_image_volume_needs_a_reference_and_a_known_pull_policy() {
        assert!(
            errors(serde_json::json!({"name": "v", "image": {"reference": "busybox"}})).is_empty()
        );
        let got = errors(serde_json::json!({"name": "v", "image": {"pullPolicy": "Sometimes"}}));
        assert_eq!(
            got,
            [
                "spec.volumes[0].image.reference: Required value",
                "spec.volumes[0].image.pullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
            ]
        );
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
    fn downward_api_items_and_modes_are_checked_at_their_paths() {
        assert!(errors(serde_json::json!({"name": "v", "downwardAPI": {"defaultMode": 0o644, "items": [
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "k8s/app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
            {"path": "cpu", "mode": 0o400, "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}}
        ]}}))
        .is_empty());
        let got = errors(
            serde_json::json!({"name": "v", "downwardAPI": {"defaultMode": 0o1000, "items": [
                {"path": "../x", "fieldRef": {"fieldPath": "spec.nodeName"}},
                {"path": "m", "resourceFieldRef": {"resource": "limits.cpu"}, "mode": 512},
                {"path": "none"}
            ]}}),
        );
        assert_eq!(
            got,
            [
                "spec.volumes[0].downwardAPI.defaultMode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive",
                "spec.volumes[0].downwardAPI.items[1].mode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive",
                "spec.volumes[0].downwardAPI.items[0].path: Invalid value: \"../x\": must not contain '..'",
                "spec.volumes[0].downwardAPI.items[0].path: Invalid value: \"../x\": must not start with '..'",
                "spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath: Unsupported value: \"spec.nodeName\": supported values: \"metadata.annotations\", \"metadata.labels\", \"metadata.name\", \"metadata.namespace\", \"metadata.uid\"",
                "spec.volumes[0].downwardAPI.items[1].resourceFieldRef.containerName: Required value",
                "spec.volumes[0].downwardAPI.items[2]: Required value: one of fieldRef and resourceFieldRef is required",
            ]
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
