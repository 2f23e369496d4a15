//! Lab 12, informer indexes: how the ReplicaSet controller finds its pods. client-go's
//! informer keeps pods in an indexer with a custom index, the controller UID of each pod (its
//! ownerReference with `controller: true`), where pods without a controller go under one
//! orphan key. `getRSPods` asks the index for the ReplicaSet's UID and for the orphan key, then
//! adopts matching orphans and releases owned pods that stopped matching. The check builds
//! such an informer over podlab's store (`AddIndexers`, `ByIndex`) and asks it.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use podlab_control::indexes::{
    controller_index_key, orphan_index_key, pod_indexers, POD_CONTROLLER_UID_INDEX,
};
use podlab_control::Informer;

use crate::env::Env;
use crate::kit::pods::{self, NAMESPACE};
use crate::{Lab, Level, Verdict};

const RS: &str = "web";
const STRAY: &str = "stray";
const REPLICAS: usize = 2;

pub static LAB: Lab = Lab {
    number: 12,
    name: "informer",
    title: "Informer indexes: adoption, release and the orphan key",
    level: Level::Advanced,
    minutes: 20,
    goal: "ReplicaSet web (2 replicas, selector app=web) made its pods; pod stray (app=stray)
is an orphan. The controller finds pods through an informer index keyed by controller UID,
with one key for orphans. Change only labels (edit and apply manifests), so that:
1. web owns pod stray (the index answers stray for web's UID) and still exactly 2 pods;
2. one of the pods web MADE (web-xxxxx) is an orphan again (under the orphan key), running.",
    hints: &[
        "`podlab get pods --index controller=orphan` and `--index controller=<web's uid>` ask \
the same index the controller asks (`podlab get rs web -o jsonpath='{.metadata.uid}'`). \
Compare with the pods' ownerReferences (`podlab get pod NAME -o yaml`).",
        "The controller adopts an orphan whose labels match its selector, and releases (removes \
its ownerReference from) an owned pod whose labels stop matching. It then makes or deletes \
pods to keep 2. A pod's labels can be changed by applying its manifest again.",
        "(set `app: web` in {work}/stray.yaml)  podlab apply -f {work}/stray.yaml\n\
podlab get pod web-XXXXX -o yaml > web-x.yaml; (set app: web-debug)  podlab apply -f web-x.yaml\n\
podlab get pods --index controller=orphan",
    ],
    not_yet: "web does not own stray",
    mistake_story: "deleting one of web's pods instead of releasing it: web just makes a new \
one, and stray stays an orphan",
    scene,
    check,
    solve,
    mistake,
    reset,
};

const RS_MANIFEST: &str = "apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: web, image: busybox, command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]}
";

fn stray_manifest(app: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: stray
  labels: {{app: {app}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: web, image: busybox, command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]}}
"
    )
}

/// The pods the index answers for a key.
fn by_index(env: &Env, key: &str) -> Result<Vec<Pod>> {
    let mut informer = Informer::<Pod>::with_indexers(env.store()?, pod_indexers());
    informer.sync()?;
    Ok(informer
        .indexer()
        .by_index(POD_CONTROLLER_UID_INDEX, key)?
        .iter()
        .map(|p| p.as_ref().clone())
        .collect())
}

