//! Fuzz targets of podlab's parsers of untrusted input, each with its seed corpus and the
//! words its mutator splices in: manifest decoding (podlab-api), go-template and jsonpath
//! (podlab-print), CNI results (podlab-cni), image manifests and layer tars (podlab-image).
//!
//! A target takes any bytes and must neither panic nor hang; where the parser has an inverse,
//! it also checks the round trip. `src/main.rs` drives them (`cargo xtask fuzz TARGET`); the
//! property tests of the same parsers are in `properties`, run by the default suite.

pub mod seeds;

#[cfg(test)]
mod properties;

use std::path::Path;

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    /// What it feeds the input to.
    pub what: &'static str,
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Tokens the mutator inserts (the syntax of the input language).
    pub dictionary: &'static [&'static str],
    /// Runs one input; true when the parser accepted it (such inputs join the corpus).
    pub run: fn(&[u8], &Scratch) -> bool,
    /// Writes files: needs a private scratch folder (see `main.rs`'s sandbox).
    pub writes_files: bool,
}

/// Where a target that writes files may write.
pub struct Scratch {
    pub dir: std::path::PathBuf,
}

pub const TARGETS: &[Target] = &[
    Target {
        name: "manifest",
        what: "podlab_api::manifest::decode (YAML/JSON documents → validated v1.Pod)",
        seeds: seeds::manifests,
        dictionary: &[
            "apiVersion: v1\n", "kind: Pod\n", "metadata:", "spec:", "containers:", "- name: ",
            "image: ", "command: [", "]", "{", "}", "---\n", "...\n", "&a ", "*a", "!!str ",
            "!!binary ", "<<: ", "\"", "'", ": ", "\n  ", "null", "~", "true", "1e999", "-0",
            "0x10", "\t", "volumes:", "emptyDir: {}", "resources:", "limits:", "cpu: ",
            "memory: ", "\"100m\"", "\"1Gi\"", "ports:", "containerPort: ", "probe",
        ],
        run: |input, _| {
            let Ok(text) = std::str::from_utf8(input) else {
                return false;
            };
            podlab_api::manifest::decode(text, "fuzz").is_ok()
        },
        writes_files: false,
    },
    Target {
        name: "gotemplate",
        what: "podlab_print::GoTemplate parse + execute on a Pod",
        seeds: seeds::go_templates,
        dictionary: &[
            "{{", "}}", "{{-", "-}}", ".", "$", "$x := ", "range", "end", "if", "else", "with",
            "define \"t\"", "template \"t\" .", "block", "break", "continue", "len", "index",
            "printf", "\"%s\"", "\"%v\"", "\"%d\"", "\"%q\"", "%-10.3f", "eq", "ne", "lt", "and",
            "or", "not", "html", "js", "urlquery", "print", "println", "base64decode", "|",
            "(", ")", "nil", "true", "1e9", "0x1p-2", "'a'", "`raw`", "/* c */", ".metadata",
            ".items", ".spec.containers", ":=", "=", ",",
        ],
        run: |input, _| {
            let Ok(text) = std::str::from_utf8(input) else {
                return false;
            };
            let Ok(template) = podlab_print::GoTemplate::parse(text) else {
                return false;
            };
            let ok = template.execute(seeds::pod_json()).is_ok();
            let _ = template.allow_missing_keys(true).execute(seeds::list_json());
            ok
        },
        writes_files: false,
    },
    Target {
        name: "jsonpath",
        what: "podlab_print::JsonPath parse + execute on a Pod",
        seeds: seeds::json_paths,
        dictionary: &[
            "{", "}", ".", "..", "[*]", "[0]", "[-1]", "[1:]", "[::2]", "[?(@.name==\"a\")]",
            "@", "$", "range", "end", "'", "\"", "\\", "\\.", "\\n", ",", ".metadata",
            ".items", ".spec.containers", "==", "!=", "<", ">=", "<=", "&&", "||", "=~",
            "[0:-1]", "2147483648", "-9223372036854775808", "9223372036854775807", "[9223372036854775807]",
            "{\"\\t\"}", ".status",
        ],
        run: |input, _| {
            let Ok(text) = std::str::from_utf8(input) else {
                return false;
            };
            let Ok(path) = podlab_print::JsonPath::parse(text) else {
                return false;
            };
            let ok = path.execute(seeds::pod_json()).is_ok();
            let _ = path.execute_as_json(seeds::list_json());
            let _ = path.allow_missing_keys(true).execute(seeds::list_json());
            ok
        },
        writes_files: false,
    },
    Target {
        name: "cni-result",
        what: "podlab_cni::result::CniResult::parse, pod_ips, and its JSON round trip",
        seeds: seeds::cni_results,
        dictionary: &[
            "{", "}", "[", "]", ",", ":", "\"cniVersion\"", "\"1.0.0\"", "\"0.4.0\"",
            "\"interfaces\"", "\"ips\"", "\"routes\"", "\"dns\"", "\"address\"", "\"gateway\"",
            "\"interface\"", "\"sandbox\"", "\"name\"", "\"mac\"", "\"dst\"", "\"gw\"",
            "\"10.88.0.5/16\"", "\"fd00::5/64\"", "\"0.0.0.0/0\"", "\"eth0\"", "-1",
            "18446744073709551616", "null", "\"nameservers\"",
        ],
        run: |input, _| {
            let Ok(result) = podlab_cni::result::CniResult::parse(input) else {
                return false;
            };
            let _ = result.pod_ips("eth0");
            let json = serde_json::to_vec(&result).expect("a parsed result serializes");
            let again = podlab_cni::result::CniResult::parse(&json)
                .unwrap_or_else(|e| panic!("a serialized result does not parse again: {e}"));
            assert_eq!(again, result, "the CNI result round trip changed it");
            true
        },
        writes_files: false,
    },
    Target {
        name: "image-manifest",
        what: "OCI image manifest, index and config (oci-spec types, as podlab-image reads them) and their digests",
        seeds: seeds::image_manifests,
        dictionary: &[
            "{", "}", "[", "]", ",", ":", "\"schemaVersion\"", "2", "\"mediaType\"",
            "\"application/vnd.oci.image.manifest.v1+json\"",
            "\"application/vnd.oci.image.index.v1+json\"",
            "\"application/vnd.oci.image.layer.v1.tar+gzip\"", "\"config\"", "\"layers\"",
            "\"manifests\"", "\"digest\"", "\"sha256:", "\"sha512:", "\"size\"", "-1",
            "\"platform\"", "\"architecture\"", "\"os\"", "\"rootfs\"", "\"diff_ids\"",
            "\"Env\"", "\"Cmd\"", "\"User\"", "\"annotations\"",
        ],
        run: |input, _| seeds::read_image_json(input),
        writes_files: false,
    },
    Target {
        name: "layer-tar",
        what: "podlab_image::layer::unpack of a layer tar (whiteouts, links, xattrs) into a scratch folder",
        seeds: seeds::layer_tars,
        dictionary: &[
            ".wh.", ".wh..wh..opq", "../", "/", "./", "etc/passwd", "ustar\0", "ustar  \0",
            "0000755\0", "0000644\0", "SCHILY.xattr.", "trusted.overlay.opaque", "path=",
            "linkpath=", "\0\0\0\0\0\0\0\0", "00000000000\0",
        ],
        run: |input, scratch| {
            let dest = scratch.dir.join("layer");
            let _ = std::fs::remove_dir_all(&dest);
            std::fs::create_dir(&dest).expect("the scratch folder is writable");
            let ok = podlab_image::layer::unpack(input, &dest, &[], "fuzz").is_ok();
            remove_all(&dest);
            ok
        },
        writes_files: true,
    },
];

