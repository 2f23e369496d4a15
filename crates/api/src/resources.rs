//! Compute resources of a Pod: `resource.Quantity` values, the API server's checks and
//! defaults for `requests` and `limits`, the pod's QoS class (`qos.GetPodQOS`), and its totals
//! as kubelet computes them (`resourcehelper.PodRequests`/`PodLimits`: the sum of the
//! containers, or the largest init container when that is more).
//!
//! podlab implements the `cpu` and `memory` resources; other names are refused by
//! [`crate::supported`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::Amount;
use crate::FieldError;

/// The resources podlab implements (kubelet's QoS considers exactly these).
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";

/// The amount of resource `name` in a requests or limits map, if set and readable.
pub fn amount(map: Option<&BTreeMap<String, Quantity>>, name: &str) -> Option<Amount> {
    map?.get(name).and_then(|q| Amount::parse(&q.0).ok())
}

/// What one container asks for: (cpu, memory) requests and limits, each None when unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContainerResources {
    pub cpu_request: Option<Amount>,
    pub memory_request: Option<Amount>,
    pub cpu_limit: Option<Amount>,
    pub memory_limit: Option<Amount>,
}

impl ContainerResources {
    pub fn of(container: &Container) -> ContainerResources {
        let r = container.resources.as_ref();
        let requests = r.and_then(|r| r.requests.as_ref());
        let limits = r.and_then(|r| r.limits.as_ref());
        ContainerResources {
            cpu_request: amount(requests, CPU),
            memory_request: amount(requests, MEMORY),
            cpu_limit: amount(limits, CPU),
            memory_limit: amount(limits, MEMORY),
        }
    }
}

/// The pod's QoS class, by kubelet's rules (`qos.GetPodQOS`): BestEffort when no container
/// (init containers included) requests or limits cpu or memory; Guaranteed when every one
/// limits both and the pod's requests equal its limits for each; Burstable otherwise. Zero
/// quantities count as unset.
pub fn pod_qos(pod: &Pod) -> &'static str {
    let Some(spec) = &pod.spec else {
        return "BestEffort";
    };
    let mut requests: BTreeMap<&str, Amount> = BTreeMap::new();
    let mut limits: BTreeMap<&str, Amount> = BTreeMap::new();
    let mut guaranteed = true;
    for container in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let r = container.resources.as_ref();
        for (map, into) in [
            (r.and_then(|r| r.requests.as_ref()), &mut requests),
            (r.and_then(|r| r.limits.as_ref()), &mut limits),
        ] {
            for name in [CPU, MEMORY] {
                if let Some(value) = amount(map, name).filter(|a| !a.is_zero()) {
                    let total = into.entry(name).or_insert(Amount::ZERO);
                    *total = *total + value;
                }
            }
        }
        let container_limits = r.and_then(|r| r.limits.as_ref());
        let limited = [CPU, MEMORY]
            .iter()
            .all(|name| amount(container_limits, name).is_some_and(|a| !a.is_zero()));
        guaranteed &= limited;
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed
        && requests.len() == limits.len()
        && requests
            .iter()
            .all(|(name, req)| limits.get(name) == Some(req))
    {
        return "Guaranteed";
    }
    "Burstable"
}

/// The pod's effective requests or limits of one resource, as kubelet sums them
/// (`PodRequests`/`PodLimits`): the containers' sum, or the largest init container's when
/// larger (init containers run one at a time, before the others).
pub fn pod_total(pod: &Pod, pick: impl Fn(&ContainerResources) -> Option<Amount>) -> Amount {
    let Some(spec) = &pod.spec else {
        return Amount::ZERO;
    };
    let sum = spec
        .containers
        .iter()
        .map(|c| pick(&ContainerResources::of(c)).unwrap_or(Amount::ZERO))
        .fold(Amount::ZERO, |a, b| a + b);
    let init_max = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| pick(&ContainerResources::of(c)).unwrap_or(Amount::ZERO))
        .max()
        .unwrap_or(Amount::ZERO);
    sum.max(init_max)
}

/// Whether every container (init ones included) sets the limit `pick` reads: kubelet only caps
/// the pod's cgroup when all do.
pub fn all_limited(pod: &Pod, pick: impl Fn(&ContainerResources) -> Option<Amount>) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .all(|c| pick(&ContainerResources::of(c)).is_some_and(|a| !a.is_zero()))
}

