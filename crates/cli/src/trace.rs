//! `--trace` (or `PODLAB_TRACE=1`) on `run`, `apply` and `delete`: the command starts the pod's
//! trace file ([`podlab_runtime::trace`]), every process that works on the pod appends its
//! marks, and the command prints them as a table on stderr when it is done, then removes the
//! file. stdout stays the command's own (a `run --rm`'s is the container's output).

use std::path::{Path, PathBuf};

use podlab_runtime::trace::{self, PodTrace};

/// Whether this command traces: its `--trace` flag or `PODLAB_TRACE`.
pub fn requested(flag: bool) -> bool {
    flag || trace::requested_by_env()
}

/// One traced pod, for the command that traces it.
pub struct Tracing {
    path: PathBuf,
    trace: PodTrace,
    title: String,
}

impl Tracing {
    /// Starts tracing `namespace/name`; None (and a warning) when the file cannot be made,
    /// since a trace must never stop the command it watches.
    pub fn begin(root: &Path, namespace: &str, name: &str, title: &str) -> Option<Tracing> {
        match PodTrace::begin(root, namespace, name) {
            Ok(trace) => Some(Tracing {
                path: trace::path(root, namespace, name),
                trace,
                title: format!("{title} pod {namespace}/{name}"),
            }),
            Err(e) => {
                eprintln!("podlab: --trace: cannot start the trace of {namespace}/{name}: {e}");
                None
            }
        }
    }

    pub fn mark(&self, phase: &str) {
        self.trace.mark(phase);
    }

    /// Prints the table on stderr (the file goes when `self` is dropped).
    pub fn finish(self) {
        match trace::read(&self.path) {
            Ok(marks) => eprint!("trace of {}:\n{}", self.title, trace::table(&marks)),
            Err(e) => eprintln!("podlab: --trace: reading {}: {e}", self.path.display()),
        }
    }
}

/// The file goes with the command's interest in it, printed or not (an error on the way).
impl Drop for Tracing {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        // The folder too once no other traced command uses it.
        let _ = std::fs::remove_dir(self.path.parent().unwrap_or(Path::new("/")));
    }
}

/// [`Tracing::mark`] on an optional trace.
pub fn mark(tracing: &Option<Tracing>, phase: &str) {
    if let Some(t) = tracing {
        t.mark(phase);
    }
}
