//! The three patches the API server applies (`kubectl patch --type`), as pure functions on
//! JSON: JSON merge patch (RFC 7386, `merge`), JSON patch (RFC 6902, `json`: `add`, `remove`,
//! `replace`, `move`, `copy`, `test` on JSON pointers), and strategic merge patch
//! (apimachinery's `strategicpatch`, `strategic`, kubectl's default).
//!
//! A strategic merge patch is a merge patch that knows the lists of the Kubernetes types:
//! a list with a merge key (`containers` by `name`, `ports` by `containerPort`, `volumeMounts`
//! by `mountPath`...) is merged element by element, a list of strings with the merge strategy
//! (`finalizers`) is merged as a set, and every other list is replaced. The directives
//! `$patch: replace|delete` (in a map or a list element), `$retainKeys`,
//! `$deleteFromPrimitiveList/FIELD` and `$setElementOrder/FIELD` are understood (the last one
//! is only dropped: the order of merged elements is the original's, then the new ones). The
//! merge keys come from the field's name, which is unambiguous for the kinds podlab serves
//! (Pod, ReplicaSet, Deployment, ConfigMap, Secret); upstream reads them from the Go types.

use serde_json::{Map, Value};

/// Why a patch could not be applied, in the words of the API server's patch libraries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch is not of the shape its type needs (a JSON patch that is not a list...).
    #[error("{0}")]
    Malformed(String),
    /// A JSON patch operation whose path is not in the document.
    #[error("{op} operation does not apply: doc is missing path: {path:?}: missing value")]
    MissingPath { op: String, path: String },
    /// A JSON patch `test` that did not hold.
    #[error("testing value {path} failed: test failed")]
    TestFailed { path: String },
}

/// How a list field is merged by a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    /// Elements matched by this key are merged; others are added.
    MergeKey(&'static str),
    /// A list of scalars merged as a set (`finalizers`).
    Set,
    /// Replaced whole.
    Replace,
}

/// The `patchStrategy`/`patchMergeKey` of the list fields of the kinds podlab serves.
fn strategy_of(field: &str) -> ListStrategy {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => ListStrategy::MergeKey("name"),
        "ports" => ListStrategy::MergeKey("containerPort"),
        "volumeMounts" => ListStrategy::MergeKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeKey("devicePath"),
        "hostAliases" => ListStrategy::MergeKey("ip"),
        "ownerReferences" => ListStrategy::MergeKey("uid"),
        "conditions" => ListStrategy::MergeKey("type"),
        "readinessGates" => ListStrategy::MergeKey("conditionType"),
        "topologySpreadConstraints" => ListStrategy::MergeKey("topologyKey"),
        "finalizers" => ListStrategy::Set,
        _ => ListStrategy::Replace,
    }
}

