//! The rustls configurations of a node, and how it checks a data node's certificate.
//!
//! A data node checks a connecting node's certificate with rustls's WebPKI client verifier
//! (chain to the cluster CA, validity dates). A connecting node checks the data node's
//! certificate the same way, and its host binding only when it has one: NDB binds data node
//! certificates to no host name by default, so WebPKI's server-name check, which would require
//! one, is applied only to certificates with subject alternative names.
#![forbid(unsafe_code)]

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

/// The client and server configurations for a node presenting `chain` with `key`.
pub(super) fn configs(
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<(Arc<ClientConfig>, Arc<ServerConfig>), rustls::Error> {
    let client_verifier =
        WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| rustls::Error::General(format!("client verifier: {e}")))?;
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(chain.clone(), key.clone_key())?;
    // No session tickets: a link is never resumed, and a ticket sent after the handshake would
    // be a record the SHM set-up's peer does not read.
    server.send_tls13_tickets = 0;
    let verifier = Arc::new(NodeServerVerifier {
        roots,
        provider: provider.clone(),
    });
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(chain, key)?;
    client.resumption = rustls::client::Resumption::disabled();
    Ok((Arc::new(client), Arc::new(server)))
}

/// Checks a data node's certificate: chained to the cluster CA and valid now, and, when it is
/// bound to host names, bound to the HostName we connected to.
#[derive(Debug)]
struct NodeServerVerifier {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NodeServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        let bound = super::pki::bound_hostnames(end_entity)
            .map_err(|e| rustls::Error::General(format!("read the peer's certificate: {e}")))?;
        if !bound.is_empty() {
            rustls::client::verify_server_name(&cert, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
