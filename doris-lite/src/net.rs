//! Accept loops that own their connections: when a listener task is dropped (stop, or the
//! `Server.restart_listeners` debug point) every open connection closes with it, and a handler
//! can drop its own connection without answering (`StreamLoad.close_mid_body` / `drop_response`).

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
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

/// Serves HTTP/1.1 and HTTP/2 (h2c, for gRPC) on `listener` until the task is dropped.
pub async fn serve_http(listener: TcpListener, router: Router) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.spawn(serve_connection(stream, router.clone()));
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, router: Router) {
    let _ = stream.set_nodelay(true);
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