fn rs_uid(env: &Env) -> Result<Option<String>> {
    match env.store()?.get::<ReplicaSet>(NAMESPACE, RS) {
        Ok(rs) => Ok(rs.metadata.uid),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

fn live(pods: Vec<Pod>) -> Vec<Pod> {
    pods.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(uid) = rs_uid(env)? else {
        verdict.missing("there is no ReplicaSet web (`podlab lab start 12` again)");
        return Ok(verdict);
    };
    let owned = live(by_index(env, &controller_index_key(NAMESPACE, &uid))?);
    let orphans = live(by_index(env, &orphan_index_key(NAMESPACE))?);
    let owned_names = names(&owned);
    verdict.part(
        owned_names.iter().any(|n| n == STRAY),
        format!("web owns stray (index {POD_CONTROLLER_UID_INDEX}, key {uid})"),
        format!("web does not own stray: the index answers {owned_names:?} for web's UID {uid}"),
    );
    verdict.part(
        owned.len() == REPLICAS,
        format!("web owns exactly {REPLICAS} pods"),
        format!("web owns {} pods, not {REPLICAS}", owned.len()),
    );
    let released: Vec<&Pod> = orphans
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("web-"))
                && p.metadata.generate_name.as_deref() == Some("web-")
        })
        .collect();
    match released.first() {
        Some(pod) => verdict.part(
            pods::all_running(pod),
            format!(
                "pod {} that web made is an orphan now, and runs",
                pod.metadata.name.as_deref().unwrap_or_default()
            ),
            format!(
                "pod {} is an orphan, but does not run",
                pod.metadata.name.as_deref().unwrap_or_default()
            ),
        ),
        None => verdict.part(
            false,
            "",
            format!(
                "no pod that web made is an orphan: the orphan key answers {:?}",
                names(&orphans)
            ),
        ),
    };
    Ok(verdict)
}

fn wait_owned(env: &Env, what: &str, done: impl Fn(&[String]) -> bool) -> Result<()> {
    env.say(format!("(waiting until {what})"));
    let start = std::time::Instant::now();
    loop {
        if let Some(uid) = rs_uid(env)? {
            let owned = live(by_index(env, &controller_index_key(NAMESPACE, &uid))?);
            let running = owned.iter().filter(|p| pods::all_running(p)).count();
            if running == owned.len() && done(&names(&owned)) {
                return Ok(());
            }
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("{what} did not happen within 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn scene(env: &Env) -> Result<()> {
    env.apply("stray.yaml", &stray_manifest("stray"))?;
    env.apply("web-rs.yaml", RS_MANIFEST)?;
    wait_owned(env, "web owns 2 running pods", |n| n.len() == REPLICAS)?;
    pods::wait_running(env, STRAY)?;
    env.podlab(&["get", "pods", "--show-labels"])?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    env.say("(app: web in stray.yaml)");
    env.apply("stray.yaml", &stray_manifest("web"))?;
    wait_owned(env, "web owns stray and 2 pods", |n| {
        n.len() == REPLICAS && n.iter().any(|n| n == STRAY)
    })?;
    let uid = rs_uid(env)?.context("ReplicaSet web is gone")?;
    let owned = live(by_index(env, &controller_index_key(NAMESPACE, &uid))?);
    let made = names(&owned)
        .into_iter()
        .find(|n| n != STRAY)
        .context("web owns no pod it made")?;
    let yaml = env.podlab(&["get", "pod", &made, "-o", "yaml"])?;
    let relabeled = yaml.replacen("app: web\n", "app: web-debug\n", 1);
    env.say(format!("(app: web-debug in {made}.yaml)"));
    env.apply(&format!("{made}.yaml"), &relabeled)?;
    wait_owned(env, "web owns 2 pods again", |n| {
        n.len() == REPLICAS && !n.contains(&made)
    })?;
    env.podlab(&["get", "pods", "--index", "controller=orphan"])?;
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    let uid = rs_uid(env)?.context("ReplicaSet web is gone")?;
    let owned = live(by_index(env, &controller_index_key(NAMESPACE, &uid))?);
    let made = names(&owned)
        .into_iter()
        .next()
        .context("web owns no pod")?;
    pods::delete(env, &[&made])?;
    wait_owned(env, "web owns 2 pods again", |n| n.len() == REPLICAS)
}

fn reset(env: &Env) -> Result<()> {
    if rs_uid(env)?.is_some() {
        env.podlab(&["delete", "replicaset", RS])?;
    }
    // What web made, released or not, and stray.
    let (all, _) = env.store()?.list::<Pod>(Some(NAMESPACE))?;
    let mine: Vec<String> = all
        .iter()
        .filter(|p| p.metadata.generate_name.as_deref() == Some("web-"))
        .filter_map(|p| p.metadata.name.clone())
        .chain([STRAY.to_string()])
        .collect();
    let mine: Vec<&str> = mine.iter().map(String::as_str).collect();
    pods::delete(env, &mine)
}
