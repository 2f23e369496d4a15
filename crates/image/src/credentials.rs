//! Registry credentials from docker's `config.json` (the format of `docker login`, `podman
//! login --authfile`, `skopeo login` and of Kubernetes' `kubernetes.io/dockerconfigjson`
//! Secrets): `{"auths": {"HOST": {"auth": base64("user:password")}}}`.
//!
//! The file is `$REGISTRY_AUTH_FILE` when set, else `~/.docker/config.json`, as podman and
//! skopeo look. A key may be written `HOST`, `HOST:PORT`, `https://HOST/v1/` (docker's key for
//! Docker Hub is `https://index.docker.io/v1/`): all name the same registry.
//!
//! A password never appears in a `Debug` or `Display` of these types, nor in any error.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

/// A user name and password (or a registry token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    Basic {
        username: String,
        password: String,
    },
    /// docker's `registrytoken`: sent as a bearer token as it is.
    Token(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Basic { username, .. } => {
                write!(
                    f,
                    "Basic {{ username: {username:?}, password: <redacted> }}"
                )
            }
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// The `auths` of a docker config.json, keyed by normalised registry host.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DockerConfig {
    auths: BTreeMap<String, Credentials>,
}

impl fmt::Debug for DockerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DockerConfig")
            .field("registries", &self.auths.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[derive(Deserialize)]
struct File {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

impl DockerConfig {
    /// Parses a config.json (or a dockerconfigjson Secret's `.dockerconfigjson` value). Errors
    /// say which key is malformed, never what it holds.
    pub fn parse(json: &[u8]) -> Result<DockerConfig, String> {
        let file: File = serde_json::from_slice(json).map_err(|e| {
            // serde's message quotes no value for a syntax error, but may for a type error;
            // only its position is kept.
            format!(
                "not a docker config.json (line {}, column {})",
                e.line(),
                e.column()
            )
        })?;
        let mut auths = BTreeMap::new();
        for (key, entry) in file.auths {
            let credentials = if let Some(token) = entry.registrytoken.filter(|t| !t.is_empty()) {
                Credentials::Token(token)
            } else if let Some(auth) = entry.auth.filter(|a| !a.is_empty()) {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .ok()
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .ok_or_else(|| format!("auths[{key:?}].auth is not base64 of user:password"))?;
                let (username, password) = decoded.split_once(':').ok_or_else(|| {
                    format!("auths[{key:?}].auth has no ':' between user and password")
                })?;
                Credentials::Basic {
                    username: username.to_owned(),
                    password: password.to_owned(),
                }
            } else if let (Some(username), Some(password)) = (entry.username, entry.password) {
                Credentials::Basic { username, password }
            } else {
                continue; // an entry docker's credential helpers fill in: none here
            };
            auths.insert(normalize_host(&key), credentials);
        }
        Ok(DockerConfig { auths })
    }

    /// Reads the file at `path`; a missing file is an empty config.
    pub fn load(path: &Path) -> Result<DockerConfig, String> {
        match std::fs::read(path) {
            Ok(bytes) => Self::parse(&bytes).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DockerConfig::default()),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    /// The config podman and skopeo would use: `$REGISTRY_AUTH_FILE`, else
    /// `~/.docker/config.json`.
    pub fn load_default() -> Result<DockerConfig, String> {
        match default_path() {
            Some(path) => Self::load(&path),
            None => Ok(DockerConfig::default()),
        }
    }

    /// The credentials for registry `host` (`docker.io`, `HOST:PORT`), if any.
    pub fn credentials_for(&self, host: &str) -> Option<&Credentials> {
        self.auths.get(&normalize_host(host))
    }

    pub fn is_empty(&self) -> bool {
        self.auths.is_empty()
    }
}

/// `$REGISTRY_AUTH_FILE`, else `$HOME/.docker/config.json`.
pub fn default_path() -> Option<PathBuf> {
    if let Some(file) = std::env::var_os("REGISTRY_AUTH_FILE").filter(|f| !f.is_empty()) {
        return Some(PathBuf::from(file));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".docker/config.json"))
}

/// `https://index.docker.io/v1/` → `docker.io`; `http://h:5000/` → `h:5000`.
fn normalize_host(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key);
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".to_owned()
        }
        other => other.to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_keys_and_host_ports_are_found() {
        let auth = base64::engine::general_purpose::STANDARD.encode("me:s3cret:with:colons");
        let json = format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{auth}"}},
                 "127.0.0.1:5443":{{"username":"u","password":"p"}},
                 "helper.example":{{}}}}}}"#
        );
        let config = DockerConfig::parse(json.as_bytes()).unwrap();
        assert_eq!(
            config.credentials_for("docker.io"),
            Some(&Credentials::Basic {
                username: "me".into(),
                password: "s3cret:with:colons".into()
            })
        );
        assert!(config.credentials_for("127.0.0.1:5443").is_some());
        assert!(config.credentials_for("127.0.0.1").is_none());
        assert!(config.credentials_for("helper.example").is_none());
    }

    #[test]
    fn passwords_are_never_shown() {
        let json = br#"{"auths":{"r.example":{"auth":"dTpodW50ZXIy"}}}"#; // u:hunter2
        let config = DockerConfig::parse(json).unwrap();
        let shown = format!("{config:?} {:?}", config.credentials_for("r.example"));
        assert!(!shown.contains("hunter2"), "{shown}");
        let bad =
            DockerConfig::parse(br#"{"auths":{"r.example":{"auth":"aHVudGVyMg=="}}}"#).unwrap_err();
        assert!(
            !bad.contains("hunter2") && !bad.contains("aHVudGVyMg"),
            "{bad}"
        );
    }
}
