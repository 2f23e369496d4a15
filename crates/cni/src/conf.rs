//! Network configuration lists (`.conflist`): finding one in a folder, reading and checking it,
//! and building the per-plugin configuration each plugin gets on stdin.
//!
//! A conflist names a network and the chain of plugins that make it: `{"cniVersion", "name",
//! "plugins": [{"type": "bridge", ...}, ...]}`. Like libcni's `ConfFiles` and containerd's CRI
//! plugin, a folder's first `.conflist`/`.conf`/`.json` file in name order is the network; a
//! single-plugin `.conf` is read as a list of one. Everything wrong with a file becomes an
//! [`Error::Conf`] naming the file and the problem, before any plugin runs.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::args::check_network_name;
use crate::{Error, Result};

/// The spec versions this client speaks, oldest first. Results of 0.3.x and 0.4.0 have the same
/// shape as 1.x (only an extra `ips[].version`), so one reader serves them all.
pub const SUPPORTED_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The capability argument of host ports (CRI `port_mappings`), which the `portmap` plugin
/// declares.
pub const PORT_MAPPINGS: &str = "portMappings";

/// The file extensions a configuration folder is searched for (libcni's, in its order).
pub const CONF_EXTENSIONS: [&str; 3] = ["conf", "conflist", "json"];

/// One network: a checked conflist.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfList {
    /// The file it was read from.
    pub path: PathBuf,
    /// The spec version the plugins are spoken to in.
    pub cni_version: String,
    pub name: String,
    /// `disableCheck`: CHECK is skipped for this network.
    pub disable_check: bool,
    pub plugins: Vec<PluginConf>,
    /// The whole list as read, kept with a cached result so that DEL and CHECK later run with
    /// the configuration the ADD ran with.
    pub raw: Value,
}

/// One plugin of a list.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConf {
    /// `type`: the plugin binary's file name.
    pub plugin_type: String,
    /// The plugin's own object as written in the list.
    pub raw: Map<String, Value>,
}

impl ConfList {
    /// Reads the conflist (or single-plugin conf) at `path`.
    pub fn load_file(path: &Path) -> Result<ConfList> {
        let bytes =
            std::fs::read(path).map_err(|e| Error::conf(path, format!("cannot read: {e}")))?;
        let is_list = path.extension().is_some_and(|ext| ext == "conflist");
        ConfList::from_bytes(path, &bytes, is_list)
    }

    /// The network of the folder `dir`: its first configuration file in name order.
    pub fn load_dir(dir: &Path) -> Result<ConfList> {
        let files = conf_files(dir)?;
        let first = files.first().ok_or_else(|| Error::NoConf {
            dir: dir.to_owned(),
        })?;
        ConfList::load_file(first)
    }

    /// Reads a conflist from `bytes`; `path` names it in errors. A `.conf`/`.json` file
    /// (`is_list` false) may hold a list too; without `plugins` it is one plugin's conf.
    pub fn from_bytes(path: &Path, bytes: &[u8], is_list: bool) -> Result<ConfList> {
        let raw: Value = serde_json::from_slice(bytes)
            .map_err(|e| Error::conf(path, format!("not valid JSON: {e}")))?;
        let Value::Object(object) = &raw else {
            return Err(Error::conf(path, "not a JSON object"));
        };
        if is_list || object.contains_key("plugins") {
            ConfList::from_list(path, object, raw.clone())
        } else {
            ConfList::from_single(path, object)
        }
    }

