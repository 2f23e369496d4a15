//! The nat rules of host ports that podlab's pods left behind (`podlab gc`).
//!
//! A pod's host ports are the CNI `portmap` plugin's: per pod a chain `CNI-DN-<hash>` of its
//! DNAT rules, entered from portmap's `CNI-HOSTPORT-DNAT` by one rule commented `dnat name:
//! "<network>" id: "<CNI container id>"`. The pod's DEL (StopPodSandbox) removes both; when no
//! DEL ran (the records were lost, a state root deleted by hand, a teardown that kept
//! failing), they stay in the node's nat table, DNATing a port to an address that may be
//! handed to the next pod.
//!
//! So `podlab gc` removes, under the network's lock, every such entry rule of podlab's network
//! (its name in the comment) whose container id holds no lease of the network's IPAM any
//! more (host-local writes the container id into each lease file), with its `CNI-DN-` chain;
//! and then, when no `CNI-DN-` chain of anyone is left, portmap's own top-level chains
//! (`CNI-HOSTPORT-DNAT`, `-SETMARK`, `-MASQ`) and the jumps to them, which portmap makes again
//! at its next ADD. Chains of other networks (other runtimes) are left alone. Two
//! `iptables-restore --noflush` transactions make the change: the rules, then the chains
//! (nf_tables refuses to delete a chain in the transaction that empties it: EBUSY).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// portmap's top-level chains.
const TOP_LEVEL: [&str; 3] = [
    "CNI-HOSTPORT-DNAT",
    "CNI-HOSTPORT-SETMARK",
    "CNI-HOSTPORT-MASQ",
];

/// One per-pod entry rule of portmap's: its text in `iptables -S`, the network and container
/// id of its comment, the `CNI-DN-` chain it jumps to.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    rule: String,
    network: String,
    container_id: String,
    chain: String,
}

/// Parses `dnat name: \"NET\" id: \"ID\"` and `-j CNI-DN-…` out of a rule of
/// `CNI-HOSTPORT-DNAT`.
fn entry(rule: &str) -> Option<Entry> {
    let rest = rule.strip_prefix("-A CNI-HOSTPORT-DNAT ")?;
    let chain = rest
        .split_whitespace()
        .skip_while(|w| *w != "-j")
        .nth(1)
        .filter(|c| c.starts_with("CNI-DN-"))?;
    let comment = rest.split("dnat name: \\\"").nth(1)?;
    let (network, comment) = comment.split_once("\\\" id: \\\"")?;
    let (container_id, _) = comment.split_once("\\\"")?;
    Some(Entry {
        rule: rule.to_owned(),
        network: network.to_owned(),
        container_id: container_id.to_owned(),
        chain: chain.to_owned(),
    })
}

/// The container ids of the leases in `lease_dir` (host-local's files: the id, then the
/// interface name on the next line).
fn leased_ids(lease_dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(lease_dir) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|text| text.lines().next().map(|id| id.trim().to_owned()))
        .filter(|id| !id.is_empty())
        .collect()
}

/// What goes, as two `iptables-restore` inputs (the rules, then the chains: nf_tables refuses
/// to delete a chain in the transaction that empties it).
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    rules: String,
    chains: String,
    /// The container ids whose entries go.
    ids: Vec<String>,
}

/// What removes the stale entries of `network` from `rules` (`iptables -t nat -S`), and the
/// top-level chains when nothing uses them; None when there is nothing to remove.
fn plan(rules: &str, network: &str, leased: &BTreeSet<String>) -> Option<Plan> {
    let lines: Vec<&str> = rules.lines().collect();
    let entries: Vec<Entry> = lines.iter().filter_map(|l| entry(l)).collect();
    let (stale, kept): (Vec<&Entry>, Vec<&Entry>) = entries
        .iter()
        .partition(|e| e.network == network && !leased.contains(&e.container_id));
    let dn_chains: BTreeSet<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("-N "))
        .filter(|c| c.starts_with("CNI-DN-"))
        .collect();
    let gone: BTreeSet<&str> = stale.iter().map(|e| e.chain.as_str()).collect();
    // Top-level chains go when no DN chain would be left at all (nobody's host ports).
    let top_level_unused = kept.is_empty()
        && dn_chains.iter().all(|c| gone.contains(c))
        && lines.contains(&"-N CNI-HOSTPORT-DNAT");
    if stale.is_empty() && !top_level_unused {
        return None;
    }
    let mut script = String::from("*nat\n");
    let mut chains = String::from("*nat\n");
    for e in &stale {
        script.push_str(&format!("-D{}\n", &e.rule[2..]));
    }
    for chain in &gone {
        if dn_chains.contains(chain) {
            script.push_str(&format!("-F {chain}\n"));
            chains.push_str(&format!("-X {chain}\n"));
        }
    }
    if top_level_unused {
        // The jumps to them from the built-in chains, then the chains.
        for line in &lines {
            let builtin = ["-A PREROUTING ", "-A OUTPUT ", "-A POSTROUTING "]
                .iter()
                .any(|p| line.starts_with(p));
            if builtin && TOP_LEVEL.iter().any(|c| line.ends_with(&format!("-j {c}"))) {
                script.push_str(&format!("-D{}\n", &line[2..]));
            }
        }
        for chain in TOP_LEVEL {
            if lines.iter().any(|l| *l == format!("-N {chain}")) {
                script.push_str(&format!("-F {chain}\n"));
                chains.push_str(&format!("-X {chain}\n"));
            }
        }
    }
    script.push_str("COMMIT\n");
    chains.push_str("COMMIT\n");
    Some(Plan {
        rules: script,
        chains,
        ids: stale.iter().map(|e| e.container_id.clone()).collect(),
    })
}

