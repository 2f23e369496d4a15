//! Where a registry's content is fetched from, and how: containerd's `certs.d` folders
//! (`docs/hosts.md` of containerd), read the same way.
//!
//! ```text
//! /etc/podlab/certs.d/            ($PODLAB_REGISTRY_CONFIG names another folder)
//!   docker.io/hosts.toml          for images named docker.io/...
//!   127.0.0.1:5443/hosts.toml     a registry on HOST:PORT has the folder HOST:PORT
//!   127.0.0.1:5443/ca.crt         without hosts.toml: every *.crt is a CA of the registry
//!   _default/hosts.toml           for registries that have no folder of their own
//! ```
//!
//! ```toml
//! server = "https://registry-1.docker.io"      # the upstream, tried last (default https://HOST)
//!
//! [host."http://127.0.0.1:5000"]                # mirrors, tried first, in file order
//!   capabilities = ["pull", "resolve"]          # resolve: may turn a tag into a digest
//!   skip_verify = false
//!   ca = "/etc/podlab/certs.d/mirror-ca.pem"    # a path or a list; relative to the folder
//! ```
//!
//! Plain HTTP is used only for a host written `http://...` here; everything else is HTTPS with
//! the system's roots plus the `ca` files. Without any folder, a registry is `https://HOST`
//! (`https://registry-1.docker.io` for `docker.io`), as containerd does.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The default folder of per-registry host configurations.
pub const DEFAULT_CONFIG_DIR: &str = "/etc/podlab/certs.d";
/// The variable that names another folder.
pub const CONFIG_DIR_VAR: &str = "PODLAB_REGISTRY_CONFIG";

/// `$PODLAB_REGISTRY_CONFIG`, else `/etc/podlab/certs.d`.
pub fn config_dir() -> PathBuf {
    std::env::var_os(CONFIG_DIR_VAR)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_DIR))
}

/// One place to fetch from: a mirror or the registry itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryHost {
    /// `https` unless the configuration writes the host `http://...`.
    pub plain_http: bool,
    /// `HOST[:PORT]`, with any path prefix before `/v2` (`mirror.example/cache`).
    pub host: String,
    /// Whether the host may turn a tag into a digest (`resolve`); all hosts may serve content
    /// by digest (`pull`).
    pub resolve: bool,
    pub pull: bool,
    /// PEM files of CAs to trust besides the system's.
    pub ca: Vec<PathBuf>,
    pub skip_verify: bool,
    /// A mirror (a `[host]` entry) rather than the registry (`server`).
    pub mirror: bool,
}

impl RegistryHost {
    pub fn url(&self) -> String {
        let scheme = if self.plain_http { "http" } else { "https" };
        format!("{scheme}://{}", self.host)
    }
}

#[derive(Deserialize, Default)]
struct HostsFile {
    server: Option<String>,
    capabilities: Option<Vec<String>>,
    ca: Option<OneOrMany>,
    skip_verify: Option<bool>,
    #[serde(default)]
    host: toml::Table,
}

#[derive(Deserialize, Default)]
struct HostEntry {
    capabilities: Option<Vec<String>>,
    ca: Option<OneOrMany>,
    skip_verify: Option<bool>,
    #[serde(default)]
    override_path: bool,
}

#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn paths(&self, base: &Path) -> Vec<PathBuf> {
        let list = match self {
            OneOrMany::One(one) => vec![one.clone()],
            OneOrMany::Many(many) => many.clone(),
        };
        list.iter().map(|p| base.join(p)).collect()
    }
}

/// The hosts to try for `registry` (a reference's domain, `HOST[:PORT]`), mirrors first, the
/// registry itself last. Errors name the file and what is wrong in it.
pub fn hosts_for(config_dir: &Path, registry: &str) -> Result<Vec<RegistryHost>, String> {
    let folder = [registry, "_default"]
        .iter()
        .map(|name| config_dir.join(name))
        .find(|dir| dir.is_dir());
    let default_server = match registry {
        "docker.io" => "https://registry-1.docker.io".to_owned(),
        other => format!("https://{other}"),
    };
    let Some(folder) = folder else {
        return Ok(vec![upstream(&default_server, None, Vec::new(), false)?]);
    };
    let file = folder.join("hosts.toml");
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // docker's layout: CA files beside each other, no hosts.toml.
            return Ok(vec![upstream(
                &default_server,
                None,
                crt_files(&folder),
                false,
            )?]);
        }
        Err(e) => return Err(format!("reading {}: {e}", file.display())),
    };
    let parsed: HostsFile = toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|span| text[..span.start.min(text.len())].lines().count().max(1));
        match line {
            Some(line) => format!("{} line {line}: {}", file.display(), e.message()),
            None => format!("{}: {}", file.display(), e.message()),
        }
    })?;
    let mut hosts = Vec::new();
    for (url, entry) in &parsed.host {
        let entry: HostEntry = entry.clone().try_into().map_err(|e: toml::de::Error| {
            format!("{}: [host.{url:?}]: {}", file.display(), e.message())
        })?;
        if entry.override_path {
            return Err(format!(
                "{}: [host.{url:?}]: override_path is not supported by podlab",
                file.display()
            ));
        }
        let mut host =
            parse_url(url).map_err(|e| format!("{}: [host.{url:?}]: {e}", file.display()))?;
        host.mirror = true;
        if let Some(caps) = &entry.capabilities {
            (host.pull, host.resolve) = capabilities(caps)
                .map_err(|e| format!("{}: [host.{url:?}]: {e}", file.display()))?;
        }
        host.ca = entry.ca.map(|c| c.paths(&folder)).unwrap_or_default();
        host.skip_verify = entry.skip_verify.unwrap_or(false);
        hosts.push(host);
    }
    let server = parsed.server.as_deref().unwrap_or(&default_server);
    let mut last = upstream(
        server,
        parsed.capabilities.as_deref(),
        parsed.ca.map(|c| c.paths(&folder)).unwrap_or_default(),
        parsed.skip_verify.unwrap_or(false),
    )
    .map_err(|e| format!("{}: server: {e}", file.display()))?;
    if last.ca.is_empty() {
        last.ca = crt_files(&folder);
    }
    hosts.push(last);
    Ok(hosts)
}

