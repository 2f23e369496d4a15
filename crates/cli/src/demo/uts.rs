//! `podlab demo uts`: a new uts namespace gets its own hostname; the host keeps its own.

use anyhow::Result;
use podlab_ns::{child, ops, uts, NsKind};
use serde::{Deserialize, Serialize};

use super::{say, Evidence};

const POD_HOSTNAME: &str = "podlab-demo";
const POD_DOMAINNAME: &str = "podlab.local";

/// What `uname(2)` says, and which uts namespace said it.
#[derive(Debug, Serialize, Deserialize)]
struct Names {
    hostname: String,
    domainname: String,
    inode: u64,
}

impl Names {
    fn read() -> podlab_ns::Result<Names> {
        Ok(Names {
            hostname: uts::hostname()?,
            domainname: uts::domainname()?,
            inode: ops::self_inode(NsKind::Uts)?,
        })
    }
}

pub fn run(evidence: &mut Evidence) -> Result<()> {
    say("A uts namespace isolates two names: the hostname and the NIS domain name, what");
    say("uname(2) reports. A pod has one uts namespace, held by its pause process, and every");
    say("container joins it: that is why all containers of a pod report the pod's hostname,");
    say("while the node keeps its own.");
    let host_before = Names::read()?;
    say("A child process unshares a new uts namespace (unshare(CLONE_NEWUTS)) and sets");
    say(format!(
        "hostname {POD_HOSTNAME} and domainname {POD_DOMAINNAME} inside:"
    ));
    let inside = child::run_in_child(|| {
        ops::create(&[NsKind::Uts])?;
        uts::set_hostname(POD_HOSTNAME)?;
        uts::set_domainname(POD_DOMAINNAME)?;
        Names::read()
    })?;
    let host_after = Names::read()?;
    side_by_side(
        ("host", "inside"),
        &[
            ("hostname", &host_after.hostname, &inside.hostname),
            ("domainname", &host_after.domainname, &inside.domainname),
            (
                "uts namespace",
                &format!("uts:[{}]", host_after.inode),
                &format!("uts:[{}]", inside.inode),
            ),
        ],
    );
    say("The child has exited. No process is in its uts namespace and nothing pins it, so the");
    say("namespace is gone with it (and its inode id free for the next one); a pod keeps its");
    say("own alive with the pause process.");

    evidence.compare(
        "the child is in another uts namespace (inode ids differ)",
        host_after.inode,
        inside.inode,
        false,
    );
    evidence.compare(
        "inside, the hostname is the new one",
        inside.hostname.as_str(),
        POD_HOSTNAME,
        true,
    );
    evidence.compare(
        "inside, the domainname is the new one",
        inside.domainname.as_str(),
        POD_DOMAINNAME,
        true,
    );
    evidence.compare(
        "the host's hostname is unchanged",
        host_after.hostname,
        host_before.hostname,
        true,
    );
    evidence.compare(
        "the host's domainname is unchanged",
        host_after.domainname,
        host_before.domainname,
        true,
    );
    Ok(())
}

/// Prints rows of "what: left | right" in aligned columns under a two-word header.
pub(super) fn side_by_side(header: (&str, &str), rows: &[(&str, &str, &str)]) {
    let label = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let left = rows
        .iter()
        .map(|r| r.1.len())
        .chain([header.0.len()])
        .max()
        .unwrap_or(0);
    say(format!(
        "  {:label$}   {:left$}   {}",
        "", header.0, header.1
    ));
    for (what, l, r) in rows {
        say(format!("  {what:label$}   {l:left$}   {r}"));
    }
}
