//! kubelet's container manager for a pod's resources (`pkg/kubelet/cm`, `pkg/kubelet/qos`):
//! the pod's cgroup name and values, each container's cgroup values, and `oom_score_adj` by
//! QoS class.
//!
//! | what | kubelet |
//! |---|---|
//! | pod cgroup | `kubepods/pod<uid>` (Guaranteed), `kubepods/burstable/pod<uid>`, `kubepods/besteffort/pod<uid>` |
//! | pod values | `ResourceConfigForPod`: shares from the pod's requests; quota and memory limit from the pod-level limits (`spec.resources`) when set, else only when every container declares the limit (always for Guaranteed); BestEffort: 2 shares; `pids.max` from `podPidsLimit` |
//! | container values | `calculateLinuxResources`: shares from the cpu request (from the limit when only that is set), CFS quota from the cpu limit over a 100 ms period, the memory limit |
//! | huge pages | for every page size the machine has (`/sys/kernel/mm/hugepages`): the pod's cgroup gets the pod's `hugepages-<size>` requests summed (`HugePageLimits`; the pod-level request of a size when set), the container's its limit (its request when no limit: `GetHugepageLimitsFromResources`), 0 for a size not asked for; skipped where the hugetlb controller is not mounted |
//! | `oom_score_adj` | Guaranteed -997, BestEffort 1000, Burstable `1000 - 1000 × memory request / node memory`, kept within 3..999 (`GetContainerOOMScoreAdjust`); with a pod-level memory request, a container that requests none counts an equal share of what the others leave of it |
//!
//! The pod pids limit is kubelet's `podPidsLimit` node option, which defaults to unlimited;
//! podlab's default is [`DEFAULT_POD_PIDS_LIMIT`] (a fork bomb in one pod must not take the
//! node's pid space), `PODLAB_POD_PIDS_LIMIT` sets another (-1: unlimited, kubelet's default).

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Container, Pod};
use podlab_api::quantity::Amount;
use podlab_api::resources::{
    hugepages, pod_level, pod_limit, pod_qos, pod_request, ContainerResources as Asked, CPU, MEMORY,
};
use podlab_cgroups::cpu::{milli_cpu_to_quota, milli_cpu_to_shares, MIN_SHARES, QUOTA_PERIOD_US};
use podlab_cgroups::hugetlb::{self, HugepageLimit};
use podlab_cgroups::{QosClass, Resources};
use podlab_runtime::config::ContainerResources;

/// podlab's `podPidsLimit`: processes (tasks) one pod may have at once.
pub const DEFAULT_POD_PIDS_LIMIT: i64 = 1024;

/// kubelet's `oom_score_adj` of Guaranteed containers, and of BestEffort ones.
pub const GUARANTEED_OOM_SCORE_ADJ: i32 = -997;
pub const BEST_EFFORT_OOM_SCORE_ADJ: i32 = 1000;

pub fn qos_class(pod: &Pod) -> QosClass {
    match pod_qos(pod) {
        "Guaranteed" => QosClass::Guaranteed,
        "Burstable" => QosClass::Burstable,
        _ => QosClass::BestEffort,
    }
}

/// The pod's cgroup below the node's cgroup root (kubelet's cgroupfs name).
pub fn pod_cgroup_parent(pod: &Pod) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    match qos_class(pod).folder() {
        Some(folder) => format!("kubepods/{folder}/pod{uid}"),
        None => format!("kubepods/pod{uid}"),
    }
}

/// `podPidsLimit`: `$PODLAB_POD_PIDS_LIMIT`, else [`DEFAULT_POD_PIDS_LIMIT`].
pub fn pod_pids_limit() -> i64 {
    std::env::var("PODLAB_POD_PIDS_LIMIT")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_POD_PIDS_LIMIT)
}

/// The pod cgroup's values (`ResourceConfigForPod`).
pub fn pod_resources(pod: &Pod) -> Resources {
    let cpu_requests = pod_request(pod, CPU).milli();
    let cpu_limit = pod_limit(pod, CPU).map(Amount::milli);
    let memory_limit = pod_limit(pod, MEMORY).map(Amount::value);
    let mut resources = Resources {
        pids_limit: pod_pids_limit(),
        hugepage_limits: pod_hugepage_limits(pod, &hugetlb::page_sizes()),
        ..Resources::default()
    };
    if qos_class(pod) == QosClass::BestEffort {
        resources.cpu_shares = MIN_SHARES;
        return resources;
    }
    resources.cpu_shares = milli_cpu_to_shares(cpu_requests);
    if let Some(limit) = cpu_limit {
        resources.cpu_quota = milli_cpu_to_quota(limit, QUOTA_PERIOD_US);
        resources.cpu_period = QUOTA_PERIOD_US;
    }
    if let Some(limit) = memory_limit {
        resources.memory_limit_in_bytes = limit;
    }
    resources
}

