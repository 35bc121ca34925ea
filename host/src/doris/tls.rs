//! TLS to Doris (`enable_tls`): rustls on ring for the FE's and BEs' https (Stream Load, 2PC,
//! the REST API), for Arrow Flight SQL and for the MySQL protocol (lookups, offset tables). The server's chain is checked against
//! `tls_ca_certificate_path`, or the system's roots; `tls_skip_hostname_verification` checks the
//! chain but not the name in it, for HTTP only (Flight fails closed, as the Flink connector does).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::config::DorisSection;

/// Make ring the process's rustls provider, once: every HTTP client Sluice builds takes it.
pub fn install_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Another part of the process may have installed one first; that one stays.
        let _ = ring().install_default();
    });
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(ring())
}

/// rustls' ring provider. rustls deprecates it for aws-lc-rs (post-quantum key exchange), whose C
/// build Sluice does without; ring's TLS 1.2/1.3 suites are what Doris' Java and C++ servers speak.
#[allow(deprecated)]
fn ring() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The TLS options of one Doris connection.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// `doris` or `connections.<name>`, for messages.
    key: String,
    ca: Option<PathBuf>,
    client: Option<(PathBuf, PathBuf)>,
    skip_hostname: bool,
    http: bool,
    flight: bool,
    mysql: bool,
}

impl TlsSettings {
    /// The connection's TLS settings, when `enable_tls` is on.
    pub fn of(key: &str, section: &DorisSection) -> Option<TlsSettings> {
        section.enable_tls.then(|| TlsSettings {
            key: key.to_string(),
            ca: section.tls_ca_certificate_path.clone(),
            client: section.tls_client_certificate_path.clone().zip(section.tls_client_key_path.clone()),
            skip_hostname: section.tls_skip_hostname_verification,
            http: section.tls_for("http"),
            flight: section.tls_for("arrowflight"),
            mysql: section.tls_for("mysql"),
        })
    }

    fn certificates(&self, option: &str, path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|i| i.collect::<Result<Vec<_>, _>>())
            .with_context(|| format!("{}.{option}: cannot read {}", self.key, path.display()))?;
        if certs.is_empty() {
            anyhow::bail!("{}.{option}: {} holds no PEM certificate", self.key, path.display());
        }
        Ok(certs)
    }

    fn roots(&self) -> anyhow::Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        match &self.ca {
            Some(path) => {
                for cert in self.certificates("tls_ca_certificate_path", path)? {
                    roots.add(cert).with_context(|| {
                        format!("{}.tls_ca_certificate_path: {}: not a CA certificate", self.key, path.display())
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    anyhow::bail!(
                        "{}: no system CA certificates found ({}); set `tls_ca_certificate_path`",
                        self.key,
                        found.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")
                    );
                }
            }
        }
        Ok(roots)
    }

    fn identity(&self) -> anyhow::Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>> {
        let Some((cert, key)) = &self.client else { return Ok(None) };
        let chain = self.certificates("tls_client_certificate_path", cert)?;
        let key = PrivateKeyDer::from_pem_file(key).with_context(|| {
            format!("{}.tls_client_key_path: cannot read a PEM private key from {}", self.key, key.display())
        })?;
        Ok(Some((chain, key)))
    }

    /// The rustls client configuration for https, or None when `http` is kept plain.
    pub fn http_config(&self) -> anyhow::Result<Option<rustls::ClientConfig>> {
        if !self.http {
            return Ok(None);
        }
        let roots = Arc::new(self.roots()?);
        let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .with_context(|| format!("{}: the CA certificates", self.key))?;
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?;
        let builder = if self.skip_hostname {
            tracing::warn!(
                connection = %self.key,
                "tls_skip_hostname_verification: Doris' certificates are checked against the CA but not against the host name; anyone with a certificate of that CA can pose as Doris"
            );
            builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyName(verifier)))
        } else {
            builder.with_webpki_verifier(verifier)
        };
        let mut config = match self.identity()? {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .with_context(|| format!("{}.tls_client_key_path: does not fit the client certificate", self.key))?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(config))
    }

    /// The tonic TLS configuration for Arrow Flight SQL, or None when `arrowflight` is kept plain.
    pub fn flight_config(&self) -> anyhow::Result<Option<tonic::transport::ClientTlsConfig>> {
        if !self.flight {
            return Ok(None);
        }
        if self.skip_hostname {
            anyhow::bail!(
                "{}.tls_skip_hostname_verification: Arrow Flight SQL always checks the host name (as the Flink connector does); give Doris a certificate for its name, or keep Flight plain with `tls_excluded_protocols = [\"arrowflight\"]`",
                self.key
            );
        }
        let mut config = tonic::transport::ClientTlsConfig::new();
        match &self.ca {
            Some(path) => {
                self.certificates("tls_ca_certificate_path", path)?;
                let pem = std::fs::read(path)
                    .with_context(|| format!("{}.tls_ca_certificate_path: cannot read {}", self.key, path.display()))?;
                config = config.ca_certificate(tonic::transport::Certificate::from_pem(pem));
            }
            None => config = config.with_native_roots(),
        }
        if let Some((cert, key)) = &self.client {
            self.identity()?;
            let read = |option: &str, p: &Path| {
                std::fs::read(p).with_context(|| format!("{}.{option}: cannot read {}", self.key, p.display()))
            };
            let identity = tonic::transport::Identity::from_pem(
                read("tls_client_certificate_path", cert)?,
                read("tls_client_key_path", key)?,
            );
            config = config.identity(identity);
        }
        Ok(Some(config))
    }
}

impl TlsSettings {
    /// The MySQL protocol's TLS options (lookups, offset tables), or None when `mysql` is kept
    /// plain. Without `tls_ca_certificate_path`, Mozilla's roots (webpki-roots) vouch for Doris.
    pub fn mysql_config(&self) -> anyhow::Result<Option<mysql_async::SslOpts>> {
        if !self.mysql {
            return Ok(None);
        }
        let mut opts = mysql_async::SslOpts::default().with_danger_skip_domain_validation(self.skip_hostname);
        if let Some(path) = &self.ca {
            self.certificates("tls_ca_certificate_path", path)?;
            opts = opts.with_root_certs(vec![path.clone().into()]).with_disable_built_in_roots(true);
        }
        if let Some((cert, key)) = &self.client {
            self.identity()?;
            opts = opts
                .with_client_identity(Some(mysql_async::ClientIdentity::new(cert.clone().into(), key.clone().into())));
        }
        Ok(Some(opts))
    }
}

/// Checks the chain with webpki, and takes any name in a certificate the chain vouches for.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain first, the name last: a name error means the chain held.
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
