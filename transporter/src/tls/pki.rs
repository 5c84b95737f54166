//! Making and reading the cluster's keys and certificates (what `ndb_sign_keys` does): a CA,
//! node keys (ECDSA P-256, PKCS#8 PEM, mode 0400 as NDB writes them), node certificates signed
//! by the CA, and the facts `--list` and `--check` show.
//!
//! NDB protects the CA key with a pass phrase; rndb writes it unencrypted, readable by its
//! owner only.
#![forbid(unsafe_code)]

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use rndb_config::NodeKind;
use rustls::pki_types::CertificateDer;
use time::{Duration, OffsetDateTime};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use super::{file_error, kind_name, CA_CERT_FILE, CA_KEY_FILE};
use crate::TransportError;

/// How long a CA certificate is valid by default (NDB: 4 years).
pub const CA_LIFETIME_DAYS: i64 = 4 * 365 + 1;
/// How long a node certificate is valid by default (NDB: 90 days).
pub const NODE_LIFETIME_DAYS: i64 = 90;

/// When a new certificate is valid: from `not_before` to `not_after`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
}

impl Lifetime {
    /// From a day ago until `seconds` from now (negative: a certificate that has already
    /// expired, for tests). A lifetime past what a date can hold is an error.
    pub fn from_now(seconds: i64) -> Result<Lifetime, TransportError> {
        let now = OffsetDateTime::now_utc();
        let end = now
            .checked_add(Duration::seconds(seconds))
            .and_then(|end| Some((end, end.checked_sub(Duration::days(1))?)))
            .filter(|(end, _)| end.year() <= 9999);
        let Some((not_after, day_before_end)) = end else {
            return Err(TransportError::Tls(format!(
                "a certificate lifetime of {seconds} seconds ends past the year 9999"
            )));
        };
        Ok(Lifetime {
            not_before: (now - Duration::days(1)).min(day_before_end),
            not_after,
        })
    }
}

/// Creates the cluster CA in `dir`: `NDB-Cluster-private-key` and `NDB-Cluster-cert`. Refuses
/// to overwrite either.
pub fn create_ca(dir: &Path, lifetime: Lifetime) -> Result<(PathBuf, PathBuf), TransportError> {
    let key = KeyPair::generate().map_err(|e| tls_error("generate the CA key", e))?;
    let mut params = CertificateParams::default();
    params.distinguished_name.push(
        DnType::CommonName,
        format!("MySQL NDB Cluster {}", month_year()),
    );
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = lifetime.not_before;
    params.not_after = lifetime.not_after;
    let cert = params
        .self_signed(&key)
        .map_err(|e| tls_error("sign the CA certificate", e))?;
    let key_path = write_new(dir, CA_KEY_FILE, key.serialize_pem().as_bytes(), 0o400)?;
    let cert_path = write_new(dir, CA_CERT_FILE, cert.pem().as_bytes(), 0o644)?;
    Ok((key_path, cert_path))
}

/// The CA, loaded for signing.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    /// The CA certificate as stored, appended to each node certificate (NDB's node certificate
    /// files hold the whole chain).
    cert_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

impl Ca {
    /// Reads `NDB-Cluster-cert` and `NDB-Cluster-private-key` from `search_path`.
    pub fn load(search_path: &super::SearchPath) -> Result<Ca, TransportError> {
        let cert_path = search_path.require(CA_CERT_FILE)?;
        let key_path = search_path.require(CA_KEY_FILE)?;
        let cert_pem = read_text(&cert_path)?;
        let key = KeyPair::from_pem(&read_text(&key_path)?)
            .map_err(|e| file_error(&key_path, format!("not a PEM private key: {e}")))?;
        let params = CertificateParams::from_ca_cert_pem(&cert_pem)
            .map_err(|e| file_error(&cert_path, format!("not a CA certificate: {e}")))?;
        // Signed again only to have an rcgen issuer with the stored subject and key; the file
        // keeps the original.
        let cert = params.self_signed(&key).map_err(|e| {
            file_error(
                &key_path,
                format!("does not sign for {}: {e}", cert_path.display()),
            )
        })?;
        Ok(Ca {
            cert,
            key,
            cert_pem,
        })
    }

    /// Signs `key`'s public key as a certificate for a node of `kind`, bound to `hostnames`
    /// (none: any host), valid for `lifetime`. Returns the PEM chain (node, then CA).
    pub fn sign(
        &self,
        key: &KeyPair,
        kind: NodeKind,
        hostnames: &[String],
        lifetime: Lifetime,
    ) -> Result<String, TransportError> {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name_for(kind));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        for host in hostnames {
            let san = match host.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(
                    host.clone()
                        .try_into()
                        .map_err(|e| tls_error(&format!("bind to host name {host}"), e))?,
                ),
            };
            params.subject_alt_names.push(san);
        }
        params.not_before = lifetime.not_before;
        params.not_after = lifetime.not_after;
        let cert = params
            .signed_by(key, &self.cert, &self.key)
            .map_err(|e| tls_error("sign the node certificate", e))?;
        Ok(format!("{}{}", cert.pem(), self.cert_pem))
    }
}

/// A new node key (ECDSA P-256).
pub fn generate_key() -> Result<KeyPair, TransportError> {
    KeyPair::generate().map_err(|e| tls_error("generate a node key", e))
}

/// Reads a node's private key.
pub fn read_key(path: &Path) -> Result<KeyPair, TransportError> {
    KeyPair::from_pem(&read_text(path)?)
        .map_err(|e| file_error(path, format!("not a PEM private key: {e}")))
}

/// The PEM of a key, for writing.
pub fn key_pem(key: &KeyPair) -> String {
    key.serialize_pem()
}

