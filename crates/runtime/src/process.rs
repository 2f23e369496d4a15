//! From a container config and its image's config to the one process to `execve`: argv by
//! Kubernetes' command/args rules, the environment, the working directory and the user.
//!
//! Kubernetes ("Define a Command and Arguments for a Container"):
//!
//! | `command` | `args` | runs |
//! |---|---|---|
//! | —   | —   | image ENTRYPOINT + image CMD |
//! | set | —   | `command` (the image's ENTRYPOINT *and* CMD are ignored) |
//! | —   | set | image ENTRYPOINT + `args` |
//! | set | set | `command` + `args` |

use serde::{Deserialize, Serialize};

use crate::config::EnvVar;

/// The `PATH` a container gets when neither its image nor its config sets one (containerd's).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The parts of an image's config that shape the process (OCI image config `config`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageProcess {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `NAME=value` strings.
    pub env: Vec<String>,
    pub working_dir: String,
    /// `user`, `uid`, `user:group`, `uid:gid`; empty is root.
    pub user: String,
}

/// The process of a container, fully resolved, as the shim starts it and `exec` reuses it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSpec {
    pub argv: Vec<String>,
    /// `NAME=value` strings, in order.
    pub env: Vec<String>,
    pub cwd: String,
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
    /// The capabilities it keeps (OCI names); None: containerd's default set.
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    /// no_new_privs (`allowPrivilegeEscalation: false`).
    #[serde(default)]
    pub no_new_privs: bool,
    /// The seccomp profile it runs under; None: unconfined.
    #[serde(default)]
    pub seccomp: Option<crate::seccomp::SeccompSpec>,
}

/// The identity a container's first process runs with, as the CRI's `LinuxContainerUser` and
/// the pod's `containerStatuses[].user.linux` report it: read from the kernel
/// (`/proc/PID/status`) once the process has made its `execve`, so it is what the process got,
/// not what was asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinuxUser {
    pub uid: u32,
    pub gid: u32,
    /// The supplementary groups (the `Groups:` line), in the kernel's order.
    pub supplemental_groups: Vec<u32>,
}

impl LinuxUser {
    /// The real uid, real gid and groups of `pid` from `/proc/PID/status`.
    pub fn of_process(pid: i32) -> crate::Result<LinuxUser> {
        let path = format!("/proc/{pid}/status");
        let text =
            std::fs::read_to_string(&path).map_err(|e| crate::Error::io("reading", &path, e))?;
        LinuxUser::parse_status(&text).ok_or_else(|| crate::Error::State {
            path: path.into(),
            message: "no Uid, Gid or Groups line".into(),
        })
    }

    /// The `Uid:`, `Gid:` (their first, real, field) and `Groups:` lines of a
    /// `/proc/PID/status` text.
    pub fn parse_status(text: &str) -> Option<LinuxUser> {
        let line = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key).map(|rest| rest.split_whitespace()))
        };
        let first = |key: &str| line(key)?.next()?.parse::<u32>().ok();
        let groups = line("Groups:")?
            .map(|g| g.parse::<u32>().ok())
            .collect::<Option<Vec<_>>>()?;
        Some(LinuxUser {
            uid: first("Uid:")?,
            gid: first("Gid:")?,
            supplemental_groups: groups,
        })
    }
}

impl ProcessSpec {
    /// The value of `name` in the environment.
    pub fn env_value(&self, name: &str) -> Option<&str> {
        env_lookup(&self.env, name)
    }
}

/// argv by the Kubernetes rules; an empty result is an error (containerd: "no command specified").
pub fn resolve_argv(
    command: &[String],
    args: &[String],
    image: &ImageProcess,
) -> Result<Vec<String>, String> {
    let argv: Vec<String> = match (command.is_empty(), args.is_empty()) {
        (true, true) => image.entrypoint.iter().chain(&image.cmd).cloned().collect(),
        (false, true) => command.to_vec(),
        (true, false) => image.entrypoint.iter().chain(args).cloned().collect(),
        (false, false) => command.iter().chain(args).cloned().collect(),
    };
    if argv.is_empty() {
        return Err("no command specified: neither the container nor its image has one".into());
    }
    Ok(argv)
}

