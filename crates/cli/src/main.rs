//! `podlab`: the one command. kubectl, crictl and podman's twin for pods built on this kernel.
//!
//! Exit status: 0 success; 1 an operation failed, a manifest, selector or template was
//! refused, or a demo's evidence did not hold (as kubectl exits 1); 2 a usage error (an unknown
//! demo or namespace kind, a kind this kernel lacks, no way to get privileges). `run --rm`,
//! `exec` and `ns run` exit with the container's or command's own status.

mod apply;
mod attach;
mod attachable;
mod columns;
mod completion;
mod context;
mod cp;
mod cri;
mod debug;
mod delete;
mod demo;
mod describe;
mod exec;
mod explain;
mod gc;
mod get;
mod handover;
mod image;
mod image_pull;
mod index;
mod label;
mod logs;
mod network;
mod node;
mod nsls;
mod nsrun;
mod objects;
mod oneshot_keeper;
mod output;
mod patch;
mod port_forward;
mod privilege;
mod remote;
mod rollout;
mod run;
mod scale;
mod terminal;
mod top;
mod trace;
mod verbs;
mod wait;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "podlab",
    version,
    about = "A Kubernetes pod, built for real on the Linux kernel"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// `-n NAMESPACE`, as every kubectl command takes it.
#[derive(Args, Clone)]
struct NamespaceArg {
    /// The namespace (default: `default`).
    #[arg(short = 'n', long = "namespace", default_value = "default")]
    namespace: String,
}