/// One limit per page size of `page_sizes` (bytes), each `asked` for it or 0.
fn limits_for(page_sizes: &[u64], asked: &[(i64, i64)]) -> Vec<HugepageLimit> {
    page_sizes
        .iter()
        .filter_map(|&size| {
            let limit = asked
                .iter()
                .filter(|(s, _)| *s as u64 == size)
                .map(|(_, bytes)| (*bytes).max(0) as u64)
                .sum();
            Some(HugepageLimit {
                page_size: hugetlb::unit_size(size)?,
                limit,
            })
        })
        .collect()
}

/// The pod cgroup's huge page limits (`ResourceConfigForPod` → `HugePageLimits` of the pod's
/// requests, kubelet's `maybeSetHugetlb`): per size the containers' requests summed, or the
/// largest init container's when more; 0 for every other size.
pub fn pod_hugepage_limits(pod: &Pod, page_sizes: &[u64]) -> Vec<HugepageLimit> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let requests =
        |c: &Container| hugepages(c.resources.as_ref().and_then(|r| r.requests.as_ref()));
    let mut asked: Vec<(i64, i64)> = spec.containers.iter().flat_map(requests).collect();
    for &size in page_sizes {
        let size = size as i64;
        let sum: i64 = asked
            .iter()
            .filter(|(s, _)| *s == size)
            .map(|(_, b)| b)
            .sum();
        let init = spec
            .init_containers
            .iter()
            .flatten()
            .flat_map(requests)
            .filter(|(s, _)| *s == size)
            .map(|(_, b)| b)
            .max()
            .unwrap_or(0);
        if init > sum {
            asked.retain(|(s, _)| *s != size);
            asked.push((size, init));
        }
    }
    // Pod-level huge pages are the pod's, for the sizes they name.
    let level = pod_level(pod).and_then(|r| r.requests.as_ref());
    let level = hugepages(level);
    asked.retain(|(size, _)| !level.iter().any(|(s, _)| s == size));
    asked.extend(level);
    limits_for(page_sizes, &asked)
}

/// A container's huge page limits (`GetHugepageLimitsFromResources`): its limit per size (its
/// request where it sets none), 0 for every other size of the machine.
pub fn container_hugepage_limits(container: &Container, page_sizes: &[u64]) -> Vec<HugepageLimit> {
    let resources = container.resources.as_ref();
    let limits = hugepages(resources.and_then(|r| r.limits.as_ref()));
    let mut asked = limits.clone();
    for (size, bytes) in hugepages(resources.and_then(|r| r.requests.as_ref())) {
        if !limits.iter().any(|(s, _)| *s == size) {
            asked.push((size, bytes));
        }
    }
    limits_for(page_sizes, &asked)
}

/// A container's cgroup values and `oom_score_adj` (`calculateLinuxResources`,
/// `GetContainerOOMScoreAdjust`). Ephemeral containers (`container` None) get no values.
pub fn container_resources(pod: &Pod, container: Option<&Container>) -> ContainerResources {
    let asked = container.map(Asked::of).unwrap_or_default();
    let milli = |a: Option<Amount>| a.map_or(0, Amount::milli);
    let cgroup = match container {
        None => Resources::default(),
        Some(_) => {
            let request = milli(asked.cpu_request);
            let limit = milli(asked.cpu_limit);
            // A limit alone is the request too (the API server defaults it; kubelet repeats it).
            let shares_from = if request == 0 && limit != 0 {
                limit
            } else {
                request
            };
            Resources {
                cpu_shares: milli_cpu_to_shares(shares_from),
                cpu_quota: milli_cpu_to_quota(limit, QUOTA_PERIOD_US),
                cpu_period: QUOTA_PERIOD_US,
                memory_limit_in_bytes: asked.memory_limit.map_or(0, Amount::value),
                pids_limit: 0,
                hugepage_limits: container.map_or_else(Vec::new, |c| {
                    container_hugepage_limits(c, &hugetlb::page_sizes())
                }),
            }
        }
    };
    let memory_request = match (asked.memory_request, container) {
        (Some(request), _) => request.value(),
        (None, Some(_)) => unrequested_share(pod, MEMORY),
        (None, None) => 0,
    };
    ContainerResources {
        cgroup,
        oom_score_adj: Some(oom_score_adj(
            qos_class(pod),
            memory_request,
            memory_capacity(),
        )),
    }
}

