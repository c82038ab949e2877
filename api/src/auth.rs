//! Access control: bearer tokens from a token file, and the client identity that per-client
//! limits count against.
//!
//! - **Token file** (`memplan serve --token-file F`): one token per line, optionally preceded
//!   by a client name (`NAME TOKEN`, separated by white space); blank lines and lines starting
//!   with `#` are ignored. A token has at least [`MIN_TOKEN_LEN`] characters, printable ASCII
//!   without spaces; names and tokens are unique. A token without a name is the client
//!   `token-LINE`.
//! - **Checking.** With tokens configured, every request but `GET /healthz` must carry
//!   `Authorization: Bearer TOKEN`; otherwise it is answered 401 (a problem document with
//!   `WWW-Authenticate: Bearer`). The presented token is hashed (SHA-256) and compared with
//!   every configured token's hash, each comparison touching every byte, so the time taken
//!   does not depend on how much of a token matched, nor on which token matched.
//! - **Client identity** ([`Client`], put in the request's extensions): the token's name with
//!   tokens, else the peer's IP address (when the server records it), else `local`.

use crate::error::ApiError;
use crate::service::AppState;
use axum::extract::{ConnectInfo, Request};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::Path;
use thiserror::Error;

/// Shortest accepted token (characters).
pub const MIN_TOKEN_LEN: usize = 16;

/// Longest accepted token (characters).
pub const MAX_TOKEN_LEN: usize = 4096;

/// The paths served without a token.
const PUBLIC_PATHS: [&str; 1] = ["/healthz"];

/// A token file that cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TokenFileError {
    /// The file cannot be read.
    #[error("cannot read the token file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// A line breaks a rule.
    #[error("token file line {line}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong (never the token itself).
        reason: String,
    },
    /// No token at all.
    #[error("the token file holds no token (every line is blank or a comment)")]
    Empty,
}

/// One configured token: its client name and the SHA-256 of the token.
#[derive(Clone, PartialEq, Eq)]
struct Entry {
    name: String,
    hash: [u8; 32],
}

/// The configured tokens (only their hashes are kept).
#[derive(Clone, PartialEq, Eq)]
pub struct Tokens {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
        f.debug_struct("Tokens").field("clients", &names).finish()
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Equality of two digests in time independent of where they differ.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn token_rule(token: &str) -> Result<(), String> {
    let n = token.chars().count();
    if n < MIN_TOKEN_LEN {
        return Err(format!(
            "the token has {n} characters; at least {MIN_TOKEN_LEN} are required"
        ));
    }
    if n > MAX_TOKEN_LEN {
        return Err(format!(
            "the token has {n} characters; at most {MAX_TOKEN_LEN} are allowed"
        ));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("a token is printable ASCII without spaces".into());
    }
    Ok(())
}

impl Tokens {
    /// Parses a token file's text (see the module doc).
    pub fn parse(text: &str) -> Result<Tokens, TokenFileError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let t = raw.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = t.split_whitespace().collect();
            let (name, token) = match fields.as_slice() {
                [token] => (format!("token-{line}"), *token),
                [name, token] => ((*name).to_string(), *token),
                _ => {
                    return Err(TokenFileError::Line {
                        line,
                        reason: "expected `TOKEN` or `NAME TOKEN`".into(),
                    })
                }
            };
            token_rule(token).map_err(|reason| TokenFileError::Line { line, reason })?;
            if !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
            {
                return Err(TokenFileError::Line {
                    line,
                    reason: format!(
                        "client name {name:?}: use letters, digits, `-`, `_`, `.` or `@`"
                    ),
                });
            }
            let hash = sha256(token.as_bytes());
            if let Some(e) = entries.iter().find(|e| e.name == name) {
                return Err(TokenFileError::Line {
                    line,
                    reason: format!("client name {:?} is used twice", e.name),
                });
            }
            if let Some(e) = entries.iter().find(|e| same_digest(&e.hash, &hash)) {
                return Err(TokenFileError::Line {
                    line,
                    reason: format!("the token is the same as client {:?}'s", e.name),
                });
            }
            entries.push(Entry { name, hash });
        }
        if entries.is_empty() {
            return Err(TokenFileError::Empty);
        }
        Ok(Tokens { entries })
    }

    /// Reads and parses a token file.
    pub fn read(path: &Path) -> Result<Tokens, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| TokenFileError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Tokens::parse(&text)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no token (never true for a parsed file).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The client whose token `presented` is, comparing with every token in constant time.
    pub fn client_of(&self, presented: &str) -> Option<&str> {
        let hash = sha256(presented.as_bytes());
        let mut found = None;
        for e in &self.entries {
            if same_digest(&e.hash, &hash) {
                found = Some(e.name.as_str());
            }
        }
        found
    }
}

/// Who sent a request: what per-client limits count against (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client(pub String);

