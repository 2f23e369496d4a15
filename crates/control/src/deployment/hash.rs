//! The `pod-template-hash`: kube-controller-manager's `ComputeHash` (controller_utils.go).
//! FNV-32a over the pod template (and the collision count, little-endian, when there is one),
//! its decimal value then "safe-encoded" into consonants and digits (`rand.SafeEncodeString`)
//! so that it can never spell a word. The bytes hashed are the template's canonical JSON (keys
//! sorted) rather than Go's `spew` dump of the struct, which only Go's types can reproduce: the
//! names have upstream's shape and stability (same template, same name), not its values.

use k8s_openapi::api::core::v1::PodTemplateSpec;

/// The label (and selector term) that ties a ReplicaSet's pods to its template.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// `rand.SafeEncodeString`'s alphabet: no vowels, no 0, 1, 3.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// FNV-1a, 32 bits (Go's `hash/fnv.New32a`).
pub fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |hash, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// `rand.SafeEncodeString`: each character mapped into `ALPHANUMS` by its code.
pub fn safe_encode(text: &str) -> String {
    text.chars()
        .map(|c| ALPHANUMS[(c as usize) % ALPHANUMS.len()] as char)
        .collect()
}

/// `ComputeHash(template, collisionCount)`.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(&canonical(template)).expect("a template serializes");
    if let Some(count) = collision_count {
        bytes.extend_from_slice(&(count as u32 as u64).to_le_bytes());
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// The template as JSON: fields in their declared order, maps sorted, so that the same
/// template always gives the same bytes.
fn canonical(template: &PodTemplateSpec) -> serde_json::Value {
    serde_json::to_value(template).expect("a template serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv32a_matches_the_reference_vectors() {
        // From the FNV reference (draft-eastlake-fnv): "" and "a" and "foobar".
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn safe_encoding_maps_digits_as_upstream() {
        // '0' is 48: 48 % 27 = 21 → '4'; '9' is 57: 57 % 27 = 3 → 'f'.
        assert_eq!(safe_encode("0"), "4");
        assert_eq!(safe_encode("9"), "f");
        let hash = compute_hash(&PodTemplateSpec::default(), None);
        assert!(
            hash.len() <= 10 && hash.bytes().all(|b| ALPHANUMS.contains(&b)),
            "{hash}"
        );
    }

    #[test]
    fn the_hash_follows_the_template_and_the_collision_count() {
        let a = PodTemplateSpec::default();
        let mut b = a.clone();
        b.metadata = Some(Default::default());
        b.metadata.as_mut().unwrap().labels = Some([("app".into(), "web".into())].into());
        assert_eq!(compute_hash(&a, None), compute_hash(&a.clone(), None));
        assert_ne!(compute_hash(&a, None), compute_hash(&b, None));
        assert_ne!(compute_hash(&a, None), compute_hash(&a, Some(1)));
    }
}
