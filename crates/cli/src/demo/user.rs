//! `podlab demo user`: an unprivileged process makes a user namespace, is root inside it, over
//! what it owns, and stays who it was everywhere else.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::fd::AsRawFd;

use anyhow::{anyhow, Context, Result};
use nix::sched::{unshare, CloneFlags};
use nix::sys::wait::WaitStatus;
use nix::unistd::{getgid, getuid, Gid, Uid};
use podlab_ns::pid::OwnedChild;
use podlab_ns::user::{self, IdMapping};
use podlab_ns::uts;
use serde::{Deserialize, Serialize};

use super::pid::{channel, fork_child, receive_line, send_line};
use super::uts::side_by_side;
use super::{say, Evidence, Shown};

/// The unprivileged user the demo becomes when podlab runs as real root.
const NOBODY: u32 = 65534;
const OWN_HOSTNAME: &str = "podlab-userns";

/// What the child saw, from inside its user namespace.
#[derive(Debug, Serialize, Deserialize)]
struct Inside {
    uid_before: u32,
    uid: u32,
    gid: u32,
    capabilities: String,
    /// The errno of sethostname on the uts namespace it shares with podlab, if it failed.
    host_hostname_errno: Option<String>,
    own_hostname: String,
}

pub fn run(evidence: &mut Evidence) -> Result<()> {
    say("A user namespace renumbers user and group ids: /proc/PID/uid_map says which ids inside");
    say("are which ids outside. The process that makes one gets every capability in it, but only");
    say("over namespaces that belong to it; outside it is still who it was. That is how rootless");
    say("podman and `unshare --map-root-user` work, and how podlab runs its demos for a user who");
    say("is not root.");
    let real_root = getuid().is_root() && user::in_initial_userns();
    let outside_uid = if real_root {
        say("");
        say(format!(
            "podlab runs as root, so the child first drops to uid {NOBODY} (nobody), with no groups,"
        ));
        say("to show unprivileged use; then it unshares CLONE_NEWUSER and writes its maps.");
        NOBODY
    } else {
        say("");
        say("podlab already runs in a user namespace (it was started by a user who is not root), so");
        say("the child makes one more, nested in it, with the same kind of maps.");
        getuid().as_raw()
    };
    let host_hostname = uts::hostname()?;

    let (report_read, report_write) = channel()?;
    let (done_read, done_write) = channel()?;
    let our_ends = [report_read.as_raw_fd(), done_write.as_raw_fd()];
    let child = OwnedChild::new(fork_child(move || {
        for fd in our_ends {
            // SAFETY: the child's copies of the demo's own pipe ends, used by nothing else.
            unsafe { libc::close(fd) };
        }
        let mut report = File::from(report_write);
        let inside = make_and_look(real_root).map_err(|e| format!("{e:#}"));
        if send_line(&mut report, &inside).is_err() || inside.is_err() {
            return 1;
        }
        // Stay, so that podlab can look at this process from outside, until told to go.
        let _ = File::from(done_read).read(&mut [0u8; 1]);
        0
    })?);
    let inside: Inside =
        receive_line::<Result<Inside, String>>(&mut BufReader::new(File::from(report_read)))?
            .map_err(|e| anyhow!("the child: {e}"))?;

    let pid = child.pid().as_raw();
    let (uid_map, gid_map) = user::id_maps(pid)?;
    let status_uid = proc_status_id(pid, "Uid:")?;
    let status_gid = proc_status_id(pid, "Gid:")?;
    File::from(done_write).write_all(b"x")?;
    let ended = child.wait()?;

    side_by_side(
        ("seen from podlab", "seen inside"),
        &[
            ("uid", &status_uid.to_string(), &inside.uid.to_string()),
            ("gid", &status_gid.to_string(), &inside.gid.to_string()),
        ],
    );
    say(format!(
        "/proc/{pid}/uid_map: {}",
        mapping_words(&user::parse_id_map(&uid_map)?)
    ));
    say(format!(
        "/proc/{pid}/gid_map: {}",
        mapping_words(&user::parse_id_map(&gid_map)?)
    ));
    let podlab_map = user::parse_id_map(&user::id_maps(std::process::id() as i32)?.0)?;
    let host_uid = user::map_to_outside(&user::parse_id_map(&uid_map)?, 0)
        .and_then(|uid| user::map_to_outside(&podlab_map, uid));
    if !real_root {
        say(format!(
            "podlab's own uid_map maps its uid {outside_uid} to the host's uid {}.",
            host_uid.map_or("(unmapped)".into(), |u| u.to_string())
        ));
    }
    say(format!(
        "Inside, CapEff is {}: every capability, but only over namespaces that its user",
        inside.capabilities
    ));
    say("namespace owns. Trying both:");
    say(format!(
        "sethostname on podlab's own uts namespace: {}",
        inside.host_hostname_errno.as_deref().unwrap_or("allowed")
    ));
    say(format!(
        "sethostname(\"{OWN_HOSTNAME}\") in a uts namespace it made: now \"{}\"",
        inside.own_hostname
    ));

    let own_id = [IdMapping {
        inside: 0,
        outside: outside_uid,
        count: 1,
    }];
    evidence.compare(
        "before unsharing, the child has the uid it started with (as podlab numbers it)",
        inside.uid_before,
        outside_uid,
        true,
    );
    evidence.check(
        "inside the new user namespace it is uid 0, gid 0",
        (inside.uid, inside.gid) == (0, 0),
        format!("uid {}, gid {}", inside.uid, inside.gid),
    );
    let uid_mapping = user::parse_id_map(&uid_map)?;
    evidence.check(
        "its uid_map maps 0 inside to its own uid outside",
        uid_mapping == own_id,
        mapping_words(&uid_mapping),
    );
    let own_gid = if real_root { NOBODY } else { getgid().as_raw() };
    evidence.compare(
        "its gid_map maps 0 inside to its own gid outside",
        user::map_to_outside(&user::parse_id_map(&gid_map)?, 0),
        Some(own_gid),
        true,
    );
    evidence.check(
        "on the host, uid 0 inside is an ordinary user, not root",
        host_uid.is_some_and(|uid| uid != 0),
        format!("host uid {}", host_uid.shown()),
    );
    evidence.check(
        "from outside, the same process still has its own uid and gid",
        (status_uid, status_gid) == (outside_uid, own_gid),
        format!("uid {status_uid}, gid {status_gid}"),
    );
    evidence.check(
        "inside, it holds capabilities",
        !inside.capabilities.trim_start_matches('0').is_empty(),
        format!("CapEff {}", inside.capabilities),
    );
    evidence.compare(
        "it cannot set the hostname of a uts namespace it does not own",
        inside.host_hostname_errno.as_deref(),
        Some("EPERM"),
        true,
    );
    evidence.compare(
        "it can set the hostname of the uts namespace it made",
        inside.own_hostname.as_str(),
        OWN_HOSTNAME,
        true,
    );
    evidence.compare(
        "podlab's hostname is unchanged",
        uts::hostname()?,
        host_hostname,
        true,
    );
    evidence.check(
        "the child ended normally",
        ended == WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0),
        podlab_ns::child::describe(ended),
    );
    Ok(())
}