/// RFC 7386: objects merged key by key, `null` removes, anything else replaces.
pub fn merge_patch(original: &Value, patch: &Value) -> Value {
    let Value::Object(patch) = patch else {
        return patch.clone();
    };
    let mut result = match original {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    for (key, value) in patch {
        if value.is_null() {
            result.remove(key);
        } else {
            let merged = merge_patch(result.get(key).unwrap_or(&Value::Null), value);
            result.insert(key.clone(), merged);
        }
    }
    Value::Object(result)
}

/// The RFC 7386 patch that takes `original` to `modified` (kubectl's two-way merge patch, as
/// `kubectl edit` sends it): changed keys, `null` for removed ones, lists whole. Applied with
/// [`merge_patch`] to a newer version of the object, it keeps what others changed meanwhile.
pub fn create_merge_patch(original: &Value, modified: &Value) -> Value {
    let (Value::Object(original), Value::Object(modified)) = (original, modified) else {
        return modified.clone();
    };
    let mut patch = Map::new();
    for key in original.keys().filter(|key| !modified.contains_key(*key)) {
        patch.insert(key.clone(), Value::Null);
    }
    for (key, value) in modified {
        match original.get(key) {
            Some(old) if old == value => {}
            Some(old @ Value::Object(_)) if value.is_object() => {
                patch.insert(key.clone(), create_merge_patch(old, value));
            }
            _ => {
                patch.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(patch)
}

/// A strategic merge patch of `original` (an object).
pub fn strategic_merge_patch(original: &Value, patch: &Value) -> Result<Value, PatchError> {
    let (Value::Object(original), Value::Object(patch)) = (original, patch) else {
        return Err(PatchError::Malformed(
            "unable to find api field in struct Unstructured for the json field \"\"; a strategic merge patch is a JSON object".into(),
        ));
    };
    Ok(merge_map(original, patch)?.map_or(Value::Object(Map::new()), Value::Object))
}

/// Merges a map; `None` when the patch deletes it (`$patch: delete`).
fn merge_map(
    original: &Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<Option<Map<String, Value>>, PatchError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(None),
        Some("replace") => return Ok(Some(strip_directives(patch))),
        Some(other) => {
            return Err(PatchError::Malformed(format!(
                "unknown patch type: {other} in map"
            )))
        }
        None => {}
    }
    let mut result = original.clone();
    for (key, value) in patch {
        if key == "$patch" || key.starts_with("$setElementOrder/") || key == "$retainKeys" {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let doomed = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = result.get_mut(field) {
                list.retain(|item| !doomed.contains(item));
            }
            continue;
        }
        match (result.get(key), value) {
            (_, Value::Null) => {
                result.remove(key);
            }
            (Some(Value::Object(old)), Value::Object(new)) => match merge_map(old, new)? {
                Some(merged) => {
                    result.insert(key.clone(), Value::Object(merged));
                }
                None => {
                    result.remove(key);
                }
            },
            (Some(Value::Array(old)), Value::Array(new)) => {
                let merged = merge_list(key, old, new)?;
                result.insert(key.clone(), Value::Array(merged));
            }
            (_, Value::Object(new))
                if new.get("$patch").and_then(Value::as_str) == Some("delete") =>
            {
                result.remove(key);
            }
            (_, new) => {
                result.insert(key.clone(), strip_value(new));
            }
        }
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        result.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Some(result))
}

fn merge_list(field: &str, original: &[Value], patch: &[Value]) -> Result<Vec<Value>, PatchError> {
    let replace = patch
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace {
        return Ok(patch
            .iter()
            .filter(|item| item.get("$patch").is_none())
            .map(strip_value)
            .collect());
    }
    match strategy_of(field) {
        ListStrategy::Replace => Ok(patch.iter().map(strip_value).collect()),
        ListStrategy::Set => {
            let mut result = original.to_vec();
            for item in patch {
                if !result.contains(item) {
                    result.push(item.clone());
                }
            }
            Ok(result)
        }
        ListStrategy::MergeKey(key) => {
            // The patch's elements (merged with the original's of the same key), and the
            // original's that the patch does not name; then upstream's order of the two.
            let mut merged = Vec::new();
            let mut named = Vec::new();
            for item in patch {
                let Value::Object(fields) = item else {
                    return Err(PatchError::Malformed(format!(
                        "{field}: a list merged by {key:?} takes objects, not {item}"
                    )));
                };
                let Some(wanted) = fields.get(key) else {
                    return Err(PatchError::Malformed(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    )));
                };
                named.push(wanted.clone());
                if fields.get("$patch").and_then(Value::as_str) == Some("delete") {
                    continue;
                }
                let old = original.iter().find(|old| old.get(key) == Some(wanted));
                let old = old.and_then(Value::as_object).cloned().unwrap_or_default();
                if let Some(item) = merge_map(&old, fields)? {
                    merged.push(Value::Object(item));
                }
            }
            let server_only: Vec<Value> = original
                .iter()
                .filter(|old| !old.get(key).is_some_and(|k| named.contains(k)))
                .cloned()
                .collect();
            Ok(merge_sorted(&server_only, &merged, original, key))
        }
    }
}

/// apimachinery's `mergeSortedSlice`: the original's own elements and the patch's, each list
/// in its order, interleaved by the original's order where both are in it; a new element comes
/// before an original one.
fn merge_sorted(left: &[Value], right: &[Value], order: &[Value], key: &str) -> Vec<Value> {
    let index = |item: &Value| order.iter().position(|o| o.get(key) == item.get(key));
    let (mut i, mut j) = (0, 0);
    let mut result = Vec::with_capacity(left.len() + right.len());
    while i < left.len() || j < right.len() {
        let take_left = if j >= right.len() {
            true
        } else if i >= left.len() {
            false
        } else {
            matches!((index(&left[i]), index(&right[j])), (Some(l), Some(r)) if l < r)
        };
        if take_left {
            result.push(left[i].clone());
            i += 1;
        } else {
            result.push(right[j].clone());
            j += 1;
        }
    }
    result
}

/// The patch's own value without directives, as it lands in the object.
fn strip_value(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(strip_directives(map)),
        Value::Array(items) => Value::Array(items.iter().map(strip_value).collect()),
        other => other.clone(),
    }
}

fn strip_directives(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| (k.clone(), strip_value(v)))
        .collect()
}

