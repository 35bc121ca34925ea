//! A certificate authority made on the spot, for tests of TLS: its certificate, and server and
//! client certificates it signs, written as PEM files a server and its clients read.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A test CA.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct PemFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    /// A new CA named `name` (its common name).
    pub fn new(name: &str) -> Result<TestCa, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ok(TestCa { issuer: CertifiedIssuer::self_signed(params, KeyPair::generate()?)? })
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Write the CA's certificate to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.pem())
    }

    /// A server certificate for `names` (host names or IP addresses), written to
    /// `<dir>/<stem>.crt` and `<dir>/<stem>.key`.
    pub fn server(&self, names: &[&str], dir: &Path, stem: &str) -> Result<PemFiles, String> {
        self.leaf(names, ExtendedKeyUsagePurpose::ServerAuth, dir, stem)
    }

    /// A client certificate with common name `user`, written as [`TestCa::server`] does.
    pub fn client(&self, user: &str, dir: &Path, stem: &str) -> Result<PemFiles, String> {
        self.leaf(&[user], ExtendedKeyUsagePurpose::ClientAuth, dir, stem)
    }

    fn leaf(&self, names: &[&str], usage: ExtendedKeyUsagePurpose, dir: &Path, stem: &str) -> Result<PemFiles, String> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).map_err(|e| e.to_string())?;
        params.distinguished_name.push(DnType::CommonName, names.first().cloned().unwrap_or_default());
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let cert = params.signed_by(&key, &self.issuer).map_err(|e| e.to_string())?;
        let files = PemFiles { cert: dir.join(format!("{stem}.crt")), key: dir.join(format!("{stem}.key")) };
        std::fs::write(&files.cert, cert.pem()).map_err(|e| format!("{}: {e}", files.cert.display()))?;
        std::fs::write(&files.key, key.serialize_pem()).map_err(|e| format!("{}: {e}", files.key.display()))?;
        Ok(files)
    }
}
