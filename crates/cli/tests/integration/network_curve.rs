//! A measurement, not a check (ignored; run with `--ignored --nocapture` in the test sandbox):
//! 100 pods created back to back through the whole stack (`podlab apply` → node agent →
//! RunPodSandbox with the pod's network → container → Ready in the store), once with the real
//! CNI plugins and once with podlab's built-in path. It prints the time each pod took to become
//! Ready, as CSV (`path,pod,ms`), for docs/benchmarks.md's per-pod cost curve.

use std::time::{Duration, Instant};

use crate::pods::{running, Root};

const PODS: usize = 100;

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 0\n  containers: [{{name: c, image: busybox, command: [sleep, \"3600\"]}}]\n"
    )
}

#[test]
#[ignore = "a measurement, not a check: run with --ignored --nocapture"]
fn measure_100_pods_back_to_back_for_both_network_paths() {
    // Each root takes the network lock itself (`with_network`), one path after the other.
    println!("path,pod,ms");
    for path in ["cni", "builtin"] {
        let root = Root::new(&format!("curve-{path}")).with_network();
        let root = root.with_env("PODLAB_NETWORK", path);
        let mut names = Vec::new();
        for i in 0..PODS {
            let name = format!("p{i:03}");
            let start = Instant::now();
            let out = root.apply(&pod(&name));
            assert_eq!(out.code, Some(0), "{out:?}");
            loop {
                if root.pod(&name).is_some_and(|p| running(&p)) {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "pod {name} not ready"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            println!("{path},{i},{:.1}", start.elapsed().as_secs_f64() * 1000.0);
            names.push(name);
        }
        let mut args = vec!["delete", "pod"];
        args.extend(names.iter().map(String::as_str));
        root.ok(&args);
    }
}