// Each subcommand's arguments are built only when it is the one run (`defer`): building all of
// them took about half a millisecond of every command. So the `Args` structs have no doc
// comments (`//`): a struct's doc would become the `about` of the command it is part of.
#[derive(Subcommand)]
#[command(defer = true)]
enum Command {
    /// Run a demo that builds it for real and checks its own evidence (default: the pod).
    #[command(after_help = demo::catalogue())]
    Demo {
        /// A demo or a set of them (listed below).
        #[arg(default_value = "pod")]
        what: String,
        /// Leave the demo's pods running, and print how to look at them and how to remove them.
        #[arg(long)]
        keep: bool,
    },
    /// Create or update pods and replicasets from a manifest (`-` for stdin).
    Apply {
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// Wait until each pod is Ready (or finished), then print what each phase took.
        #[arg(long)]
        trace: bool,
    },
    /// Run a one-container pod, like `kubectl run`.
    Run {
        name: String,
        #[arg(long)]
        image: String,
        /// Wait for the container, print its output, return its exit code, remove the pod.
        #[arg(long)]
        rm: bool,
        /// The pod's restartPolicy: Always, OnFailure or Never.
        #[arg(long, default_value = "Always")]
        restart: String,
        /// The words after `--` are the command (replacing the image's ENTRYPOINT), not args.
        #[arg(long)]
        command: bool,
        /// NAME=VALUE, repeatable.
        #[arg(long = "env")]
        env: Vec<String>,
        /// The pod's annotations, KEY=VALUE, repeatable (kubectl run's `--annotations`).
        #[arg(long = "annotations")]
        annotations: Vec<String>,
        /// The container's image pull policy (default: the API server's for its tag: Always
        /// for `:latest` or no tag, else IfNotPresent).
        #[arg(long, value_parser = ["Always", "IfNotPresent", "Never"])]
        image_pull_policy: Option<String>,
        /// Print what each phase of the pod's life took, on stderr (without --rm: until it
        /// is Ready or finished).
        #[arg(long)]
        trace: bool,
        #[command(flatten)]
        streams: StreamArgs,
        #[command(flatten)]
        ns: NamespaceArg,
        /// The container's args (or command with `--command`).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// List objects: pods, events, replicasets, images.
    Get(GetCli),
    /// Show a pod in detail, with its events.
    Describe {
        /// `pod` (or `pods`, `po`).
        resource: String,
        name: String,
        #[command(flatten)]
        ns: NamespaceArg,
    },
    /// Print a container's output.
    Logs {
        #[command(flatten)]
        args: logs::LogsArgs,
        #[command(flatten)]
        ns: NamespaceArg,
    },
    /// Run a command in a running container.
    Exec {
        #[command(flatten)]
        target: PodTarget,
        #[arg(short = 'c', long = "container")]
        container: Option<String>,
        #[command(flatten)]
        streams: StreamArgs,
        #[command(flatten)]
        ns: NamespaceArg,
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Attach to the process of a running container, like `kubectl attach`.
    Attach {
        #[command(flatten)]
        target: PodTarget,
        #[arg(short = 'c', long = "container")]
        container: Option<String>,
        #[command(flatten)]
        streams: StreamArgs,
        #[command(flatten)]
        ns: NamespaceArg,
    },
    /// Copy files and folders to and from containers, like `kubectl cp` (tar through exec).
    Cp {
        /// `[NAMESPACE/]POD:PATH` or a local path.
        src: String,
        /// `[NAMESPACE/]POD:PATH` or a local path.
        dest: String,
        #[arg(short = 'c', long = "container")]
        container: Option<String>,
        #[command(flatten)]
        ns: NamespaceArg,
    },
    /// Forward local ports to a pod, like `kubectl port-forward`.
    PortForward {
        #[command(flatten)]
        target: PodTarget,
        /// `[LOCAL:]REMOTE`: `8080`, `8080:80`, `:80` (any free local port).
        #[arg(required = true)]
        ports: Vec<String>,
        #[command(flatten)]
        ns: NamespaceArg,
    },
    /// Add an ephemeral debug container to a running pod, like `kubectl debug`.
    Debug {
        pod: String,
        #[arg(long, default_value = "busybox")]
        image: String,
        /// The debug container's image pull policy (default: the API server's for its tag:
        /// Always for `:latest` or no tag, else IfNotPresent).
        #[arg(long, value_parser = ["Always", "IfNotPresent", "Never"])]
        image_pull_policy: Option<String>,
        /// Share this container's process namespace.
        #[arg(long)]
        target: Option<String>,
        /// The debug container's name (default: debugger-XXXXX).
        #[arg(long = "container", short = 'c')]
        container: Option<String>,
        #[command(flatten)]
        streams: StreamArgs,
        #[command(flatten)]
        ns: NamespaceArg,
        #[arg(last = true)]
        cmd: Vec<String>,
    },
    /// Delete objects: pods gracefully (SIGTERM, grace period, SIGKILL), others at once.
    Delete(delete::DeleteArgs),
    /// Wait until pods meet a condition, like `kubectl wait`.
    Wait {
        /// `pod/NAME...`, or `pod NAME...`.
        #[arg(required = true)]
        resources: Vec<String>,
        /// `condition=Ready` (`=VALUE`, default True), `delete`, or `jsonpath='{EXPR}'=VALUE`.
        #[arg(long = "for")]
        condition: String,
        /// How long to wait in all: `30s` (the default), `1m`, `500ms`.
        #[arg(long, default_value = "30s")]
        timeout: String,
        #[command(flatten)]
        ns: NamespaceArg,
    },
    /// Remove what a crashed podlab left: pins, mounts, shims, state.
    Gc,
    /// CPU and memory of pods or of the node, read from their cgroups (kubectl top).
    Top {
        #[command(subcommand)]
        command: TopCommand,
    },
    /// The node agent (kubelet's twin); started on demand by the other commands.
    Node(node::NodeArgs),
    /// Serve the Kubernetes CRI v1 over gRPC for crictl, critest or a kubelet (docs/cri.md).
    Cri(cri::CriArgs),
    /// Images in podlab's store.
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },
    /// Kubelet's decisions for a cases file, with the rule IDs that made them (docs/explain.md).
    Explain {
        /// A JSON file with one case, or an object with a `cases` array (`-` for stdin).
        #[arg(short = 'f', long = "filename", required_unless_present = "example")]
        file: Option<PathBuf>,
        /// Print an example cases file, one case of each kind with its expect, to start from.
        #[arg(long, conflicts_with_all = ["file", "output", "check"])]
        example: bool,
        /// `json`: one JSON object with the outputs; default: the decisions in words.
        #[arg(short = 'o', long = "output", value_parser = ["json"])]
        output: Option<String>,
        /// Compare each output with the case's `expect`; end with `N passed, M failed`.
        #[arg(long)]
        check: bool,
    },
    /// Namespaces on this host.
    Ns {
        #[command(subcommand)]
        command: NsCommand,
    },
    /// Self-checking exercises: list, start ID, check, hint, solve, reset, status.
    Lab(podlab_labs::cli::LabArgs),
    #[command(flatten)]
    Verb(verbs::Verb),
}

#[derive(Args)]
struct GetCli {
    /// `TYPE[,TYPE...] [NAME...]` or `TYPE/NAME...`: pods, events, replicasets, deployments,
    /// configmaps, secrets, images.
    #[arg(required = true)]
    resources: Vec<String>,
    /// wide, json, yaml, name, jsonpath=..., jsonpath-file=..., go-template=...,
    /// go-template-file=..., custom-columns=..., custom-columns-file=...
    #[arg(short = 'o', long = "output")]
    output: Option<String>,
    #[command(flatten)]
    ns: NamespaceArg,
    /// Every namespace.
    #[arg(short = 'A', long = "all-namespaces")]
    all_namespaces: bool,
    #[command(flatten)]
    selectors: SelectorArgs,
    /// Sort by a JSONPath, e.g. `.metadata.name` or `{.status.podIP}`.
    #[arg(long = "sort-by")]
    sort_by: Option<String>,
    #[arg(long = "no-headers")]
    no_headers: bool,
    #[arg(long = "show-labels")]
    show_labels: bool,
    /// After the listing, print every change.
    #[arg(short = 'w', long)]
    watch: bool,
    /// Answer from an informer index: controller=UID, controller=orphan, node=NAME.
    #[arg(long)]
    index: Option<String>,
}

// The pod `exec`, `attach` and `port-forward` work on, as kubectl takes it.
#[derive(Args)]
struct PodTarget {
    /// `POD`, or `TYPE/NAME`: `pod/NAME`, or a pod of `deployment/NAME` (`deploy/`) or
    /// `replicaset/NAME` (`rs/`), the most active one, as kubectl picks it.
    pod: String,
    /// How long to wait for a pod of the workload: `1m0s` (the default), `30s`.
    #[arg(long = "pod-running-timeout", default_value = attachable::DEFAULT_TIMEOUT)]
    pod_running_timeout: String,
}

impl PodTarget {
    fn timeout(&self) -> anyhow::Result<std::time::Duration> {
        podlab_kubelet::node::parse_duration(&self.pod_running_timeout)
            .map_err(|e| UsageError(format!("--pod-running-timeout: {e}")).into())
    }
}

// `-l` and `--field-selector`, as kubectl's get and top take them.
#[derive(Args)]
struct SelectorArgs {
    /// Label selector: `a=b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`.
    #[arg(short = 'l', long = "selector")]
    selector: Option<String>,
    /// Field selector: `status.phase=Running,metadata.name!=x`.
    #[arg(long = "field-selector")]
    field_selector: Option<String>,
}

// `-i` and `-t`, as kubectl's exec, run, attach and debug take them.
#[derive(Args, Clone, Copy)]
struct StreamArgs {
    /// Pass stdin to the container.
    #[arg(short = 'i', long = "stdin")]
    stdin: bool,
    /// Stdin is a TTY (with `-i`: a terminal in the container, this one in raw mode).
    #[arg(short = 't', long = "tty")]
    tty: bool,
    /// Print nothing but the container's output (no TTY warnings).
    #[arg(short = 'q', long = "quiet")]
    quiet: bool,
}

impl StreamArgs {
    fn streams(self) -> terminal::Streams {
        terminal::streams(self.stdin, self.tty, self.quiet)
    }

