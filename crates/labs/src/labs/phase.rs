//! Lab 8, phase and conditions: predict, then `podlab explain`. The scene writes a cases file
//! (kubelet's view of seven pods: restart policy, container records, sandbox) and an answers
//! file to fill in: the phase and the Ready condition kubelet computes for each. The check runs
//! the cases through podlab-kubelet's pure rules (what `podlab explain` runs) and says which
//! predictions are wrong, without giving the answer away; `podlab explain` then shows the rule
//! that decided each.

use anyhow::{Context, Result};
use serde_json::{json, Value};

use crate::env::Env;
use crate::{Lab, Level, Verdict};

const CASES: &str = "cases.json";
const ANSWERS: &str = "answers.txt";

pub static LAB: Lab = Lab {
    number: 8,
    name: "phase",
    title: "Pod phase and conditions: predict, then explain",
    level: Level::Intermediate,
    minutes: 15,
    goal: "{work}/cases.json describes seven pods as kubelet sees them in one sync pass: the
restart policy, each container's record (running, or exited with a code), the sandbox.
Predict, for each, the pod's phase (Pending, Running, Succeeded, Failed) and its Ready
condition (True or False): fill in {work}/answers.txt, one line per case, `ID: PHASE READY`.
Then run `podlab explain -f {work}/cases.json` to see the rule that decided each.",
    hints: &[
        "Phase is about the containers as a whole: Pending until all have started; Running while \
at least one runs or will be restarted; Succeeded or Failed only once all have stopped and \
none will be restarted. Ready needs every container ready.",
        "restartPolicy decides whether a stopped container will come back: Always restarts it \
whatever its exit code, OnFailure only after a failure, Never never. A pod whose containers \
will be restarted is still Running.",
        "podlab explain -f {work}/cases.json   # the answers, with the rules (PH-*, COND-*)\n\
(then copy each case's phase and Ready into {work}/answers.txt)",
    ],
    not_yet: "no prediction yet",
    mistake_story: "predicting Succeeded for a restartPolicy Always pod whose containers all \
exited 0: kubelet will restart them, so it is still Running",
    scene,
    check,
    solve,
    mistake,
    reset,
};

/// One container record: (name, "running" or an exit code).
type Record<'a> = (&'a str, Option<i32>);

/// A sync case: the pod's restart policy, its init and regular containers, and the runtime's
/// records (a container without a record has not been created yet).
fn case(
    id: &str,
    title: &str,
    policy: &str,
    spec: (&[&str], &[&str]),
    records: &[Record],
) -> Value {
    let records: Vec<Value> = records
        .iter()
        .enumerate()
        .map(|(i, (name, exit))| match exit {
            None => json!({"name": name, "state": "running", "created": 10 + i, "restartCount": 0}),
            Some(code) => json!({"name": name, "state": "exited", "created": 10 + i,
                                 "restartCount": 0, "exitCode": code}),
        })
        .collect();
    let names =
        |names: &[&str]| -> Vec<Value> { names.iter().map(|n| json!({"name": n})).collect() };
    json!({
        "id": id,
        "kind": "sync",
        "title": title,
        "input": {
            "pod": {"restartPolicy": policy, "hostNetwork": false,
                    "initContainers": names(spec.0), "containers": names(spec.1)},
            "runtime": {
                "sandboxes": [{"id": "s1", "created": 1, "state": "READY", "netns": "POD",
                               "ip": "10.88.0.5", "attempt": 0}],
                "containers": records
            }
        }
    })
}

