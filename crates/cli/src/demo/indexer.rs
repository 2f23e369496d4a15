//! `podlab demo indexer`: client-go's informer indexes at work in the ReplicaSet controller
//! (the one inside `podlab node`). A pod with the labels a ReplicaSet selects, made before
//! it, is adopted instead of a new one being made; `get pods --index controller=<uid>` and
//! `--index controller=orphan` show the controller-UID index with its orphan key; a pod whose
//! labels stop matching is released (an orphan again) and replaced; scaling down deletes the
//! extras, newest first. Last, a second controller synced in this process shows that a sync
//! hands out only the index's answer for its ReplicaSet and its namespace's orphans, not
//! every pod in the cache.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use podlab_control::indexes::{
    controller_index_key, orphan_index_key, pod_indexers, POD_CONTROLLER_UID_INDEX,
};
use podlab_control::replicaset::reconcile::Action;
use podlab_control::{controller_of, ControllerConfig, Informer, ReplicaSetController};
use serde_json::Value;

use super::lab::{Lab, NAMESPACE};
use super::{say, Evidence, Shown};

const ORPHAN: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: idx-orphan, labels: {app: idx}}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
"#;

const REPLICASETS: &str = r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: idx}
spec:
  replicas: 3
  selector: {matchLabels: {app: idx}}
  template:
    metadata: {labels: {app: idx}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: other}
spec:
  replicas: 2
  selector: {matchLabels: {app: other}}
  template:
    metadata: {labels: {app: other}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
"#;

const LIMIT: Duration = Duration::from_secs(30);

pub fn run(evidence: &mut Evidence) -> Result<()> {
    let lab = Lab::open("indexer", &[("PODLAB_NETWORK", "none")])?;
    say("A controller finds its pods the way client-go's informers let it: by an index. Each pod");
    say("is filed under its controller's UID (`<namespace>/<uid>`), or under `_ORPHAN_POD/<ns>`");
    say("when nothing controls it; the ReplicaSet controller reads only those two answers.");
    let outcome = walk_through(&lab, evidence);
    if super::keep() {
        return outcome;
    }
    say("\n$ podlab delete replicaset idx other     # their pods go with them (the cascade)");
    let cleaned = clean_up(&lab);
    outcome?;
    cleaned?;
    let (left, _) = lab.ctx.store.list::<Pod>(None)?;
    evidence.check(
        "everything the demo made is gone",
        left.is_empty(),
        format!("{} pods left", left.len()),
    );
    Ok(())
}

fn pods(lab: &Lab) -> Result<Vec<Pod>> {
    Ok(lab.ctx.store.list::<Pod>(Some(NAMESPACE))?.0)
}

/// Pods controlled by `uid` that are not being deleted.
fn owned(pods: &[Pod], uid: &str) -> Vec<String> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| controller_of(&p.metadata).is_some_and(|o| o.uid == uid))
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// Polls the store (bounded) until `done` holds for the pods of the namespace.
fn wait_pods(lab: &Lab, what: &str, done: impl Fn(&[Pod]) -> bool) -> Result<Vec<Pod>> {
    let start = Instant::now();
    loop {
        let pods = pods(lab)?;
        if done(&pods) {
            return Ok(pods);
        }
        if start.elapsed() > LIMIT {
            let names: Vec<_> = pods
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            bail!(
                "{what} did not happen within {} s (pods: {})",
                LIMIT.as_secs(),
                names.shown()
            );
        }
        super::poll_pause(Duration::from_millis(100));
    }
}

/// Prints `podlab get pods --index SPEC` as the command prints it, and returns the names.
fn show_index(lab: &Lab, spec: &str) -> Result<Vec<String>> {
    say(format!("\n$ podlab get pods --index {spec}"));
    let items = crate::index::pods_by_index(&lab.ctx, spec, Some(NAMESPACE))?;
    let mut names: Vec<String> = items
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
        .collect();
    names.sort();
    if items.is_empty() {
        say("  No resources found in default namespace.");
        return Ok(names);
    }
    let now = crate::columns::now();
    let rows: Vec<(Vec<String>, &Value)> = items
        .iter()
        .map(|item| {
            let pod: Pod = serde_json::from_value(item.clone()).unwrap_or_default();
            (crate::columns::pod_row(&pod, now, false), item)
        })
        .collect();
    let query = crate::output::Query::default();
    let mut sorted = rows;
    sorted.sort_by(|a, b| a.0[0].cmp(&b.0[0]));
    let text = crate::output::table(&crate::columns::POD_HEADERS, sorted, &query);
    for line in text.lines() {
        say(format!("  {line}"));
    }
    Ok(names)
}