    fn from_list(path: &Path, object: &Map<String, Value>, raw: Value) -> Result<ConfList> {
        let name = required_string(path, object, "name")?;
        check_network_name(&name).map_err(|problem| Error::conf(path, problem))?;
        let cni_version = list_version(path, object)?;
        let disable_check = match object.get("disableCheck") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(Error::conf(
                    path,
                    format!("\"disableCheck\" must be true or false, not {other}"),
                ))
            }
        };
        let plugins = match object.get("plugins") {
            Some(Value::Array(plugins)) if !plugins.is_empty() => plugins,
            Some(Value::Array(_)) => return Err(Error::conf(path, "\"plugins\" is empty")),
            Some(_) => return Err(Error::conf(path, "\"plugins\" must be a list")),
            None => return Err(Error::conf(path, "no \"plugins\" list")),
        };
        let plugins = plugins
            .iter()
            .enumerate()
            .map(|(i, plugin)| plugin_conf(path, i, plugin))
            .collect::<Result<Vec<_>>>()?;
        Ok(ConfList {
            path: path.to_owned(),
            cni_version,
            name,
            disable_check,
            plugins,
            raw,
        })
    }

    /// A single-plugin conf becomes a list of one, as libcni's `ConfListFromConf` does.
    fn from_single(path: &Path, object: &Map<String, Value>) -> Result<ConfList> {
        let mut list = Map::new();
        for key in ["cniVersion", "name"] {
            if let Some(value) = object.get(key) {
                list.insert(key.to_owned(), value.clone());
            }
        }
        list.insert(
            "plugins".to_owned(),
            Value::Array(vec![Value::Object(object.clone())]),
        );
        let raw = Value::Object(list);
        let Value::Object(list) = &raw else {
            unreachable!("built as an object")
        };
        ConfList::from_list(path, list, raw.clone())
    }

    /// What plugin `index` gets on stdin: its own object plus the list's `cniVersion` and
    /// `name`, `runtimeConfig` with the capability arguments it declared (`capabilities:
    /// {"portMappings": true}`) and the runtime offers, and `prevResult` when there is one.
    pub fn plugin_stdin(
        &self,
        index: usize,
        prev_result: Option<&Value>,
        capability_args: &Map<String, Value>,
    ) -> Vec<u8> {
        let plugin = &self.plugins[index];
        let mut conf = plugin.raw.clone();
        conf.insert("cniVersion".to_owned(), self.cni_version.clone().into());
        conf.insert("name".to_owned(), self.name.clone().into());
        let runtime_config: Map<String, Value> = capability_args
            .iter()
            .filter(|(capability, _)| plugin.has_capability(capability))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !runtime_config.is_empty() {
            conf.insert("runtimeConfig".to_owned(), Value::Object(runtime_config));
        }
        if let Some(prev) = prev_result {
            conf.insert("prevResult".to_owned(), prev.clone());
        }
        serde_json::to_vec(&Value::Object(conf)).expect("a JSON object serializes")
    }

    /// Whether some plugin of the list declares `capability` (`portMappings`...).
    pub fn declares(&self, capability: &str) -> bool {
        self.plugins.iter().any(|p| p.has_capability(capability))
    }

    /// Whether plugin `index` can be left out of a run because, given `capability_args`, it
    /// would do nothing: a `portmap` plugin offered no port mappings answers ADD with its
    /// prevResult unchanged and DEL and CHECK with success, touching nothing (portmap v1.1.1,
    /// `main.go`: `if len(netConf.RuntimeConfig.PortMaps) == 0`). Skipping it saves a Go
    /// program's start for every pod without a host port; libcni would run it anyway.
    pub fn idle(&self, index: usize, capability_args: &Map<String, Value>) -> bool {
        let plugin = &self.plugins[index];
        plugin.plugin_type == "portmap"
            && capability_args
                .get(PORT_MAPPINGS)
                .and_then(Value::as_array)
                .is_none_or(|mappings| mappings.is_empty())
    }

    /// Whether this list's version has the CHECK command and DEL's prevResult (0.4.0 and later).
    pub fn has_check(&self) -> bool {
        version_cmp(&self.cni_version, "0.4.0") != Ordering::Less
    }
}

impl PluginConf {
    fn has_capability(&self, capability: &str) -> bool {
        self.raw
            .get("capabilities")
            .and_then(|caps| caps.get(capability))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// The configuration files of `dir` in name order; none when `dir` does not exist.
pub fn conf_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("reading the CNI config folder", dir, e)),
        Ok(entries) => entries,
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("reading the CNI config folder", dir, e))?;
        let path = entry.path();
        let wanted = path
            .extension()
            .and_then(|ext| ext.to_str())
            .is_some_and(|ext| CONF_EXTENSIONS.contains(&ext));
        if wanted && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn plugin_conf(path: &Path, index: usize, plugin: &Value) -> Result<PluginConf> {
    let Value::Object(raw) = plugin else {
        return Err(Error::conf(
            path,
            format!("plugin {index} is not a JSON object"),
        ));
    };
    let plugin_type = match raw.get("type") {
        Some(Value::String(t)) if !t.is_empty() => t.clone(),
        _ => {
            return Err(Error::conf(
                path,
                format!("plugin {index} has no \"type\" (the plugin binary's name)"),
            ))
        }
    };
    if plugin_type.contains('/') || plugin_type == "." || plugin_type == ".." {
        return Err(Error::conf(
            path,
            format!("plugin {index}: type {plugin_type:?} is not a file name"),
        ));
    }
    if let Some(caps) = raw.get("capabilities") {
        if !caps.is_object() {
            return Err(Error::conf(
                path,
                format!("plugin {index} ({plugin_type}): \"capabilities\" must be an object"),
            ));
        }
    }
    Ok(PluginConf {
        plugin_type,
        raw: raw.clone(),
    })
}