fn cases() -> Value {
    json!({
        "schema": podlab_kubelet::explain::CASES_SCHEMA,
        "title": "podlab lab 8: predict each pod's phase and Ready condition",
        "cases": [
            case("all-running", "Always: both containers run", "Always",
                 (&[], &["a", "b"]), &[("a", None), ("b", None)]),
            case("init-still-running", "Always: the init container runs, app not created yet",
                 "Always", (&["setup"], &["app"]), &[("setup", None)]),
            case("one-running-one-failed", "Never: a runs, b exited 1", "Never",
                 (&[], &["a", "b"]), &[("a", None), ("b", Some(1))]),
            case("all-exited-zero-never", "Never: a and b exited 0", "Never",
                 (&[], &["a", "b"]), &[("a", Some(0)), ("b", Some(0))]),
            case("one-exited-one-never", "Never: a exited 0, b exited 1", "Never",
                 (&[], &["a", "b"]), &[("a", Some(0)), ("b", Some(1))]),
            case("all-exited-zero-always", "Always: a and b exited 0", "Always",
                 (&[], &["a", "b"]), &[("a", Some(0)), ("b", Some(0))]),
            case("failed-onfailure", "OnFailure: a exited 1", "OnFailure",
                 (&[], &["a"]), &[("a", Some(1))]),
        ]
    })
}

/// Each case's id with the phase and Ready status kubelet's rules compute.
fn truth() -> Result<Vec<(String, String, String)>> {
    let results = podlab_kubelet::explain::explain(&cases())?;
    Ok(results
        .into_iter()
        .map(|r| {
            let phase = r.output["phase"].as_str().unwrap_or_default().to_string();
            let ready = r.output["conditions"]["Ready"]["status"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (r.id, phase, ready)
        })
        .collect())
}

fn template() -> Result<String> {
    let mut text = String::from(
        "# One line per case: ID: PHASE READY   (PHASE: Pending Running Succeeded Failed; READY: True False)\n",
    );
    for (id, _, _) in truth()? {
        text.push_str(&format!("{id}: ? ?\n"));
    }
    Ok(text)
}

fn scene(env: &Env) -> Result<()> {
    let path = env.write(CASES, &serde_json::to_string_pretty(&cases())?)?;
    env.write(ANSWERS, &template()?)?;
    env.say(format!("The cases: {}", path.display()));
    env.run("cat", &[&env.file(ANSWERS).display().to_string()])?;
    Ok(())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let text = std::fs::read_to_string(env.file(ANSWERS)).unwrap_or_default();
    let answers: Vec<(String, Vec<String>)> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(id, rest)| {
            (
                id.trim().to_string(),
                rest.split_whitespace().map(str::to_string).collect(),
            )
        })
        .collect();
    for (id, phase, ready) in truth()? {
        let Some((_, said)) = answers.iter().find(|(a, _)| *a == id) else {
            verdict.missing(format!(
                "{id}: no prediction yet in {}",
                env.file(ANSWERS).display()
            ));
            continue;
        };
        let (p, r) = (
            said.first().map(String::as_str),
            said.get(1).map(String::as_str),
        );
        if p.is_none() || p == Some("?") {
            verdict.missing(format!("{id}: no prediction yet"));
            continue;
        }
        let phase_ok = p.is_some_and(|p| p.eq_ignore_ascii_case(&phase));
        let ready_ok = r.is_some_and(|r| r.eq_ignore_ascii_case(&ready));
        match (phase_ok, ready_ok) {
            (true, true) => verdict.met(format!("{id}: {phase}, Ready={ready}")),
            (false, _) => verdict.missing(format!(
                "{id}: the phase is not {} (which containers will kubelet start again?)",
                p.unwrap_or_default()
            )),
            (true, false) => verdict.missing(format!(
                "{id}: the phase is right, Ready is not {}",
                r.unwrap_or("given")
            )),
        }
    }
    Ok(verdict)
}

fn write_answers(env: &Env, wrong: Option<&str>) -> Result<()> {
    let mut text = String::new();
    for (id, phase, ready) in truth()? {
        let phase = if Some(id.as_str()) == wrong {
            "Succeeded".to_string()
        } else {
            phase
        };
        text.push_str(&format!("{id}: {phase} {ready}\n"));
    }
    let path = env.write(ANSWERS, &text)?;
    env.run("cat", &[&path.display().to_string()])?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    let cases = env.file(CASES).display().to_string();
    env.podlab(&["explain", "-f", &cases])
        .context("podlab explain")?;
    write_answers(env, None)
}

fn mistake(env: &Env) -> Result<()> {
    write_answers(env, Some("all-exited-zero-always"))
}

fn reset(_env: &Env) -> Result<()> {
    // Only files in the lab's folder, which `reset` removes.
    Ok(())
}
