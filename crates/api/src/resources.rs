//! Compute resources of a Pod: `resource.Quantity` values, the API server's checks and
//! defaults for `requests` and `limits`, the pod's QoS class (`qos.GetPodQOS`), and its totals
//! as kubelet computes them (`resourcehelper.PodRequests`/`PodLimits`: the sum of the
//! containers, or the largest init container when that is more).
//!
//! podlab implements the `cpu`, `memory`, `ephemeral-storage` and `hugepages-<size>` resources;
//! other names are refused by [`crate::supported`]. `ephemeral-storage` takes no part in the QoS
//! class or the cgroups: kubelet's eviction manager enforces its limits (`podlab-kubelet`'s
//! `eviction`). Huge pages cannot be overcommitted: a request needs an equal
//! limit, and a container asking for them must ask for cpu or memory too (the API server's
//! rules).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::Amount;
use crate::FieldError;

/// The resources kubelet's QoS considers (and its cgroups are made of).
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
/// Local ephemeral storage: a container's writable layer and logs, the pod's disk emptyDirs.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// The prefix of the huge page resources: `hugepages-2Mi`, `hugepages-1Gi`.
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// The page size in bytes of a `hugepages-<size>` resource (`HugePageSizeFromResourceName`);
/// None for another name or a size that is not a positive quantity.
pub fn hugepage_size(name: &str) -> Option<i64> {
    let size = name.strip_prefix(HUGEPAGES_PREFIX)?;
    Amount::parse(size)
        .ok()
        .map(Amount::value)
        .filter(|v| *v > 0)
}

/// The `hugepages-<size>` entries of a requests or limits map: (page size in bytes, bytes).
pub fn hugepages(map: Option<&BTreeMap<String, Quantity>>) -> Vec<(i64, i64)> {
    map.into_iter()
        .flatten()
        .filter_map(|(name, q)| Some((hugepage_size(name)?, Amount::parse(&q.0).ok()?.value())))
        .collect()
}

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
    for ((kind, name), amount) in &parsed {
        if !name.starts_with(HUGEPAGES_PREFIX) {
            continue;
        }
        let divisible = hugepage_size(name).is_some_and(|size| amount.value() % size == 0);
        if !divisible {
            let text = &[&resources.limits, &resources.requests][usize::from(*kind == "requests")]
                .as_ref()
                .expect("parsed from it")[*name]
                .0;
            errors.push(FieldError::new(
                format!("{path}.{kind}[{name}]"),
                format!(
                    "Invalid value: {text:?}: {text} is not positive integer multiple of {name}"
                ),
            ));
        }
    }
    for (name, quantity) in resources.requests.iter().flatten() {
        let overcommit = !name.starts_with(HUGEPAGES_PREFIX);
        let Some(request) = parsed.get(&("requests", name.as_str())) else {
            continue;
        };
        let Some(limit) = parsed.get(&("limits", name.as_str())) else {
            if !overcommit {
                errors.push(FieldError::new(
                    format!("{path}.limits"),
                    "Required value: Limit must be set for non overcommitable resources",
                ));
            }
            continue;
        };
        if !overcommit && request != limit {
            let limit_text = &resources.limits.as_ref().expect("parsed from it")[name].0;
            errors.push(FieldError::new(
                format!("{path}.requests[{name}]"),
                format!(
                    "Invalid value: {:?}: must be equal to {name} limit of {limit_text}",
                    quantity.0
                ),
            ));
        } else if request > limit {
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
    let names = || {
        [&resources.limits, &resources.requests]
            .into_iter()
            .flatten()
            .flat_map(|m| m.keys())
    };
    if names().any(|n| n.starts_with(HUGEPAGES_PREFIX)) && !names().any(|n| n == CPU || n == MEMORY)
    {
        errors.push(FieldError::new(
            path.to_string(),
            "Forbidden: HugePages require cpu or memory",
        ));
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

    fn errors(resources: &str) -> Vec<String> {
        let requirements: ResourceRequirements = serde_yaml_ng::from_str(resources).unwrap();
        let mut errors = Vec::new();
        validate(&requirements, "spec.containers[0].resources", &mut errors);
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn hugepages_are_checked_as_the_api_server_does() {
        assert!(errors("{limits: {memory: 64Mi, hugepages-2Mi: 4Mi}, requests: {memory: 64Mi, hugepages-2Mi: 4Mi}}").is_empty());
        assert_eq!(
            errors("{limits: {memory: 64Mi, hugepages-2Mi: 4Mi}, requests: {hugepages-2Mi: 2Mi}}"),
            ["spec.containers[0].resources.requests[hugepages-2Mi]: Invalid value: \"2Mi\": must be equal to hugepages-2Mi limit of 4Mi"]
        );
        assert_eq!(
            errors("{requests: {cpu: 100m, hugepages-2Mi: 2Mi}}"),
            ["spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"]
        );
        assert_eq!(
            errors("{limits: {hugepages-2Mi: 2Mi}, requests: {hugepages-2Mi: 2Mi}}"),
            ["spec.containers[0].resources: Forbidden: HugePages require cpu or memory"]
        );
        assert_eq!(
            errors("{limits: {cpu: 1, hugepages-2Mi: 3Mi}, requests: {hugepages-2Mi: 3Mi}}"),
            [
                "spec.containers[0].resources.limits[hugepages-2Mi]: Invalid value: \"3Mi\": 3Mi is not positive integer multiple of hugepages-2Mi",
                "spec.containers[0].resources.requests[hugepages-2Mi]: Invalid value: \"3Mi\": 3Mi is not positive integer multiple of hugepages-2Mi",
            ]
        );
        assert_eq!(hugepage_size("hugepages-1Gi"), Some(1 << 30));
        assert_eq!(hugepage_size("hugepages-x"), None);
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