/// Removes a folder a layer made, also when it made folders in it read-only.
fn remove_all(dir: &Path) {
    if std::fs::remove_dir_all(dir).is_ok() {
        return;
    }
    fn writable(dir: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                writable(&entry.path());
            }
        }
    }
    writable(dir);
    let _ = std::fs::remove_dir_all(dir);
}

/// The target named `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every seed runs through its target, and the well-formed ones are accepted (a seed the
    /// parser refuses would make the fuzzer start from nothing).
    #[test]
    fn every_seed_of_every_target_is_accepted() {
        let scratch = Scratch {
            dir: std::env::temp_dir().join(format!("podlab-fuzz-seeds-{}", std::process::id())),
        };
        std::fs::create_dir_all(&scratch.dir).unwrap();
        for target in TARGETS {
            if target.writes_files && !nix::unistd::geteuid().is_root() {
                continue;
            }
            let seeds = (target.seeds)();
            assert!(!seeds.is_empty(), "{} has no seeds", target.name);
            for (i, seed) in seeds.iter().enumerate() {
                assert!(
                    (target.run)(seed, &scratch),
                    "{} refuses its seed {i}: {}",
                    target.name,
                    String::from_utf8_lossy(seed)
                );
            }
        }
        let _ = std::fs::remove_dir_all(&scratch.dir);
    }
}