    fn flags(self) -> attach::Flags {
        attach::Flags {
            stdin: self.stdin,
            tty: self.tty,
            quiet: self.quiet,
        }
    }
}

#[derive(Subcommand)]
enum TopCommand {
    /// NAME CPU(cores) MEMORY(bytes) of the namespace's pods, or of one.
    Pod {
        name: Option<String>,
        /// One line per running container (its own cgroup) instead of per pod.
        #[arg(long)]
        containers: bool,
        #[command(flatten)]
        selectors: SelectorArgs,
        /// `cpu` or `memory`: the largest first.
        #[arg(long = "sort-by")]
        sort_by: Option<String>,
        /// Every namespace.
        #[arg(short = 'A', long = "all-namespaces")]
        all_namespaces: bool,
        #[arg(long = "no-headers")]
        no_headers: bool,
        #[command(flatten)]
        ns: NamespaceArg,
    },
    /// The node's CPU and memory.
    Node {
        name: Option<String>,
        /// Label selector, on the node's labels (`kubernetes.io/hostname`, `os`, `arch`).
        #[arg(short = 'l', long = "selector")]
        selector: Option<String>,
        /// `cpu` or `memory`.
        #[arg(long = "sort-by")]
        sort_by: Option<String>,
        #[arg(long = "no-headers")]
        no_headers: bool,
    },
}

#[derive(Subcommand)]
enum ImageCommand {
    /// The images in the store (the built-in busybox is made on first use).
    Ls {
        #[arg(short = 'o', long = "output")]
        output: Option<String>,
        #[arg(long = "no-headers")]
        no_headers: bool,
    },
    /// Import an oci-archive or docker-archive tarball, or an OCI layout folder.
    Import {
        path: PathBuf,
        /// The name to give the image (default: the names the archive carries).
        #[arg(long)]
        name: Option<String>,
    },
    /// An image's manifest, config and layers as JSON.
    Inspect { name: String },
    /// Remove images (their unreferenced blobs and snapshots go too).
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Pull an image from a registry (hosts and TLS from $PODLAB_REGISTRY_CONFIG or
    /// /etc/podlab/certs.d, credentials from $REGISTRY_AUTH_FILE or ~/.docker/config.json).
    Pull(image_pull::PullArgs),
    /// Remove every image no container has (running or exited).
    Prune,
    /// Check the store: every blob's digest, every image's blobs and snapshots.
    Verify,
}

#[derive(Subcommand)]
enum NsCommand {
    /// List namespaces like `lsns`: one row per namespace, with its processes.
    Ls {
        /// Only the namespaces of this process.
        #[arg(long)]
        pid: Option<i32>,
        /// Only namespaces of this kind: uts, ipc, net, pid, mnt, user, cgroup, time.
        #[arg(short = 't', long = "type")]
        kind: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    Run(nsrun::RunArgs),
}

/// An error that is the user's to fix: printed on one line, exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// What a command ends with: done, or a status of its own (a container's exit code).
enum Outcome {
    Done,
    Status(i32),
}

fn dispatch(command: Command) -> anyhow::Result<Outcome> {
    use Outcome::Done;
    match command {
        Command::Demo { what, keep } => demo::run(&what, keep).map(|()| Done),
        Command::Apply { file, trace } => apply::run(&file, trace::requested(trace)).map(|()| Done),
        Command::Run {
            name,
            image,
            rm,
            restart,
            command,
            env,
            annotations,
            image_pull_policy,
            streams,
            trace,
            ns,
            args,
        } => {
            let args = run::RunArgs {
                annotations,
                image_pull_policy,
                stdin: streams.stdin,
                tty: streams.tty,
                quiet: streams.quiet,
                name,
                image,
                rm,
                restart,
                command,
                env,
                trace: trace::requested(trace),
                namespace: ns.namespace,
                args,
            };
            run::run(args).map(Outcome::Status)
        }
        Command::Get(get) => {
            let query = output::Query {
                namespace: Some(get.ns.namespace),
                all_namespaces: get.all_namespaces,
                selector: get.selectors.selector,
                field_selector: get.selectors.field_selector,
                sort_by: get.sort_by,
                no_headers: get.no_headers,
                show_labels: get.show_labels,
            };
            get::run(get::GetArgs {
                args: get.resources,
                format: output::Format::parse(get.output.as_deref())?,
                query,
                watch: get.watch,
                index: get.index,
            })
            .map(|()| Done)
        }
        Command::Describe { resource, name, ns } => match get::Resource::parse(&resource)? {
            get::Resource::Pods => describe::run(&name, &ns.namespace).map(|()| Done),
            _ => Err(UsageError("podlab describe shows pods".into()).into()),
        },
        Command::Logs { args, ns } => logs::run(&args, &ns.namespace).map(|()| Done),
        Command::Exec {
            target,
            container,
            streams,
            ns,
            cmd,
        } => exec::run(
            &target.pod,
            target.timeout()?,
            container.as_deref(),
            &ns.namespace,
            &cmd,
            streams.streams(),
        )
        .map(Outcome::Status),
        Command::Attach {
            target,
            container,
            streams,
            ns,
        } => attach::run(
            &target.pod,
            target.timeout()?,
            container.as_deref(),
            &ns.namespace,
            streams.flags(),
        )
        .map(Outcome::Status),
        Command::Cp {
            src,
            dest,
            container,
            ns,
        } => cp::run(&src, &dest, container.as_deref(), &ns.namespace).map(Outcome::Status),
        Command::PortForward { target, ports, ns } => {
            port_forward::run(&target.pod, target.timeout()?, &ns.namespace, &ports)
                .map(Outcome::Status)
        }
        Command::Debug {
            pod,
            image,
            image_pull_policy,
            target,
            container,
            streams,
            ns,
            cmd,
        } => debug::run(
            streams.flags(),
            &pod,
            &image,
            image_pull_policy.as_deref(),
            target.as_deref(),
            container,
            &ns.namespace,
            &cmd,
        )
        .map(Outcome::Status),
        Command::Delete(args) => delete::run(args).map(|()| Done),
        Command::Wait {
            resources,
            condition,
            timeout,
            ns,
        } => {
            let condition = wait::Condition::parse(&condition)?;
            let timeout = podlab_kubelet::node::parse_duration(&timeout)
                .map_err(|e| UsageError(format!("--timeout: {e}")))?;
            wait::run(
                &wait::pod_names(&resources)?,
                &ns.namespace,
                &condition,
                timeout,
            )
            .map(|()| Done)
        }
        Command::Gc => gc::run().map(|()| Done),
        Command::Top { command } => match command {
            TopCommand::Pod {
                name,
                containers,
                selectors,
                sort_by,
                all_namespaces,
                no_headers,
                ns,
            } => top::pods(&top::PodQuery {
                name: name.as_deref(),
                namespace: &ns.namespace,
                all_namespaces,
                selector: selectors.selector.as_deref(),
                field_selector: selectors.field_selector.as_deref(),
                sort_by: sort_by.as_deref(),
                containers,
                no_headers,
            }),
            TopCommand::Node {
                name,
                selector,
                sort_by,
                no_headers,
            } => top::node(&top::NodeQuery {
                name: name.as_deref(),
                selector: selector.as_deref(),
                sort_by: sort_by.as_deref(),
                no_headers,
            }),
        }
        .map(|()| Done),
        Command::Node(args) => node::run(args).map(|()| Done),
        Command::Cri(args) => cri::run(args).map(|()| Done),
        Command::Image { command } => match command {
            ImageCommand::Ls { output, no_headers } => image::ls(output.as_deref(), no_headers),
            ImageCommand::Import { path, name } => image::import(&path, name.as_deref()),
            ImageCommand::Inspect { name } => image::inspect(&name),
            ImageCommand::Rm { names } => image::remove(&names),
            ImageCommand::Pull(args) => image_pull::run_pull(&args),
            ImageCommand::Prune => image_pull::run_prune(),
            ImageCommand::Verify => image_pull::run_verify(),
        }
        .map(|()| Done),
        Command::Explain {
            file,
            example,
            output,
            check,
        } => match file {
            Some(file) if !example => explain::run(&file, output.is_some(), check),
            _ => explain::print_example(),
        }
        .map(|()| Done),
        Command::Ns {
            command: NsCommand::Ls { pid, kind, json },
        } => nsls::run(pid, kind.as_deref(), json).map(|()| Done),
        Command::Ns {
            command: NsCommand::Run(args),
        } => nsrun::run(args).map(Outcome::Status),
        Command::Lab(args) => podlab_labs::cli::run(args).map(Outcome::Status),
        Command::Verb(verb) => verbs::run(verb, Cli::command).map(|()| Done),
    }
}

fn main() -> ExitCode {
    // Like every Unix filter: `podlab get pods | head` ends quietly when head has read enough.
    // SAFETY: restoring a default signal disposition before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let command = match nsrun::parse_alone() {
        Some(args) => Command::Ns {
            command: NsCommand::Run(args),
        },
        None => Cli::parse().command,
    };
    match dispatch(command) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::Status(code)) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(err) => {
            let usage = err.downcast_ref::<UsageError>().is_some()
                || err.downcast_ref::<podlab_labs::cli::UsageError>().is_some()
                || matches!(
                    err.downcast_ref::<podlab_ns::Error>(),
                    Some(
                        podlab_ns::Error::UnknownKind(_) | podlab_ns::Error::KindUnsupported { .. }
                    )
                );
            // Like kubectl: a message that already ends its line gets no second newline.
            let message = format!("podlab: {err:#}");
            if message.ends_with('\n') {
                eprint!("{message}");
            } else {
                eprintln!("{message}");
            }
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}
