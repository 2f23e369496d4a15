//! The sandbox change check (kubelet's `PodSandboxChanged`, spec 2.1, SBX-1..6): does the pod
//! need a new sandbox, with which attempt number, and which old sandbox id is reported.

use serde::{Deserialize, Serialize};

use crate::model::{NetnsMode, SandboxRecord, SandboxState};
use crate::rules::{RuleId, Trace};

/// Why a sandbox is (or is not) recreated; the spellings of section 11.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxReason {
    NoSandbox,
    MultipleReadySandboxes,
    LatestSandboxNotReady,
    NetworkNamespaceChanged,
    SandboxHasNoIP,
    None,
}

impl SandboxReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxReason::NoSandbox => "NoSandbox",
            SandboxReason::MultipleReadySandboxes => "MultipleReadySandboxes",
            SandboxReason::LatestSandboxNotReady => "LatestSandboxNotReady",
            SandboxReason::NetworkNamespaceChanged => "NetworkNamespaceChanged",
            SandboxReason::SandboxHasNoIP => "SandboxHasNoIP",
            SandboxReason::None => "None",
        }
    }
}

/// Result of the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxCheck {
    pub recreate: bool,
    pub reason: SandboxReason,
    /// Attempt number for a new sandbox (the current max when nothing is recreated).
    pub attempt: u32,
    /// The newest sandbox's id, or `""` (SBX-1, SBX-4): only a non-empty id lets the sync
    /// emit `SandboxChanged`.
    pub sandbox_id: String,
    pub rule: RuleId,
}

/// SBX-1..6, first match wins. `sandboxes` may be in any order.
pub fn check(sandboxes: &[SandboxRecord], host_network: bool, trace: &mut Trace) -> SandboxCheck {
    let Some(latest) = sandboxes.iter().max_by_key(|s| s.created) else {
        trace.fire("SBX-1", || {
            "the pod has no sandbox, so one is created with attempt 0".into()
        });
        return SandboxCheck {
            recreate: true,
            reason: SandboxReason::NoSandbox,
            attempt: 0,
            sandbox_id: String::new(),
            rule: "SBX-1",
        };
    };
    let max_attempt = sandboxes.iter().map(|s| s.attempt).max().unwrap_or(0);
    let ready_count = sandboxes
        .iter()
        .filter(|s| s.state == SandboxState::Ready)
        .count();
    let expected_netns = if host_network {
        NetnsMode::Node
    } else {
        NetnsMode::Pod
    };
    let next = max_attempt + 1;
    let recreate = |reason, rule, sandbox_id: &str| SandboxCheck {
        recreate: true,
        reason,
        attempt: next,
        sandbox_id: sandbox_id.to_string(),
        rule,
    };

    if ready_count > 1 {
        trace.fire("SBX-2", || {
            format!("{ready_count} sandboxes are READY, so a new sandbox is created with attempt {next}")
        });
        return recreate(SandboxReason::MultipleReadySandboxes, "SBX-2", &latest.id);
    }
    if latest.state != SandboxState::Ready {
        trace.fire("SBX-3", || {
            format!(
                "the newest sandbox {} is NOTREADY, so a new sandbox is created with attempt {next}",
                latest.id
            )
        });
        return recreate(SandboxReason::LatestSandboxNotReady, "SBX-3", &latest.id);
    }
    if latest.netns != expected_netns {
        trace.fire("SBX-4", || {
            format!(
                "the newest sandbox {} has network namespace mode {:?} but the pod wants {:?}, so a new \
                 sandbox is created with attempt {next}; no sandbox id is reported, hence no SandboxChanged event",
                latest.id, latest.netns, expected_netns
            )
        });
        return recreate(SandboxReason::NetworkNamespaceChanged, "SBX-4", "");
    }
    if !host_network && latest.ip.as_deref() == Some("") {
        trace.fire("SBX-5", || {
            format!(
                "the newest sandbox {} has a network status without an IP, so a new sandbox is created \
                 with attempt {next}",
                latest.id
            )
        });
        return recreate(SandboxReason::SandboxHasNoIP, "SBX-5", &latest.id);
    }
    trace.fire("SBX-6", || {
        format!(
            "the newest sandbox {} is READY and usable; it is kept",
            latest.id
        )
    });
    SandboxCheck {
        recreate: false,
        reason: SandboxReason::None,
        attempt: max_attempt,
        sandbox_id: latest.id.clone(),
        rule: "SBX-6",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(
        id: &str,
        created: i64,
        state: SandboxState,
        ip: Option<&str>,
        attempt: u32,
    ) -> SandboxRecord {
        SandboxRecord {
            id: id.into(),
            created,
            state,
            netns: NetnsMode::Pod,
            ip: ip.map(String::from),
            attempt,
        }
    }

    fn run(sandboxes: &[SandboxRecord], host_network: bool) -> SandboxCheck {
        check(sandboxes, host_network, &mut Trace::quiet())
    }

    #[test]
    fn sbx_1_no_sandbox_attempt_zero_no_id() {
        let c = run(&[], false);
        assert_eq!(
            (c.recreate, c.reason, c.attempt, c.sandbox_id.as_str()),
            (true, SandboxReason::NoSandbox, 0, "")
        );
    }

    #[test]
    fn sbx_2_two_ready_sandboxes() {
        let c = run(
            &[
                sb("s1", 1, SandboxState::Ready, Some("10.0.0.1"), 0),
                sb("s2", 2, SandboxState::Ready, Some("10.0.0.2"), 3),
            ],
            false,
        );
        assert_eq!(
            (c.reason, c.attempt, c.sandbox_id.as_str()),
            (SandboxReason::MultipleReadySandboxes, 4, "s2")
        );
    }

    #[test]
    fn sbx_3_ready_one_is_not_the_latest() {
        let c = run(
            &[
                sb("s2", 2, SandboxState::NotReady, Some("10.0.0.2"), 1),
                sb("s1", 1, SandboxState::Ready, Some("10.0.0.1"), 0),
            ],
            false,
        );
        assert_eq!(
            (c.reason, c.attempt, c.sandbox_id.as_str()),
            (SandboxReason::LatestSandboxNotReady, 2, "s2")
        );
    }

    #[test]
    fn sbx_4_netns_mismatch_returns_no_id() {
        let c = run(
            &[sb("s1", 1, SandboxState::Ready, Some("10.0.0.1"), 0)],
            true,
        );
        assert_eq!(
            (c.reason, c.attempt, c.sandbox_id.as_str()),
            (SandboxReason::NetworkNamespaceChanged, 1, "")
        );
    }

    #[test]
    fn sbx_5_empty_ip_recreates_but_missing_status_does_not() {
        let c = run(&[sb("s1", 1, SandboxState::Ready, Some(""), 0)], false);
        assert_eq!(c.reason, SandboxReason::SandboxHasNoIP);
        let c = run(&[sb("s1", 1, SandboxState::Ready, None, 0)], false);
        assert_eq!((c.recreate, c.reason), (false, SandboxReason::None));
    }

    #[test]
    fn sbx_5_never_for_host_network() {
        let mut s = sb("s1", 1, SandboxState::Ready, Some(""), 2);
        s.netns = NetnsMode::Node;
        let c = run(&[s], true);
        assert_eq!((c.recreate, c.attempt, c.rule), (false, 2, "SBX-6"));
    }
}
