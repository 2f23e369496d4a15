//! `podlab-shim`: the per-pod shim daemon (see `podlab_runtime::shim`). Started by the runtime
//! library, never by hand.

fn main() -> anyhow::Result<()> {
    let args = podlab_runtime::shim::ShimArgs::parse(std::env::args_os().skip(1))
        .map_err(|e| anyhow::anyhow!("podlab-shim: {e}"))?;
    podlab_runtime::shim::run(args)
}