/// RFC 6902: the operations one after another; the first that fails fails the patch and
/// nothing of it is kept.
pub fn json_patch(original: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Array(operations) = patch else {
        return Err(PatchError::Malformed(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into(),
        ));
    };
    let mut doc = original.clone();
    for operation in operations {
        let field = |name: &str| -> Result<String, PatchError> {
            operation
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| {
                    PatchError::Malformed(format!("operation {operation} has no {name:?}"))
                })
        };
        let op = field("op")?;
        let path = field("path")?;
        let value = || {
            operation.get("value").cloned().ok_or_else(|| {
                PatchError::Malformed(format!("{op} operation {operation} has no \"value\""))
            })
        };
        let missing = || PatchError::MissingPath {
            op: op.clone(),
            path: path.clone(),
        };
        match op.as_str() {
            "add" => add(&mut doc, &path, value()?).ok_or_else(missing)?,
            "remove" => {
                remove(&mut doc, &path).ok_or_else(missing)?;
            }
            "replace" => {
                let target = doc.pointer_mut(&path).ok_or_else(missing)?;
                *target = value()?;
            }
            "move" | "copy" => {
                let from = field("from")?;
                let moved = match op.as_str() {
                    "move" => remove(&mut doc, &from),
                    _ => doc.pointer(&from).cloned(),
                };
                let moved = moved.ok_or_else(|| PatchError::MissingPath {
                    op: op.clone(),
                    path: from.clone(),
                })?;
                add(&mut doc, &path, moved).ok_or_else(missing)?;
            }
            "test" => {
                if doc.pointer(&path) != Some(&value()?) {
                    return Err(PatchError::TestFailed { path });
                }
            }
            other => return Err(PatchError::Malformed(format!("Unexpected kind: {other}"))),
        }
    }
    Ok(doc)
}

