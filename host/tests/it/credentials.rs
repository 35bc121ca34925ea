//! Sluice logs in with real passwords, taken from the environment (`password_env`), on every
//! path: against a doris-lite whose user has a password, Stream Load with 2PC, the FE API, lookups
//! over the MySQL protocol and Arrow Flight SQL; the MySQL source's snapshot and binlog as a
//! MariaDB user with a password; the PostgreSQL source as a role that must pass
//! `scram-sha-256`. A wrong password fails each with an error that names the user and never shows
//! a password.

use std::path::Path;

use crate::common::{Background, Doris, converges, pipeline_file};
use crate::lookup::{ENRICHED, lookup_pipeline_with, with_cities};
use crate::mysql::MariaDb;
use crate::postgres::Postgres;

const DORIS_USER: &str = "etl";
/// Spaces, quotes and URL-special characters: a password that is escaped wrong somewhere fails.
const DORIS_PASSWORD: &str = "d0ris pa$$:w@rd/'#1";
const WRONG: &str = "not-the-password-42";

/// doris-lite with `root` (no password, for the test's own queries) and `etl` (a password).
async fn doris_with_a_password() -> Doris {
    let users = vec![("root".to_string(), String::new()), (DORIS_USER.to_string(), DORIS_PASSWORD.to_string())];
    Doris::start_with(doris_lite::Config { users, ..doris_lite::Config::ephemeral() }).await
}

