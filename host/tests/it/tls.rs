//! Sluice against a doris-lite that serves TLS (`--tls-cert/--tls-key`): Stream Load and the
//! REST API over https, lookups over the MySQL protocol in TLS, Arrow Flight SQL over TLS; and
//! the refusals: another CA, a redirect to plain http, plain http to a TLS port, a client
//! certificate missing. The CA is made by the test.

use std::path::{Path, PathBuf};

use doris_lite::test_ca::{PemFiles, TestCa};

use crate::common::{Doris, pipeline_file, run_file};
use crate::lookup::{ENRICHED, lookup_pipeline_with, with_cities};

struct Pki {
    /// Holds `ca.pem` (the CA that signed doris-lite's certificate) and the pipelines.
    dir: tempfile::TempDir,
    /// A client certificate of the same CA.
    client: PemFiles,
}

/// doris-lite serving TLS (a certificate for 127.0.0.1), asking for client certificates with
/// `client_certs`; the CA is `ca.pem` in the returned dir, where the pipelines are written too.
async fn tls_doris(client_certs: bool) -> (Doris, Pki) {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("sluice test CA").unwrap();
    ca.write(&dir.path().join("ca.pem")).unwrap();
    let server = ca.server(&["127.0.0.1"], dir.path(), "server").unwrap();
    let client = ca.client("root", dir.path(), "client").unwrap();
    let tls = doris_lite::TlsFiles {
        cert: server.cert,
        key: server.key,
        client_ca: client_certs.then(|| dir.path().join("ca.pem")),
    };
    let doris = Doris::start_with(doris_lite::Config { tls: Some(tls), ..doris_lite::Config::ephemeral() }).await;
    (doris, Pki { dir, client })
}

/// A `[doris]` section for the TLS doris-lite: loads straight to the BE, `extra` appended.
fn section(doris: &Doris, extra: &str) -> String {
    format!(
        "fenodes = {}\nauto_redirect = false\nbenodes = [\"{}\"]\njdbc_url = \"jdbc:mysql://127.0.0.1:{}\"\nenable_tls = true\n{extra}",
        doris.fenodes(),
        doris.h().be_http_addr(),
        doris.h().query_addr().port()
    )
}

const CA: &str = "tls_ca_certificate_path = \"ca.pem\"";

