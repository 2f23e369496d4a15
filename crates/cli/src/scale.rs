//! `podlab scale rs|deployment NAME --replicas=N [--current-replicas=M]`: the `scale`
//! subresource as kubectl uses it: `spec.replicas` set, under the precondition on the current
//! count when one is given; the controllers do the rest.

use anyhow::{bail, Result};
use podlab_control::Kind;

use crate::context::Ctx;
use crate::objects;

#[derive(clap::Args)]
pub struct ScaleArgs {
    /// `TYPE NAME...` or `TYPE/NAME...` (replicasets, deployments).
    #[arg(required = true)]
    args: Vec<String>,
    /// The new number of replicas.
    #[arg(long, allow_negative_numbers = true)]
    replicas: Option<i64>,
    /// Scale only if the current number of replicas is this (kubectl's precondition).
    #[arg(long = "current-replicas", default_value_t = -1, allow_negative_numbers = true)]
    current_replicas: i64,
    #[command(flatten)]
    selection: objects::Selection,
}

pub fn run(args: ScaleArgs) -> Result<()> {
    let replicas = match args.replicas {
        Some(n) if n >= 0 && n <= i64::from(i32::MAX) => n as i32,
        _ => bail!(
            "The --replicas=COUNT flag is required, and COUNT must be greater than or equal to 0"
        ),
    };
    let ctx = Ctx::open()?;
    let namespace = &args.selection.namespace;
    for (kind, name) in args.selection.resolve(&ctx, &args.args, "scale")? {
        if !matches!(kind, Kind::ReplicaSet | Kind::Deployment) {
            bail!(
                "Error from server (NotFound): the server could not find the requested resource ({} {name:?} has no scale subresource; podlab scales replicasets and deployments)",
                kind.resource()
            );
        }
        scale_one(
            &ctx,
            kind,
            namespace,
            &name,
            replicas,
            args.current_replicas,
        )?;
        println!("{}/{name} scaled", objects::qualified(kind));
    }
    Ok(())
}

/// Sets `spec.replicas`, retrying on a conflict as kubectl's scaler does, but never past a
/// failed precondition.
pub fn scale_one(
    ctx: &Ctx,
    kind: Kind,
    namespace: &str,
    name: &str,
    replicas: i32,
    current_replicas: i64,
) -> Result<()> {
    objects::modify(ctx, kind, namespace, name, |object| {
        let now = object["spec"]["replicas"].as_i64().unwrap_or(1);
        if current_replicas >= 0 && now != current_replicas {
            bail!("Expected replicas to be {current_replicas}, was {now}");
        }
        object["spec"]["replicas"] = replicas.into();
        Ok((now != i64::from(replicas), ()))
    })
}
