//! Crash-loop backoff (spec 8, BO-1..6): the gate every container start goes through once the
//! container has an exited record. Times are plain seconds supplied by the caller; the gate has
//! no clock of its own.

use crate::rules::{RuleId, Trace};

/// Durations of the backoff, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    pub initial: i64,
    pub max: i64,
    /// An entry older than this (measured from its last allowed start to the record's
    /// `finishedAt`) counts as expired.
    pub reset_after: i64,
}

impl Default for BackoffPolicy {
    /// kubelet's defaults: 10 s, doubling, capped at 300 s (`MaxContainerBackOff`), reset after 600 s.
    fn default() -> Self {
        BackoffPolicy {
            initial: 10,
            max: 300,
            reset_after: 600,
        }
    }
}

impl BackoffPolicy {
    /// BO-6: an initial backoff above the cap is lowered to the cap.
    pub fn effective_initial(&self) -> i64 {
        self.initial.min(self.max)
    }

    pub fn is_default(&self) -> bool {
        *self == BackoffPolicy::default()
    }
}

/// The stored state for one key (pod + container + container hash).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffEntry {
    pub backoff: i64,
    pub last_update: i64,
}

/// What the gate says about one start request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateDecision {
    /// Start now; `backoff_after` is what the entry holds afterwards.
    Start { backoff_after: i64 },
    /// Skipped with `CrashLoopBackOff` until `earliest_start`.
    CrashLoopBackOff {
        earliest_start: i64,
        current_backoff: i64,
    },
}

/// The gate's answer with the rules that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub decision: GateDecision,
    pub rules: Vec<RuleId>,
}

/// One key's backoff state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff {
    pub entry: Option<BackoffEntry>,
}

impl Backoff {
    /// BO-5: the entry no longer counts when the container ran longer than `reset_after` after
    /// its last allowed start (flowcontrol's `hasExpired`), or when that start is older than
    /// `reset_after` (kubelet's housekeeping `backOff.GC()` drops such entries every 2 s). The
    /// second matters when the gate's record is older than the last start: a container killed
    /// by its liveness probe after long hours of running is gated by the crash before.
    fn expired(&self, policy: &BackoffPolicy, finished_at: i64, now: i64) -> bool {
        self.entry.is_some_and(|e| {
            finished_at - e.last_update > policy.reset_after
                || now - e.last_update > policy.reset_after
        })
    }