/// A `[doris]` section logging in as `etl`, with the password in `SLUICE_TEST_DORIS_PW`.
fn doris_section(doris: &Doris) -> String {
    format!(
        "fenodes = {}\njdbc_url = \"jdbc:mysql://127.0.0.1:{}\"\nusername = \"{DORIS_USER}\"\npassword_env = \"SLUICE_TEST_DORIS_PW\"",
        doris.fenodes(),
        doris.h().query_addr().port()
    )
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// `sluice run` of `path` with `env`, to its end: the exit code and the log.
async fn run_to_end(path: &Path, env: &[(String, String)]) -> (Option<i32>, String) {
    Background::start_with(path, &[], env).exit(120).await
}

/// The log of a run refused for a wrong password: it names `user` and shows no password.
fn refused(code: Option<i32>, log: &str, user: &str, what: &str) {
    assert_ne!(code, Some(0), "{what}: {log}");
    assert!(log.contains(user), "{what}: the user is not named: {log}");
    for secret in [WRONG, DORIS_PASSWORD, MYSQL_PASSWORD, PG_PASSWORD] {
        assert!(!log.contains(secret), "{what}: a password is shown: {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_doris_path_logs_in_with_a_password_and_a_wrong_one_is_named_without_it() {
    let doris = doris_with_a_password().await;
    with_cities(&doris);
    doris.sql(ENRICHED);
    let dir = tempfile::tempdir().unwrap();
    let right = env(&[("SLUICE_TEST_DORIS_PW", DORIS_PASSWORD)]);
    let wrong = env(&[("SLUICE_TEST_DORIS_PW", WRONG)]);

    for sub in ["enrich", "enrich-wrong"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    // The FE API (the table's schema), lookups over the MySQL protocol, Stream Load with 2PC.
    let enrich = lookup_pipeline_with(&doris_section(&doris), &dir.path().join("enrich"));
    let (code, log) = run_to_end(&enrich, &right).await;
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(
        doris.sql("SELECT id, province FROM test.enriched ORDER BY id"),
        ["1\tZhejiang", "2\tNULL", "3\tNULL", "4\tBeijing"]
    );
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());

    // Arrow Flight SQL: the rows read back.
    let read = dir.path().join("read");
    let text = format!(
        "[pipeline]\nname = \"read\"\n\n[doris]\n{}\n\n[[source]]\ntype = \"doris\"\ntable = \"test.enriched\"\n\n\
         [[sink]]\ntype = \"file\"\npath = \"out.jsonl\"\n",
        doris_section(&doris)
    );
    let read_path = pipeline_file(&read, &text);
    let (code, log) = run_to_end(&read_path, &right).await;
    assert_eq!(code, Some(0), "{log}");
    let out = std::fs::read_to_string(read.join("out.jsonl")).unwrap();
    assert_eq!(out.lines().count(), 4, "{out}");
    assert!(out.contains("\"province\":\"Zhejiang\""), "{out}");

    // A wrong password: each refused, naming the user, nothing loaded.
    let enrich = lookup_pipeline_with(&doris_section(&doris), &dir.path().join("enrich-wrong"));
    let (code, log) = run_to_end(&enrich, &wrong).await;
    refused(code, &log, DORIS_USER, "the enriching pipeline");
    let read_path = pipeline_file(&dir.path().join("read-wrong"), &text);
    let (code, log) = run_to_end(&read_path, &wrong).await;
    refused(code, &log, DORIS_USER, "the Flight read");
    assert_eq!(doris.sql("SELECT count(*) FROM test.enriched"), ["4"]);
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

const MYSQL_PASSWORD: &str = "my sql;pw'\"x";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_source_reads_the_snapshot_and_the_binlog_as_a_user_with_a_password() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(&format!(
        "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(8)); INSERT INTO app.t VALUES (1, 'one'); \
         CREATE USER 'sync'@'%' IDENTIFIED BY '{}'; GRANT ALL ON *.* TO 'sync'@'%'",
        MYSQL_PASSWORD.replace('\'', "''")
    ));
    let doris = doris_with_a_password().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let source = Source {
        kind: "mysql",
        port: maria.port,
        keys: "database = \"app\"",
        password: ("SLUICE_TEST_MYSQL_PW", MYSQL_PASSWORD),
        following: "following the binlog from",
        rows: &|| maria.sql("SELECT id, v FROM app.t ORDER BY id"),
        denied: "Access denied",
    };
    let change = || maria.sql("INSERT INTO app.t VALUES (2, 'two'); UPDATE app.t SET v = 'uno' WHERE id = 1");
    mirrors_then_refuses(&doris, dir.path(), &source, change).await;
}

const PG_PASSWORD: &str = "pg scram:pw'1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_source_logs_in_with_scram_sha_256() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql("CREATE TABLE t (id INT PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'one')");
    pg.require_password("sync", PG_PASSWORD);
    let doris = doris_with_a_password().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let source = Source {
        kind: "postgres",
        port: pg.port,
        keys: "database = \"postgres\"\nslot_name = \"{name}\"",
        password: ("SLUICE_TEST_PG_PW", PG_PASSWORD),
        following: "following replication slot",
        rows: &|| pg.sql("SELECT id, v FROM t ORDER BY id"),
        denied: "password authentication failed",
    };
    let change = || pg.sql("INSERT INTO t VALUES (2, 'two'); UPDATE t SET v = 'uno' WHERE id = 1");
    mirrors_then_refuses(&doris, dir.path(), &source, change).await;
}

/// A source database as the two tests below log in to it.
struct Source<'a> {
    /// The connection's and the source's `type`.
    kind: &'static str,
    port: u16,
    /// More keys of the source (`{name}` is the pipeline's name).
    keys: &'static str,
    /// The variable the pipeline's `password_env` names, and the right password.
    password: (&'static str, &'static str),
    /// What the log says once the source follows its log.
    following: &'static str,
    /// The source's `t` as `id, v`, ordered.
    rows: &'a dyn Fn() -> Vec<String>,
    /// What the server says to a wrong password.
    denied: &'static str,
}

/// A pipeline `name` from `source` (as `sync`, snapshot then log) into Doris' `ods` (as `etl`).
fn sync_pipeline(doris: &Doris, source: &Source<'_>, name: &str) -> String {
    let (kind, var) = (source.kind, source.password.0);
    format!(
        "[pipeline]\nname = \"{name}\"\ncheckpoint_interval = \"300ms\"\n\n\
         [connections.src]\ntype = \"{kind}\"\nhost = \"127.0.0.1\"\nport = {}\nuser = \"sync\"\npassword_env = \"{var}\"\n\n\
         [doris]\n{}\n\n\
         [[source]]\ntype = \"{kind}\"\nconnection = \"src\"\n{}\nscan.startup.mode = \"initial\"\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\n",
        source.port,
        doris_section(doris),
        source.keys.replace("{name}", name)
    )
}

/// The pipeline run with the right passwords: once it follows the source's log, `change` is
/// written and Doris' `ods.t` must mirror the source's `t`, and it stops cleanly. Then run again
/// with the source's password wrong: refused, naming the user `sync` and no password.
async fn mirrors_then_refuses(doris: &Doris, dir: &Path, source: &Source<'_>, change: impl FnOnce() -> Vec<String>) {
    let (var, password) = source.password;
    let path = pipeline_file(&dir.join("right"), &sync_pipeline(doris, source, "right"));
    let mut run =
        Background::start_with(&path, &[], &env(&[("SLUICE_TEST_DORIS_PW", DORIS_PASSWORD), (var, password)]));
    run.until(60, "following the source's log", |r| r.log().contains(source.following)).await;
    change();
    if let Err(e) = converges(source.rows, doris, "SELECT id, v FROM ods.t ORDER BY id", 60).await {
        panic!("{e}\n{}", run.log());
    }
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");

    let path = pipeline_file(&dir.join("wrong"), &sync_pipeline(doris, source, "wrong"));
    let (code, log) = run_to_end(&path, &env(&[("SLUICE_TEST_DORIS_PW", DORIS_PASSWORD), (var, WRONG)])).await;
    refused(code, &log, "sync", var);
    assert!(log.contains(source.denied), "{log}");
}
