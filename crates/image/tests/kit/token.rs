//! A token server as Docker Hub's `auth.docker.io` is one, for a registry started with
//! `Registry::start_with_tokens(&server.auth())`: anyone gets a token for what they ask (the
//! registry trusts the server's certificate, named in its `rootcertbundle`), and the server
//! counts the tokens it gave. The tokens are the distribution spec's JWTs, ES256-signed, the
//! signing certificate in their `x5c` header.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::json;

use crate::kit::{read_head, self_signed, LocalServer, TokenAuth};

/// The registry's `service` and the tokens' audience.
const SERVICE: &str = "podlab-test";
/// The tokens' issuer, which the registry trusts.
const ISSUER: &str = "podlab-test-tokens";

pub struct TokenServer {
    server: LocalServer,
    issued: Arc<AtomicUsize>,
    dir: tempfile::TempDir,
}

/// The signing key and its certificate, as the server's thread uses them.
struct Signer {
    key: EcdsaKeyPair,
    certificate_der: Vec<u8>,
    rng: ring::rand::SystemRandom,
}

impl TokenServer {
    /// Makes a key and a self-signed certificate with `openssl`, and serves tokens.
    pub fn start(openssl: &Path) -> TokenServer {
        let dir = tempfile::tempdir().unwrap();
        self_signed(openssl, dir.path(), "token", "/CN=podlab test token issuer");
        let rng = ring::rand::SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &pem_der(&dir.path().join("token.key")),
            &rng,
        )
        .unwrap();
        let signer = Arc::new(Signer {
            key,
            certificate_der: pem_der(&dir.path().join("token.pem")),
            rng,
        });
        let issued = Arc::new(AtomicUsize::new(0));
        let server = {
            let issued = issued.clone();
            LocalServer::start(move |stream| {
                let _ = answer(stream, &signer, &issued);
            })
        };
        TokenServer {
            server,
            issued,
            dir,
        }
    }

    /// The registry's `auth: token` section for this server.
    pub fn auth(&self) -> TokenAuth {
        TokenAuth {
            realm: format!("http://127.0.0.1:{}/token", self.server.port()),
            service: SERVICE,
            issuer: ISSUER,
            certificate: self.dir.path().join("token.pem"),
        }
    }

    /// How many tokens were handed out so far.
    pub fn issued(&self) -> usize {
        self.issued.load(Ordering::SeqCst)
    }
}

/// One `GET /token?service=…&scope=repository:NAME:ACTIONS…`: a token granting every scope
/// asked for.
fn answer(mut client: TcpStream, signer: &Signer, issued: &AtomicUsize) -> std::io::Result<()> {
    let Some(head) = read_head(&mut client)? else {
        return Ok(());
    };
    let head = String::from_utf8_lossy(&head);
    let target = head.split(' ').nth(1).unwrap_or_default();
    let Ok(url) = reqwest::Url::parse(&format!("http://token.invalid{target}")) else {
        return Ok(());
    };
    let access: Vec<_> = url
        .query_pairs()
        .filter(|(key, _)| key == "scope")
        .filter_map(|(_, scope)| {
            let (kind, rest) = scope.split_once(':')?;
            let (name, actions) = rest.rsplit_once(':')?;
            Some(json!({"type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
        })
        .collect();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header =
        json!({"typ": "JWT", "alg": "ES256", "x5c": [STANDARD.encode(&signer.certificate_der)]});
    let n = issued.fetch_add(1, Ordering::SeqCst);
    let claims = json!({
        "iss": ISSUER, "sub": "", "aud": SERVICE, "exp": now + 300, "nbf": now - 10,
        "iat": now, "jti": format!("podlab-test-{n}"), "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = signer
        .key
        .sign(&signer.rng, signing_input.as_bytes())
        .unwrap();
    let token = format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(signature.as_ref())
    );
    let body = json!({"token": token, "access_token": token, "expires_in": 300}).to_string();
    write!(
        client,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The DER bytes of the first PEM block of `path`.
fn pem_der(path: &Path) -> Vec<u8> {
    let text = std::fs::read_to_string(path).unwrap();
    let body: String = text
        .lines()
        .skip_while(|line| !line.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|line| !line.starts_with("-----END"))
        .collect();
    STANDARD
        .decode(body)
        .unwrap_or_else(|e| panic!("{}: not PEM: {e}", path.display()))
}