/// The parent of a JSON pointer and its last token (unescaped).
fn split(path: &str) -> Option<(&str, String)> {
    let (parent, last) = path.rsplit_once('/')?;
    Some((parent, last.replace("~1", "/").replace("~0", "~")))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Option<()> {
    if path.is_empty() {
        *doc = value;
        return Some(());
    }
    let (parent, last) = split(path)?;
    match doc.pointer_mut(parent)? {
        Value::Object(map) => {
            map.insert(last, value);
        }
        Value::Array(items) => {
            let at = match last.as_str() {
                "-" => items.len(),
                index => index.parse().ok().filter(|i| *i <= items.len())?,
            };
            items.insert(at, value);
        }
        _ => return None,
    }
    Some(())
}

fn remove(doc: &mut Value, path: &str) -> Option<Value> {
    let (parent, last) = split(path)?;
    match doc.pointer_mut(parent)? {
        Value::Object(map) => map.remove(&last),
        Value::Array(items) => {
            let at: usize = last.parse().ok().filter(|i| *i < items.len())?;
            Some(items.remove(at))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_two_way_merge_patch_carries_only_the_change_onto_a_newer_version() {
        let original = json!({"metadata": {"resourceVersion": "1", "labels": {"a": "1", "b": "2"}},
                              "spec": {"replicas": 1, "image": "busybox"}});
        let edited = json!({"metadata": {"resourceVersion": "1", "labels": {"a": "1"}},
                            "spec": {"replicas": 1, "image": "busybox:1.36"}});
        let patch = create_merge_patch(&original, &edited);
        assert_eq!(
            patch,
            json!({"metadata": {"labels": {"b": null}}, "spec": {"image": "busybox:1.36"}})
        );
        let newer = json!({"metadata": {"resourceVersion": "2", "labels": {"a": "1", "b": "2"}},
                           "spec": {"replicas": 1, "image": "busybox"}, "status": {"replicas": 1}});
        assert_eq!(
            merge_patch(&newer, &patch),
            json!({"metadata": {"resourceVersion": "2", "labels": {"a": "1"}},
                   "spec": {"replicas": 1, "image": "busybox:1.36"}, "status": {"replicas": 1}})
        );
        assert_eq!(create_merge_patch(&original, &original), json!({}));
    }

    fn pod() -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"},
                         "finalizers": ["a"]},
            "spec": {
                "containers": [
                    {"name": "app", "image": "busybox", "args": ["sleep", "1"],
                     "ports": [{"containerPort": 80, "name": "http"}],
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "side", "image": "busybox"}
                ],
                "tolerations": [{"key": "x"}]
            }
        })
    }

    #[test]
    fn strategic_merge_merges_containers_by_name_and_replaces_plain_lists() {
        let patch = json!({
            "metadata": {"labels": {"tier": null, "env": "prod"}, "finalizers": ["b", "a"]},
            "spec": {
                "containers": [
                    {"name": "app", "image": "busybox:1.36", "args": ["sleep", "2"],
                     "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]},
                    {"name": "new", "image": "x"}
                ],
                "tolerations": [{"key": "y"}]
            }
        });
        let merged = strategic_merge_patch(&pod(), &patch).unwrap();
        assert_eq!(
            merged["metadata"]["labels"],
            json!({"app": "web", "env": "prod"})
        );
        assert_eq!(merged["metadata"]["finalizers"], json!(["a", "b"]));
        let app = &merged["spec"]["containers"][0];
        assert_eq!(app["image"], "busybox:1.36");
        assert_eq!(app["args"], json!(["sleep", "2"]));
        assert_eq!(app["ports"], json!([{"containerPort": 80, "name": "http"}]));
        assert_eq!(
            app["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]),
            "as kubectl orders them"
        );
        let names: Vec<&str> = merged["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["app", "new", "side"],
            "new ones before the ones the patch does not name"
        );
        assert_eq!(merged["spec"]["tolerations"], json!([{"key": "y"}]));
    }

    #[test]
    fn strategic_merge_directives() {
        let patch = json!({"spec": {
            "containers": [{"name": "side", "$patch": "delete"}],
            "$setElementOrder/containers": [{"name": "app"}]
        }});
        let merged = strategic_merge_patch(&pod(), &patch).unwrap();
        assert_eq!(merged["spec"]["containers"].as_array().unwrap().len(), 1);
        let patch = json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}});
        let merged = strategic_merge_patch(&pod(), &patch).unwrap();
        assert_eq!(merged["metadata"]["labels"], json!({"only": "this"}));
        let patch =
            json!({"spec": {"containers": [{"name": "x", "image": "y"}, {"$patch": "replace"}]}});
        let merged = strategic_merge_patch(&pod(), &patch).unwrap();
        assert_eq!(
            merged["spec"]["containers"],
            json!([{"name": "x", "image": "y"}])
        );
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
        let merged = strategic_merge_patch(&pod(), &patch).unwrap();
        assert_eq!(merged["metadata"]["finalizers"], json!([]));
        let e = strategic_merge_patch(&pod(), &json!({"spec": {"containers": [{"image": "x"}]}}))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("does not contain declared merge key: name"),
            "{e}"
        );
    }

    #[test]
    fn merge_patch_replaces_lists_and_removes_nulls() {
        let patch = json!({"metadata": {"labels": {"tier": null}}, "spec": {"containers": [{"name": "only"}]}});
        let merged = merge_patch(&pod(), &patch);
        assert_eq!(merged["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(merged["spec"]["containers"], json!([{"name": "only"}]));
        // RFC 7386's own examples.
        assert_eq!(
            merge_patch(&json!({"a": "b"}), &json!({"a": "c"})),
            json!({"a": "c"})
        );
        assert_eq!(
            merge_patch(&json!({"a": [{"b": "c"}]}), &json!({"a": [1]})),
            json!({"a": [1]})
        );
        assert_eq!(
            merge_patch(&json!({"e": null}), &json!({"a": 1})),
            json!({"e": null, "a": 1})
        );
        assert_eq!(
            merge_patch(&json!([1, 2]), &json!({"a": "b", "c": null})),
            json!({"a": "b"})
        );
    }

    #[test]
    fn json_patch_operations_and_their_errors() {
        let patch = json!([
            {"op": "test", "path": "/spec/containers/0/name", "value": "app"},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:1.36"},
            {"op": "add", "path": "/metadata/labels/a~1b", "value": "x"},
            {"op": "add", "path": "/spec/containers/0/args/-", "value": "more"},
            {"op": "remove", "path": "/spec/containers/1"},
            {"op": "copy", "from": "/metadata/name", "path": "/metadata/labels/name"},
            {"op": "move", "from": "/metadata/labels/tier", "path": "/metadata/labels/layer"}
        ]);
        let patched = json_patch(&pod(), &patch).unwrap();
        assert_eq!(patched["spec"]["containers"][0]["image"], "busybox:1.36");
        assert_eq!(
            patched["spec"]["containers"][0]["args"],
            json!(["sleep", "1", "more"])
        );
        assert_eq!(patched["spec"]["containers"].as_array().unwrap().len(), 1);
        assert_eq!(
            patched["metadata"]["labels"],
            json!({"app": "web", "a/b": "x", "name": "web", "layer": "front"})
        );
        let e = json_patch(
            &pod(),
            &json!([{"op": "replace", "path": "/spec/nosuch/x", "value": 1}]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "replace operation does not apply: doc is missing path: \"/spec/nosuch/x\": missing value"
        );
        let e = json_patch(
            &pod(),
            &json!([{"op": "test", "path": "/metadata/name", "value": "db"}]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "testing value /metadata/name failed: test failed"
        );
        assert!(json_patch(&pod(), &json!({"op": "add"})).is_err());
    }
}
