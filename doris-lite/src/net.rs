//! Accept loops that own their connections: when a listener task is dropped (stop, or the
//! `Server.restart_listeners` debug point) every open connection closes with it, and a handler
//! can drop its own connection without answering (`StreamLoad.close_mid_body` / `drop_response`).
//! With a [`TlsAcceptor`] every connection is TLS from its first byte, as a Doris FE/BE with
//! `enable_https` and a Flight SQL server with TLS serve it.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
pub use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

/// A request extension: closes the request's connection without a response.
#[derive(Debug, Clone)]
pub struct ConnectionKill(Arc<Notify>);

impl ConnectionKill {
    /// Closes the connection; the calling handler is dropped with it, so this never returns.
    pub async fn close(&self) -> ! {
        self.0.notify_one();
        std::future::pending().await
    }
}

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves HTTP/1.1 and HTTP/2 (h2c, or h2 over TLS, for gRPC) on `listener` until the task is
/// dropped; over TLS only with `tls`.
pub async fn serve_http(listener: TcpListener, router: Router, tls: Option<TlsAcceptor>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let router = router.clone();
                    match tls.clone() {
                        None => conns.spawn(serve_connection(stream, router)),
                        Some(acceptor) => conns.spawn(async move {
                            if let Some(stream) = handshake(&acceptor, stream).await {
                                serve_connection(stream, router).await
                            }
                        }),
                    };
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// The server side of a TLS handshake on `stream`; None (logged) when the client does not
/// complete one: it spoke plain text, distrusts the certificate, or went quiet.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

async fn serve_connection<S>(stream: S, router: Router)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let kill = ConnectionKill(Arc::new(Notify::new()));
    let ext = kill.clone();
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ext.clone());
        let router = router.clone();
        async move { Ok::<_, Infallible>(router.oneshot(req.map(Body::new)).await.unwrap_or_else(|e| match e {})) }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
    tokio::select! {
        res = conn => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "http connection ended");
            }
        }
        _ = kill.0.notified() => {}
    }
}

/// Serves connections with `serve_one` until the task is dropped; dropping closes them all.
pub async fn serve_tcp<F, Fut>(listener: TcpListener, serve_one: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.spawn(serve_one(stream));
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// The TLS settings of a server: its certificate chain and key (PEM files), and, when client
/// certificates are required, the CA that signs them.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// PEM certificate chain, the server's own certificate first.
    pub cert: std::path::PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: std::path::PathBuf,
    /// Require a client certificate signed by this PEM CA (the HTTP ports and Arrow Flight SQL).
    pub client_ca: Option<std::path::PathBuf>,
}

/// The rustls server configuration of `files` (ring; TLS 1.2 and 1.3; ALPN h2 and http/1.1).
pub fn server_config(files: &TlsFiles) -> Result<rustls::ServerConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", files.cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| format!("{}: {e}", files.key.display()))?;
    let provider = Arc::new(ring_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))? {
                let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
                roots.add(cert).map_err(|e| format!("{}: {e}", ca.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("{}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| format!("{}: {e}", files.cert.display()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// rustls' ring provider. rustls deprecates it for aws-lc-rs (post-quantum key exchange), whose C
/// build doris-lite does without; ring's TLS 1.2/1.3 suites serve its clients.
#[allow(deprecated)]
fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}