fn rs_uid(lab: &Lab, name: &str) -> Result<String> {
    let rs: ReplicaSet = lab.ctx.store.get(NAMESPACE, name)?;
    rs.metadata.uid.context("the ReplicaSet's uid")
}

fn walk_through(lab: &Lab, evidence: &mut Evidence) -> Result<()> {
    say("\n$ podlab apply -f orphan.yaml     # a pod labelled app=idx, and no controller yet");
    lab.apply(ORPHAN, "orphan.yaml")?;
    let orphans = show_index(lab, "controller=orphan")?;
    evidence.check(
        "before any ReplicaSet, idx-orphan is under the orphan key",
        orphans == ["idx-orphan"],
        orphans.shown(),
    );

    say("\n$ podlab apply -f replicasets.yaml     # idx: 3 replicas of app=idx; other: 2 of app=other");
    lab.apply(REPLICASETS, "replicasets.yaml")?;
    let (idx, other) = (rs_uid(lab, "idx")?, rs_uid(lab, "other")?);
    let pods_now = wait_pods(lab, "3 idx pods and 2 other pods", |p| {
        owned(p, &idx).len() == 3 && owned(p, &other).len() == 2
    })?;
    let mine = owned(&pods_now, &idx);
    let shown = show_index(lab, &format!("controller={idx}"))?;
    evidence.check(
        "idx adopted the orphan and made only 2 pods (3 in all)",
        mine.contains(&"idx-orphan".to_string())
            && pods_now
                .iter()
                .filter(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("app"))
                        .map(String::as_str)
                        == Some("idx")
                })
                .count()
                == 3,
        mine.shown(),
    );
    evidence.compare(
        "--index controller=<idx uid> answers idx's pods",
        shown.clone(),
        {
            let mut m = mine.clone();
            m.sort();
            m
        },
        true,
    );
    let orphans = show_index(lab, "controller=orphan")?;
    evidence.check("no orphan is left", orphans.is_empty(), orphans.shown());

    // Relabel one of idx's own pods: it no longer matches, is released, and replaced.
    let victim = mine
        .iter()
        .find(|n| *n != "idx-orphan")
        .cloned()
        .context("a pod idx made")?;
    say(format!(
        "\n$ kubectl label pod {victim} app=debug --overwrite     # podlab: the same update in its store"
    ));
    crate::apply::retry_on_conflict(|| {
        let mut pod: Pod = lab.ctx.store.get(NAMESPACE, &victim)?;
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("app".into(), "debug".into());
        lab.ctx.store.update(pod)
    })?;
    let after = wait_pods(lab, "the relabelled pod released and replaced", |p| {
        let released = p.iter().any(|p| {
            p.metadata.name.as_deref() == Some(victim.as_str())
                && controller_of(&p.metadata).is_none()
        });
        released && owned(p, &idx).len() == 3
    })?;
    let orphans = show_index(lab, "controller=orphan")?;
    let mine_now = owned(&after, &idx);
    let replacement: Vec<_> = mine_now
        .iter()
        .filter(|n| !mine.contains(n))
        .cloned()
        .collect();
    show_index(lab, &format!("controller={idx}"))?;
    evidence.check(
        format!("{victim} was released: now under the orphan key"),
        orphans == [victim.clone()],
        orphans.shown(),
    );
    evidence.check(
        "a replacement was made (idx has 3 pods again)",
        mine_now.len() == 3 && replacement.len() == 1,
        format!("{}, new: {}", mine_now.shown(), replacement.shown()),
    );

    // What a sync of idx reads: a second controller, synced once here.
    let mut informer = Informer::<Pod>::with_indexers(lab.ctx.store.clone(), pod_indexers());
    informer.sync()?;
    let sizes = informer.indexer().index_sizes(POD_CONTROLLER_UID_INDEX);
    say("\nThe controller-UID index (key → pods):");
    for (key, size) in &sizes {
        let owner = if key == &controller_index_key(NAMESPACE, &idx) {
            " (idx)"
        } else if key == &controller_index_key(NAMESPACE, &other) {
            " (other)"
        } else {
            ""
        };
        say(format!("  {key:<60} {size}{owner}"));
    }
    let mut controller = ReplicaSetController::new(
        lab.ctx.store.clone(),
        ControllerConfig {
            record_events: false,
            ..ControllerConfig::default()
        },
    );
    let reports = controller.run_until_idle(Duration::from_secs(10))?;
    let report = reports
        .iter()
        .find(|r| r.key == format!("{NAMESPACE}/idx"))
        .context("a sync of default/idx")?;
    let expected = sizes
        .get(&controller_index_key(NAMESPACE, &idx))
        .copied()
        .unwrap_or(0)
        + sizes
            .get(&orphan_index_key(NAMESPACE))
            .copied()
            .unwrap_or(0);
    say(format!(
        "A sync of default/idx by a second ReplicaSetController in this process: it examined {} pods\n(its own and the namespace's orphans) of the {} in its cache; what it did: {}",
        report.pods_examined,
        report.pods_cached,
        action_names(&report.done)
    ));
    evidence.check(
        "the controller examined only the index answers (own + orphans), not the whole cache",
        report.pods_examined as usize == expected
            && (report.pods_examined as usize) < report.pods_cached,
        format!(
            "examined {}, index answers {expected}, cached {}",
            report.pods_examined, report.pods_cached
        ),
    );
    evidence.check(
        "the second controller found nothing to do (the first had converged)",
        !report.done.iter().any(|a| {
            matches!(
                a,
                Action::Create(_) | Action::Delete(_) | Action::Adopt(_) | Action::Release(_)
            )
        }),
        action_names(&report.done),
    );
    drop(controller);

    // Scale down: the extras go, newest first.
    say("\n$ kubectl scale replicaset idx --replicas=1     # podlab: the same update in its store");
    crate::apply::retry_on_conflict(|| {
        let mut rs: ReplicaSet = lab.ctx.store.get(NAMESPACE, "idx")?;
        rs.spec.get_or_insert_with(Default::default).replicas = Some(1);
        lab.ctx.store.update(rs)
    })?;
    let scaled = wait_pods(lab, "idx scaled down to 1", |p| owned(p, &idx).len() == 1)?;
    let kept = owned(&scaled, &idx);
    show_index(lab, &format!("controller={idx}"))?;
    let created = |name: &str| {
        after
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.metadata.creation_timestamp.clone())
            .map(|t| t.0)
    };
    let kept_at = kept.first().and_then(|n| created(n));
    say(format!(
        "  kept {}; the others are deleted gracefully (Terminating until the agent has stopped them)",
        kept.join(", ")
    ));
    let deleted: Vec<_> = mine_now
        .iter()
        .filter(|n| !kept.contains(n))
        .cloned()
        .collect();
    evidence.check(
        "scaling to 1 deleted the 2 extras, newest first (the oldest pod stays)",
        kept.len() == 1 && deleted.len() == 2 && deleted.iter().all(|d| created(d) >= kept_at),
        format!("kept {}, deleted {}", kept.shown(), deleted.shown()),
    );
    Ok(())
}