/// NDB's common name for a node certificate of `kind`, with this month.
pub fn common_name_for(kind: NodeKind) -> String {
    let kind = match kind {
        NodeKind::Data => "Data ",
        NodeKind::Mgm => "Management ",
        NodeKind::Api => "",
    };
    format!("NDB {kind}Node {}", month_year())
}

/// What `--list` and `--check` show of a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFacts {
    pub common_name: String,
    pub issuer: String,
    pub serial_hex: String,
    pub not_before: String,
    pub not_after: String,
    /// Seconds from now until it expires (negative: expired).
    pub expires_in_seconds: i64,
    pub bound_hostnames: Vec<String>,
    pub is_ca: bool,
}

/// The facts of one DER certificate.
pub fn facts(cert: &CertificateDer<'_>) -> Result<CertFacts, String> {
    let (_, x509) = X509Certificate::from_der(cert.as_ref()).map_err(|e| e.to_string())?;
    let validity = x509.validity();
    let now = OffsetDateTime::now_utc().unix_timestamp();
    Ok(CertFacts {
        common_name: common_name_of(&x509)?,
        issuer: x509.issuer().to_string(),
        serial_hex: x509.raw_serial_as_string(),
        not_before: validity.not_before.to_string(),
        not_after: validity.not_after.to_string(),
        expires_in_seconds: validity.not_after.timestamp() - now,
        bound_hostnames: hostnames_of(&x509)?,
        is_ca: x509.is_ca(),
    })
}

/// The subject's common name.
pub fn common_name(cert: &CertificateDer<'_>) -> Result<String, String> {
    let (_, x509) = X509Certificate::from_der(cert.as_ref()).map_err(|e| e.to_string())?;
    common_name_of(&x509)
}

/// The host names and addresses a certificate is bound to (its subject alternative names).
pub fn bound_hostnames(cert: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    let (_, x509) = X509Certificate::from_der(cert.as_ref()).map_err(|e| e.to_string())?;
    hostnames_of(&x509)
}

fn common_name_of(x509: &X509Certificate<'_>) -> Result<String, String> {
    let name = x509
        .subject()
        .iter_common_name()
        .next()
        .ok_or_else(|| "the subject has no common name".to_string())?;
    name.as_str()
        .map(str::to_string)
        .map_err(|e| format!("the common name is not text: {e}"))
}

fn hostnames_of(x509: &X509Certificate<'_>) -> Result<Vec<String>, String> {
    let Some(san) = x509.subject_alternative_name().map_err(|e| e.to_string())? else {
        return Ok(Vec::new());
    };
    Ok(san
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some(dns.to_string()),
            GeneralName::IPAddress(bytes) => ip_text(bytes),
            _ => None,
        })
        .collect())
}

fn ip_text(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?).to_string()),
        16 => Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?).to_string()),
        _ => None,
    }
}

/// Checks that the certificate in `cert_path` (with the CA of `ca_path`) would be accepted by
/// a peer now: signed by the CA, valid, for a node of `kind`, and matching the key in
/// `key_path`. `Ok` holds the facts of the node certificate.
pub fn check(
    ca_path: &Path,
    cert_path: &Path,
    key_path: &Path,
    kind: NodeKind,
) -> Result<CertFacts, TransportError> {
    let roots = super::read_certs(ca_path)?;
    let chain = super::read_certs(cert_path)?;
    let node_facts = facts(&chain[0]).map_err(|e| file_error(cert_path, e))?;
    let own_kind = super::kind_of_certificate(&chain[0]).map_err(|e| file_error(cert_path, e))?;
    if own_kind != kind {
        return Err(file_error(
            cert_path,
            format!(
                "is a certificate for {}, not {}",
                kind_name(own_kind),
                kind_name(kind)
            ),
        ));
    }
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store
            .add(root)
            .map_err(|e| file_error(ca_path, format!("not a usable CA certificate: {e}")))?;
    }
    let provider = rustls::crypto::ring::default_provider();
    let parsed = rustls::server::ParsedCertificate::try_from(&chain[0])
        .map_err(|e| file_error(cert_path, e.to_string()))?;
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &parsed,
        &store,
        &chain[1..],
        rustls::pki_types::UnixTime::now(),
        provider.signature_verification_algorithms.all,
    )
    .map_err(|e| {
        file_error(
            cert_path,
            format!("is not accepted with CA {}: {e}", ca_path.display()),
        )
    })?;
    let key = read_key(key_path)?;
    let (_, x509) = X509Certificate::from_der(chain[0].as_ref())
        .map_err(|e| file_error(cert_path, e.to_string()))?;
    if x509.public_key().raw != key.public_key_der().as_slice() {
        return Err(file_error(
            cert_path,
            format!("does not certify the key in {}", key_path.display()),
        ));
    }
    Ok(node_facts)
}

/// Writes `bytes` to a new file `dir/name` with `mode`; an existing file is an error.
pub fn write_new(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<PathBuf, TransportError> {
    let path = dir.join(name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&path)
        .map_err(|e| file_error(&path, format!("create: {e}")))?;
    file.write_all(bytes)
        .map_err(|e| file_error(&path, format!("write: {e}")))?;
    Ok(path)
}

fn read_text(path: &Path) -> Result<String, TransportError> {
    std::fs::read_to_string(path).map_err(|e| file_error(path, format!("read: {e}")))
}

/// "Dec 2026", as NDB stamps its common names.
fn month_year() -> String {
    let now = OffsetDateTime::now_utc();
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][usize::from(u8::from(now.month())) - 1];
    format!("{month} {}", now.year())
}

fn tls_error(doing: &str, e: impl std::fmt::Display) -> TransportError {
    TransportError::Tls(format!("{doing}: {e}"))
}
