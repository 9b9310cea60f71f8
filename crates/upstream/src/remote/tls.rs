//! The TLS settings of a url server's connections (issue 29 §1): rustls with the system's
//! roots (`rustls-native-certs`: the distribution's CA bundle, `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` honoured), plus the server's `tls_ca_file`, or, only when the operator wrote
//! `tls_skip_verify = true`, no verification at all.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// The client configuration: roots from the system and `ca_file`, or none checked when
/// `skip_verify`. Errors name the file and what is wrong with it.
pub fn client_config(ca_file: Option<&Path>, skip_verify: bool) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    if skip_verify {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth());
    }
    let mut roots = RootCertStore::empty();
    // A system without a CA bundle still works with `tls_ca_file`; unreadable entries are
    // skipped, as every TLS client does.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(path) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("tls_ca_file {}: {e}", path.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("tls_ca_file {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "tls_ca_file {}: no PEM certificate in it",
                path.display()
            ));
        }
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!(
                "tls_ca_file {}: no usable CA certificate in it",
                path.display()
            ));
        }
    }
    if roots.is_empty() {
        return Err(
            "no CA certificates: the system has none (install ca-certificates) and no tls_ca_file is set"
                .into(),
        );
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// `tls_skip_verify = true`: every certificate is accepted; signatures are still checked so
/// the handshake is well-formed.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
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
            &self.0.signature_verification_algorithms,
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
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
