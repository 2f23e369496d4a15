//! Lab 11, kubectl's templates: write the query whose output is asked for. Pods in the
//! namespace lab-templates carry labels whose keys have dots and slashes (as
//! `paas.sogou.com/app`), where `.metadata.labels.KEY` cannot reach and go-template's `index`
//! can; then jsonpath, custom-columns with --sort-by, and --field-selector. The student's
//! answer is a file of `podlab get` command lines; the check runs each and compares its output
//! with the reference query's, and that the asked-for feature was used.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::env::{shell_line, Env};
use crate::kit::pods;
use crate::{Lab, Level, Verdict};

const NS: &str = "lab-templates";
const ANSWERS: &str = "answers.txt";
const PODS: [&str; 4] = ["web-1", "web-2", "batch-1", "broken-1"];

/// One question: what is asked, the feature the answer must use, the reference query.
struct Question {
    asked: &'static str,
    must_use: &'static str,
    reference: &'static [&'static str],
}

const QUESTIONS: [Question; 5] = [
    Question {
        asked: "only the value of pod web-1's label paas.sogou.com/app, with a go-template",
        must_use: "index",
        reference: &["get", "pod", "web-1", "-n", NS, "-o",
            "go-template={{index .metadata.labels \"paas.sogou.com/app\"}}"],
    },
    Question {
        asked: "every pod's paas.sogou.com/app label, one per line, with one go-template",
        must_use: "range",
        reference: &["get", "pods", "-n", NS, "-o",
            "go-template={{range .items}}{{index .metadata.labels \"paas.sogou.com/app\"}}{{\"\\n\"}}{{end}}"],
    },
    Question {
        asked: "every pod as NAME=PHASE, one per line, with jsonpath",
        must_use: "jsonpath",
        reference: &["get", "pods", "-n", NS, "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase}{\"\\n\"}{end}"],
    },
    Question {
        asked: "a table with columns NAME and PHASE (custom-columns), sorted by phase",
        must_use: "--sort-by",
        reference: &["get", "pods", "-n", NS, "-o",
            "custom-columns=NAME:.metadata.name,PHASE:.status.phase", "--sort-by=.status.phase"],
    },
    Question {
        asked: "the names (pod/NAME) of the pods that are not Running, selected by the API's field selector",
        must_use: "--field-selector",
        reference: &["get", "pods", "-n", NS, "--field-selector", "status.phase!=Running", "-o", "name"],
    },
];

pub static LAB: Lab = Lab {
    number: 11,
    name: "templates",
    title: "kubectl templates: index, jsonpath, custom-columns, sort-by, field-selector",
    level: Level::Intermediate,
    minutes: 20,
    goal: "Four pods run in the namespace lab-templates (podlab get pods -n lab-templates
--show-labels). For each question in {work}/answers.txt, write after `N:` the `podlab get`
command line (as you would type it in a shell) whose output is what is asked. The check runs
your command and compares its output with the expected one.",
    hints: &[
        "`.metadata.labels.paas.sogou.com/app` reads as a path through `paas`, `sogou`...: a key \
with dots needs go-template's `index MAP KEY`. A go-template over a list ranges over \
`.items`; `{{\"\\n\"}}` prints a newline.",
        "jsonpath: `{range .items[*]}...{end}`. custom-columns: `NAME:.metadata.name,...`; \
`--sort-by=JSONPATH` sorts any output. `--field-selector status.phase!=Running` filters \
like the API server does. Every query needs `-n lab-templates`.",
        "1: podlab get pod web-1 -n lab-templates -o go-template='{{index .metadata.labels \"paas.sogou.com/app\"}}'\n\
2: podlab get pods -n lab-templates -o go-template='{{range .items}}{{index .metadata.labels \"paas.sogou.com/app\"}}{{\"\\n\"}}{{end}}'\n\
3: podlab get pods -n lab-templates -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase}{\"\\n\"}{end}'\n\
4: podlab get pods -n lab-templates -o custom-columns=NAME:.metadata.name,PHASE:.status.phase --sort-by=.status.phase\n\
5: podlab get pods -n lab-templates --field-selector status.phase!=Running -o name",
    ],
    not_yet: "question 1: no answer yet",
    mistake_story: "reaching the label with a dotted path, `{{.metadata.labels.paas.sogou.com/app}}`, \
instead of `index`",
    scene,
    check,
    solve,
    mistake,
    reset,
};

const MANIFEST: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: lab-templates
  labels: {app: web, tier: frontend, paas.sogou.com/app: shop}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: web, image: busybox, command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-2
  namespace: lab-templates
  labels: {app: web, paas.sogou.com/app: shop}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: web, image: busybox, command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]}
---
apiVersion: v1
kind: Pod
metadata:
  name: batch-1
  namespace: lab-templates
  labels: {app: batch, paas.sogou.com/app: report}
