//! doris-lite with `--tls-cert/--tls-key`: curl over https as the Doris manual uses it, the
//! MySQL protocol over TLS with the mysql CLI and mysql_async, and the refusals a client with the
//! wrong CA, without a client certificate, or in plain text meets.

use std::process::Command;

use doris_lite::test_ca::{PemFiles, TestCa};
use doris_lite::{Config, TlsFiles};
use mysql_async::prelude::Queryable;

use crate::common::{Server, args, curl_json};

struct Tls {
    server: Server,
    _pki: tempfile::TempDir,
    ca: std::path::PathBuf,
    /// A client certificate the CA signed.
    client: PemFiles,
}

/// doris-lite serving TLS with a certificate for 127.0.0.1 and localhost; with `client_certs`,
/// it asks for a client certificate signed by the same CA.
fn start(client_certs: bool) -> Tls {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("doris-lite test CA").unwrap();
    let ca_path = dir.path().join("ca.pem");
    ca.write(&ca_path).unwrap();
    let cert = ca.server(&["127.0.0.1", "localhost"], dir.path(), "server").unwrap();
    let client = ca.client("root", dir.path(), "client").unwrap();
    let tls = TlsFiles { cert: cert.cert, key: cert.key, client_ca: client_certs.then(|| ca_path.clone()) };
    let server = Server::start_with(Config { tls: Some(tls), ..Config::ephemeral() });
    Tls { server, _pki: dir, ca: ca_path, client }
}

fn curl_status(a: &[String]) -> (i32, String, String) {
    let out = Command::new("curl").args(a).output().expect("curl must be installed");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mysql_cli(t: &Tls, extra: &[&str], sql: &str) -> std::process::Output {
    let port = t.server.query_port().to_string();
    Command::new("mysql")
        .args(["-h127.0.0.1", "-P", &port, "-uroot", "--connect-timeout=5", "-N", "-B"])
        .args(extra)
        .args(["-e", sql])
        .output()
        .expect("the mysql CLI must be installed")
}

#[test]
fn stream_load_over_https_with_the_ca_and_refused_without_it() {
    let t = start(false);
    let ca = format!("--ssl-ca={}", t.ca.display());
    let out = mysql_cli(
        &t,
        &["--ssl", &ca, "--ssl-verify-server-cert"],
        "CREATE DATABASE test; CREATE TABLE test.t (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
    );
    assert!(out.status.success(), "mysql over TLS: {}", String::from_utf8_lossy(&out.stderr));
    let data = t.server.file("rows.csv", b"1,a\n2,b\n");
    let be = t.server.be().replace("127.0.0.1", "localhost");
    let url = format!("https://{be}/api/test/t/_stream_load");
    let load = |label: &str, extra: &[&str]| {
        let mut a = args(&["-sS", "--location-trusted", "-u", "root:", "-H", &format!("label:{label}")]);
        a.extend(args(&["-H", "column_separator:,", "-T", &data.display().to_string()]));
        a.extend(args(extra));
        a.push(url.clone());
        a
    };
    let reply = curl_json(&load("tls_1", &["--cacert", &t.ca.display().to_string()]));
    assert_eq!(reply["Status"], "Success", "{reply}");
    assert_eq!(reply["NumberLoadedRows"], 2, "{reply}");
    // Without the CA, curl does not trust the server (exit 60) and nothing is loaded.
    let (code, _, err) = curl_status(&load("tls_2", &[]));
    assert_eq!(code, 60, "curl without the CA: {err}");
    // Plain HTTP to the TLS port gets no HTTP answer.
    let (code, out, _) =
        curl_status(&args(&["-sS", "-u", "root:", &format!("http://{}/api/bootstrap", t.server.be())]));
    assert_ne!(code, 0, "plain HTTP to a TLS port answered: {out}");
    let out = mysql_cli(&t, &["--ssl", &ca], "SELECT k, v FROM test.t ORDER BY k");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\ta\n2\tb\n");
}

#[test]
fn the_fe_redirects_an_https_load_to_the_be_in_http() {
    let t = start(false);
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "-u", "root:", "-X", "PUT"])
        .args(["-H", "Expect: 100-continue", "--cacert", &t.ca.display().to_string()])
        .arg(format!("https://{}/api/test/t/_stream_load", t.server.fe()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let be = t.server.be();
    assert!(text.starts_with(&format!("307 http://root%40default_cluster:@{be}/api/test/t/_stream_load")), "{text}");
}

#[test]
fn the_mysql_protocol_offers_tls_and_plain_clients_still_connect() {
    let t = start(false);
    let port = t.server.query_port();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let ssl = mysql_async::SslOpts::default()
            .with_root_certs(vec![t.ca.clone().into()])
            .with_disable_built_in_roots(true);
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(port)
            .user(Some("root"))
            .ssl_opts(ssl);
        let mut conn = mysql_async::Conn::new(opts).await.expect("mysql_async over TLS");
        let one: Option<i64> = conn.query_first("SELECT 1 + 1").await.unwrap();
        assert_eq!(one, Some(2));
        conn.disconnect().await.unwrap();
        // Another CA: the handshake is refused, and says why.
        let other = TestCa::new("another CA").unwrap();
        let other_path = t.server.dir.path().join("other-ca.pem");
        other.write(&other_path).unwrap();
        let ssl =
            mysql_async::SslOpts::default().with_root_certs(vec![other_path.into()]).with_disable_built_in_roots(true);
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(port)
            .user(Some("root"))
            .ssl_opts(ssl);
        let err = mysql_async::Conn::new(opts).await.expect_err("an untrusted server is refused").to_string();
        assert!(err.contains("UnknownIssuer"), "{err}");
        // A client that does not ask for TLS stays in plain text (Doris' `enable_ssl` without
        // `require_secure_transport`).
        let mut plain = mysql_async::Conn::from_url(format!("mysql://root@127.0.0.1:{port}").as_str()).await.unwrap();
        let two: Option<i64> = plain.query_first("SELECT 2").await.unwrap();
        assert_eq!(two, Some(2));
        plain.disconnect().await.unwrap();
    });
}

#[test]
fn a_server_asking_for_client_certificates_takes_only_those_its_ca_signed() {
    let t = start(true);
    let ca = t.ca.display().to_string();
    let url = format!("https://{}/api/bootstrap", t.server.be());
    let (code, out, err) = curl_status(&args(&["-sS", "-u", "root:", "--cacert", &ca, &url]));
    assert_ne!(code, 0, "a client without a certificate was served: {out}");
    assert!(!err.is_empty());
    let reply = curl_json(&args(&[
        "-sS",
        "-u",
        "root:",
        "--cacert",
        &ca,
        "--cert",
        &t.client.cert.display().to_string(),
        "--key",
        &t.client.key.display().to_string(),
        &url,
    ]));
    assert_eq!(reply["msg"], "success", "{reply}");
}
