//! `podlab cri`: the CRI endpoint (containerd's CRI plugin's twin). A long-running gRPC server
//! on a unix socket for `crictl`, `critest` or a kubelet's `--container-runtime-endpoint`,
//! over the same runtime and image store as every other podlab command (podlab-cri).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use podlab_runtime::config::RuntimeConfig;
use podlab_runtime::{Runtime, StoreImages};

#[derive(Args)]
pub struct CriArgs {
    /// The socket to serve on (`unix:///PATH` or a path).
    #[arg(long, default_value = "unix:///run/podlab/cri.sock")]
    listen: String,
    /// The state root (default `$PODLAB_ROOT`, else `/run/podlab`); images are kept under it
    /// unless `$PODLAB_IMAGE_ROOT` names another place.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Print each RPC with what it did and how long it took.
    #[arg(long)]
    trace: bool,
    /// Where the streaming server (Exec, Attach, PortForward URLs) listens: loopback and a
    /// port the kernel picks by default, as containerd's `stream_server_address`.
    #[arg(long, default_value = "127.0.0.1:0")]
    stream_address: std::net::SocketAddr,
    /// Serve NRI plugins (the Node Resource Interface, containerd/nri) on this socket
    /// (containerd's is `/var/run/nri/nri.sock`): each is told of every pod's and container's
    /// steps and may veto a pod's or a container's creation. Off when not given.
    #[arg(long, value_name = "PATH")]
    nri_socket: Option<PathBuf>,
}

pub fn run(args: CriArgs) -> Result<()> {
    crate::privilege::require_root_for_pods()?;
    // podlab's main restores SIGPIPE's default for a CLI's closed stdout; a server must not die
    // when it answers a client that has gone (the write fails with EPIPE instead). Children
    // get the default back: std's spawn resets SIGPIPE, and the shim's inits reset signals.
    // SAFETY: setting a signal's disposition to SIG_IGN, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let config = match &args.root {
        Some(root) => {
            let mut config = RuntimeConfig::with_root(root);
            if let Some(images) = std::env::var_os("PODLAB_IMAGE_ROOT") {
                config.image_root = images.into();
            }
            config
        }
        None => RuntimeConfig::from_env(),
    };
    podlab_runtime::state::private_dir(&config.root)?;
    let store = podlab_image::Store::open(&config.image_root).context("opening the image store")?;
    let images = Arc::new(StoreImages::new(store));
    let root = config.root.clone();
    let image_root = config.image_root.clone();
    let mut runtime =
        Runtime::with_images(config, images.clone()).context("opening the runtime")?;
    // The bridge stays for the next pod while the server runs, as on a kubelet node.
    let network = crate::network::plugin_with(&root, crate::network::Bridge::Keep)?;
    if let Some(network) = &network {
        runtime.set_network_plugin(Arc::clone(network));
    }
    if let Err(e) = runtime.use_mount_template() {
        eprintln!("podlab cri: containers copy the node's mount namespace ({e})");
    }
    // Removals answer once the container or sandbox is out of sight; its cgroups and files go
    // after, in a cleaner process forked now, while this one is single-threaded. So does an
    // image's content after RemoveImage, as containerd's garbage collector takes it.
    let collect_images = move || {
        let collected = podlab_image::Store::open(&image_root).and_then(|store| store.gc());
        if let Err(e) = collected {
            eprintln!("podlab-cleaner: image garbage collection: {e}");
        }
    };
    if let Err(e) = runtime.start_cleaner_with(Some(Box::new(collect_images))) {
        eprintln!("podlab cri: removals clean up before they answer ({e})");
    }
    let mut cri = podlab_cri::Cri::new(runtime, images, network.is_some()).with_trace(args.trace);
    if let Some(nri) = &args.nri_socket {
        cri = cri.with_nri(nri);
    }
    let socket = podlab_cri::socket_path(&args.listen);
    podlab_cri::serve(cri, &socket, args.stream_address, || {
        eprintln!("podlab cri: serving CRI v1 on unix://{}", socket.display());
    })
    .with_context(|| format!("podlab cri on {}", socket.display()))?;
    if let Some(network) = network {
        let _ = network.node_stopping();
    }
    Ok(())
}