    /// A start request at `now` for a container whose newest exited record finished at
    /// `finished_at` (BO-1: containers without an exited record never reach the gate).
    pub fn request(
        &mut self,
        policy: &BackoffPolicy,
        finished_at: i64,
        now: i64,
        trace: &mut Trace,
    ) -> Gate {
        let mut rules = Vec::with_capacity(3);
        let mut fire = |rule: RuleId, trace: &mut Trace, say: &dyn Fn() -> String| {
            rules.push(rule);
            trace.fire(rule, say);
        };
        if !policy.is_default() {
            fire("BO-6", trace, &|| {
                format!(
                    "non-default backoff: initial {} s (effective {}), cap {} s, reset after {} s",
                    policy.initial,
                    policy.effective_initial(),
                    policy.max,
                    policy.reset_after
                )
            });
        }
        let expired = self.expired(policy, finished_at, now);
        match self.entry {
            Some(entry) if !expired && now - finished_at < entry.backoff => {
                fire("BO-2", trace, &|| {
                    format!(
                        "{} s since the crash at {finished_at} is less than the backoff of {} s: CrashLoopBackOff until {}",
                        now - finished_at,
                        entry.backoff,
                        finished_at + entry.backoff
                    )
                });
                return Gate {
                    decision: GateDecision::CrashLoopBackOff {
                        earliest_start: finished_at + entry.backoff,
                        current_backoff: entry.backoff,
                    },
                    rules,
                };
            }
            None => fire("BO-1", trace, &|| {
                "no backoff entry yet: the first restart happens immediately".into()
            }),
            Some(entry) if expired => fire("BO-5", trace, &|| {
                let ran = (finished_at - entry.last_update).max(now - entry.last_update);
                format!(
                    "{ran} s (> {} s) passed since the last allowed start: the backoff is reset",
                    policy.reset_after
                )
            }),
            Some(_) => {}
        }
        let backoff = match self.entry {
            Some(entry) if !expired => {
                let doubled = entry.backoff.saturating_mul(2);
                if doubled > policy.max {
                    fire("BO-4", trace, &|| {
                        format!("the doubled backoff is capped at {} s", policy.max)
                    });
                }
                doubled.min(policy.max)
            }
            _ => policy.effective_initial(),
        };
        let previous = self.entry.map(|e| e.backoff);
        fire("BO-3", trace, &|| match previous {
            Some(p) if !expired => {
                format!("start allowed; the backoff doubles from {p} s to {backoff} s")
            }
            _ => format!("start allowed; the backoff starts at {backoff} s"),
        });
        self.entry = Some(BackoffEntry {
            backoff,
            last_update: now,
        });
        Gate {
            decision: GateDecision::Start {
                backoff_after: backoff,
            },
            rules,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(policy: BackoffPolicy, attempts: &[(i64, i64)]) -> Vec<GateDecision> {
        let mut b = Backoff::default();
        attempts
            .iter()
            .map(|&(finished, now)| {
                b.request(&policy, finished, now, &mut Trace::quiet())
                    .decision
            })
            .collect()
    }

    #[test]
    fn bo_4_sequence_of_waits_is_0_10_20_40_80_160_300_300() {
        // Each crash happens right after its start and is retried exactly when allowed.
        let mut b = Backoff::default();
        let policy = BackoffPolicy::default();
        let mut now = 0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let finished = now + 1;
            let mut t = finished;
            loop {
                match b
                    .request(&policy, finished, t, &mut Trace::quiet())
                    .decision
                {
                    GateDecision::Start { .. } => break,
                    GateDecision::CrashLoopBackOff { earliest_start, .. } => t = earliest_start,
                }
            }
            waits.push(t - finished);
            now = t;
        }
        assert_eq!(waits, [0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn bo_2_is_strict() {
        let d = starts(BackoffPolicy::default(), &[(0, 0), (5, 14), (5, 15)]);
        assert_eq!(
            d[1],
            GateDecision::CrashLoopBackOff {
                earliest_start: 15,
                current_backoff: 10
            }
        );
        assert_eq!(d[2], GateDecision::Start { backoff_after: 20 });
    }

    #[test]
    fn bo_5_reset_needs_more_than_600_s() {
        let d = starts(
            BackoffPolicy::default(),
            &[(0, 0), (600, 600), (1201, 1201)],
        );
        // 600 s after the last start is not yet more than 600 s: the entry still gates.
        assert_eq!(
            d[1],
            GateDecision::CrashLoopBackOff {
                earliest_start: 610,
                current_backoff: 10
            }
        );
        assert_eq!(d[2], GateDecision::Start { backoff_after: 10 });
    }

    #[test]
    fn bo_5_an_entry_unused_for_600_s_is_reset_even_when_the_gated_crash_is_older() {
        // A liveness kill 20 min after the last allowed start is gated by the crash before that
        // start (the newest exited record): the entry is kubelet's GC'd one, not doubled.
        let d = starts(BackoffPolicy::default(), &[(0, 0), (5, 15), (5, 15 + 1200)]);
        assert_eq!(d[1], GateDecision::Start { backoff_after: 20 });
        assert_eq!(d[2], GateDecision::Start { backoff_after: 10 });
        let d = starts(BackoffPolicy::default(), &[(0, 0), (5, 15), (5, 615)]);
        assert_eq!(d[2], GateDecision::Start { backoff_after: 40 });
    }

    #[test]
    fn bo_6_initial_above_cap_is_lowered() {
        let policy = BackoffPolicy {
            initial: 10,
            max: 5,
            reset_after: 600,
        };
        let d = starts(policy, &[(0, 0), (1, 2)]);
        assert_eq!(d[0], GateDecision::Start { backoff_after: 5 });
        assert_eq!(
            d[1],
            GateDecision::CrashLoopBackOff {
                earliest_start: 6,
                current_backoff: 5
            }
        );
    }
}