spec:
  restartPolicy: Never
  containers:
  - {name: job, image: busybox, command: [\"true\"]}
---
apiVersion: v1
kind: Pod
metadata:
  name: broken-1
  namespace: lab-templates
  labels: {app: batch, paas.sogou.com/app: billing}
spec:
  restartPolicy: Never
  containers:
  - {name: job, image: busybox, command: [\"false\"]}
";

fn template() -> String {
    let mut text =
        String::from("# After each `N:`, the podlab get command line whose output is asked for.\n");
    for (i, q) in QUESTIONS.iter().enumerate() {
        text.push_str(&format!("# {}. {}\n{}:\n", i + 1, q.asked, i + 1));
    }
    text
}

fn scene(env: &Env) -> Result<()> {
    env.apply("templates-pods.yaml", MANIFEST)?;
    let limit = Duration::from_secs(60);
    for (name, done) in [
        ("web-1", "Running"),
        ("web-2", "Running"),
        ("batch-1", "Succeeded"),
        ("broken-1", "Failed"),
    ] {
        pods::wait_in(env, NS, name, done, limit, |p| pods::phase(p) == done)?;
    }
    env.podlab(&["get", "pods", "-n", NS, "--show-labels"])?;
    let path = env.write(ANSWERS, &template())?;
    env.say(format!("Your answers go in {}", path.display()));
    Ok(())
}

/// The student's command line for question `n` (1-based), as words.
fn answer(text: &str, n: usize) -> Option<Result<Vec<String>>> {
    let line = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.strip_prefix(&format!("{n}:")))?
        .trim();
    if line.is_empty() {
        return None;
    }
    Some(
        shlex::split(line)
            .with_context(|| format!("question {n}: the line is not valid shell quoting")),
    )
}

/// Runs `podlab ARGS` (ARGS after `podlab`); its stdout, or the error it printed.
fn run_query(env: &Env, args: &[String]) -> Result<std::result::Result<String, String>> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = env.podlab_quiet(&args)?;
    Ok(if code == 0 {
        Ok(out)
    } else {
        Err(err.trim().to_string())
    })
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let text = std::fs::read_to_string(env.file(ANSWERS)).unwrap_or_default();
    for (i, q) in QUESTIONS.iter().enumerate() {
        let n = i + 1;
        let words = match answer(&text, n) {
            None => {
                verdict.missing(format!("question {n}: no answer yet ({})", q.asked));
                continue;
            }
            Some(Err(e)) => {
                verdict.missing(format!("{e:#}"));
                continue;
            }
            Some(Ok(words)) => words,
        };
        let args: Vec<String> = match words.first().map(String::as_str) {
            Some("podlab") => words[1..].to_vec(),
            _ => words.clone(),
        };
        if args.first().map(String::as_str) != Some("get") {
            verdict.missing(format!(
                "question {n}: the answer should be a `podlab get` command"
            ));
            continue;
        }
        let reference: Vec<String> = q.reference.iter().map(|s| s.to_string()).collect();
        let expected = run_query(env, &reference)?
            .map_err(|e| anyhow::anyhow!("the reference query of question {n} failed: {e}"))?;
        let got = run_query(env, &args)?;
        let uses = args.iter().any(|a| a.contains(q.must_use));
        match got {
            Err(e) => verdict.missing(format!("question {n}: your command failed: {e}")),
            Ok(out) if out != expected => verdict.missing(format!(
                "question {n}: your output differs from the expected one\n--- yours:\n{}--- expected:\n{}",
                show(&out),
                show(&expected)
            )),
            Ok(_) if !uses => verdict.missing(format!(
                "question {n}: the output is right, but the question asks for {}",
                q.must_use
            )),
            Ok(_) => verdict.met(format!("question {n}: {}", q.asked)),
        }
    }
    Ok(verdict)
}

/// Output as the check shows it: a final newline made visible when missing.
fn show(text: &str) -> String {
    if text.ends_with('\n') {
        text.to_string()
    } else {
        format!("{text}(no newline at the end)\n")
    }
}

fn write_answers(env: &Env, first: Option<&[&str]>) -> Result<()> {
    let mut text = String::new();
    for (i, q) in QUESTIONS.iter().enumerate() {
        let words = if i == 0 {
            first.unwrap_or(q.reference)
        } else {
            q.reference
        };
        text.push_str(&format!("{}: podlab {}\n", i + 1, shell_line(words)));
    }
    let path = env.write(ANSWERS, &text)?;
    env.run("cat", &[&path.display().to_string()])?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    write_answers(env, None)?;
    for q in &QUESTIONS {
        env.podlab(q.reference)?;
    }
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    write_answers(
        env,
        Some(&[
            "get",
            "pod",
            "web-1",
            "-n",
            NS,
            "-o",
            "go-template={{.metadata.labels.paas.sogou.com/app}}",
        ]),
    )
}

fn reset(env: &Env) -> Result<()> {
    pods::delete_in(env, NS, &PODS)
}
