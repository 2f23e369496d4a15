//! What a user has done, kept in `$XDG_STATE_HOME/podlab/progress.json` (default
//! `~/.local/state/podlab`): per lab, when it was started, how many checks and hints, when it
//! first passed, and whether `solve` did it. `podlab lab status` prints it; `check` without an
//! id checks the lab started last.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Progress {
    /// The lab started last (`check` and `hint` without an id use it).
    #[serde(default)]
    pub current: Option<String>,
    #[serde(default)]
    pub labs: BTreeMap<String, LabProgress>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct LabProgress {
    /// Seconds since the epoch.
    pub started: Option<u64>,
    #[serde(default)]
    pub checks: u32,
    /// The highest hint number shown.
    #[serde(default)]
    pub hints: u32,
    /// When a check first passed.
    pub passed: Option<u64>,
    /// Whether the reference solution was run (`solve`).
    #[serde(default)]
    pub solved: bool,
}

impl Progress {
    pub fn path(state: &Path) -> PathBuf {
        state.join("progress.json")
    }

    /// The progress kept under `state`, empty when there is none yet.
    pub fn load(state: &Path) -> Result<Progress> {
        let path = Progress::path(state);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("reading {} (remove it to start over)", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Progress::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Writes it whole (a new file renamed over the old one).
    pub fn save(&self, state: &Path) -> Result<()> {
        std::fs::create_dir_all(state).with_context(|| format!("creating {}", state.display()))?;
        let path = Progress::path(state);
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
    }

    pub fn lab(&mut self, id: &str) -> &mut LabProgress {
        self.labs.entry(id.to_string()).or_default()
    }
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_survives_a_save_and_a_load() {
        let dir = std::env::temp_dir().join(format!("podlab-progress-{}", std::process::id()));
        assert!(Progress::load(&dir).unwrap().labs.is_empty());
        let mut progress = Progress {
            current: Some("01-pod-by-hand".into()),
            ..Progress::default()
        };
        progress.lab("01-pod-by-hand").checks = 2;
        progress.lab("01-pod-by-hand").passed = Some(7);
        progress.save(&dir).unwrap();
        let back = Progress::load(&dir).unwrap();
        assert_eq!(back.current.as_deref(), Some("01-pod-by-hand"));
        assert_eq!(back.labs["01-pod-by-hand"].checks, 2);
        assert_eq!(back.labs["01-pod-by-hand"].passed, Some(7));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
