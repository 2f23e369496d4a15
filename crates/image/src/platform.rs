//! Platforms (`os/arch[/variant]`) and picking one image out of an index or a Docker manifest
//! list, as containerd's default platform matcher does: the OS and architecture must be equal,
//! and a variant, when the wanted platform names one, too (`arm64` and `arm64/v8` are the same).

use std::fmt;

use serde::Deserialize;

/// A platform as image indexes name them: `linux/amd64`, `linux/arm/v7`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    /// This machine's platform, in Go's names (`x86_64` is `amd64`, `aarch64` is `arm64`).
    pub fn host() -> Platform {
        let (architecture, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", None),
            "x86" => ("386", None),
            "arm" => ("arm", Some("v7")),
            "powerpc64" => ("ppc64le", None),
            "loongarch64" => ("loong64", None),
            other => (other, None),
        };
        Platform {
            os: "linux".into(),
            architecture: architecture.into(),
            variant: variant.map(str::to_owned),
        }
    }

    /// Parses `os/arch` or `os/arch/variant`.
    pub fn parse(text: &str) -> Result<Platform, String> {
        let parts: Vec<&str> = text.split('/').collect();
        let valid = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        match parts.as_slice() {
            [os, arch] if valid(os) && valid(arch) => Ok(Platform {
                os: (*os).into(),
                architecture: (*arch).into(),
                variant: None,
            }),
            [os, arch, variant] if valid(os) && valid(arch) && valid(variant) => Ok(Platform {
                os: (*os).into(),
                architecture: (*arch).into(),
                variant: Some((*variant).into()),
            }),
            _ => Err(format!(
                "invalid platform {text:?}: expected os/arch or os/arch/variant in lowercase, \
                 such as linux/amd64 or linux/arm64/v8"
            )),
        }
    }

    /// Whether an index entry for `offered` serves this platform.
    pub fn matches(&self, offered: &Platform) -> bool {
        if self.os != offered.os || self.architecture != offered.architecture {
            return false;
        }
        let normal = |p: &Platform| match (p.architecture.as_str(), p.variant.as_deref()) {
            ("arm64", None) => Some("v8".to_owned()),
            (_, v) => v.map(str::to_owned),
        };
        match normal(self) {
            None => true,
            wanted => wanted == normal(offered),
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

/// An image index or Docker manifest list, only as far as picking a manifest needs.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct IndexDocument {
    #[serde(default)]
    pub manifests: Vec<IndexEntry>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct IndexEntry {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    #[serde(default)]
    pub platform: Option<EntryPlatform>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct EntryPlatform {
    pub os: String,
    pub architecture: String,
    #[serde(default)]
    pub variant: Option<String>,
}

impl EntryPlatform {
    fn platform(&self) -> Platform {
        Platform {
            os: self.os.clone(),
            architecture: self.architecture.clone(),
            variant: self.variant.clone().filter(|v| !v.is_empty()),
        }
    }
}

impl IndexDocument {
    /// The first entry for `wanted`; else the platforms the index offers, for the error.
    pub fn pick(&self, wanted: &Platform) -> Result<&IndexEntry, Vec<String>> {
        self.manifests
            .iter()
            .find(|e| {
                e.platform
                    .as_ref()
                    .is_some_and(|p| wanted.matches(&p.platform()))
            })
            .ok_or_else(|| {
                self.manifests
                    .iter()
                    .filter_map(|e| e.platform.as_ref().map(|p| p.platform().to_string()))
                    .collect()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_parse_and_print() {
        let p = Platform::parse("linux/arm64/v8").unwrap();
        assert_eq!(p.variant.as_deref(), Some("v8"));
        assert_eq!(p.to_string(), "linux/arm64/v8");
        for bad in ["linux", "linux/", "Linux/amd64", "a/b/c/d", ""] {
            assert!(Platform::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Platform::host().os, "linux");
    }

    #[test]
    fn the_index_entry_of_the_wanted_platform_is_picked() {
        let index: IndexDocument = serde_json::from_str(
            r#"{"manifests":[
              {"mediaType":"m","digest":"sha256:a","platform":{"os":"linux","architecture":"arm","variant":"v6"}},
              {"mediaType":"m","digest":"sha256:b","platform":{"os":"linux","architecture":"arm","variant":"v7"}},
              {"mediaType":"m","digest":"sha256:c","platform":{"os":"linux","architecture":"arm64","variant":"v8"}},
              {"mediaType":"m","digest":"sha256:d","platform":{"os":"linux","architecture":"amd64"}},
              {"mediaType":"m","digest":"sha256:e","platform":{"os":"unknown","architecture":"unknown"}}
            ]}"#,
        )
        .unwrap();
        let pick = |p: &str| {
            index
                .pick(&Platform::parse(p).unwrap())
                .map(|e| e.digest.clone())
        };
        assert_eq!(pick("linux/amd64").unwrap(), "sha256:d");
        assert_eq!(pick("linux/arm/v7").unwrap(), "sha256:b");
        assert_eq!(
            pick("linux/arm").unwrap(),
            "sha256:a",
            "no variant: the first arm"
        );
        assert_eq!(
            pick("linux/arm64").unwrap(),
            "sha256:c",
            "arm64 is arm64/v8"
        );
        let offered = pick("linux/s390x").unwrap_err();
        assert!(offered.contains(&"linux/arm/v7".to_owned()), "{offered:?}");
    }
}
