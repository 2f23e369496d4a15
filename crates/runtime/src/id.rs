//! Sandbox and container ids: 64 random hex digits, as containerd makes them; tables show the
//! first 13, and any unambiguous prefix names the object.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// How many digits a table shows (as crictl does).
pub const SHORT_LEN: usize = 13;

macro_rules! hex_id {
    ($name:ident, $what:literal) => {
        #[doc = concat!("The id of a ", $what, ": 64 lowercase hex digits.")]
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// A fresh random id (256 bits from the kernel's CSPRNG).
            pub fn generate() -> $name {
                $name(random_hex())
            }

            /// Takes a full id; anything but 64 lowercase hex digits is refused.
            pub fn parse(text: &str) -> Result<$name> {
                if is_full_id(text) {
                    Ok($name(text.to_string()))
                } else {
                    Err(Error::Invalid(format!(
                        concat!("{:?} is not a ", $what, " id (64 lowercase hex digits)"),
                        text
                    )))
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The first 13 digits, for tables.
            pub fn short(&self) -> &str {
                &self.0[..SHORT_LEN]
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

hex_id!(SandboxId, "pod sandbox");
hex_id!(ContainerId, "container");

/// Whether `text` is a full id.
pub fn is_full_id(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: the kernel writes at most the given length into the buffer.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n > 0 {
            filled += n as usize;
        } else if nix::errno::Errno::last() != nix::errno::Errno::EINTR {
            panic!("getrandom failed: {}", nix::errno::Errno::last());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The one id among `ids` that starts with `prefix` (a full id matches itself).
pub fn resolve_prefix<'a>(
    what: &'static str,
    prefix: &str,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<Option<String>> {
    let matches: Vec<String> = ids
        .into_iter()
        .filter(|id| id.starts_with(prefix))
        .map(str::to_string)
        .collect();
    match matches.len() {
        0 => Ok(None),
        1 => Ok(matches.into_iter().next()),
        _ if prefix.is_empty() => Err(Error::Invalid(format!("an empty {what} id"))),
        _ => Err(Error::AmbiguousId {
            what,
            prefix: prefix.to_string(),
            matches,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_full_and_distinct() {
        let a = SandboxId::generate();
        let b = SandboxId::generate();
        assert!(is_full_id(a.as_str()), "{a}");
        assert_ne!(a, b);
        assert_eq!(a.short().len(), SHORT_LEN);
        assert_eq!(SandboxId::parse(a.as_str()).unwrap(), a);
    }

    #[test]
    fn bad_ids_are_refused() {
        assert!(ContainerId::parse("abc").is_err());
        assert!(ContainerId::parse(&"G".repeat(64)).is_err());
        assert!(ContainerId::parse(&"A".repeat(64)).is_err());
    }

    #[test]
    fn prefixes_resolve_or_say_why_not() {
        let ids = ["abc1", "abd2", "bcd3"];
        assert_eq!(
            resolve_prefix("container", "abc", ids).unwrap().as_deref(),
            Some("abc1")
        );
        assert_eq!(resolve_prefix("container", "x", ids).unwrap(), None);
        let err = resolve_prefix("container", "ab", ids).unwrap_err();
        assert!(err.to_string().contains("ambiguous"), "{err}");
    }
}
