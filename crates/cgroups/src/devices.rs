//! The devices controller: which device nodes a container may create (`mknod`) and open.
//!
//! As runc's default (containerd gives every non-privileged container a deny-all rule, and runc
//! adds its `AllowedDevices`): everything is denied, then allowed are `mknod` of any character
//! or block device, and read/write/mknod of `/dev/null`, `/dev/zero`, `/dev/full`,
//! `/dev/random`, `/dev/urandom`, `/dev/tty`, `/dev/ptmx` and the pseudo-terminals `/dev/pts/*`.
//! A node made with `mknod` for anything else (the host's disk, `/dev/kmsg`, `/dev/mem`) cannot
//! be opened: `EPERM`.
//!
//! A privileged container gets every device (containerd's `a *:* rwm`, [`apply_privileged`]).
//!
//! On v1 the rules are lines written to `devices.deny` and `devices.allow`. On v2 the kernel
//! asks a `BPF_PROG_TYPE_CGROUP_DEVICE` program attached to the cgroup instead: the same rules
//! compiled to one ([`crate::bpf`]), as runc's and youki's v2 managers do.

use crate::hierarchy::{Controller, Version};
use crate::{Cgroup, Result};

/// One rule: `type major:minor access`, `*` for any number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// `c` (character), `b` (block) or `a` (all).
    pub kind: char,
    pub major: Option<u32>,
    pub minor: Option<u32>,
    /// Some of `r`, `w`, `m`.
    pub access: &'static str,
}

impl Rule {
    const fn char(major: u32, minor: u32) -> Rule {
        Rule {
            kind: 'c',
            major: Some(major),
            minor: Some(minor),
            access: "rwm",
        }
    }

    /// The line the v1 files take: `c 1:3 rwm`, `c *:* m`, `a`.
    pub fn line(&self) -> String {
        if self.kind == 'a' {
            return "a".to_string();
        }
        let number = |n: Option<u32>| n.map_or("*".to_string(), |n| n.to_string());
        format!(
            "{} {}:{} {}",
            self.kind,
            number(self.major),
            number(self.minor),
            self.access
        )
    }
}

/// runc's `AllowedDevices`, in its order.
pub const DEFAULT_ALLOWED: [Rule; 10] = [
    Rule {
        kind: 'c',
        major: None,
        minor: None,
        access: "m",
    },
    Rule {
        kind: 'b',
        major: None,
        minor: None,
        access: "m",
    },
    Rule::char(1, 3), // /dev/null
    Rule::char(1, 8), // /dev/random
    Rule::char(1, 7), // /dev/full
    Rule::char(5, 0), // /dev/tty
    Rule::char(1, 5), // /dev/zero
    Rule::char(1, 9), // /dev/urandom
    Rule {
        kind: 'c',
        major: Some(136),
        minor: None,
        access: "rwm",
    }, // /dev/pts/*
    Rule::char(5, 2), // /dev/ptmx
];

/// Every device, every access: a privileged container's rule.
pub const ALLOW_ALL: Rule = Rule {
    kind: 'a',
    major: None,
    minor: None,
    access: "rwm",
};

/// Denies every device, then allows [`DEFAULT_ALLOWED`]. Returns whether the rules are
/// enforced (false on a v1 machine without the devices controller).
pub fn apply_default(cgroup: &Cgroup) -> Result<bool> {
    apply(cgroup, &DEFAULT_ALLOWED)
}

/// Allows every device (containerd's privileged container). Returns whether a rule was set.
pub fn apply_privileged(cgroup: &Cgroup) -> Result<bool> {
    apply(cgroup, &[ALLOW_ALL])
}

/// Denies every device but those `allowed` lists: v1 lines, or a v2 device program.
pub fn apply(cgroup: &Cgroup, allowed: &[Rule]) -> Result<bool> {
    match cgroup.version {
        Version::V1 => {
            if !cgroup.has(Controller::Devices) {
                return Ok(false);
            }
            if allowed.contains(&ALLOW_ALL) {
                // What a new cgroup inherits may already deny; `a` in devices.allow lifts all.
                cgroup.write(Controller::Devices, "devices.allow", "a")?;
                return Ok(true);
            }
            cgroup.write(Controller::Devices, "devices.deny", "a")?;
            let lines: Vec<String> = allowed.iter().map(Rule::line).collect();
            cgroup.write_each(Controller::Devices, "devices.allow", &lines)?;
            Ok(true)
        }
        Version::V2 => {
            let Some(dir) = cgroup.unique_dirs().first().map(|d| d.to_path_buf()) else {
                return Ok(false);
            };
            crate::bpf::attach_rules(allowed, &dir)?;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_as_the_kernel_writes_them() {
        let lines: Vec<String> = DEFAULT_ALLOWED.iter().map(Rule::line).collect();
        assert_eq!(
            lines,
            [
                "c *:* m",
                "b *:* m",
                "c 1:3 rwm",
                "c 1:8 rwm",
                "c 1:7 rwm",
                "c 5:0 rwm",
                "c 1:5 rwm",
                "c 1:9 rwm",
                "c 136:* rwm",
                "c 5:2 rwm"
            ]
        );
    }
}
