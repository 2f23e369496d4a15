//! The seed corpora of the fuzz targets: well-formed inputs of each language, small and
//! varied, that the mutator starts from; and the objects templates are run against.

use std::sync::OnceLock;

const POD_YAML: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  labels: {app: web, tier: front}
  annotations: {note: "a: b"}
spec:
  terminationGracePeriodSeconds: 5
  restartPolicy: Always
  shareProcessNamespace: true
  volumes: [{name: work, emptyDir: {}}]
  initContainers:
  - name: init
    image: busybox
    command: [sh, -c, "echo hi > /work/x"]
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: app
    image: busybox:1.36
    imagePullPolicy: IfNotPresent
    command: [sleep]
    args: ["1000"]
    env: [{name: A, value: "1"}]
    workingDir: /work
    ports: [{containerPort: 8080, protocol: TCP}]
    resources:
      requests: {cpu: 100m, memory: 64Mi}
      limits: {cpu: "1", memory: 128Mi}
    readinessProbe:
      exec: {command: [cat, /work/x]}
      periodSeconds: 2
    livenessProbe:
      httpGet: {path: /, port: 8080}
"#;

pub fn manifests() -> Vec<Vec<u8>> {
    let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"busybox","command":["true"]}]}}"#;
    let multi = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c, image: busybox}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b, labels: {x: y}}\nspec:\n  hostNetwork: true\n  containers: [{name: c, image: busybox, command: [sh, -c, 'exit 0']}]\n";
    [POD_YAML, json, multi]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect()
}

