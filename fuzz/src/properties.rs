//! Property tests of the fuzzed parsers, in the default suite: generated well-formed input
//! round-trips, and generated arbitrary input never panics (proptest shrinks a failure to a
//! minimal case).

use proptest::prelude::*;

use crate::{seeds, Scratch, TARGETS};

fn run_target(name: &str, input: &[u8]) -> bool {
    let target = crate::target(name).unwrap();
    (target.run)(
        input,
        &Scratch {
            dir: "/nonexistent".into(),
        },
    )
}

fn dns_label() -> impl Strategy<Value = String> {
    "[a-z]([a-z0-9-]{0,20}[a-z0-9])?"
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A generated pod, written as JSON, decodes to the same names, images and commands.
    #[test]
    fn a_generated_pod_decodes_to_what_was_written(
        name in dns_label(),
        containers in proptest::collection::btree_map(dns_label(), ("[a-z]{1,10}(:[a-z0-9.]{1,8})?", proptest::collection::vec("[ -~]{0,12}", 0..4)), 1..4),
        labels in proptest::collection::btree_map("[a-z]{1,10}", "[a-z0-9]{0,10}", 0..4),
    ) {
        let list: Vec<serde_json::Value> = containers
            .iter()
            .map(|(n, (image, command))| serde_json::json!({"name": n, "image": image, "command": command}))
            .collect();
        let manifest = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": list},
        });
        let pod = podlab_api::manifest::decode_pod(&manifest.to_string(), "generated")
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(pod.metadata.name.as_deref(), Some(name.as_str()));
        let spec = pod.spec.unwrap();
        prop_assert_eq!(spec.containers.len(), containers.len());
        for c in &spec.containers {
            let (image, command) = &containers[&c.name];
            prop_assert_eq!(c.image.as_deref(), Some(image.as_str()));
            let decoded = c.command.clone().unwrap_or_default();
            prop_assert_eq!(&decoded, command);
        }
    }

    /// Any text: manifest decoding, templates and paths end in a value or an error, never a
    /// panic.
    #[test]
    fn any_text_is_decoded_or_refused_without_a_panic(text in "\\PC{0,200}") {
        for target in ["manifest", "gotemplate", "jsonpath", "cni-result", "image-manifest"] {
            run_target(target, text.as_bytes());
        }
    }

    /// Mutated seeds (the fuzzer's starting points with random bytes spliced in) never panic.
    #[test]
    fn mutated_seeds_never_panic(which in 0usize..5, at in any::<prop::sample::Index>(), bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
        let target = &TARGETS[which];
        let seeds = (target.seeds)();
        let mut input = seeds[at.index(seeds.len())].clone();
        let i = at.index(input.len() + 1);
        input.splice(i..i, bytes);
        run_target(target.name, &input);
    }

    /// `{{.metadata.name}}` and `{.metadata.name}` print a generated name as it is.
    #[test]
    fn templates_and_paths_print_a_generated_name(name in "[ -~]{0,40}") {
        let mut pod = seeds::pod_json().clone();
        pod["metadata"]["name"] = name.clone().into();
        let go = podlab_print::GoTemplate::parse("{{.metadata.name}}").unwrap();
        prop_assert_eq!(go.execute(&pod).unwrap(), name.clone());
        let path = podlab_print::JsonPath::parse("{.metadata.name}").unwrap();
        prop_assert_eq!(path.execute(&pod).unwrap(), name);
    }

    /// Text without an action is printed by a go-template as it is.
    #[test]
    fn a_template_without_actions_prints_its_text(text in "[^{]{0,80}") {
        let go = podlab_print::GoTemplate::parse(&text).unwrap();
        prop_assert_eq!(go.execute(seeds::pod_json()).unwrap(), text);
    }

    /// A generated CNI result survives a JSON round trip unchanged.
    #[test]
    fn a_generated_cni_result_round_trips(
        addresses in proptest::collection::vec((any::<[u8; 4]>(), 8u8..=32), 0..4),
        ifname in "[a-z][a-z0-9]{0,14}",
        nameservers in proptest::collection::vec("[0-9.]{1,15}", 0..3),
    ) {
        let ips: Vec<serde_json::Value> = addresses
            .iter()
            .map(|(a, len)| serde_json::json!({"address": format!("{}.{}.{}.{}/{len}", a[0], a[1], a[2], a[3]), "interface": 0}))
            .collect();
        let json = serde_json::json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": ifname, "sandbox": "/run/netns/x"}],
            "ips": ips,
            "dns": {"nameservers": nameservers},
        });
        let result = podlab_cni::result::CniResult::parse(json.to_string().as_bytes())
            .map_err(TestCaseError::fail)?;
        prop_assert_eq!(result.pod_ips(&ifname).len(), addresses.len());
        let again = podlab_cni::result::CniResult::parse(&serde_json::to_vec(&result).unwrap()).unwrap();
        prop_assert_eq!(again, result);
    }

    /// A sha256 digest parses back to itself; anything else is refused without a panic.
    #[test]
    fn digests_round_trip(hex in "[0-9a-f]{64}", junk in "\\PC{0,80}") {
        let text = format!("sha256:{hex}");
        let digest = podlab_image::Digest::parse(&text).unwrap();
        prop_assert_eq!(digest.to_string(), text);
        prop_assert_eq!(digest.hex(), hex.as_str());
        let _ = podlab_image::Digest::parse(&junk);
    }
}
