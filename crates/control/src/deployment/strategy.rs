//! The arithmetic of a rollout (deployment/util/deployment_util.go): `maxSurge` and
//! `maxUnavailable` as ints or percentages of the desired replicas (surge rounded up,
//! unavailable rounded down, both zero meaning one unavailable), and the replica counts a
//! RollingUpdate may reach in one step.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The defaults of `SetDefaults_Deployment` for both fenceposts.
pub const DEFAULT_FENCEPOST: &str = "25%";

/// `intstr.GetScaledValueFromIntOrPercent`: an int as it is, `N%` of `total` rounded up or
/// down. A malformed percentage is the API server's validation message.
pub fn scaled_value(value: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(text) => {
            let percent: i64 = text
                .strip_suffix('%')
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid type: string is not a percentage: {text:?}"))?;
            let scaled = percent * i64::from(total);
            let value = if round_up {
                (scaled + 99).div_euclid(100)
            } else {
                scaled.div_euclid(100)
            };
            Ok(value as i32)
        }
    }
}

pub fn replicas(deployment: &Deployment) -> i32 {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
}

pub fn is_rolling_update(deployment: &Deployment) -> bool {
    let strategy = deployment.spec.as_ref().and_then(|s| s.strategy.as_ref());
    strategy
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

fn fenceposts(deployment: &Deployment) -> (IntOrString, IntOrString) {
    let rolling = deployment
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let default = || IntOrString::String(DEFAULT_FENCEPOST.into());
    (
        rolling
            .and_then(|r| r.max_surge.clone())
            .unwrap_or_else(default),
        rolling
            .and_then(|r| r.max_unavailable.clone())
            .unwrap_or_else(default),
    )
}

/// `ResolveFenceposts`: (surge, unavailable) as counts of pods.
pub fn resolve_fenceposts(deployment: &Deployment) -> (i32, i32) {
    let desired = replicas(deployment);
    let (surge, unavailable) = fenceposts(deployment);
    let surge = scaled_value(&surge, desired, true).unwrap_or(0);
    let unavailable = scaled_value(&unavailable, desired, false).unwrap_or(0);
    // Rounding down may make both zero; then one pod may be unavailable, as upstream decides
    // ("surge might not work due to quota").
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable)
}

/// `MaxUnavailable`: at most the desired replicas; 0 for Recreate or zero replicas.
pub fn max_unavailable(deployment: &Deployment) -> i32 {
    let desired = replicas(deployment);
    if !is_rolling_update(deployment) || desired == 0 {
        return 0;
    }
    resolve_fenceposts(deployment).1.min(desired)
}

/// `MaxSurge`: 0 for Recreate.
pub fn max_surge(deployment: &Deployment) -> i32 {
    if !is_rolling_update(deployment) {
        return 0;
    }
    resolve_fenceposts(deployment).0
}

pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

/// The available replicas a ReplicaSet's status reports, never more than its `spec.replicas`:
/// the ReplicaSet controller writes the status of the sync that deletes surplus pods from the
/// pods it had before, so right after a scale-down the status still counts the doomed ones.
pub fn rs_available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
        .min(rs_replicas(rs))
}

/// `GetReplicaCountForReplicaSets`: the sum of `spec.replicas`.
pub fn spec_total<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    sets.into_iter().map(rs_replicas).sum()
}

/// `GetAvailableReplicaCountForReplicaSets`.
pub fn available_total<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    sets.into_iter().map(rs_available).sum()
}

/// `NewRSNewReplicas`: how far the new ReplicaSet may grow now. RollingUpdate: up to
/// `replicas + maxSurge` pods in all (counted by `spec.replicas`), never past `replicas`;
/// Recreate: all at once (its old pods are gone by then).
pub fn new_rs_new_replicas(deployment: &Deployment, all: &[&ReplicaSet], new: &ReplicaSet) -> i32 {
    let desired = replicas(deployment);
    let current_new = rs_replicas(new);
    if !is_rolling_update(deployment) {
        return desired;
    }
    let (surge, _) = fenceposts(deployment);
    let surge = scaled_value(&surge, desired, true).unwrap_or(0);
    let current = spec_total(all.iter().copied());
    let max_total = desired + surge;
    if current >= max_total {
        return current_new;
    }
    current_new + (max_total - current).min(desired - current_new)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{
        DeploymentSpec, DeploymentStrategy, ReplicaSetSpec, RollingUpdateDeployment,
    };

    use super::*;

    fn deployment(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pct(text: &str) -> IntOrString {
        IntOrString::String(text.into())
    }

    fn rs(replicas: i32) -> ReplicaSet {
        ReplicaSet {
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn percentages_round_surge_up_and_unavailable_down() {
        assert_eq!(scaled_value(&pct("25%"), 10, true), Ok(3));
        assert_eq!(scaled_value(&pct("25%"), 10, false), Ok(2));
        assert_eq!(scaled_value(&IntOrString::Int(2), 10, false), Ok(2));
        assert!(scaled_value(&pct("x%"), 10, false).is_err());
        assert_eq!(
            resolve_fenceposts(&deployment(10, pct("25%"), pct("25%"))),
            (3, 2)
        );
        // 25% of 3: surge 1 (up), unavailable 0 (down).
        assert_eq!(
            resolve_fenceposts(&deployment(3, pct("25%"), pct("25%"))),
            (1, 0)
        );
        // Both resolving to zero: one may be unavailable.
        assert_eq!(
            resolve_fenceposts(&deployment(3, pct("0%"), pct("10%"))),
            (0, 1)
        );
        assert_eq!(
            max_unavailable(&deployment(2, IntOrString::Int(0), IntOrString::Int(5))),
            2
        );
    }

    #[test]
    fn the_new_replicaset_grows_within_the_surge() {
        let d = deployment(3, IntOrString::Int(1), IntOrString::Int(1));
        let (old, new) = (rs(3), rs(0));
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 1);
        let (old, new) = (rs(2), rs(1));
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 2);
        let (old, new) = (rs(0), rs(3));
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 3);
    }
}