pub fn go_templates() -> Vec<Vec<u8>> {
    [
        "{{.metadata.name}}",
        "{{range .spec.containers}}{{.name}}={{.image}}{{\"\\n\"}}{{end}}",
        "{{if eq .status.phase \"Running\"}}up{{else if .status}}down{{else}}none{{end}}",
        "{{printf \"%s-%d-%q-%v\" .metadata.name 3 \"x\" .metadata.labels}}",
        "{{len .spec.containers}} {{index .metadata.labels \"app\"}}",
        "{{with .status}}{{.podIP}}{{end}}{{- /* comment */ -}}",
        "{{$m := .metadata}}{{$m.name}}/{{$m.namespace}}",
        "{{range $i, $c := .spec.containers}}{{$i}}:{{$c.name}} {{end}}",
        "{{and 1 0}} {{or 0 \"x\"}} {{not true}} {{lt 1 2}} {{ne \"a\" \"b\"}}",
        "{{html \"<a>\"}} {{js \"x'y\"}} {{urlquery \"a b\"}} {{base64decode \"aGk=\"}}",
        "{{define \"t\"}}[{{.}}]{{end}}{{template \"t\" .metadata.name}}",
        "{{range .spec.containers}}{{if .ports}}{{break}}{{end}}{{.name}}{{end}}",
        "{{println (len .metadata.labels) | print}}",
        "text only, no action",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

pub fn json_paths() -> Vec<Vec<u8>> {
    [
        "{.metadata.name}",
        "{.spec.containers[*].name}",
        "{range .spec.containers[*]}{.name}{\"\\t\"}{.image}{\"\\n\"}{end}",
        "{.spec.containers[?(@.name==\"app\")].image}",
        "{..name}",
        "{.spec.containers[0:1].name}",
        "{.metadata.labels['app']}",
        "{.status.conditions[?(@.type==\"Ready\")].status}",
        "{@}",
        "{.spec.containers[-1:].name}",
        "name: {.metadata.name}, {.metadata.namespace}",
        "{.spec.containers[?(@.resources.limits.cpu>=\"1\")].name}",
        "{.metadata.annotations.note}",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

pub fn cni_results() -> Vec<Vec<u8>> {
    [
        r#"{"cniVersion":"1.0.0","interfaces":[{"name":"podlab0","mac":"aa:bb:cc:dd:ee:ff"},{"name":"veth1234","mac":"aa:bb:cc:dd:ee:01"},{"name":"eth0","mac":"aa:bb:cc:dd:ee:02","sandbox":"/run/podlab/ns/net"}],"ips":[{"address":"10.88.0.5/16","gateway":"10.88.0.1","interface":2}],"routes":[{"dst":"10.88.0.0/16"}],"dns":{"nameservers":["10.0.0.10"],"search":["svc.cluster.local"],"options":["ndots:5"]}}"#,
        r#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.1.2.3/24"}]}"#,
        r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/proc/1/ns/net","mtu":1500}],"ips":[{"address":"fd00::5/64","interface":0},{"address":"10.2.0.2/16","interface":0}]}"#,
        r#"{"cniVersion":"1.0.0"}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

const MANIFEST: &str = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:354cf18f0dd28d3afb0b5c3747f9bbec6b7de7fe3d40d8c2a860b1fe32d19576","size":581},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:a46fbb00284b4d4ec8ba8bdc2bb6cbfbaf2e1e3a8b8d6b0b8e0d2e3c9d0f1a2b","size":2123456}],"annotations":{"org.opencontainers.image.ref.name":"latest"}}"#;

pub fn image_manifests() -> Vec<Vec<u8>> {
    [
        MANIFEST,
        r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":1234,"platform":{"architecture":"amd64","os":"linux"}},{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210","size":1234,"platform":{"architecture":"arm64","os":"linux","variant":"v8"}}]}"#,
        r#"{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":["sh"],"User":"1000:1000","WorkingDir":"/","ExposedPorts":{"80/tcp":{}}},"rootfs":{"type":"layers","diff_ids":["sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"]},"history":[{"created_by":"tar"}]}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Reads `input` as podlab-image reads image JSON: a manifest, an index or a config (as the
/// oci-spec types), and every digest a descriptor names. True when one of them parsed.
pub fn read_image_json(input: &[u8]) -> bool {
    use podlab_image::oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest};
    let digests =
        |descriptors: &mut dyn Iterator<Item = &podlab_image::oci_spec::image::Descriptor>| {
            for d in descriptors {
                if let Ok(digest) = podlab_image::Digest::parse(d.digest().as_ref()) {
                    let again = podlab_image::Digest::parse(&digest.to_string())
                        .expect("a parsed digest parses again");
                    assert_eq!(again, digest);
                }
            }
        };
    let mut ok = false;
    if let Ok(manifest) = serde_json::from_slice::<ImageManifest>(input) {
        digests(&mut std::iter::once(manifest.config()).chain(manifest.layers()));
        ok = true;
    }
    if let Ok(index) = serde_json::from_slice::<ImageIndex>(input) {
        digests(&mut index.manifests().iter());
        ok = true;
    }
    if let Ok(config) = serde_json::from_slice::<ImageConfiguration>(input) {
        for diff_id in config.rootfs().diff_ids() {
            let _ = podlab_image::Digest::parse(diff_id);
        }
        ok = true;
    }
    ok
}

/// Layer tars with what layers hold: folders, files, a symlink, a hard link, a whiteout, an
/// opaque folder, a PAX xattr.
pub fn layer_tars() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    let entry = |builder: &mut tar::Builder<Vec<u8>>,
                 kind: tar::EntryType,
                 path: &str,
                 link: Option<&str>,
                 data: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(if kind == tar::EntryType::Directory {
            0o755
        } else {
            0o644
        });
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(1_700_000_000);
        header.set_size(data.len() as u64);
        if let Some(link) = link {
            header.set_link_name(link).unwrap();
        }
        builder.append_data(&mut header, path, data).unwrap();
    };
    let mut b = tar::Builder::new(Vec::new());
    entry(&mut b, tar::EntryType::Directory, "etc/", None, b"");
    entry(
        &mut b,
        tar::EntryType::Regular,
        "etc/hostname",
        None,
        b"layer\n",
    );
    entry(
        &mut b,
        tar::EntryType::Symlink,
        "etc/link",
        Some("hostname"),
        b"",
    );
    entry(
        &mut b,
        tar::EntryType::Link,
        "etc/hard",
        Some("etc/hostname"),
        b"",
    );
    seeds.push(b.into_inner().unwrap());

    let mut b = tar::Builder::new(Vec::new());
    entry(&mut b, tar::EntryType::Directory, "var/", None, b"");
    entry(&mut b, tar::EntryType::Regular, "var/.wh.gone", None, b"");
    entry(&mut b, tar::EntryType::Directory, "opt/", None, b"");
    entry(
        &mut b,
        tar::EntryType::Regular,
        "opt/.wh..wh..opq",
        None,
        b"",
    );
    entry(&mut b, tar::EntryType::Regular, "opt/new", None, b"x");
    seeds.push(b.into_inner().unwrap());

    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("SCHILY.xattr.user.note", b"hello".as_slice())])
        .unwrap();
    entry(
        &mut b,
        tar::EntryType::Regular,
        "noted",
        None,
        b"with an xattr",
    );
    seeds.push(b.into_inner().unwrap());
    seeds
}

fn pod_value() -> serde_json::Value {
    let mut pod: serde_json::Value = podlab_api::manifest::documents(POD_YAML, "seed")
        .expect("the seed pod decodes")
        .remove(0);
    pod["status"] = serde_json::json!({
        "phase": "Running",
        "podIP": "10.88.0.5",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "app", "ready": true, "restartCount": 2}]
    });
    pod
}

/// The Pod templates and paths run against.
pub fn pod_json() -> &'static serde_json::Value {
    static POD: OnceLock<serde_json::Value> = OnceLock::new();
    POD.get_or_init(pod_value)
}

/// A kubectl List of two Pods.
pub fn list_json() -> &'static serde_json::Value {
    static LIST: OnceLock<serde_json::Value> = OnceLock::new();
    LIST.get_or_init(|| {
        let mut other = pod_value();
        other["metadata"]["name"] = "db".into();
        podlab_print::kubectl_list(vec![pod_value(), other])
    })
}