fn required_string(path: &Path, object: &Map<String, Value>, key: &str) -> Result<String> {
    match object.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(Error::conf(path, format!("\"{key}\" is empty"))),
        Some(other) => Err(Error::conf(
            path,
            format!("\"{key}\" must be a string, not {other}"),
        )),
        None => Err(Error::conf(path, format!("no \"{key}\""))),
    }
}

/// `cniVersion`, or with 1.1's `cniVersions` the highest of them this client speaks.
fn list_version(path: &Path, object: &Map<String, Value>) -> Result<String> {
    if let Some(Value::Array(versions)) = object.get("cniVersions") {
        let best = versions
            .iter()
            .filter_map(Value::as_str)
            .filter(|v| SUPPORTED_VERSIONS.contains(v))
            .max_by(|a, b| version_cmp(a, b));
        if let Some(best) = best {
            return Ok(best.to_owned());
        }
    }
    let version = required_string(path, object, "cniVersion")?;
    if !SUPPORTED_VERSIONS.contains(&version.as_str()) {
        return Err(Error::conf(
            path,
            format!(
                "cniVersion {version:?} is not supported (supported: {})",
                SUPPORTED_VERSIONS.join(", ")
            ),
        ));
    }
    Ok(version)
}

/// Orders `x.y.z` versions numerically.
pub fn version_cmp(a: &str, b: &str) -> Ordering {
    let parts = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parts(a).cmp(&parts(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfList> {
        ConfList::from_bytes(
            Path::new("/etc/cni/net.d/10-test.conflist"),
            text.as_bytes(),
            true,
        )
    }

    const BRIDGE_LIST: &str = r#"{
        "cniVersion": "1.0.0", "name": "podlab",
        "plugins": [
            {"type": "bridge", "bridge": "podlab0", "ipam": {"type": "host-local"}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]}"#;

    #[test]
    fn a_list_is_read_with_its_plugins() {
        let list = parse(BRIDGE_LIST).unwrap();
        assert_eq!(list.name, "podlab");
        assert_eq!(list.cni_version, "1.0.0");
        let types: Vec<&str> = list
            .plugins
            .iter()
            .map(|p| p.plugin_type.as_str())
            .collect();
        assert_eq!(types, ["bridge", "portmap"]);
        assert!(list.has_check());
        assert!(!list.disable_check);
    }

    #[test]
    fn portmap_is_idle_without_port_mappings_and_nothing_else_is() {
        let list = parse(BRIDGE_LIST).unwrap();
        let mut caps = Map::new();
        assert!(list.declares(PORT_MAPPINGS) && !list.declares("bandwidth"));
        assert!(!list.idle(0, &caps), "bridge always runs");
        assert!(list.idle(1, &caps), "portmap without mappings does nothing");
        caps.insert(PORT_MAPPINGS.to_owned(), serde_json::json!([]));
        assert!(list.idle(1, &caps));
        caps.insert(
            PORT_MAPPINGS.to_owned(),
            serde_json::json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        );
        assert!(!list.idle(1, &caps));
    }

    #[test]
    fn plugin_stdin_has_name_version_runtime_config_and_prev_result() {
        let list = parse(BRIDGE_LIST).unwrap();
        let mut caps = Map::new();
        caps.insert(
            "portMappings".to_owned(),
            serde_json::json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        );
        caps.insert(
            "bandwidth".to_owned(),
            serde_json::json!({"ingressRate": 1}),
        );
        let prev = serde_json::json!({"cniVersion": "1.0.0", "ips": []});

        let first: Value = serde_json::from_slice(&list.plugin_stdin(0, None, &caps)).unwrap();
        assert_eq!(first["name"], "podlab");
        assert_eq!(first["cniVersion"], "1.0.0");
        assert_eq!(first["bridge"], "podlab0");
        assert!(first.get("prevResult").is_none());
        assert!(
            first.get("runtimeConfig").is_none(),
            "bridge declared no capabilities"
        );

        let second: Value =
            serde_json::from_slice(&list.plugin_stdin(1, Some(&prev), &caps)).unwrap();
        assert_eq!(second["prevResult"], prev);
        assert_eq!(second["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
        assert!(
            second["runtimeConfig"].get("bandwidth").is_none(),
            "only declared capabilities are passed"
        );
    }

    #[test]
    fn broken_lists_name_the_file_and_the_problem() {
        let cases = [
            ("{\"cniVersion\": \"1.0.0\",", "not valid JSON"),
            ("[1, 2]", "not a JSON object"),
            (
                r#"{"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}]}"#,
                "no \"name\"",
            ),
            (
                r#"{"cniVersion": "1.0.0", "name": "pod lab", "plugins": [{"type": "x"}]}"#,
                "network name",
            ),
            (
                r#"{"name": "n", "plugins": [{"type": "bridge"}]}"#,
                "no \"cniVersion\"",
            ),
            (
                r#"{"cniVersion": "9.9.9", "name": "n", "plugins": [{"type": "x"}]}"#,
                "not supported",
            ),
            (r#"{"cniVersion": "1.0.0", "name": "n"}"#, "no \"plugins\""),
            (
                r#"{"cniVersion": "1.0.0", "name": "n", "plugins": []}"#,
                "empty",
            ),
            (
                r#"{"cniVersion": "1.0.0", "name": "n", "plugins": [{"bridge": "b"}]}"#,
                "plugin 0 has no \"type\"",
            ),
            (
                r#"{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "../bin/sh"}]}"#,
                "not a file name",
            ),
        ];
        for (text, problem) in cases {
            let err = parse(text).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, Error::Conf { .. }), "{message}");
            assert!(message.contains("10-test.conflist"), "{message}");
            assert!(message.contains(problem), "{text}: {message}");
        }
    }

    #[test]
    fn a_single_conf_is_a_list_of_one_and_cni_versions_picks_the_highest() {
        let single = ConfList::from_bytes(
            Path::new("87-podman.conf"),
            br#"{"cniVersion": "0.4.0", "name": "old", "type": "bridge", "bridge": "cni0"}"#,
            false,
        )
        .unwrap();
        assert_eq!(single.plugins.len(), 1);
        assert_eq!(single.plugins[0].raw["bridge"], "cni0");
        assert_eq!(single.name, "old");

        let list = parse(
            r#"{"cniVersions": ["0.4.0", "1.1.0", "2.0.0"], "cniVersion": "0.4.0", "name": "n",
                "plugins": [{"type": "loopback"}]}"#,
        )
        .unwrap();
        assert_eq!(list.cni_version, "1.1.0");
        let old = parse(r#"{"cniVersion": "0.3.1", "name": "n", "plugins": [{"type": "x"}]}"#);
        assert!(!old.unwrap().has_check());
    }

    #[test]
    fn the_first_file_by_name_is_the_network() {
        let dir = std::env::temp_dir().join(format!("podlab-cni-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("README.md"), "not a conf").unwrap();
        std::fs::write(
            dir.join("20-second.conflist"),
            r#"{"cniVersion": "1.0.0", "name": "second", "plugins": [{"type": "x"}]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("10-first.conflist"),
            r#"{"cniVersion": "1.0.0", "name": "first", "plugins": [{"type": "x"}]}"#,
        )
        .unwrap();
        let list = ConfList::load_dir(&dir);
        let empty = ConfList::load_dir(&dir.join("missing"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(list.unwrap().name, "first");
        assert!(matches!(empty, Err(Error::NoConf { .. })));
    }

    #[test]
    fn versions_compare_as_numbers() {
        assert_eq!(version_cmp("0.10.0", "0.4.0"), Ordering::Greater);
        assert_eq!(version_cmp("1.0.0", "1.0.0"), Ordering::Equal);
        assert_eq!(version_cmp("0.3.1", "0.4.0"), Ordering::Less);
    }
}
