//! GitHub App authentication: an RS256 JWT signed with the App's private key
//! (PKCS#1, as GitHub issues it, or PKCS#8), which buys an installation token
//! (`POST /app/installations/{id}/access_tokens`, in [`crate::api`]).

use std::time::Duration;

use protocol::Code;
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use serde_json::json;

use crate::error::ApiError;

/// An installation token is bought again this long before it expires.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);
/// A JWT is dated this far back, for clock drift (GitHub's advice).
pub const JWT_BACKDATE_S: i64 = 60;
/// A JWT lives this long (GitHub's maximum is ten minutes).
pub const JWT_LIFETIME_S: i64 = 9 * 60;
/// The largest private key PEM accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 16 * 1024;

/// A GitHub App installation: the App's ID, the installation and the key.
pub struct AppCredentials {
    /// The App's ID (or client ID), the JWT's `iss`.
    pub app_id: String,
    /// The installation.
    pub installation_id: u64,
    key: RsaKeyPair,
}

impl AppCredentials {
    /// Parses the App's private key (PEM: `RSA PRIVATE KEY` or `PRIVATE KEY`).
    pub fn new(app_id: &str, installation_id: u64, pem: &str) -> Result<Self, ApiError> {
        let bad = |m: String| ApiError {
            code: Code::Invalid,
            status: None,
            message: m,
            documentation_url: None,
            errors: None,
            reset_at: None,
        };
        if app_id.trim().is_empty() {
            return Err(bad("app_id is empty".into()));
        }
        if pem.len() > MAX_KEY_BYTES {
            return Err(bad(format!(
                "the private_key is longer than {MAX_KEY_BYTES} bytes"
            )));
        }
        let (label, der) = pem_der(pem).map_err(bad)?;
        let key = match label.as_str() {
            "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
            "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
            other => {
                return Err(bad(format!(
                    "the private_key is a PEM `{other}`, not an RSA PRIVATE KEY or PRIVATE KEY"
                )))
            }
        }
        .map_err(|e| bad(format!("the private_key is not a usable RSA key: {e}")))?;
        Ok(AppCredentials {
            app_id: app_id.trim().to_string(),
            installation_id,
            key,
        })
    }

    /// The App's public key (DER, PKCS#1 `RSAPublicKey`), to check a JWT.
    pub fn public_key_der(&self) -> Vec<u8> {
        use ring::signature::KeyPair;
        self.key.public_key().as_ref().to_vec()
    }

    /// A JWT for the App, issued at `now_s` (seconds since the epoch).
    pub fn jwt(&self, now_s: i64) -> Result<String, ApiError> {
        let header = b64url(json!({"alg": "RS256", "typ": "JWT"}).to_string().as_bytes());
        let claims = b64url(
            json!({
                "iat": now_s - JWT_BACKDATE_S,
                "exp": now_s + JWT_LIFETIME_S,
                "iss": self.app_id,
            })
            .to_string()
            .as_bytes(),
        );
        let signing_input = format!("{header}.{claims}");
        let mut signature = vec![0u8; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| ApiError {
                code: Code::Internal,
                status: None,
                message: "signing the App's JWT failed".into(),
                documentation_url: None,
                errors: None,
                reset_at: None,
            })?;
        Ok(format!("{signing_input}.{}", b64url(&signature)))
    }
}

/// Base64url without padding, as JWTs use.
pub fn b64url(bytes: &[u8]) -> String {
    base64_simd::URL_SAFE_NO_PAD.encode_to_string(bytes)
}

/// The label and bytes of the first PEM block.
fn pem_der(pem: &str) -> Result<(String, Vec<u8>), String> {
    let mut lines = pem
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("-----BEGIN "));
    let label = lines
        .next()
        .and_then(|l| l.strip_prefix("-----BEGIN "))
        .and_then(|l| l.strip_suffix("-----"))
        .ok_or("the private_key is not PEM (no -----BEGIN line)")?
        .to_string();
    let end = format!("-----END {label}-----");
    let mut text = String::new();
    let mut ended = false;
    for line in lines {
        if line == end {
            ended = true;
            break;
        }
        if line.contains(':') {
            return Err("the private_key is an encrypted PEM; give it unencrypted".into());
        }
        text.push_str(line);
    }
    if !ended {
        return Err(format!("the private_key has no `{end}` line"));
    }
    let der =
        protocol::b64::decode(&text).map_err(|_| "the private_key's PEM body is not base64")?;
    Ok((label, der))
}
