//! A pull's clients for one registry host, and the order in which they ask it.
//!
//! oci-client asks a registry's `GET /v2/` before every request once a client holds auth
//! for that registry, anonymous auth too: for a registry that lets anyone pull, the probe
//! never yields a token, so it is asked again before the manifest and before each blob. On
//! a local registry that was one more round trip on each of them. containerd's resolver asks
//! without credentials first and fetches a token only after a `401` names where to get it.
//! An anonymous pull here does the same:
//!
//! - the manifest is fetched with a plain GET (no auth stored, no probe);
//! - the blobs go through oci-client with no auth stored for the registry, so it sends them
//!   without a probe and without an `Authorization` header;
//! - a `401` on either marks the host as one that wants a token: from then on the requests
//!   go through oci-client with anonymous auth stored, which probes, fetches the token the
//!   challenge names and keeps it.
//!
//! A pull with credentials always goes through oci-client, as before.

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use oci_client::client::{
    BlobResponse, Certificate, CertificateEncoding, ClientConfig, ClientProtocol,
};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest as _, Sha256};

use crate::hosts::RegistryHost;
use crate::pull::PullErrorKind;

const USER_AGENT: &str = concat!("podlab/", env!("CARGO_PKG_VERSION"));
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// The clients a pull asks one host with.
#[derive(Clone)]
pub(crate) struct HostClient {
    oci: Client,
    /// Anonymous access only: asks without oci-client's probe until the host wants a token.
    plain: Option<Plain>,
}

#[derive(Clone)]
struct Plain {
    http: reqwest::Client,
    /// The host answered `401` once: it hands out tokens even to anonymous pulls.
    wants_token: Arc<AtomicBool>,
}

impl Plain {
    fn asks_plainly(&self) -> bool {
        !self.wants_token.load(Ordering::Relaxed)
    }
}

/// Clients built for anonymous pulls, kept for the process's later pulls. Building a client
/// loads the system's CA roots (about 150 files on Debian), which cost most of a pull whose
/// layers are already in the store. A client that was given credentials is never kept: its
/// token cache would serve that pull's token to another pull that has none. A kept client
/// keeps the CA files it read: a CA changed later is read by the next process.
static ANONYMOUS_CLIENTS: Mutex<Vec<(RegistryHost, HostClient)>> = Mutex::new(Vec::new());

/// The clients for `host`: kept ones for anonymous access, else new ones.
pub(crate) fn client_for(
    host: &RegistryHost,
    auth: &RegistryAuth,
) -> Result<HostClient, PullErrorKind> {
    if !matches!(auth, RegistryAuth::Anonymous) {
        return Ok(HostClient {
            oci: build_client(host, read_cas(host)?)?,
            plain: None,
        });
    }
    let kept = |clients: &[(RegistryHost, HostClient)]| {
        clients
            .iter()
            .find(|(h, _)| h == host)
            .map(|(_, c)| c.clone())
    };
    if let Some(client) = kept(&ANONYMOUS_CLIENTS.lock().unwrap_or_else(|e| e.into_inner())) {
        return Ok(client);
    }
    let cas = read_cas(host)?;
    let client = HostClient {
        oci: build_client(host, cas.clone())?,
        plain: Some(Plain {
            http: build_plain(host, &cas)?,
            wants_token: Arc::default(),
        }),
    };
    let mut clients = ANONYMOUS_CLIENTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(other) = kept(&clients) {
        return Ok(other); // another pull built one meanwhile
    }
    clients.push((host.clone(), client.clone()));
    Ok(client)
}

fn read_cas(host: &RegistryHost) -> Result<Vec<Vec<u8>>, PullErrorKind> {
    host.ca
        .iter()
        .map(|ca| {
            fs::read(ca).map_err(|e| {
                PullErrorKind::Config(format!(
                    "reading CA {} for {}: {e}",
                    ca.display(),
                    host.url()
                ))
            })
        })
        .collect()
}

/// `cas`: the host's own CA files, read once for both of its clients.
fn build_client(host: &RegistryHost, cas: Vec<Vec<u8>>) -> Result<Client, PullErrorKind> {
    let extra = cas
        .into_iter()
        .map(|data| Certificate {
            encoding: CertificateEncoding::Pem,
            data,
        })
        .collect();
    let config = ClientConfig {
        protocol: if host.plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        accept_invalid_certificates: host.skip_verify,
        extra_root_certificates: extra,
        platform_resolver: None,
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(READ_TIMEOUT),
        user_agent: USER_AGENT,
        ..ClientConfig::default()
    };
    Client::try_from(config).map_err(|e| PullErrorKind::Config(format!("{}: {e}", host.url())))
}

/// A reqwest client set up as oci-client sets up its own from the same host entry.
fn build_plain(host: &RegistryHost, cas: &[Vec<u8>]) -> Result<reqwest::Client, PullErrorKind> {
    let config = |e: &dyn std::fmt::Display| PullErrorKind::Config(format!("{}: {e}", host.url()));
    let extra = cas
        .iter()
        .map(|pem| reqwest::Certificate::from_pem(pem))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| config(&e))?;
    reqwest::Client::builder()
        .danger_accept_invalid_certs(host.skip_verify)
        .tls_certs_merge(extra)
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .user_agent(USER_AGENT)
        .build()
        .map_err(|e| config(&e))
}