fn upstream(
    server: &str,
    caps: Option<&[String]>,
    ca: Vec<PathBuf>,
    skip_verify: bool,
) -> Result<RegistryHost, String> {
    let mut host = parse_url(server)?;
    if let Some(caps) = caps {
        (host.pull, host.resolve) = capabilities(caps)?;
    }
    host.ca = ca;
    host.skip_verify = skip_verify;
    Ok(host)
}

fn capabilities(caps: &[String]) -> Result<(bool, bool), String> {
    let mut pull = false;
    let mut resolve = false;
    for cap in caps {
        match cap.as_str() {
            "pull" => pull = true,
            "resolve" => resolve = true,
            "push" => {}
            other => {
                return Err(format!(
                    "unknown capability {other:?} (pull, resolve, push)"
                ))
            }
        }
    }
    Ok((pull, resolve))
}

/// `https://h:5000/prefix/v2` → host `h:5000/prefix`; the scheme must be given.
fn parse_url(url: &str) -> Result<RegistryHost, String> {
    let (plain_http, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (true, rest)
    } else {
        return Err(format!("{url:?} is not an http:// or https:// URL"));
    };
    let rest = rest.trim_end_matches('/');
    let rest = rest.strip_suffix("/v2").unwrap_or(rest);
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{url:?} names no host"));
    }
    Ok(RegistryHost {
        plain_http,
        host: rest.to_owned(),
        resolve: true,
        pull: true,
        ca: Vec::new(),
        skip_verify: false,
        mirror: false,
    })
}

/// `*.crt` files of a docker-style certs.d folder, sorted.
fn crt_files(folder: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(folder)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "crt"))
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_folder_means_https_to_the_registry() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = hosts_for(dir.path(), "docker.io").unwrap();
        assert_eq!(hosts.len(), 1);
        assert_eq!(hosts[0].url(), "https://registry-1.docker.io");
        let hosts = hosts_for(dir.path(), "127.0.0.1:5443").unwrap();
        assert_eq!(hosts[0].url(), "https://127.0.0.1:5443");
        assert!(hosts[0].resolve && hosts[0].pull && !hosts[0].mirror);
    }

    #[test]
    fn mirrors_come_first_in_file_order_then_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("docker.io");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(
            folder.join("hosts.toml"),
            r#"
server = "https://registry-1.docker.io"
[host."http://127.0.0.1:5000/v2"]
  capabilities = ["pull"]
[host."https://b.example/cache"]
  capabilities = ["pull", "resolve"]
  ca = ["ca.pem", "/abs/other.pem"]
  skip_verify = true
"#,
        )
        .unwrap();
        let hosts = hosts_for(dir.path(), "docker.io").unwrap();
        let urls: Vec<String> = hosts.iter().map(RegistryHost::url).collect();
        assert_eq!(
            urls,
            [
                "http://127.0.0.1:5000",
                "https://b.example/cache",
                "https://registry-1.docker.io"
            ]
        );
        assert!(hosts[0].plain_http && hosts[0].pull && !hosts[0].resolve);
        assert_eq!(
            hosts[1].ca,
            [folder.join("ca.pem"), PathBuf::from("/abs/other.pem")]
        );
        assert!(hosts[1].skip_verify && hosts[1].mirror);
        assert!(!hosts[2].mirror && !hosts[2].plain_http);
    }

    #[test]
    fn host_port_folders_and_crt_files() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("127.0.0.1:5443");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("ca.crt"), "pem").unwrap();
        let hosts = hosts_for(dir.path(), "127.0.0.1:5443").unwrap();
        assert_eq!(hosts[0].ca, [folder.join("ca.crt")]);
        assert_eq!(
            hosts_for(dir.path(), "127.0.0.1:5444").unwrap()[0].ca,
            Vec::<PathBuf>::new()
        );
    }

    #[test]
    fn bad_files_name_the_file_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("r.example");
        std::fs::create_dir(&folder).unwrap();
        let file = folder.join("hosts.toml");
        for (text, says) in [
            ("server = 5", "line 1: invalid type: integer"),
            ("[host.\"ftp://x\"]\n", "not an http"),
            (
                "[host.\"https://x\"]\ncapabilities = [\"fly\"]",
                "unknown capability",
            ),
            (
                "[host.\"https://x\"]\noverride_path = true",
                "override_path",
            ),
        ] {
            std::fs::write(&file, text).unwrap();
            let err = hosts_for(dir.path(), "r.example").unwrap_err();
            assert!(
                err.contains("hosts.toml") && err.contains(says),
                "{text}: {err}"
            );
        }
    }
}