/// The environment as containerd builds it: `PATH` (the image's or the default), `HOSTNAME`,
/// the image's variables, then the container's, a later name replacing an earlier one in place.
pub fn resolve_env(image_env: &[String], config_env: &[EnvVar], hostname: &str) -> Vec<String> {
    let mut env: Vec<String> = Vec::new();
    let mut set = |entry: String| {
        let name = entry.split('=').next().unwrap_or("").to_string();
        match env
            .iter_mut()
            .find(|e| e.split('=').next() == Some(name.as_str()))
        {
            Some(existing) => *existing = entry,
            None => env.push(entry),
        }
    };
    if env_lookup(image_env, "PATH").is_none() {
        set(format!("PATH={DEFAULT_PATH}"));
    }
    if !hostname.is_empty() {
        set(format!("HOSTNAME={hostname}"));
    }
    for entry in image_env {
        set(entry.clone());
    }
    for var in config_env {
        set(format!("{}={}", var.name, var.value));
    }
    env
}

fn env_lookup<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
    env.iter().rev().find_map(|entry| {
        let (key, value) = entry.split_once('=')?;
        (key == name).then_some(value)
    })
}

/// The working directory: the container's, else the image's, else `/`.
pub fn resolve_cwd(config: Option<&str>, image: &str) -> String {
    match config.filter(|c| !c.is_empty()) {
        Some(dir) => dir.to_string(),
        None if !image.is_empty() => image.to_string(),
        None => "/".to_string(),
    }
}

/// uid, gid and supplementary groups. `run_as_user`/`run_as_group` win over the image's USER;
/// names are looked up in the image's `/etc/passwd` and `/etc/group` texts, as runc does.
pub fn resolve_user(
    image_user: &str,
    run_as_user: Option<u32>,
    run_as_group: Option<u32>,
    passwd: Option<&str>,
    group: Option<&str>,
) -> Result<(u32, u32, Vec<u32>), String> {
    let (user_part, group_part) = match image_user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (image_user, None),
    };
    let passwd_entries = passwd.map(parse_passwd).unwrap_or_default();
    // The user: runAsUser, else the image's (a number or a name), else root.
    let (uid, name, passwd_gid) = match run_as_user {
        Some(uid) => {
            let entry = passwd_entries.iter().find(|e| e.uid == uid);
            (uid, entry.map(|e| e.name.clone()), entry.map(|e| e.gid))
        }
        None if user_part.is_empty() => (0, Some("root".to_string()), Some(0)),
        None => match user_part.parse::<u32>() {
            Ok(uid) => {
                let entry = passwd_entries.iter().find(|e| e.uid == uid);
                (uid, entry.map(|e| e.name.clone()), entry.map(|e| e.gid))
            }
            Err(_) => {
                let entry = passwd_entries
                    .iter()
                    .find(|e| e.name == user_part)
                    .ok_or_else(|| {
                        format!(
                            "unable to find user {user_part}: no matching entries in passwd file"
                        )
                    })?;
                (entry.uid, Some(entry.name.clone()), Some(entry.gid))
            }
        },
    };
    let group_entries = group.map(parse_group).unwrap_or_default();
    let gid = match (run_as_group, group_part) {
        (Some(gid), _) => gid,
        (None, Some(g)) if !g.is_empty() => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => group_entries
                .iter()
                .find(|e| e.name == g)
                .map(|e| e.gid)
                .ok_or_else(|| {
                    format!("unable to find group {g}: no matching entries in group file")
                })?,
        },
        _ => passwd_gid.unwrap_or(0),
    };
    let mut groups = vec![gid];
    if let Some(name) = name {
        for entry in &group_entries {
            if entry.members.contains(&name) && !groups.contains(&entry.gid) {
                groups.push(entry.gid);
            }
        }
    }
    Ok((uid, gid, groups))
}

struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
}

fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            Some(PasswdEntry {
                name: fields.first()?.to_string(),
                uid: fields.get(2)?.parse().ok()?,
                gid: fields.get(3)?.parse().ok()?,
            })
        })
        .collect()
}

struct GroupEntry {
    name: String,
    gid: u32,
    members: Vec<String>,
}