fn enriched(doris: &Doris) -> Vec<String> {
    doris.sql("SELECT id, name, city, province, country, city_level FROM test.enriched ORDER BY id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_loads_looks_up_and_reads_over_tls() {
    let (doris, pki) = tls_doris(false).await;
    with_cities(&doris);
    doris.sql(ENRICHED);
    // Lookups over the MySQL protocol in TLS, the load over https straight to the BE.
    let path = lookup_pipeline_with(&section(&doris, CA), pki.dir.path());
    run_file(&path).await.unwrap();
    assert_eq!(
        enriched(&doris),
        [
            "1\tAlice\tHangzhou\tZhejiang\tChina\t2",
            "2\tBob\tAtlantis\tNULL\tNULL\tNULL",
            "3\tCarol\tNULL\tNULL\tNULL\tNULL",
            "4\tDave\tBeijing\tBeijing\tChina\t1",
        ]
    );
    // Read back over Arrow Flight SQL in TLS.
    let read = pki.dir.path().join("read");
    std::fs::create_dir_all(&read).unwrap();
    std::fs::copy(pki.dir.path().join("ca.pem"), read.join("ca.pem")).unwrap();
    let path = pipeline_file(
        &read,
        &format!(
            "[pipeline]\nname = \"read\"\n\n[doris]\n{}\n\n[[source]]\ntype = \"doris\"\ntable = \"test.enriched\"\n\n[[sink]]\ntype = \"file\"\npath = \"out.jsonl\"\n",
            section(&doris, CA)
        ),
    );
    run_file(&path).await.unwrap();
    let out = std::fs::read_to_string(read.join("out.jsonl")).unwrap();
    let mut ids: Vec<i64> =
        out.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_i64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3, 4], "{out}");
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// The error of running the enriching pipeline in `dir` with `[doris]` = `section`.
async fn fails(dir: &Path, section: &str) -> String {
    let path = lookup_pipeline_with(section, dir);
    format!("{:#}", run_file(&path).await.expect_err("the pipeline fails"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_ca_a_downgrade_or_plain_http_is_refused_and_nothing_is_loaded() {
    let (doris, pki) = tls_doris(false).await;
    with_cities(&doris);
    doris.sql(ENRICHED);
    let dir = pki.dir.path();
    let fe = doris.h().fe_http_addr();
    // Another CA: neither the MySQL protocol (the lookup connects first) nor the FE's https is
    // trusted, and each error says which server and why.
    let other = TestCa::new("another CA").unwrap();
    other.write(&dir.join("other.pem")).unwrap();
    let e = fails(dir, &section(&doris, "tls_ca_certificate_path = \"other.pem\"")).await;
    let query = doris.h().query_addr();
    assert!(e.contains(&format!("the dimension table cannot be read at {query}: ")), "{e}");
    assert!(e.contains("UnknownIssuer"), "{e}");
    let e =
        fails(dir, &section(&doris, "tls_ca_certificate_path = \"other.pem\"\ntls_excluded_protocols = [\"mysql\"]"))
            .await;
    assert!(e.contains(&format!("https://{fe}/")), "{e}");
    assert!(e.contains("UnknownIssuer"), "{e}");
    // Through the FE: its 307 names the BE in plain http, which is refused.
    let through_fe = format!(
        "fenodes = {}\njdbc_url = \"jdbc:mysql://127.0.0.1:{}\"\nenable_tls = true\n{CA}",
        doris.fenodes(),
        doris.h().query_addr().port()
    );
    let e = fails(dir, &through_fe).await;
    let be = doris.h().be_http_addr();
    assert!(e.contains(&format!("redirected to http://{be}/api/test/enriched/_stream_load")), "{e}");
    assert!(e.contains("`auto_redirect = false`"), "{e}");
    // TLS off against a TLS port: the error names the plain URL.
    let plain = format!(
        "fenodes = {}\njdbc_url = \"jdbc:mysql://127.0.0.1:{}\"",
        doris.fenodes(),
        doris.h().query_addr().port()
    );
    let e = fails(dir, &plain).await;
    assert!(e.contains(&format!("http://{fe}/")), "{e}");
    assert_eq!(doris.sql("SELECT count(*) FROM test.enriched"), ["0"]);
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_doris_asking_for_client_certificates_takes_sluices() {
    let (doris, pki) = tls_doris(true).await;
    with_cities(&doris);
    doris.sql(ENRICHED);
    let dir = pki.dir.path();
    // Without one, the handshake fails.
    let e = fails(dir, &section(&doris, CA)).await;
    assert!(e.contains(&format!("https://{}/", doris.h().fe_http_addr())), "{e}");
    assert_eq!(doris.sql("SELECT count(*) FROM test.enriched"), ["0"]);
    let name = |p: &PathBuf| p.file_name().unwrap().to_string_lossy().into_owned();
    let with_cert = format!(
        "{CA}\ntls_client_certificate_path = \"{}\"\ntls_client_key_path = \"{}\"",
        name(&pki.client.cert),
        name(&pki.client.key)
    );
    run_file(&lookup_pipeline_with(&section(&doris, &with_cert), dir)).await.unwrap();
    assert_eq!(doris.sql("SELECT count(*) FROM test.enriched"), ["4"]);
}

#[test]
fn tls_options_are_checked_when_the_file_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let err = |doris: &str| {
        let path = pipeline_file(
            dir.path(),
            &format!(
                "[pipeline]\nname = \"p\"\n\n[doris]\n{doris}\n\n[[source]]\ntype = \"datagen\"\nschema = \"id INT\"\nnumber_of_rows = 1\n\n[[sink]]\ntype = \"doris\"\ntable = \"test.t\"\n"
            ),
        );
        sluice::pipeline::load_file(&path).expect_err("refused").to_string()
    };
    let file = dir.path().join("pipeline.toml").display().to_string();
    assert_eq!(
        err("fenodes = [\"127.0.0.1:8030\"]\ntls_ca_certificate_path = \"ca.pem\""),
        format!("{file}:6: doris.tls_ca_certificate_path: TLS is off: set `enable_tls = true` too, or remove this key")
    );
    assert_eq!(
        err("fenodes = [\"127.0.0.1:8030\"]\nenable_tls = true\ntls_client_certificate_path = \"c.pem\""),
        format!("{file}:4: doris.tls_client_key_path: a client certificate needs its private key")
    );
    assert_eq!(
        err("fenodes = [\"127.0.0.1:8030\"]\nenable_tls = true\ntls_excluded_protocols = [\"thrift\"]"),
        format!(
            "{file}:7: doris.tls_excluded_protocols: \"thrift\" is not a protocol Sluice speaks to Doris over TLS; expected `http`, `mysql` or `arrowflight`"
        )
    );
}
