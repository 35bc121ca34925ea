//! `sluice serve`, and the commands that talk to one: `sluice submit|list|status|pause|resume|
//! stop|delete|savepoint --server URL` (the token from `$SLUICE_TOKEN`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use super::embedded;
use crate::pipeline::{Connection, FeNodes};
use crate::server::config::ServerConfig;
use crate::server::{Server, api};

/// `sluice serve --config server.toml`: run until SIGINT/SIGTERM (every pipeline takes a final
/// checkpoint and resumes from it at the next start).
pub fn serve(config: PathBuf) -> anyhow::Result<()> {
    let cfg = ServerConfig::load(&config)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let mut connections = cfg.connections.clone();
        let mut doris = None;
        if let Some(section) = connections.values_mut().find_map(|c| match c {
            Connection::Doris(d) if d.fenodes.is_embedded() => Some(d),
            _ => None,
        }) {
            let data = cfg.path(&cfg.server.data_dir).join("doris-lite");
            let handle = embedded::EmbeddedDoris::start(data).await?;
            // Run once here; the tenants' pipelines see a Doris with its tables made.
            if let Some(init) = section.init_sql.take() {
                embedded::run_init_sql(&cfg.file, &init, &handle.client()?).await?;
            }
            section.fenodes = FeNodes::List(vec![handle.fe_http_addr().to_string()]);
            section.jdbc_url.get_or_insert_with(|| handle.jdbc_url());
            doris = Some(handle);
        }
        let listen = cfg.server.listen;
        let server = Server::new(cfg, connections)?;
        server.restore();
        let listener =
            tokio::net::TcpListener::bind(listen).await.with_context(|| format!("server.listen {listen}"))?;
        let addr = listener.local_addr()?;
        eprintln!("sluice serve: http://{addr}/ (API http://{addr}/api/v1, metrics http://{addr}/metrics)");
        let watcher = server.clone();
        tokio::spawn(async move {
            let mut failed = Default::default();
            loop {
                watcher.rescan(&mut failed).await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        let app = api::router(server.clone());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let http = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stop_rx.await;
                })
                .await
        });
        super::run::wait_for_signal().await;
        eprintln!("stopping: every pipeline takes a final checkpoint");
        tokio::spawn(async {
            super::run::wait_for_signal().await;
            eprintln!("second signal: exiting now; the next start recovers from the last checkpoints");
            std::process::exit(130);
        });
        server.shutdown().await;
        let _ = stop_tx.send(());
        let _ = http.await;
        if let Some(d) = doris {
            d.stop().await;
        }
        Ok(())
    })
}

/// What a client command does.
#[derive(Debug, Clone)]
pub enum Request {
    Submit(PathBuf),
    List,
    Status(String),
    Action(String, &'static str),
    Delete(String),
}

/// Send `request` to the server at `url` with the token in the environment variable `token_env`,
/// and print its answer.
pub fn client(url: &str, token_env: &str, request: Request) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(call(url, token_env, request))
}

async fn call(url: &str, token_env: &str, request: Request) -> anyhow::Result<()> {
    let token = std::env::var(token_env)
        .with_context(|| format!("set the environment variable `{token_env}` to your API token"))?;
    let base = url.trim_end_matches('/');
    crate::doris::tls::install_provider();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(180)).build()?;
    let call = match &request {
        Request::Submit(file) => {
            let text = std::fs::read_to_string(file).with_context(|| format!("{}: cannot read it", file.display()))?;
            http.post(format!("{base}/api/v1/pipelines")).header("Content-Type", "application/toml").body(text)
        }
        Request::List => http.get(format!("{base}/api/v1/pipelines")),
        Request::Status(id) => http.get(format!("{base}/api/v1/pipelines/{id}")),
        Request::Action(id, action) => http.post(format!("{base}/api/v1/pipelines/{id}/{action}")),
        Request::Delete(id) => http.delete(format!("{base}/api/v1/pipelines/{id}")),
    };
    let reply = call.bearer_auth(token).send().await.with_context(|| format!("{base}: the server did not answer"))?;
    let status = reply.status();
    let body = reply.text().await?;
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    if !status.is_success() {
        let mut message = json["error"].as_str().unwrap_or(body.as_str()).to_string();
        if let Some(list) = json["refused"].as_array() {
            for r in list {
                message.push_str(&format!("\n  {}", r.as_str().unwrap_or_default()));
            }
        }
        anyhow::bail!("{base} answered {status}: {message}");
    }
    match request {
        Request::List => {
            for p in json["data"].as_array().into_iter().flatten() {
                let cp = p["last_checkpoint"]["id"].as_u64().map_or("-".to_string(), |c| c.to_string());
                println!(
                    "{}\t{}\tcheckpoint {cp}\trows in {} out {}",
                    p["id"].as_str().unwrap_or_default(),
                    p["state"].as_str().unwrap_or_default(),
                    p["rows_in"],
                    p["rows_out"]
                );
            }
        }
        Request::Submit(_) => println!("{}", json["id"].as_str().unwrap_or_default()),
        Request::Delete(id) => println!("deleted {id}"),
        _ => println!("{}", serde_json::to_string_pretty(&json)?),
    }
    Ok(())
}