fn parse_group(text: &str) -> Vec<GroupEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            Some(GroupEntry {
                name: fields.first()?.to_string(),
                gid: fields.get(2)?.parse().ok()?,
                members: fields
                    .get(3)
                    .map(|m| {
                        m.split(',')
                            .filter(|s| !s.is_empty())
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// Where `execve` is tried for `program`, in order: itself when it holds a `/`, else each
/// folder of `path` (an empty entry is the current folder), as execvp searches.
pub fn exec_candidates(program: &str, path: Option<&str>) -> Vec<String> {
    if program.contains('/') {
        return vec![program.to_string()];
    }
    path.unwrap_or(DEFAULT_PATH)
        .split(':')
        .map(|dir| {
            if dir.is_empty() {
                format!("./{program}")
            } else {
                format!("{}/{program}", dir.trim_end_matches('/'))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_identity_is_the_real_ids_and_the_groups_of_proc_status() {
        let status = "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t2000\t2000\t2000\nFDSize:\t64\nGroups:\t1000 1234 50000 \n";
        assert_eq!(
            LinuxUser::parse_status(status),
            Some(LinuxUser {
                uid: 1000,
                gid: 1000,
                supplemental_groups: vec![1000, 1234, 50000],
            })
        );
        let none = "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n";
        assert_eq!(
            LinuxUser::parse_status(none).map(|u| u.supplemental_groups),
            Some(vec![])
        );
        assert_eq!(LinuxUser::parse_status("Name:\tsh\n"), None);
        // This test process's own identity, read from the kernel.
        let me = LinuxUser::of_process(std::process::id() as i32).unwrap();
        assert_eq!(me.uid, nix::unistd::getuid().as_raw());
        assert_eq!(me.gid, nix::unistd::getgid().as_raw());
    }

    fn image() -> ImageProcess {
        ImageProcess {
            entrypoint: strings(&["/entry"]),
            cmd: strings(&["--default"]),
            ..ImageProcess::default()
        }
    }

    #[test]
    fn kubernetes_command_and_args_table() {
        let none: Vec<String> = Vec::new();
        let cmd = strings(&["/bin/echo"]);
        let args = strings(&["hi"]);
        assert_eq!(
            resolve_argv(&none, &none, &image()).unwrap(),
            ["/entry", "--default"]
        );
        assert_eq!(
            resolve_argv(&cmd, &none, &image()).unwrap(),
            ["/bin/echo"],
            "command replaces ENTRYPOINT and the image CMD is then ignored"
        );
        assert_eq!(
            resolve_argv(&none, &args, &image()).unwrap(),
            ["/entry", "hi"]
        );
        assert_eq!(
            resolve_argv(&cmd, &args, &image()).unwrap(),
            ["/bin/echo", "hi"]
        );
    }

    #[test]
    fn no_command_at_all_is_an_error() {
        let err = resolve_argv(&[], &[], &ImageProcess::default()).unwrap_err();
        assert!(err.contains("no command specified"), "{err}");
    }

    #[test]
    fn env_adds_path_and_hostname_and_lets_the_config_override() {
        let image_env = strings(&["A=image", "B=image"]);
        let config = vec![EnvVar::new("B", "config"), EnvVar::new("C", "config")];
        let env = resolve_env(&image_env, &config, "pod-1");
        assert_eq!(
            env,
            strings(&[
                &format!("PATH={DEFAULT_PATH}"),
                "HOSTNAME=pod-1",
                "A=image",
                "B=config",
                "C=config"
            ])
        );
        let with_path = resolve_env(&strings(&["PATH=/x"]), &[], "");
        assert_eq!(with_path, strings(&["PATH=/x"]));
    }

    #[test]
    fn cwd_falls_back_to_the_image_then_root() {
        assert_eq!(resolve_cwd(Some("/w"), "/img"), "/w");
        assert_eq!(resolve_cwd(None, "/img"), "/img");
        assert_eq!(resolve_cwd(Some(""), ""), "/");
    }

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\nwww:x:33:33::/var/www:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nwww:x:33:\nadm:x:4:www,other\n";

    #[test]
    fn users_resolve_by_number_name_and_security_context() {
        let p = Some(PASSWD);
        let g = Some(GROUP);
        assert_eq!(resolve_user("", None, None, p, g).unwrap(), (0, 0, vec![0]));
        assert_eq!(
            resolve_user("www", None, None, p, g).unwrap(),
            (33, 33, vec![33, 4]),
            "groups from /etc/group membership"
        );
        assert_eq!(
            resolve_user("1000:1000", None, None, p, g).unwrap(),
            (1000, 1000, vec![1000])
        );
        assert_eq!(
            resolve_user("www", Some(65534), None, p, g).unwrap(),
            (65534, 65534, vec![65534]),
            "runAsUser wins, its passwd gid follows"
        );
        assert_eq!(
            resolve_user("www", Some(1234), Some(99), p, g).unwrap(),
            (1234, 99, vec![99])
        );
        let err = resolve_user("ghost", None, None, p, g).unwrap_err();
        assert!(err.contains("unable to find user ghost"), "{err}");
        assert_eq!(
            resolve_user("www:adm", None, None, p, g).unwrap(),
            (33, 4, vec![4])
        );
    }

    #[test]
    fn exec_candidates_follow_path() {
        assert_eq!(exec_candidates("/bin/sh", Some("/x")), ["/bin/sh"]);
        assert_eq!(
            exec_candidates("sh", Some("/usr/bin:/bin/")),
            ["/usr/bin/sh", "/bin/sh"]
        );
        assert_eq!(exec_candidates("sh", None).len(), 6);
    }
}
