//! What the API server makes up for a new object: its UID, the random end of a `generateName`
//! name, and the creation time (whole seconds, the precision `metav1.Time` keeps on the wire).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::jiff::Timestamp;

/// apimachinery's `util/rand` alphabet: lowercase consonants and digits without vowels and
/// look-alikes, so that generated names never spell words.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Length of the random suffix of a `generateName` name.
pub const RANDOM_SUFFIX_LEN: usize = 5;

/// The longest base that keeps a generated name a valid DNS label (63 - 5).
const MAX_GENERATED_BASE: usize = 63 - RANDOM_SUFFIX_LEN;

pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `generateName` → name, as `names.SimpleNameGenerator` does: base (cut to 58 bytes) + 5 random
/// characters.
pub fn generate_name(base: &str) -> String {
    let mut cut = base.len().min(MAX_GENERATED_BASE);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut name = base[..cut].to_string();
    for _ in 0..RANDOM_SUFFIX_LEN {
        name.push(ALPHANUMS[fastrand::usize(..ALPHANUMS.len())] as char);
    }
    name
}

/// Now, truncated to whole seconds so that what a caller holds equals what was stored.
pub fn now() -> Time {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    Time(Timestamp::from_second(since_epoch.as_secs() as i64).expect("now is a valid time"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_keep_the_base_and_add_five_safe_characters() {
        let name = generate_name("web-");
        assert_eq!(name.len(), 9);
        assert!(name.starts_with("web-"));
        assert!(name[4..].bytes().all(|b| ALPHANUMS.contains(&b)), "{name}");
    }

    #[test]
    fn a_long_base_is_cut_to_fit_a_dns_label() {
        let name = generate_name(&"a".repeat(80));
        assert_eq!(name.len(), 63);
    }

    #[test]
    fn uids_are_uuid_v4_text() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(uid.as_bytes()[14], b'4', "{uid}");
    }
}
