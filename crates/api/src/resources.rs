//! Compute resources of a Pod: `resource.Quantity` values, the API server's checks and
//! defaults for `requests` and `limits`, the pod's QoS class (`qos.GetPodQOS`), and its totals
//! as kubelet computes them (`resourcehelper.PodRequests`/`PodLimits`: the sum of the
//! containers, or the largest init container when that is more).
//!
//! Pod-level `resources` (`spec.resources`, cpu and memory) are the pod's budget when set: they
//! decide the QoS class and the pod's requests and limits ([`pod_request`], [`pod_limit`]).
//!
//! podlab implements the `cpu`, `memory`, `ephemeral-storage` and `hugepages-<size>` resources;
//! other names are refused by [`crate::supported`]. `ephemeral-storage` takes no part in the QoS
//! class or the cgroups: kubelet's eviction manager enforces its limits (`podlab-kubelet`'s
//! `eviction`). Huge pages cannot be overcommitted: a request needs an equal
//! limit, and a container asking for them must ask for cpu or memory too (the API server's
//! rules).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
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
        container
            .resources
            .as_ref()
            .map(ContainerResources::from_requirements)
            .unwrap_or_default()
    }

    /// The cpu and memory of a `resources` stanza.
    pub fn from_requirements(r: &ResourceRequirements) -> ContainerResources {
        let (requests, limits) = (r.requests.as_ref(), r.limits.as_ref());
        ContainerResources {
            cpu_request: amount(requests, CPU),
            memory_request: amount(requests, MEMORY),
            cpu_limit: amount(limits, CPU),
            memory_limit: amount(limits, MEMORY),
        }
    }

    /// The request of `name` (`cpu`, else memory).
    pub fn request(&self, name: &str) -> Option<Amount> {
        match name {
            CPU => self.cpu_request,
            _ => self.memory_request,
        }
    }

    /// The limit of `name` (`cpu`, else memory).
    pub fn limit(&self, name: &str) -> Option<Amount> {
        match name {
            CPU => self.cpu_limit,
            _ => self.memory_limit,
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
    if let Some(level) = pod_level(pod) {
        return pod_level_qos(level);
    }
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

/// The QoS class of pod-level resources, which decide it alone when set: BestEffort without
/// cpu or memory, Guaranteed when both are limited and requested at their limits.
fn pod_level_qos(resources: &ResourceRequirements) -> &'static str {
    let set = |map: &Option<BTreeMap<String, Quantity>>| -> BTreeMap<&str, Amount> {
        [CPU, MEMORY]
            .into_iter()
            .filter_map(|name| Some((name, amount(map.as_ref(), name).filter(|a| !a.is_zero())?)))
            .collect()
    };
    let (requests, limits) = (set(&resources.requests), set(&resources.limits));
    match (
        requests.is_empty() && limits.is_empty(),
        limits.len() == 2 && requests == limits,
    ) {
        (true, _) => "BestEffort",
        (false, true) => "Guaranteed",
        (false, false) => "Burstable",
    }
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

/// A pod's containers, then its init containers (not its ephemeral ones, which have no
/// resources).
pub fn containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
}

/// The pod-level `resources` (`spec.resources`, KEP-2837, beta and on in Kubernetes 1.34), when
/// they name cpu or memory (`IsPodLevelResourcesSet`): the pod's budget, which its containers
/// share; it decides the QoS class and the pod cgroup's values.
pub fn pod_level(pod: &Pod) -> Option<&ResourceRequirements> {
    let resources = pod.spec.as_ref()?.resources.as_ref()?;
    let names_one = |map: &Option<BTreeMap<String, Quantity>>| {
        map.as_ref()
            .is_some_and(|m| m.contains_key(CPU) || m.contains_key(MEMORY))
    };
    (names_one(&resources.requests) || names_one(&resources.limits)).then_some(resources)
}

/// The pod's request of `name` (`PodRequests`): the pod-level request when set, else the
/// containers' (summed, or the largest init container's when more).
pub fn pod_request(pod: &Pod, name: &str) -> Amount {
    let level = pod_level(pod).and_then(|r| amount(r.requests.as_ref(), name));
    level.unwrap_or_else(|| pod_total(pod, |c| c.request(name)))
}

/// The pod's limit of `name` (`PodLimits`) when it has one: the pod-level limit when set, else
/// the containers' sum when every container sets it (kubelet caps the pod cgroup only then).
pub fn pod_limit(pod: &Pod, name: &str) -> Option<Amount> {
    let pick = |c: &ContainerResources| c.limit(name);
    if let Some(limit) = pod_level(pod).and_then(|r| amount(r.limits.as_ref(), name)) {
        return Some(limit);
    }
    all_limited(pod, pick).then(|| pod_total(pod, pick))
}

/// The API server's defaulting of pod-level requests (`defaultPodRequests`): for cpu and
/// memory with a pod-level limit and no pod-level request, the containers' aggregate request
/// when any container requests it, else the limit; huge pages at their limit.
pub fn default_pod_requests(pod: &mut Pod) {
    let Some(limits) = pod_level(pod).and_then(|r| r.limits.clone()) else {
        return;
    };
    let mut defaults = BTreeMap::new();
    for name in [CPU, MEMORY] {
        let Some(limit) = limits.get(name) else {
            continue;
        };
        let any_request = pod.spec.iter().flat_map(containers).any(|c| {
            amount(c.resources.as_ref().and_then(|r| r.requests.as_ref()), name).is_some()
        });
        let value = match any_request {
            true => Quantity(quantity_text(name, pod_total(pod, |c| c.request(name)))),
            false => limit.clone(),
        };
        defaults.insert(name.to_string(), value);
    }
    // Huge pages cannot be overcommitted: requested at their limit.
    for (name, limit) in &limits {
        if name.starts_with(HUGEPAGES_PREFIX) {
            defaults.insert(name.clone(), limit.clone());
        }
    }
    let resources = pod
        .spec
        .as_mut()
        .and_then(|s| s.resources.as_mut())
        .expect("pod_level found them");
    let requests = resources.requests.get_or_insert_with(BTreeMap::new);
    for (name, value) in defaults {
        requests.entry(name).or_insert(value);
    }
}

/// A sum of quantities as the API server writes it: milli-CPUs in their canonical form (`1500m`,
/// `2`), bytes in binary units when whole KiB (`6Gi`).
fn quantity_text(name: &str, amount: Amount) -> String {
    let text = match name {
        CPU => format!("{}m", amount.milli()),
        _ if amount.value() % 1024 == 0 => format!("{}Ki", amount.value() / 1024),
        _ => amount.value().to_string(),
    };
    crate::quantity::canonical(&text).unwrap_or(text)
}

/// The API server's checks of pod-level resources (`validatePodResources`,
/// `validatePodResourceConsistency`): cpu, memory and huge pages only, quantities and limits ≥
/// requests as for a container (huge pages: equal), pod requests at least the containers'
/// aggregate, a huge page limit at least the containers' aggregate limit, and no container limit
/// above the pod's.
pub fn validate_pod_level(pod: &Pod, errors: &mut Vec<FieldError>) {
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .is_none()
    {
        return;
    }
    // The API server validates what its defaulting made: the containers' requests from their
    // limits, then the pod's from its limits or the containers' sum.
    let mut pod = pod.clone();
    if let Some(spec) = pod.spec.as_mut() {
        let containers = spec.containers.iter_mut();
        for container in containers.chain(spec.init_containers.iter_mut().flatten()) {
            if let Some(resources) = container.resources.as_mut() {
                default_requests(resources);
            }
        }
    }
    default_pod_requests(&mut pod);
    let pod = &pod;
    let resources = pod
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .expect("checked above");
    let path = "spec.resources";
    let mut clean = true;
    for (kind, map) in [
        ("limits", &resources.limits),
        ("requests", &resources.requests),
    ] {
        for name in map.iter().flatten().map(|(n, _)| n) {
            let field = format!("{path}.{kind}[{name}]");
            if name != CPU && name != MEMORY && !name.starts_with(HUGEPAGES_PREFIX) {
                clean = false;
                errors.push(FieldError::new(
                    field,
                    format!("Unsupported value: {name:?}: supported values: \"cpu\", \"hugepages-\", \"memory\""),
                ));
            }
        }
    }
    validate(resources, path, errors);
    if !clean {
        return;
    }
    for name in [CPU, MEMORY] {
        let Some(requested) = amount(resources.requests.as_ref(), name) else {
            continue;
        };
        let aggregate = pod_total(pod, |c| c.request(name));
        if requested < aggregate {
            let aggregate = quantity_text(name, aggregate);
            let text = &resources.requests.as_ref().expect("read from it")[name].0;
            errors.push(FieldError::new(
                format!("{path}.requests[{name}]"),
                format!(
                    "Invalid value: {text:?}: must be greater than or equal to aggregate container requests of {aggregate}"
                ),
            ));
        }
    }
    for (name, limit) in resources.limits.iter().flatten() {
        let (Some(size), Ok(pod_limit)) = (hugepage_size(name), Amount::parse(&limit.0)) else {
            continue;
        };
        let aggregate: i64 = pod
            .spec
            .iter()
            .flat_map(containers)
            .flat_map(|c| hugepages(c.resources.as_ref().and_then(|r| r.limits.as_ref())))
            .filter(|(s, _)| *s == size)
            .map(|(_, bytes)| bytes)
            .sum();
        if pod_limit.value() < aggregate {
            let aggregate = Amount::parse(&aggregate.to_string()).unwrap_or(Amount::ZERO);
            errors.push(FieldError::new(
                format!("{path}.limits[{name}]"),
                format!(
                    "Invalid value: {:?}: must be greater than or equal to aggregate container limits of {}",
                    limit.0,
                    quantity_text(MEMORY, aggregate)
                ),
            ));
        }
    }
    let regular = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .enumerate();
    for (i, container) in regular {
        for name in [CPU, MEMORY] {
            let pod_limit = amount(resources.limits.as_ref(), name);
            let limits = container.resources.as_ref().and_then(|r| r.limits.as_ref());
            if let (Some(pod_limit), Some(limit)) = (pod_limit, amount(limits, name)) {
                if limit > pod_limit {
                    // The API server builds this path from the pod-level one.
                    errors.push(FieldError::new(
                        format!("{path}.containers[{i}][{name}].limits"),
                        format!(
                            "Invalid value: {:?}: must be less than or equal to pod limits of {}",
                            limits.expect("read from it")[name].0,
                            resources.limits.as_ref().expect("read from it")[name].0
                        ),
                    ));
                }
            }
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
    fn pod_level_resources_decide_the_qos_class_and_default_their_requests() {
        let guaranteed = pod("  resources: {limits: {cpu: 500m, memory: 64Mi}}\n  containers: [{name: a, image: busybox}, {name: b, image: busybox}]");
        assert_eq!(
            pod_qos(&guaranteed),
            "Guaranteed",
            "requests defaulted to the limits"
        );
        let requests = pod_level(&guaranteed).unwrap().requests.clone().unwrap();
        assert_eq!(
            (requests["cpu"].0.as_str(), requests["memory"].0.as_str()),
            ("500m", "64Mi")
        );
        assert_eq!(pod_limit(&guaranteed, CPU).map(Amount::milli), Some(500));
        assert_eq!(pod_request(&guaranteed, MEMORY).value(), 64 << 20);
        // A container requests cpu: the pod's cpu request defaults to the containers' sum.
        let burstable = pod("  resources: {limits: {cpu: \"1\", memory: 64Mi}}\n  containers: [{name: a, image: busybox, resources: {requests: {cpu: 200m}}}, {name: b, image: busybox, resources: {requests: {cpu: 300m}}}]");
        let requests = pod_level(&burstable).unwrap().requests.clone().unwrap();
        assert_eq!(requests["cpu"].0, "500m");
        assert_eq!(pod_qos(&burstable), "Burstable");
        let memory_only = pod("  resources: {requests: {memory: 64Mi}}\n  containers: [{name: a, image: busybox, resources: {limits: {cpu: \"1\", memory: 32Mi}}}]");
        assert_eq!(
            pod_qos(&memory_only),
            "Burstable",
            "pod-level resources alone decide"
        );
        assert_eq!(
            pod_limit(&memory_only, CPU).map(Amount::milli),
            Some(1000),
            "the containers' when the pod sets none"
        );
    }

    #[test]
    fn pod_level_resources_are_checked_against_the_containers() {
        let refused = |spec: &str| -> Vec<String> {
            let text = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{spec}");
            match crate::decode_pod(&text, "test") {
                Err(crate::ManifestError::Invalid { errors, .. }) => {
                    errors.iter().map(ToString::to_string).collect()
                }
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            refused("  resources: {requests: {cpu: \"1\"}}\n  containers: [{name: a, image: busybox, resources: {requests: {cpu: 700m}}}, {name: b, image: busybox, resources: {requests: {cpu: 800m}}}]"),
            ["spec.resources.requests[cpu]: Invalid value: \"1\": must be greater than or equal to aggregate container requests of 1500m"]
        );
        assert_eq!(
            refused("  resources: {limits: {memory: 64Mi}}\n  containers: [{name: a, image: busybox, resources: {limits: {memory: 128Mi}}}]"),
            [
                "spec.resources.requests[memory]: Invalid value: \"128Mi\": must be less than or equal to memory limit of 64Mi",
                "spec.resources.containers[0][memory].limits: Invalid value: \"128Mi\": must be less than or equal to pod limits of 64Mi"
            ]
        );
        assert_eq!(
            refused("  resources: {limits: {memory: 64Mi, hugepages-2Mi: 4Mi}}\n  containers: [{name: a, image: busybox, resources: {limits: {memory: 16Mi, hugepages-2Mi: 6Mi}}}]"),
            ["spec.resources.limits[hugepages-2Mi]: Invalid value: \"4Mi\": must be greater than or equal to aggregate container limits of 6Mi"]
        );
        let fine = pod("  resources: {limits: {memory: 64Mi, hugepages-2Mi: 8Mi}}\n  containers: [{name: a, image: busybox, resources: {limits: {memory: 16Mi, hugepages-2Mi: 6Mi}}}]");
        let requests = fine.spec.unwrap().resources.unwrap().requests.unwrap();
        assert_eq!(
            requests["hugepages-2Mi"].0, "8Mi",
            "huge pages requested at their limit"
        );
        assert_eq!(
            refused("  resources: {requests: {ephemeral-storage: 1Gi}}\n  containers: [{name: a, image: busybox}]"),
            ["spec.resources.requests[ephemeral-storage]: Unsupported value: \"ephemeral-storage\": supported values: \"cpu\", \"hugepages-\", \"memory\""]
        );
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