/// The API server's defaulting: a resource with a limit and no request is requested at its
/// limit.
pub fn default_requests(resources: &mut ResourceRequirements) {
    let Some(limits) = resources.limits.clone() else {
        return;
    };
    let requests = resources.requests.get_or_insert_with(BTreeMap::new);
    for (name, limit) in limits {
        requests.entry(name).or_insert(limit);
    }
}

/// The API server's checks (`ValidateResourceRequirements`), at `path`
/// (`spec.containers[0].resources`).
pub fn validate(resources: &ResourceRequirements, path: &str, errors: &mut Vec<FieldError>) {
    let mut parsed: BTreeMap<(&str, &str), Amount> = BTreeMap::new();
    for (kind, map) in [
        ("limits", &resources.limits),
        ("requests", &resources.requests),
    ] {
        for (name, quantity) in map.iter().flatten() {
            let field = format!("{path}.{kind}[{name}]");
            match Amount::parse(&quantity.0) {
                Err(why) => errors.push(FieldError::new(
                    field,
                    format!("Invalid value: {:?}: {why}", quantity.0),
                )),
                Ok(amount) if amount < Amount::ZERO => errors.push(FieldError::new(
                    field,
                    format!(
                        "Invalid value: {:?}: must be greater than or equal to 0",
                        quantity.0
                    ),
                )),
                Ok(amount) => {
                    parsed.insert((kind, name.as_str()), amount);
                }
            }
        }
    }
    for (name, quantity) in resources.requests.iter().flatten() {
        let (Some(request), Some(limit)) = (
            parsed.get(&("requests", name.as_str())),
            parsed.get(&("limits", name.as_str())),
        ) else {
            continue;
        };
        if request > limit {
            let limit_text = &resources.limits.as_ref().expect("parsed from it")[name].0;
            errors.push(FieldError::new(
                format!("{path}.requests[{name}]"),
                format!(
                    "Invalid value: {:?}: must be less than or equal to {name} limit of {limit_text}",
                    quantity.0
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: &str) -> Pod {
        crate::decode_pod(
            &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{containers}"),
            "test",
        )
        .unwrap()
    }

    #[test]
    fn qos_classes_follow_kubelet() {
        let best = pod("  containers: [{name: a, image: busybox}]");
        assert_eq!(pod_qos(&best), "BestEffort");
        let guaranteed = pod("  containers: [{name: a, image: busybox, resources: {limits: {cpu: 500m, memory: 64Mi}}}]");
        assert_eq!(
            pod_qos(&guaranteed),
            "Guaranteed",
            "requests defaulted to limits"
        );
        let same_value = pod("  containers: [{name: a, image: busybox, resources: {requests: {cpu: '0.5', memory: 64Mi}, limits: {cpu: 500m, memory: '67108864'}}}]");
        assert_eq!(pod_qos(&same_value), "Guaranteed", "compared as quantities");
        let burstable =
            pod("  containers: [{name: a, image: busybox, resources: {requests: {memory: 32Mi}}}]");
        assert_eq!(pod_qos(&burstable), "Burstable");
        let half = pod("  containers:\n  - {name: a, image: busybox, resources: {limits: {cpu: 1, memory: 1Gi}}}\n  - {name: b, image: busybox}");
        assert_eq!(pod_qos(&half), "Burstable", "one container without limits");
        let zero =
            pod("  containers: [{name: a, image: busybox, resources: {requests: {cpu: '0'}}}]");
        assert_eq!(pod_qos(&zero), "BestEffort", "zero counts as unset");
    }

    #[test]
    fn pod_totals_take_the_largest_init_container() {
        let p = pod("  initContainers: [{name: i, image: busybox, resources: {requests: {cpu: '2'}}}]\n  containers:\n  - {name: a, image: busybox, resources: {requests: {cpu: 500m}}}\n  - {name: b, image: busybox, resources: {requests: {cpu: 700m}}}");
        assert_eq!(pod_total(&p, |c| c.cpu_request).milli(), 2000);
        let p = pod("  containers:\n  - {name: a, image: busybox, resources: {requests: {cpu: 500m}}}\n  - {name: b, image: busybox, resources: {requests: {cpu: 700m}}}");
        assert_eq!(pod_total(&p, |c| c.cpu_request).milli(), 1200);
        assert!(!all_limited(&p, |c| c.cpu_limit));
    }
}
