//! Attempt counters (spec 2.6): the restart count a newly started container is given, and the
//! recovery of that count from the pod's log directory when no record is left.

use crate::model::RuntimeView;

/// The attempt a container start uses (it becomes `status.restartCount`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerAttempt {
    /// The newest record's restartCount + 1.
    Next(u32),
    /// No record of that name: recover from `<podLogsDir>/<ns>_<pod>_<uid>/<container>/<N>.log`
    /// with [`attempt_from_log_files`].
    FromLogDir,
}

impl ContainerAttempt {
    pub fn for_container(rt: &RuntimeView, name: &str) -> Self {
        match rt.newest(name) {
            Some(record) => ContainerAttempt::Next(record.restart_count + 1),
            None => ContainerAttempt::FromLogDir,
        }
    }
}

/// The attempt recovered from a container's log file names (`0.log`, `1.log`, ...): largest N
/// plus one, or 0 when there is none. Other names are ignored.
pub fn attempt_from_log_files<'a>(file_names: impl IntoIterator<Item = &'a str>) -> u32 {
    file_names
        .into_iter()
        .filter_map(|name| name.strip_suffix(".log")?.parse::<u32>().ok())
        .max()
        .map_or(0, |n| n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_dir_recovery_takes_largest_plus_one() {
        assert_eq!(attempt_from_log_files(["0.log", "3.log", "1.log"]), 4);
        assert_eq!(attempt_from_log_files(["x.log", "2.log.gz", "README"]), 0);
        assert_eq!(attempt_from_log_files([]), 0);
    }
}