fn action_names(actions: &[Action]) -> String {
    if actions.is_empty() {
        return "nothing".into();
    }
    let names: Vec<&str> = actions
        .iter()
        .map(|a| match a {
            Action::Adopt(_) => "adopt",
            Action::Release(_) => "release",
            Action::Create(_) => "create",
            Action::Delete(_) => "delete",
            Action::UpdateStatus(_) => "update its status",
        })
        .collect();
    names.join(", ")
}

/// Deletes both ReplicaSets (their pods go with them, the garbage collector's cascade done by
/// the controller) and the pods nothing controls, and waits until no pod is left.
fn clean_up(lab: &Lab) -> Result<()> {
    for name in ["idx", "other"] {
        match lab.ctx.store.delete::<ReplicaSet>(NAMESPACE, name) {
            Err(e) if !e.is_not_found() => return Err(e.into()),
            _ => {}
        }
    }
    let start = Instant::now();
    loop {
        let left = pods(lab)?;
        if left.is_empty() {
            return Ok(());
        }
        for pod in &left {
            let name = pod.metadata.name.clone().unwrap_or_default();
            if controller_of(&pod.metadata).is_none() && pod.metadata.deletion_timestamp.is_none() {
                crate::delete::delete_pod(&lab.ctx, NAMESPACE, &name, None, false)?;
            }
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("{} pods are still there after 60 s", left.len());
        }
        super::poll_pause(Duration::from_millis(100));
    }
}
