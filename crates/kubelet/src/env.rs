//! A container's environment as kubelet's `makeEnvironmentVariables` builds it: `envFrom`
//! (ConfigMaps and Secrets, with a prefix), then `env` in order, each `value` with `$(VAR)`
//! references to earlier variables expanded, each `valueFrom` read from the pod (`fieldRef`,
//! the downward API), the container's resources (`resourceFieldRef`, with a divisor; an unset
//! limit is the node's allocatable, as kubelet defaults it), or a ConfigMap or Secret key.
//!
//! A missing object or key is kubelet's `CreateContainerConfigError` with its message
//! (`configmap "x" not found`, `couldn't find key k in ConfigMap default/x`), unless the
//! reference is `optional`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvFromSource, EnvVar, ObjectFieldSelector, Pod, ResourceFieldSelector,
    Secret,
};
use podlab_api::quantity::Amount;
use podlab_api::resources::EPHEMERAL_STORAGE;

/// Where ConfigMaps and Secrets are read from (the object store on the node).
pub trait ConfigSource {
    /// The ConfigMap, None when it does not exist.
    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, String>;
    fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, String>;
}

impl ConfigSource for podlab_control::Store {
    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, String> {
        match self.get::<ConfigMap>(namespace, name) {
            Ok(map) => Ok(Some(map)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, String> {
        match self.get::<Secret>(namespace, name) {
            Ok(secret) => Ok(Some(secret)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// No objects at all (`podlab run --rm`, which has no store).
pub struct NoObjects;

impl ConfigSource for NoObjects {
    fn config_map(&self, _: &str, _: &str) -> Result<Option<ConfigMap>, String> {
        Ok(None)
    }

    fn secret(&self, _: &str, _: &str) -> Result<Option<Secret>, String> {
        Ok(None)
    }
}

/// What the downward API reads besides the pod: its addresses and the node's.
#[derive(Debug, Clone, Default)]
pub struct PodRuntimeFacts {
    pub pod_ips: Vec<String>,
    pub host_ip: String,
    /// The node's allocatable cpu (milli-CPUs), memory and ephemeral storage (bytes): the
    /// value of an unset limit.
    pub node_milli_cpu: i64,
    pub node_memory: i64,
    pub node_ephemeral_storage: i64,
}

impl PodRuntimeFacts {
    /// This node's cpus and memory (`/proc/meminfo`'s MemTotal), as kubelet's allocatable
    /// when nothing is reserved.
    pub fn of_this_node(pod_ips: Vec<String>, host_ip: String) -> PodRuntimeFacts {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| {
                let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
                line.split_whitespace().nth(1)?.parse::<i64>().ok()
            })
            .map_or(0, |kib| kib * 1024);
        PodRuntimeFacts {
            pod_ips,
            host_ip,
            node_milli_cpu: cpus * 1000,
            node_memory: memory,
            node_ephemeral_storage: 0,
        }
    }

    /// The node's ephemeral storage: the size of the file system that holds `path` (the
    /// node's state root, as kubelet's capacity is the size of its root folder's file system).
    pub fn with_node_fs(mut self, path: &std::path::Path) -> PodRuntimeFacts {
        if let Ok(fs) = crate::node::images::image_fs(path) {
            self.node_ephemeral_storage = i64::try_from(fs.capacity).unwrap_or(i64::MAX);
        }
        self
    }
}

/// Whether the container's env needs anything but its literal values.
pub fn needs_sources(container: &Container) -> bool {
    container.env_from.as_ref().is_some_and(|e| !e.is_empty())
        || container
            .env
            .iter()
            .flatten()
            .any(|e| e.value_from.is_some())
}

/// The container's environment, in kubelet's order; Err is the CreateContainerConfigError
/// message.
pub fn container_env(
    pod: &Pod,
    container: &Container,
    source: &dyn ConfigSource,
    facts: &PodRuntimeFacts,
) -> Result<Vec<(String, String)>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, name: String, value: String| {
        env.retain(|(k, _)| *k != name);
        env.push((name, value));
    };
    for from in container.env_from.iter().flatten() {
        for (name, value) in env_from(namespace, from, source)? {
            set(&mut env, name, value);
        }
    }
    for var in container.env.iter().flatten() {
        let value = match &var.value_from {
            None => {
                let lookup: BTreeMap<&str, &str> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                crate::translate::expand(var.value.as_deref().unwrap_or(""), &lookup)
            }
            Some(_) => match value_from(pod, container, namespace, var, source, facts)? {
                Some(value) => value,
                None => continue,
            },
        };
        set(&mut env, var.name.clone(), value);
    }
    Ok(env)
}

fn env_from(
    namespace: &str,
    from: &EnvFromSource,
    source: &dyn ConfigSource,
) -> Result<Vec<(String, String)>, String> {
    let prefix = from.prefix.as_deref().unwrap_or("");
    let mut out = Vec::new();
    if let Some(r) = &from.config_map_ref {
        match source.config_map(namespace, &r.name)? {
            Some(map) => {
                for (k, v) in map.data.unwrap_or_default() {
                    out.push((format!("{prefix}{k}"), v));
                }
            }
            None if r.optional == Some(true) => {}
            None => return Err(format!("configmap {:?} not found", r.name)),
        }
    }
    if let Some(r) = &from.secret_ref {
        match source.secret(namespace, &r.name)? {
            Some(secret) => {
                for (k, v) in secret.data.unwrap_or_default() {
                    out.push((
                        format!("{prefix}{k}"),
                        String::from_utf8_lossy(&v.0).into_owned(),
                    ));
                }
            }
            None if r.optional == Some(true) => {}
            None => return Err(format!("secret {:?} not found", r.name)),
        }
    }
    Ok(out)
}

/// One `valueFrom`; None when an optional reference is missing (the variable is left out).
fn value_from(
    pod: &Pod,
    container: &Container,
    namespace: &str,
    var: &EnvVar,
    source: &dyn ConfigSource,
    facts: &PodRuntimeFacts,
) -> Result<Option<String>, String> {
    let from = var.value_from.as_ref().expect("called for valueFrom");
    if let Some(field) = &from.field_ref {
        return field_value(pod, field, facts).map(Some);
    }
    if let Some(resource) = &from.resource_field_ref {
        return resource_value(&with_pod_limits(pod, container), resource, facts).map(Some);
    }
    if let Some(key) = &from.config_map_key_ref {
        let optional = key.optional == Some(true);
        return match source.config_map(namespace, &key.name)? {
            None if optional => Ok(None),
            None => Err(format!("configmap {:?} not found", key.name)),
            Some(map) => match map.data.unwrap_or_default().remove(&key.key) {
                Some(value) => Ok(Some(value)),
                None if optional => Ok(None),
                None => Err(format!(
                    "couldn't find key {} in ConfigMap {namespace}/{}",
                    key.key, key.name
                )),
            },
        };
    }
    if let Some(key) = &from.secret_key_ref {
        let optional = key.optional == Some(true);
        return match source.secret(namespace, &key.name)? {
            None if optional => Ok(None),
            None => Err(format!("secret {:?} not found", key.name)),
            Some(secret) => match secret.data.unwrap_or_default().remove(&key.key) {
                Some(value) => Ok(Some(String::from_utf8_lossy(&value.0).into_owned())),
                None if optional => Ok(None),
                None => Err(format!(
                    "couldn't find key {} in Secret {namespace}/{}",
                    key.key, key.name
                )),
            },
        };
    }
    Ok(Some(String::new()))
}

/// kubelet's `podFieldSelectorRuntimeValue` (and `ExtractFieldPathAsString`).
pub fn field_value(
    pod: &Pod,
    field: &ObjectFieldSelector,
    facts: &PodRuntimeFacts,
) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let path = field.field_path.as_str();
    let in_map = |map: &Option<BTreeMap<String, String>>, prefix: &str| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(
            map.as_ref()
                .and_then(|m| m.get(key).cloned())
                .unwrap_or_default(),
        )
    };
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_else(|| "default".into()),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.hostIP" => facts.host_ip.clone(),
        "status.hostIPs" => facts.host_ip.clone(),
        "status.podIP" => facts.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => facts.pod_ips.join(","),
        "metadata.labels" => format_map(&meta.labels),
        "metadata.annotations" => format_map(&meta.annotations),
        _ => match in_map(&meta.labels, "metadata.labels['")
            .or_else(|| in_map(&meta.annotations, "metadata.annotations['"))
        {
            Some(value) => value,
            None => return Err(format!("unsupported fieldPath: {path}")),
        },
    };
    Ok(value)
}

/// `metadata.labels` as a downward API file holds it (`fieldpath.FormatMap`): `k="v"` lines,
/// sorted, each value quoted as Go's `%q` quotes it.
fn format_map(map: &Option<BTreeMap<String, String>>) -> String {
    map.iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", podlab_print::go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `container` with the pod-level limits (`spec.resources`) standing in for the cpu and memory
/// limits it does not set, as kubelet merges them before reading a `resourceFieldRef`
/// (`MergeContainerResourceLimits`): a limit unset here and at the pod is the node's.
pub fn with_pod_limits(pod: &Pod, container: &Container) -> Container {
    let mut container = container.clone();
    let Some(pod_limits) = podlab_api::resources::pod_level(pod).and_then(|r| r.limits.as_ref())
    else {
        return container;
    };
    let resources = container.resources.get_or_insert_with(Default::default);
    let limits = resources.limits.get_or_insert_with(Default::default);
    for name in [podlab_api::resources::CPU, podlab_api::resources::MEMORY] {
        if let Some(limit) = pod_limits.get(name) {
            limits
                .entry(name.to_string())
                .or_insert_with(|| limit.clone());
        }
    }
    container
}

/// kubelet's `ExtractContainerResourceValue`: cpu as ceil(milli / divisor milli), memory and
/// ephemeral storage as ceil(bytes / divisor bytes); an unset limit is the node's allocatable.
pub fn resource_value(
    container: &Container,
    field: &ResourceFieldSelector,
    facts: &PodRuntimeFacts,
) -> Result<String, String> {
    let resources = container.resources.as_ref();
    let pick = |which: &str, name: &str| {
        let map = match which {
            "limits" => resources.and_then(|r| r.limits.as_ref()),
            _ => resources.and_then(|r| r.requests.as_ref()),
        };
        podlab_api::resources::amount(map, name)
    };
    let divisor = match field.divisor.as_ref() {
        Some(q) => Amount::parse(&q.0).map_err(|e| format!("divisor {:?}: {e}", q.0))?,
        None => Amount::parse("1").expect("1 is a quantity"),
    };
    let ceil = |a: i64, b: i64| if b == 0 { 0 } else { (a + b - 1) / b };
    let value = match field.resource.as_str() {
        "limits.cpu" => ceil(
            pick("limits", "cpu").map_or(facts.node_milli_cpu, Amount::milli),
            divisor.milli(),
        ),
        "requests.cpu" => ceil(
            pick("requests", "cpu").map_or(0, Amount::milli),
            divisor.milli(),
        ),
        "limits.memory" => ceil(
            pick("limits", "memory").map_or(facts.node_memory, Amount::value),
            divisor.value(),
        ),
        "requests.memory" => ceil(
            pick("requests", "memory").map_or(0, Amount::value),
            divisor.value(),
        ),
        "limits.ephemeral-storage" => ceil(
            pick("limits", EPHEMERAL_STORAGE).map_or(facts.node_ephemeral_storage, Amount::value),
            divisor.value(),
        ),
        "requests.ephemeral-storage" => ceil(
            pick("requests", EPHEMERAL_STORAGE).map_or(0, Amount::value),
            divisor.value(),
        ),
        other => return Err(format!("unsupported container resource : {other}")),
    };
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    struct Objects;
    impl ConfigSource for Objects {
        fn config_map(&self, _: &str, name: &str) -> Result<Option<ConfigMap>, String> {
            Ok((name == "cfg").then(|| ConfigMap {
                data: Some(BTreeMap::from([("mode".into(), "fast".into())])),
                ..Default::default()
            }))
        }
        fn secret(&self, _: &str, name: &str) -> Result<Option<Secret>, String> {
            Ok((name == "sec").then(|| Secret {
                data: Some(BTreeMap::from([(
                    "token".into(),
                    ByteString(b"t0k".to_vec()),
                )])),
                ..Default::default()
            }))
        }
    }

    fn pod(yaml: &str) -> Pod {
        podlab_api::decode_pod(yaml, "test").unwrap()
    }

    fn env_of(pod: &Pod) -> Result<Vec<(String, String)>, String> {
        let facts = PodRuntimeFacts {
            pod_ips: vec!["10.0.0.5".into()],
            host_ip: "192.168.1.2".into(),
            node_milli_cpu: 2000,
            node_memory: 4 << 30,
            node_ephemeral_storage: 100 << 30,
        };
        let c = &pod.spec.as_ref().unwrap().containers[0];
        container_env(pod, c, &Objects, &facts)
    }

    const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, uid: u-1, labels: {app: web}, annotations: {team: blue}}
spec:
  nodeName: node1
  containers:
  - name: app
    image: busybox
    resources: {limits: {cpu: 500m, memory: 64Mi}, requests: {ephemeral-storage: 1Mi}}
    envFrom: [{configMapRef: {name: cfg}, prefix: CFG_}]
    env:
    - {name: NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    - {name: UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}
    - {name: APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
    - {name: TEAM, valueFrom: {fieldRef: {fieldPath: "metadata.annotations['team']"}}}
    - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
    - {name: SA, valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}}
    - {name: HOST_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: CPU_M, valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}}
    - {name: CPU, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}
    - {name: MEM_MI, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}
    - {name: DISK_KI, valueFrom: {resourceFieldRef: {resource: requests.ephemeral-storage, divisor: 1Ki}}}
    - {name: DISK_MAX_GI, valueFrom: {resourceFieldRef: {resource: limits.ephemeral-storage, divisor: 1Gi}}}
    - {name: MODE, valueFrom: {configMapKeyRef: {name: cfg, key: mode}}}
    - {name: TOKEN, valueFrom: {secretKeyRef: {name: sec, key: token}}}
    - {name: GONE, valueFrom: {configMapKeyRef: {name: nope, key: k, optional: true}}}
    - {name: BOTH, value: "$(NAME)-$(MODE)"}
"#;

    #[test]
    fn every_source_in_kubelets_order() {
        let env: BTreeMap<String, String> = env_of(&pod(POD)).unwrap().into_iter().collect();
        let expect = [
            ("CFG_mode", "fast"),
            ("NAME", "web"),
            ("NS", "shop"),
            ("UID", "u-1"),
            ("APP", "web"),
            ("TEAM", "blue"),
            ("NODE", "node1"),
            ("SA", "default"),
            ("HOST_IP", "192.168.1.2"),
            ("POD_IP", "10.0.0.5"),
            ("CPU_M", "500"),
            ("CPU", "1"),
            ("MEM_MI", "64"),
            ("DISK_KI", "1024"),
            ("DISK_MAX_GI", "100"),
            ("MODE", "fast"),
            ("TOKEN", "t0k"),
            ("BOTH", "web-fast"),
        ];
        for (k, v) in expect {
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert!(!env.contains_key("GONE"));
    }

    #[test]
    fn missing_objects_and_keys_are_kubelets_messages() {
        let with = |env: &str| {
            pod(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: a\n    image: busybox\n    env: [{env}]\n"
            ))
        };
        let err = |env: &str| env_of(&with(env)).unwrap_err();
        assert_eq!(
            err("{name: X, valueFrom: {configMapKeyRef: {name: x, key: k}}}"),
            "configmap \"x\" not found"
        );
        assert_eq!(
            err("{name: X, valueFrom: {configMapKeyRef: {name: cfg, key: k}}}"),
            "couldn't find key k in ConfigMap default/cfg"
        );
        assert_eq!(
            err("{name: X, valueFrom: {secretKeyRef: {name: x, key: k}}}"),
            "secret \"x\" not found"
        );
        assert_eq!(
            err("{name: X, valueFrom: {secretKeyRef: {name: sec, key: k}}}"),
            "couldn't find key k in Secret default/sec"
        );
    }
}
