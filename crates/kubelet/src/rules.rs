//! Rule IDs of `reference/kubelet-semantics.md` and the trace that records which ones fired.
//!
//! Every decision function takes a [`Trace`]: it always collects the IDs of the rules that
//! decided (cheap, `&'static str`), and, only when narration was asked for, one plain sentence
//! per decision. The sentence closures are never called on the quiet path, so the node agent's
//! hot loop pays for no formatting.

/// A rule ID of the spec, e.g. `"SBX-3"` or `"PH-5c"`.
pub type RuleId = &'static str;

/// Every rule ID the spec defines, in spec order. The case suite asserts that each one is
/// exercised by at least one case.
pub const SPEC_RULE_IDS: &[RuleId] = &[
    // 2.1 sandbox change check
    "SBX-1",
    "SBX-2",
    "SBX-3",
    "SBX-4",
    "SBX-5",
    "SBX-6",
    // 2.2 sandbox (re)creation
    "ACT-1",
    "ACT-2",
    "ACT-3",
    "ACT-4",
    "ACT-5",
    "ACT-6",
    // 2.3 regular containers
    "CTR-1",
    "CTR-2",
    "CTR-3",
    "CTR-4",
    "CTR-5",
    "CTR-6",
    // 2.3 ShouldContainerBeRestarted
    "RST-0",
    "RST-1",
    "RST-2",
    "RST-3",
    "RST-4",
    "RST-5",
    // 2.4 init containers (the spec defines no INIT-3)
    "INIT-1",
    "INIT-2",
    "INIT-4",
    "INIT-5",
    "INIT-6",
    "INIT-7",
    "INIT-8",
    "INIT-9",
    "INIT-10",
    "INIT-11",
    "INIT-12",
    "INIT-13",
    // 2.5 ephemeral containers
    "EPH-1",
    "EPH-2",
    "EPH-3",
    "EPH-4",
    // 3 API container statuses and started/ready
    "API-1",
    "API-2",
    "API-3",
    "API-4",
    "API-5",
    "API-6",
    "PRB-1",
    "PRB-2",
    "PRB-3",
    "PRB-4",
    // 6.2 probe worker
    "PRB-W1",
    "PRB-W2",
    "PRB-W3",
    "PRB-W4",
    "PRB-W5",
    "PRB-W6",
    // 4 phase
    "PH-1",
    "PH-2",
    "PH-3",
    "PH-4",
    "PH-5a",
    "PH-5b",
    "PH-5c",
    "PH-5d",
    "PH-5e",
    "PH-6",
    "PH-7",
    "PH-8",
    "PH-9",
    // 5 conditions
    "COND-RTS",
    "COND-INIT-0",
    "COND-INIT-1a",
    "COND-INIT-1b",
    "COND-INIT-2",
    "COND-INIT-3",
    "COND-CR-1",
    "COND-CR-2",
    "COND-CR-3",
    "COND-CR-4",
    "COND-READY-1",
    "COND-READY-2",
    "COND-READY-3",
    "COND-SCHED",
    "COND-DT",
    "COND-RESIZE-1",
    "COND-RESIZE-2",
    // 8 crash-loop backoff
    "BO-1",
    "BO-2",
    "BO-3",
    "BO-4",
    "BO-5",
    "BO-6",
];

/// The easy-to-get-wrong points of spec section 12, each with the rules that show it. A case
/// whose id starts with `surprise-NN-` demonstrates point NN and must fire these rules.
pub const SURPRISES: &[(u8, &[RuleId])] = &[
    (1, &["RST-2"]),
    (2, &["CTR-2"]),
    (3, &["ACT-2"]),
    (4, &["SBX-4"]),
    (5, &["SBX-5"]),
    (6, &["INIT-1", "INIT-10"]),
    (7, &["PH-5a"]),
    (8, &["COND-INIT-1a"]),
    (9, &["INIT-9", "PH-2"]),
    (10, &["BO-1", "BO-5"]),
    (11, &["PRB-W1", "PRB-W2"]),
    (12, &["PRB-W3"]),
    (13, &["EPH-2"]),
    (14, &["CTR-6"]),
];

/// Collects the rules that fired and, when narrating, one sentence per decision.
#[derive(Debug, Default, Clone)]
pub struct Trace {
    rules: Vec<RuleId>,
    narration: Option<Vec<String>>,
}

impl Trace {
    /// Records rule IDs only.
    pub fn quiet() -> Self {
        Trace {
            rules: Vec::with_capacity(24),
            narration: None,
        }
    }

    /// Records rule IDs and a sentence per decision.
    pub fn narrated() -> Self {
        Trace {
            rules: Vec::with_capacity(24),
            narration: Some(Vec::new()),
        }
    }

    /// `rule` decided something; `say` tells what (called only when narrating).
    pub fn fire(&mut self, rule: RuleId, say: impl FnOnce() -> String) {
        if !self.rules.contains(&rule) {
            self.rules.push(rule);
        }
        if let Some(lines) = &mut self.narration {
            lines.push(format!("{rule}: {}", say()));
        }
    }

    /// A narration line that belongs to no rule ID (sync-pass steps, events).
    pub fn say(&mut self, say: impl FnOnce() -> String) {
        if let Some(lines) = &mut self.narration {
            lines.push(say());
        }
    }

    /// An empty trace of the same kind (narrating or quiet).
    pub fn child(&self) -> Trace {
        if self.is_narrating() {
            Trace::narrated()
        } else {
            Trace::quiet()
        }
    }

    /// Appends another trace's rules and lines.
    pub fn absorb(&mut self, other: Trace) {
        for rule in other.rules {
            if !self.rules.contains(&rule) {
                self.rules.push(rule);
            }
        }
        if let (Some(lines), Some(more)) = (&mut self.narration, other.narration) {
            lines.extend(more);
        }
    }

    pub fn is_narrating(&self) -> bool {
        self.narration.is_some()
    }

    /// The distinct rule IDs in the order they first fired.
    pub fn rules(&self) -> &[RuleId] {
        &self.rules
    }

    pub fn has(&self, rule: RuleId) -> bool {
        self.rules.contains(&rule)
    }

    pub fn into_parts(self) -> (Vec<RuleId>, Vec<String>) {
        (self.rules, self.narration.unwrap_or_default())
    }
}

/// Renders names as Go renders a `[]string` with `%s`/`%v`: `[a b]`.
pub fn go_slice(names: &[&str]) -> String {
    let mut out = String::with_capacity(2 + names.iter().map(|n| n.len() + 1).sum::<usize>());
    out.push('[');
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(name);
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_ids_are_unique() {
        for (i, id) in SPEC_RULE_IDS.iter().enumerate() {
            assert!(!SPEC_RULE_IDS[i + 1..].contains(id), "{id} listed twice");
        }
    }

    #[test]
    fn surprise_rules_are_spec_rules() {
        for (n, rules) in SURPRISES {
            for rule in *rules {
                assert!(SPEC_RULE_IDS.contains(rule), "surprise {n}: {rule}");
            }
        }
    }

    #[test]
    fn go_slice_renders_like_fmt_s() {
        assert_eq!(go_slice(&[]), "[]");
        assert_eq!(go_slice(&["a"]), "[a]");
        assert_eq!(go_slice(&["a", "b"]), "[a b]");
    }

    #[test]
    fn quiet_trace_never_formats() {
        let mut t = Trace::quiet();
        t.fire("SBX-1", || unreachable!("quiet traces do not narrate"));
        t.fire("SBX-1", || unreachable!());
        assert_eq!(t.rules(), ["SBX-1"]);
    }
}
