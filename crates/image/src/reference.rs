//! Image names as docker and containerd normalise them: `busybox` is
//! `docker.io/library/busybox:latest`, `me/app:1` is `docker.io/me/app:1`, and a first component
//! with a `.` or `:` (or `localhost`) is a registry host, kept as it is.

use std::fmt;

use crate::digest::Digest;
use crate::error::{Error, Result};

const DEFAULT_DOMAIN: &str = "docker.io";
const LEGACY_DOMAIN: &str = "index.docker.io";
const OFFICIAL_PREFIX: &str = "library/";
const DEFAULT_TAG: &str = "latest";

/// A fully qualified image reference: registry domain, repository path, tag and/or digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub domain: String,
    pub path: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parses and normalises `name`. No tag and no digest means `:latest`.
    pub fn parse(name: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidReference {
            name: name.to_owned(),
            reason: reason.to_owned(),
        };
        if name.is_empty() {
            return Err(invalid("empty name"));
        }
        let (rest, digest) = match name.split_once('@') {
            Some((rest, digest)) => (rest, Some(Digest::parse(digest)?)),
            None => (name, None),
        };
        // A ':' after the last '/' separates the tag; one before it belongs to a host:port.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(tag) = tag {
            if !valid_tag(tag) {
                return Err(invalid(
                    "a tag is 1 to 128 of [A-Za-z0-9_.-], not starting with . or -",
                ));
            }
        }
        let (domain, path) = match repository.split_once('/') {
            Some((first, rest)) if is_domain(first) => (first, rest.to_owned()),
            _ => (DEFAULT_DOMAIN, repository.to_owned()),
        };
        let domain = if domain == LEGACY_DOMAIN {
            DEFAULT_DOMAIN
        } else {
            domain
        };
        let path = if domain == DEFAULT_DOMAIN && !path.contains('/') {
            format!("{OFFICIAL_PREFIX}{path}")
        } else {
            path
        };
        if path.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(invalid("repository names must be lowercase"));
        }
        if !path.split('/').all(valid_path_component) {
            return Err(invalid(
                "each part of the repository path is lowercase letters and digits, \
                 joined by '.', '_', '__' or '-'",
            ));
        }
        let tag = match (tag, &digest) {
            (Some(tag), _) => Some(tag.to_owned()),
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_TAG.to_owned()),
        };
        Ok(Reference {
            domain: domain.to_owned(),
            path,
            tag,
            digest,
        })
    }

    /// `domain/path`, without tag or digest.
    pub fn repository(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// The name docker shows: `busybox:latest` rather than `docker.io/library/busybox:latest`.
    pub fn familiar(&self) -> String {
        let repository = if self.domain == DEFAULT_DOMAIN {
            self.path
                .strip_prefix(OFFICIAL_PREFIX)
                .unwrap_or(&self.path)
                .to_owned()
        } else {
            self.repository()
        };
        self.with_suffix(repository)
    }

    fn with_suffix(&self, mut text: String) -> String {
        if let Some(tag) = &self.tag {
            text.push(':');
            text.push_str(tag);
        }
        if let Some(digest) = &self.digest {
            text.push('@');
            text.push_str(&digest.to_string());
        }
        text
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.with_suffix(self.repository()))
    }
}

/// The normalised form of `name`: `busybox` → `docker.io/library/busybox:latest`.
pub fn normalize(name: &str) -> Result<String> {
    Reference::parse(name).map(|r| r.to_string())
}

/// The short form docker prints for a normalised name.
pub fn familiar(name: &str) -> String {
    Reference::parse(name).map_or_else(|_| name.to_owned(), |r| r.familiar())
}

fn is_domain(component: &str) -> bool {
    component.contains('.') || component.contains(':') || component == "localhost"
}

fn valid_tag(tag: &str) -> bool {
    let mut chars = tag.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    first_ok
        && tag.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn valid_path_component(component: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !component.starts_with(alnum) || !component.ends_with(alnum) {
        return false;
    }
    // Separators are '.', '_', '__' or a run of '-', always between alphanumerics.
    let mut run = String::new();
    for c in component.chars() {
        if alnum(c) {
            let ok = run.is_empty()
                || run == "."
                || run == "_"
                || run == "__"
                || run.chars().all(|c| c == '-');
            if !ok {
                return false;
            }
            run.clear();
        } else if matches!(c, '.' | '_' | '-') {
            run.push(c);
        } else {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_get_the_docker_hub_and_latest() {
        for (given, full) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("library/busybox", "docker.io/library/busybox:latest"),
            ("docker.io/busybox", "docker.io/library/busybox:latest"),
            (
                "index.docker.io/library/busybox:x",
                "docker.io/library/busybox:x",
            ),
            ("me/app", "docker.io/me/app:latest"),
            ("quay.io/org/app:v1", "quay.io/org/app:v1"),
            ("localhost/app", "localhost/app:latest"),
            ("localhost:5000/app", "localhost:5000/app:latest"),
            ("registry:5000/a/b:c", "registry:5000/a/b:c"),
        ] {
            assert_eq!(normalize(given).unwrap(), full, "{given}");
        }
    }

    #[test]
    fn digests_keep_no_default_tag() {
        let digest = Digest::of(b"m");
        let name = format!("busybox@{digest}");
        let r = Reference::parse(&name).unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.to_string(), format!("docker.io/library/busybox@{digest}"));
    }

    #[test]
    fn familiar_names_drop_what_docker_drops() {
        assert_eq!(
            familiar("docker.io/library/busybox:latest"),
            "busybox:latest"
        );
        assert_eq!(familiar("docker.io/me/app:1"), "me/app:1");
        assert_eq!(familiar("quay.io/a/b:c"), "quay.io/a/b:c");
    }

    #[test]
    fn bad_names_are_refused_with_a_reason() {
        for bad in [
            "",
            "Busybox",
            "a/-b",
            "a//b",
            "busybox:",
            "busybox:-x",
            "a b",
        ] {
            let err = normalize(bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidReference { .. }),
                "{bad}: {err}"
            );
        }
    }
}