/// With a pod-level request of `name`, a container that requests none counts the pod's
/// request less the containers' own, shared equally among the containers that request none
/// (kubelet's `GetContainerOOMScoreAdjust` with pod-level resources); 0 without one.
fn unrequested_share(pod: &Pod, name: &str) -> i64 {
    let Some(pod_request) = pod_level(pod).and_then(|r| Asked::from_requirements(r).request(name))
    else {
        return 0;
    };
    let requests: Vec<Option<Amount>> = pod
        .spec
        .iter()
        .flat_map(podlab_api::resources::containers)
        .map(|c| Asked::of(c).request(name))
        .collect();
    let claimed: i64 = requests.iter().flatten().map(|a| a.value()).sum();
    let without = requests.iter().filter(|r| r.is_none()).count() as i64;
    (pod_request.value() - claimed).max(0) / without.max(1)
}

/// kubelet's `GetContainerOOMScoreAdjust`.
pub fn oom_score_adj(qos: QosClass, memory_request: i64, memory_capacity: i64) -> i32 {
    match qos {
        QosClass::Guaranteed => GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {
            let capacity = memory_capacity.max(1) as i128;
            let adjust = 1000 - (1000 * memory_request as i128) / capacity;
            // Above Guaranteed's, and below BestEffort's.
            if adjust < i128::from(1000 + GUARANTEED_OOM_SCORE_ADJ) {
                1000 + GUARANTEED_OOM_SCORE_ADJ
            } else if adjust == i128::from(BEST_EFFORT_OOM_SCORE_ADJ) {
                BEST_EFFORT_OOM_SCORE_ADJ - 1
            } else {
                adjust as i32
            }
        }
    }
}

