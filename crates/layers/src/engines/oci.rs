//! runc and crun on one bundle folder: `config.json` from `runc spec`, changed only where it must
//! be (no terminal, an absolute root, the command, a cgroup under the lab's own).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::lab::{run, Lab};
use crate::{tools, Error, Result};

/// A bundle: its folder and its config.
pub struct Bundle {
    pub dir: PathBuf,
}

impl Bundle {
    /// `runc spec` in `dir`, then the changes of [`adapt_spec`].
    pub fn create(dir: &Path, rootfs: &Path, args: &[&str], cgroups_path: &str) -> Result<Bundle> {
        let runc = tools::require(tools::RUNC)?;
        std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
        run(Command::new(runc).arg("spec").arg("--bundle").arg(dir))?;
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io("reading", &path, e))?;
        let spec = adapt_spec(&text, rootfs, args, cgroups_path)?;
        std::fs::write(&path, spec).map_err(|e| Error::io("writing", &path, e))?;
        Ok(Bundle {
            dir: dir.to_path_buf(),
        })
    }

    /// `runc --root STATE run --bundle DIR ID` in the lab (create, start, wait, delete).
    pub fn runc_run(&self, lab: &Lab, state: &Path, id: &str) -> Result<Command> {
        Ok(self.run_args(lab.command(tools::require(tools::RUNC)?), &[], state, id))
    }

    /// The same, in the lab's cgroup2-only view.
    pub fn runc_run_cgroup2(&self, lab: &Lab, state: &Path, id: &str) -> Result<Command> {
        let cmd = lab.command_cgroup2(tools::require(tools::RUNC)?)?;
        Ok(self.run_args(cmd, &[], state, id))
    }

    /// `crun --cgroup-manager=disabled --root STATE run --bundle DIR ID` in the cgroup2 view.
    pub fn crun_run(&self, lab: &Lab, state: &Path, id: &str) -> Result<Command> {
        let cmd = lab.command_cgroup2(tools::require(tools::CRUN)?)?;
        Ok(self.run_args(cmd, &["--cgroup-manager=disabled"], state, id))
    }

    fn run_args(&self, mut cmd: Command, global: &[&str], state: &Path, id: &str) -> Command {
        cmd.args(global)
            .arg("--root")
            .arg(state)
            .arg("run")
            .arg("--bundle")
            .arg(&self.dir)
            .arg(id);
        cmd
    }
}

/// The stock spec with `terminal: false`, `root.path` absolute, `process.args` and
/// `linux.cgroupsPath` set.
pub fn adapt_spec(text: &str, rootfs: &Path, args: &[&str], cgroups_path: &str) -> Result<String> {
    let mut spec: serde_json::Value = serde_json::from_str(text).map_err(|_| Error::Parse {
        what: "runc spec's config.json",
        text: text.chars().take(200).collect(),
    })?;
    spec["process"]["terminal"] = false.into();
    spec["process"]["args"] = args.iter().map(|a| serde_json::Value::from(*a)).collect();
    spec["root"]["path"] = rootfs.display().to_string().into();
    spec["linux"]["cgroupsPath"] = cgroups_path.into();
    Ok(serde_json::to_string_pretty(&spec).expect("a Value serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_changes_only_what_it_must() {
        let stock = r#"{"ociVersion":"1.0.2-dev","process":{"terminal":true,"args":["sh"],"cwd":"/"},"root":{"path":"rootfs","readonly":true},"linux":{"namespaces":[{"type":"pid"}]}}"#;
        let out = adapt_spec(
            stock,
            Path::new("/tmp/lab/rootfs"),
            &["/bin/true"],
            "/x/runc",
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["process"]["terminal"], false);
        assert_eq!(v["process"]["args"][0], "/bin/true");
        assert_eq!(v["root"]["path"], "/tmp/lab/rootfs");
        assert_eq!(v["root"]["readonly"], true);
        assert_eq!(v["linux"]["cgroupsPath"], "/x/runc");
        assert_eq!(v["linux"]["namespaces"][0]["type"], "pid");
        assert!(adapt_spec("nope", Path::new("/"), &[], "").is_err());
    }
}