impl Client {
    /// The client of requests without a token or a known peer address.
    pub fn local() -> Client {
        Client("local".into())
    }
}

/// The bearer token of a request, if it has an `Authorization: Bearer` header.
fn bearer(req: &Request) -> Result<Option<&str>, ApiError> {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| ApiError::Unauthorized("the Authorization header is not ASCII text".into()))?;
    let (scheme, token) = value.trim().split_once(' ').ok_or_else(|| {
        ApiError::Unauthorized("the Authorization header is not `Bearer TOKEN`".into())
    })?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::Unauthorized(format!(
            "the Authorization scheme is {scheme:?}; this service takes `Bearer TOKEN`"
        )));
    }
    Ok(Some(token.trim()))
}

/// Middleware: checks the bearer token when tokens are configured (401 otherwise) and puts the
/// request's [`Client`] in its extensions.
pub async fn guard(
    axum::extract::State(svc): axum::extract::State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let public = PUBLIC_PATHS.contains(&req.uri().path());
    let client = match &svc.config().tokens {
        Some(tokens) => match bearer(&req) {
            Ok(Some(token)) => match tokens.client_of(token) {
                Some(name) => Some(Client(name.to_string())),
                None if public => None,
                None => {
                    return ApiError::Unauthorized("the bearer token is not valid".into())
                        .into_response()
                }
            },
            Ok(None) if public => None,
            Ok(None) => {
                return ApiError::Unauthorized(
                    "this service needs a bearer token: send `Authorization: Bearer TOKEN`".into(),
                )
                .into_response()
            }
            Err(_) if public => None,
            Err(e) => return e.into_response(),
        },
        None => None,
    };
    let client = client.unwrap_or_else(|| {
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(Client::local, |c| Client(c.0.ip().to_string()))
    });
    req.extensions_mut().insert(client);
    next.run(req).await
}

/// Why a listening address is refused.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "refusing to listen on {addr} without access control: it is reachable from other machines. \
     Give --token-file FILE (bearer tokens), listen on a loopback address (127.0.0.1 or ::1), \
     or pass --insecure to serve without tokens anyway"
)]
pub struct ExposedError {
    /// The address.
    pub addr: SocketAddr,
}

/// Refuses a non-loopback `addr` without tokens unless `insecure`.
pub fn check_exposure(
    addr: SocketAddr,
    has_tokens: bool,
    insecure: bool,
) -> Result<(), ExposedError> {
    if addr.ip().is_loopback() || has_tokens || insecure {
        Ok(())
    } else {
        Err(ExposedError { addr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "alpha-0123456789abcdef";
    const B: &str = "bravo-0123456789abcdef";

    #[test]
    fn a_token_file_names_clients_and_skips_comments_and_blank_lines() {
        let t = Tokens::parse(&format!("# tokens\n\nalice {A}\n{B}\n")).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.client_of(A), Some("alice"));
        assert_eq!(t.client_of(B), Some("token-4"));
        assert_eq!(t.client_of("alpha-0123456789abcdeX"), None);
        assert_eq!(t.client_of(""), None);
    }

    #[test]
    fn short_duplicate_or_malformed_tokens_are_refused_naming_the_line() {
        let short = Tokens::parse("x short\n").unwrap_err();
        assert!(
            matches!(short, TokenFileError::Line { line: 1, .. }),
            "{short}"
        );
        let dup = Tokens::parse(&format!("a {A}\nb {A}\n")).unwrap_err();
        assert!(dup.to_string().contains("line 2"), "{dup}");
        assert!(
            !dup.to_string().contains(A),
            "the error never shows a token"
        );
        let names = Tokens::parse(&format!("a {A}\na {B}\n")).unwrap_err();
        assert!(names.to_string().contains("used twice"), "{names}");
        let three = Tokens::parse(&format!("a b {A}\n")).unwrap_err();
        assert!(three.to_string().contains("NAME TOKEN"), "{three}");
        assert_eq!(Tokens::parse("# nothing\n"), Err(TokenFileError::Empty));
    }

    #[test]
    fn the_debug_form_of_tokens_shows_client_names_only() {
        let t = Tokens::parse(&format!("alice {A}\n")).unwrap();
        let shown = format!("{t:?}");
        assert!(shown.contains("alice") && !shown.contains(A), "{shown}");
    }

    #[test]
    fn a_public_address_needs_tokens_or_insecure_and_loopback_needs_neither() {
        let public: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let lan: SocketAddr = "192.168.1.5:80".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let local6: SocketAddr = "[::1]:8080".parse().unwrap();
        assert!(check_exposure(public, false, false).is_err());
        assert!(check_exposure(lan, false, false).is_err());
        assert!(check_exposure(public, true, false).is_ok());
        assert!(check_exposure(public, false, true).is_ok());
        assert!(check_exposure(local, false, false).is_ok());
        assert!(check_exposure(local6, false, false).is_ok());
    }
}