/// An id map in words: "0 inside is 65534 outside (1 id)", one range after another.
fn mapping_words(map: &[IdMapping]) -> String {
    let ranges: Vec<String> = map
        .iter()
        .map(|m| {
            let ids = if m.count == 1 { "id" } else { "ids" };
            format!(
                "{} inside is {} outside ({} {ids})",
                m.inside, m.outside, m.count
            )
        })
        .collect();
    ranges.shown()
}

/// In the child: become unprivileged (when podlab is real root), make the user namespace, and
/// try what root can do inside it.
fn make_and_look(drop_to_nobody: bool) -> Result<Inside> {
    if drop_to_nobody {
        become_nobody()?;
    }
    let uid_before = getuid().as_raw();
    user::become_root_in_new_userns()?;
    let host_hostname_errno = uts::set_hostname("podlab-not-allowed")
        .err()
        .map(|e| e.errno().map(|n| format!("{n:?}")).unwrap_or(e.to_string()));
    unshare(CloneFlags::CLONE_NEWUTS).context("unshare(CLONE_NEWUTS)")?;
    uts::set_hostname(OWN_HOSTNAME)?;
    Ok(Inside {
        uid_before,
        uid: getuid().as_raw(),
        gid: getgid().as_raw(),
        capabilities: own_capabilities()?,
        host_hostname_errno,
        own_hostname: uts::hostname()?,
    })
}

fn become_nobody() -> Result<()> {
    let (uid, gid) = (Uid::from_raw(NOBODY), Gid::from_raw(NOBODY));
    nix::unistd::setgroups(&[]).context("setgroups([])")?;
    nix::unistd::setresgid(gid, gid, gid).context("setresgid(65534)")?;
    nix::unistd::setresuid(uid, uid, uid).context("setresuid(65534)")?;
    // A change of uid makes a process non-dumpable, which gives its /proc files to root; a user's
    // own process (after exec) is dumpable, and must be to write its id maps.
    nix::sys::prctl::set_dumpable(true).context("prctl(PR_SET_DUMPABLE)")?;
    Ok(())
}

/// The CapEff line of the caller's /proc/self/status.
fn own_capabilities() -> Result<String> {
    status_field("/proc/self/status", "CapEff:")
}

/// The real id on the `Uid:` or `Gid:` line of /proc/PID/status, in the reader's user namespace.
fn proc_status_id(pid: i32, line: &str) -> Result<u32> {
    let path = format!("/proc/{pid}/status");
    let ids = status_field(&path, line)?;
    ids.split_whitespace()
        .next()
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| anyhow!("{path}: unreadable {line} line {ids:?}"))
}

fn status_field(path: &str, name: &str) -> Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| anyhow!("{path}: no {name} line"))
}