/// The node's memory in bytes (`MemTotal` of /proc/meminfo, as cAdvisor reports it).
pub fn memory_capacity() -> i64 {
    static CAPACITY: OnceLock<i64> = OnceLock::new();
    *CAPACITY.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            })
            .map_or(i64::MAX, |kib| kib * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: &str) -> Pod {
        let mut pod = podlab_api::decode_pod(
            &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{spec}"),
            "test",
        )
        .unwrap();
        pod.metadata.uid = Some("u1".into());
        pod
    }

    fn limits(list: &[HugepageLimit]) -> Vec<(&str, u64)> {
        list.iter()
            .map(|l| (l.page_size.as_str(), l.limit))
            .collect()
    }

    #[test]
    fn hugepages_go_to_the_pod_and_container_cgroups_as_kubelet_writes_them() {
        const SIZES: [u64; 2] = [2 << 20, 1 << 30];
        let p = pod("  initContainers: [{name: i, image: busybox, resources: {limits: {memory: 64Mi, hugepages-2Mi: 10Mi}}}]\n  containers:\n  - {name: a, image: busybox, resources: {limits: {memory: 64Mi, hugepages-2Mi: 4Mi}}}\n  - {name: b, image: busybox, resources: {limits: {memory: 64Mi, hugepages-2Mi: 2Mi, hugepages-1Gi: 1Gi}}}");
        // The pod: 4Mi + 2Mi of 2 MiB pages, less than the init container's 10Mi; 1Gi of 1 GiB.
        assert_eq!(
            limits(&pod_hugepage_limits(&p, &SIZES)),
            [("2MB", 10 << 20), ("1GB", 1 << 30)]
        );
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            limits(&container_hugepage_limits(&spec.containers[0], &SIZES)),
            [("2MB", 4 << 20), ("1GB", 0)],
            "a size not asked for is held to 0"
        );
        // A pod without huge pages: every size of the machine at 0, on pod and containers.
        let none = pod("  containers: [{name: a, image: busybox}]");
        assert_eq!(
            limits(&pod_hugepage_limits(&none, &SIZES)),
            [("2MB", 0), ("1GB", 0)]
        );
        // A machine without huge pages: nothing to write.
        assert!(pod_hugepage_limits(&p, &[]).is_empty());
    }

    #[test]
    fn pod_level_huge_pages_are_the_pod_cgroups_limit_of_their_size() {
        const SIZES: [u64; 2] = [2 << 20, 1 << 30];
        let p = pod("  resources: {limits: {memory: 64Mi, hugepages-2Mi: 8Mi}}\n  containers:\n  - {name: a, image: busybox, resources: {limits: {memory: 16Mi, hugepages-2Mi: 4Mi, hugepages-1Gi: 1Gi}}}");
        let limits: Vec<(String, u64)> = pod_hugepage_limits(&p, &SIZES)
            .into_iter()
            .map(|l| (l.page_size, l.limit))
            .collect();
        assert_eq!(
            limits,
            [("2MB".to_string(), 8 << 20), ("1GB".to_string(), 1 << 30)]
        );
    }

    #[test]
    fn a_guaranteed_pod_is_capped_and_shielded() {
        let p = pod("  containers: [{name: a, image: busybox, resources: {limits: {cpu: 250m, memory: 64Mi}}}]");
        assert_eq!(pod_cgroup_parent(&p), "kubepods/podu1");
        let r = pod_resources(&p);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.cpu_period),
            (256, 25_000, 100_000)
        );
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        let c = container_resources(&p, Some(&p.spec.as_ref().unwrap().containers[0]));
        assert_eq!((c.cgroup.cpu_shares, c.cgroup.cpu_quota), (256, 25_000));
        assert_eq!(c.cgroup.memory_limit_in_bytes, 64 << 20);
        assert_eq!(c.oom_score_adj, Some(-997));
    }

    #[test]
    fn a_burstable_pod_is_capped_only_where_every_container_is() {
        let p = pod("  initContainers: [{name: i, image: busybox, resources: {requests: {cpu: '1'}, limits: {memory: 32Mi}}}]\n  containers:\n  - {name: a, image: busybox, resources: {requests: {cpu: 100m, memory: 16Mi}, limits: {memory: 32Mi}}}\n  - {name: b, image: busybox, resources: {requests: {cpu: 200m}, limits: {memory: 64Mi}}}");
        assert_eq!(pod_cgroup_parent(&p), "kubepods/burstable/podu1");
        let r = pod_resources(&p);
        assert_eq!(r.cpu_shares, 1024, "the init container's 1 CPU beats 300m");
        assert_eq!(r.cpu_quota, 0, "no cpu limits");
        assert_eq!(
            r.memory_limit_in_bytes,
            96 << 20,
            "every container limits memory"
        );
        assert_eq!(r.pids_limit, pod_pids_limit());
        let a = container_resources(&p, Some(&p.spec.as_ref().unwrap().containers[0]));
        assert_eq!(
            (a.cgroup.cpu_shares, a.cgroup.cpu_quota, a.cgroup.cpu_period),
            (102, 0, 100_000)
        );
    }

    #[test]
    fn pod_level_resources_set_the_pod_cgroup_and_leave_the_containers_unlimited() {
        let p = pod("  resources: {limits: {cpu: 500m, memory: 64Mi}}\n  containers: [{name: a, image: busybox}, {name: b, image: busybox}]");
        assert_eq!(
            pod_cgroup_parent(&p),
            "kubepods/podu1",
            "Guaranteed by its pod-level resources"
        );
        let r = pod_resources(&p);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (512, 50_000, 64 << 20)
        );
        let spec = p.spec.as_ref().unwrap();
        let a = container_resources(&p, Some(&spec.containers[0]));
        assert_eq!((a.cgroup.cpu_quota, a.cgroup.memory_limit_in_bytes), (0, 0));
        assert_eq!(a.oom_score_adj, Some(GUARANTEED_OOM_SCORE_ADJ));

        // Burstable: the pod's memory request less a's is b's, for its oom_score_adj.
        let p = pod("  resources: {requests: {memory: 96Mi}, limits: {memory: 128Mi}}\n  containers: [{name: a, image: busybox, resources: {requests: {memory: 32Mi}}}, {name: b, image: busybox}]");
        assert_eq!(pod_cgroup_parent(&p), "kubepods/burstable/podu1");
        assert_eq!(pod_resources(&p).memory_limit_in_bytes, 128 << 20);
        assert_eq!(unrequested_share(&p, MEMORY), 64 << 20);
        let b = container_resources(&p, Some(&p.spec.as_ref().unwrap().containers[1]));
        let expected = oom_score_adj(QosClass::Burstable, 64 << 20, memory_capacity());
        assert_eq!(b.oom_score_adj, Some(expected));
    }

    #[test]
    fn best_effort_gets_the_least_share() {
        let p = pod("  containers: [{name: a, image: busybox}]");
        assert_eq!(pod_cgroup_parent(&p), "kubepods/besteffort/podu1");
        assert_eq!(pod_resources(&p).cpu_shares, 2);
        let c = container_resources(&p, Some(&p.spec.as_ref().unwrap().containers[0]));
        assert_eq!(c.cgroup.cpu_shares, 2);
        assert_eq!(c.oom_score_adj, Some(1000));
    }

    #[test]
    fn burstable_oom_score_follows_kubelets_formula() {
        let gib = 1i64 << 30;
        assert_eq!(oom_score_adj(QosClass::Burstable, gib, 4 * gib), 750);
        assert_eq!(
            oom_score_adj(QosClass::Burstable, 0, 4 * gib),
            999,
            "never BestEffort's 1000"
        );
        assert_eq!(
            oom_score_adj(QosClass::Burstable, 4 * gib, 4 * gib),
            3,
            "never at or below Guaranteed's"
        );
        assert_eq!(oom_score_adj(QosClass::Guaranteed, gib, 4 * gib), -997);
        assert_eq!(oom_score_adj(QosClass::BestEffort, 0, 4 * gib), 1000);
    }
}