/// The URL oci-client would ask for `reference`'s manifest (with `?ns=` on a mirror).
fn manifest_url(reference: &Reference, plain_http: bool) -> String {
    let target = reference
        .digest()
        .or_else(|| reference.tag())
        .unwrap_or("latest");
    let ns = reference
        .namespace()
        .map(|ns| format!("?ns={ns}"))
        .unwrap_or_default();
    format!(
        "{}://{}/v2/{}/manifests/{target}{ns}",
        if plain_http { "http" } else { "https" },
        reference.resolve_registry(),
        reference.repository(),
    )
}

impl HostClient {
    /// The manifest `reference` names, and its digest (the SHA-256 of the bytes received).
    pub(crate) async fn manifest(
        &self,
        host: &RegistryHost,
        reference: &Reference,
        auth: &RegistryAuth,
        accept: &[&str],
    ) -> Result<(Vec<u8>, String), OciDistributionError> {
        if let Some(plain) = self.plain.as_ref().filter(|p| p.asks_plainly()) {
            let response = plain
                .http
                .get(manifest_url(reference, host.plain_http))
                .header(reqwest::header::ACCEPT, accept.join(", "))
                .send()
                .await?;
            match response.status() {
                reqwest::StatusCode::OK => {
                    let said = response
                        .headers()
                        .get("Docker-Content-Digest")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let body = response.bytes().await?;
                    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
                    // A digest that does not match what was asked for, or what the registry
                    // says it sent, goes to oci-client, which checks both and says so.
                    let matches = |d: Option<&str>| d.is_none_or(|d| d == digest);
                    if matches(reference.digest()) && matches(said.as_deref()) {
                        return Ok((body.to_vec(), digest));
                    }
                }
                reqwest::StatusCode::UNAUTHORIZED => {
                    plain.wants_token.store(true, Ordering::Relaxed)
                }
                // Anything else oci-client asks again, and its error is the one told.
                _ => {}
            }
        }
        let (bytes, digest) = self.oci.pull_manifest_raw(reference, auth, accept).await?;
        Ok((bytes.to_vec(), digest))
    }

    /// Blob `descriptor` from byte `offset` on.
    pub(crate) async fn blob(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        descriptor: &OciDescriptor,
        offset: u64,
    ) -> Result<BlobResponse, OciDistributionError> {
        let plainly = self.plain.as_ref().filter(|p| p.asks_plainly());
        if plainly.is_none() {
            self.oci
                .store_auth_if_needed(reference.resolve_registry(), auth)
                .await;
        }
        let answer = self
            .oci
            .pull_blob_stream_partial(reference, descriptor, offset, None)
            .await;
        match (answer, plainly) {
            (Err(OciDistributionError::UnauthorizedError { .. }), Some(plain)) => {
                plain.wants_token.store(true, Ordering::Relaxed);
                self.oci
                    .store_auth_if_needed(reference.resolve_registry(), auth)
                    .await;
                self.oci
                    .pull_blob_stream_partial(reference, descriptor, offset, None)
                    .await
            }
            (answer, _) => answer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> RegistryHost {
        RegistryHost {
            plain_http: true,
            host: name.into(),
            resolve: true,
            pull: true,
            ca: Vec::new(),
            skip_verify: false,
            mirror: false,
        }
    }

    #[test]
    fn only_clients_without_credentials_are_kept_for_later_pulls() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let host = host("kept.invalid:5000");
        let kept = || {
            ANONYMOUS_CLIENTS
                .lock()
                .unwrap()
                .iter()
                .filter(|(h, _)| *h == host)
                .count()
        };
        let given = client_for(&host, &RegistryAuth::Basic("user".into(), "secret".into()));
        assert!(
            given.unwrap().plain.is_none(),
            "credentials always go through oci-client"
        );
        assert_eq!(kept(), 0, "a client given credentials is never kept");
        let first = client_for(&host, &RegistryAuth::Anonymous).unwrap();
        first
            .plain
            .as_ref()
            .unwrap()
            .wants_token
            .store(true, Ordering::Relaxed);
        let second = client_for(&host, &RegistryAuth::Anonymous).unwrap();
        assert_eq!(kept(), 1, "one client per host, built once");
        assert!(
            !second.plain.unwrap().asks_plainly(),
            "a host that wanted a token is remembered by the kept client"
        );
    }

    #[test]
    fn the_plain_manifest_url_is_oci_clients() {
        let mut mirrored =
            Reference::with_tag("docker.io".into(), "library/busybox".into(), "1.36".into());
        mirrored.set_mirror_registry("127.0.0.1:5000".into());
        assert_eq!(
            manifest_url(&mirrored, true),
            "http://127.0.0.1:5000/v2/library/busybox/manifests/1.36?ns=docker.io"
        );
        let digest = format!("sha256:{}", "a".repeat(64));
        let pinned = Reference::with_digest("ghcr.io".into(), "org/app".into(), digest.clone());
        assert_eq!(
            manifest_url(&pinned, false),
            format!("https://ghcr.io/v2/org/app/manifests/{digest}")
        );
    }
}