/// Removes what podlab's pods of `network` left in this network namespace's nat table (see the
/// module doc); the container ids whose rules went. Nothing without iptables NAT here. The
/// caller holds the network's lock.
pub fn collect(network: &str, lease_dir: &Path) -> Result<Vec<String>> {
    let Ok(listed) = Command::new("iptables")
        .args(["-w", "-t", "nat", "-S"])
        .stderr(Stdio::null())
        .output()
    else {
        return Ok(Vec::new());
    };
    if !listed.status.success() {
        return Ok(Vec::new());
    }
    let rules = String::from_utf8_lossy(&listed.stdout);
    let Some(plan) = plan(&rules, network, &leased_ids(lease_dir)) else {
        return Ok(Vec::new());
    };
    restore(&plan.rules)?;
    restore(&plan.chains)?;
    Ok(plan.ids)
}

/// `iptables-restore --noflush` of `script`: one transaction.
fn restore(script: &str) -> Result<()> {
    let mut restore = Command::new("iptables-restore")
        .args(["-w", "--noflush"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running iptables-restore")?;
    restore
        .stdin
        .take()
        .expect("piped")
        .write_all(script.as_bytes())
        .context("writing to iptables-restore")?;
    let out = restore
        .wait_with_output()
        .context("waiting for iptables-restore")?;
    if !out.status.success() {
        bail!(
            "iptables-restore could not remove the stale host-port rules: {}\n{script}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &str = r#"-P PREROUTING ACCEPT
-P INPUT ACCEPT
-P OUTPUT ACCEPT
-P POSTROUTING ACCEPT
-N CNI-DN-441373932d7799a723e04
-N CNI-DN-5555
-N CNI-HOSTPORT-DNAT
-N CNI-HOSTPORT-MASQ
-N CNI-HOSTPORT-SETMARK
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A CNI-DN-441373932d7799a723e04 -p tcp -m tcp --dport 18080 -j DNAT --to-destination 10.88.0.5:80
-A CNI-DN-5555 -p tcp -m tcp --dport 18081 -j DNAT --to-destination 10.89.0.5:80
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"podlab\" id: \"abc123\"" -m multiport --dports 18080 -j CNI-DN-441373932d7799a723e04
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"containerd-net\" id: \"other\"" -m multiport --dports 18081 -j CNI-DN-5555
-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
-A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000
"#;

    #[test]
    fn portmaps_entry_rules_name_the_network_and_the_container() {
        let e = RULES.lines().find_map(entry).unwrap();
        assert_eq!(e.network, "podlab");
        assert_eq!(e.container_id, "abc123");
        assert_eq!(e.chain, "CNI-DN-441373932d7799a723e04");
        assert_eq!(entry("-A CNI-HOSTPORT-MASQ -j MASQUERADE"), None);
    }

    #[test]
    fn only_podlabs_unleased_entries_go_and_the_top_level_chains_stay_while_used() {
        let stale = plan(RULES, "podlab", &BTreeSet::new()).unwrap();
        assert_eq!(stale.ids, ["abc123"]);
        assert!(stale.rules.contains(
            "-D CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"podlab\\\" id: \\\"abc123\\\"\""
        ));
        assert!(stale.rules.contains("-F CNI-DN-441373932d7799a723e04\n"));
        assert_eq!(
            stale.chains,
            "*nat\n-X CNI-DN-441373932d7799a723e04\nCOMMIT\n"
        );
        assert!(
            !stale.rules.contains("CNI-DN-5555"),
            "another network's: {stale:?}"
        );
        assert!(
            !stale.rules.contains("CNI-HOSTPORT-DNAT\n"),
            "still used: {stale:?}"
        );
        // A pod that still holds its lease keeps its rules.
        let leased = BTreeSet::from(["abc123".to_owned()]);
        assert_eq!(plan(RULES, "podlab", &leased), None);
    }

    #[test]
    fn the_top_level_chains_go_with_the_last_dn_chain() {
        let ours: String = RULES
            .lines()
            .filter(|l| !l.contains("5555") && !l.contains("containerd-net"))
            .map(|l| format!("{l}\n"))
            .collect();
        let both = plan(&ours, "podlab", &BTreeSet::new()).unwrap();
        let script = &both.rules;
        assert!(
            script.contains("-D PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT\n")
        );
        assert!(script.contains("-D POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j CNI-HOSTPORT-MASQ\n"));
        for chain in TOP_LEVEL {
            assert!(script.contains(&format!("-F {chain}\n")), "{script}");
            assert!(both.chains.contains(&format!("-X {chain}\n")), "{both:?}");
        }
        assert!(script.ends_with("COMMIT\n"));
        // Left by themselves (no pod had host ports since), they go too.
        let top_only: String = ours
            .lines()
            .filter(|l| !l.contains("CNI-DN-"))
            .map(|l| format!("{l}\n"))
            .collect();
        let top = plan(&top_only, "podlab", &BTreeSet::new()).unwrap();
        assert!(top.ids.is_empty());
        assert!(top.chains.contains("-X CNI-HOSTPORT-MASQ\n"));
        // A table without them has nothing to do.
        assert_eq!(plan("-P OUTPUT ACCEPT\n", "podlab", &BTreeSet::new()), None);
    }
}
