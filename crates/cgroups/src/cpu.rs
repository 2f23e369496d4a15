//! The cpu controller: a share of the CPU under contention from the requests, a hard cap per
//! period from the limits; and the CPU time used (cpuacct on v1, `cpu.stat` on v2).
//!
//! The conversions are kubelet's (`pkg/kubelet/cm/helpers_linux.go`): `MilliCPUToShares` (1024
//! shares per CPU, at least 2, at most 262144) and `MilliCPUToQuota` (the limit's share of a
//! 100 ms period, at least 1 ms); and runc's `ConvertCPUSharesToCgroupV2Value` for v2's
//! `cpu.weight` (shares 2..262144 onto weight 1..10000).

use crate::hierarchy::{Controller, Version};
use crate::{Cgroup, Error, Result};

pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262_144;
pub const SHARES_PER_CPU: u64 = 1024;
/// kubelet's CFS period: 100 ms, in microseconds.
pub const QUOTA_PERIOD_US: u64 = 100_000;
/// kubelet's smallest quota: 1 ms.
pub const MIN_QUOTA_US: i64 = 1000;

/// kubelet's `MilliCPUToShares`: 0 (no request) is the minimum, 2.
pub fn milli_cpu_to_shares(milli_cpu: i64) -> u64 {
    if milli_cpu <= 0 {
        return MIN_SHARES;
    }
    let shares = (milli_cpu as u64).saturating_mul(SHARES_PER_CPU) / 1000;
    shares.clamp(MIN_SHARES, MAX_SHARES)
}

/// kubelet's `MilliCPUToQuota`: 0 (no limit) is no quota; otherwise at least 1 ms per period.
pub fn milli_cpu_to_quota(milli_cpu: i64, period_us: u64) -> i64 {
    if milli_cpu <= 0 {
        return 0;
    }
    let quota = milli_cpu.saturating_mul(period_us as i64) / 1000;
    quota.max(MIN_QUOTA_US)
}

/// runc's `ConvertCPUSharesToCgroupV2Value`: 0 stays 0 (unset); 2..262144 maps linearly onto
/// 1..10000.
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    let shares = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + ((shares - 2) * 9999) / 262_142
}

/// Writes the share (`cpu.shares`, v2 `cpu.weight`).
pub fn set_shares(cgroup: &Cgroup, shares: u64) -> Result<()> {
    match cgroup.version {
        Version::V1 => cgroup.write(Controller::Cpu, "cpu.shares", &shares.to_string()),
        Version::V2 => cgroup.write(
            Controller::Cpu,
            "cpu.weight",
            &shares_to_weight(shares).to_string(),
        ),
    }
}

/// Writes the cap: `quota` microseconds per `period` (`quota` ≤ 0: no cap). v1's
/// `cpu.cfs_period_us` is written before `cpu.cfs_quota_us`, as runc does; v2 has both in
/// `cpu.max`.
pub fn set_quota(cgroup: &Cgroup, quota: i64, period: u64) -> Result<()> {
    match cgroup.version {
        Version::V1 => {
            if !cgroup.has_file(Controller::Cpu, "cpu.cfs_quota_us") {
                return Ok(());
            }
            if period > 0 {
                cgroup.write(Controller::Cpu, "cpu.cfs_period_us", &period.to_string())?;
            }
            let quota = if quota > 0 { quota } else { -1 };
            cgroup.write(Controller::Cpu, "cpu.cfs_quota_us", &quota.to_string())
        }
        Version::V2 => {
            let period = if period > 0 { period } else { QUOTA_PERIOD_US };
            let value = if quota > 0 {
                format!("{quota} {period}")
            } else {
                format!("max {period}")
            };
            cgroup.write(Controller::Cpu, "cpu.max", &value)
        }
    }
}

/// CPU time used by the cgroup's processes since it was made, in nanoseconds (cpuacct.usage on
/// v1; `usage_usec` of `cpu.stat` on v2).
pub fn usage_ns(cgroup: &Cgroup) -> Result<Option<u64>> {
    match cgroup.version {
        Version::V1 => {
            let Some(text) = cgroup.read(Controller::Cpuacct, "cpuacct.usage")? else {
                return Ok(None);
            };
            parse_u64(cgroup, Controller::Cpuacct, "cpuacct.usage", text.trim()).map(Some)
        }
        Version::V2 => {
            let Some(text) = cgroup.read(Controller::Cpu, "cpu.stat")? else {
                return Ok(None);
            };
            let Some(value) = stat_value(&text, "usage_usec") else {
                return Ok(None);
            };
            Ok(Some(value.saturating_mul(1000)))
        }
    }
}

/// `key value` lines (cpu.stat, memory.stat, memory.events): the value of `key`.
pub(crate) fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

pub(crate) fn parse_u64(
    cgroup: &Cgroup,
    controller: Controller,
    file: &str,
    text: &str,
) -> Result<u64> {
    text.parse().map_err(|_| Error::Parse {
        path: cgroup
            .dir(controller)
            .map(|d| d.join(file))
            .unwrap_or_default(),
        what: "a number",
        text: text.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_kubelet() {
        assert_eq!(milli_cpu_to_shares(0), 2, "no request: the minimum");
        assert_eq!(milli_cpu_to_shares(1), 2, "1m is 1 share, raised to 2");
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(250), 256);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), 262_144, "capped");
    }

    #[test]
    fn quota_follows_kubelet() {
        assert_eq!(
            milli_cpu_to_quota(0, QUOTA_PERIOD_US),
            0,
            "no limit, no quota"
        );
        assert_eq!(
            milli_cpu_to_quota(5, QUOTA_PERIOD_US),
            1000,
            "at least 1 ms"
        );
        assert_eq!(milli_cpu_to_quota(250, QUOTA_PERIOD_US), 25_000);
        assert_eq!(milli_cpu_to_quota(1500, QUOTA_PERIOD_US), 150_000);
    }

    #[test]
    fn weight_follows_runc() {
        assert_eq!(shares_to_weight(0), 0);
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
    }
}
