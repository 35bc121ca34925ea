//! Third-party Python clients (from PyPI, in the test virtualenv) driving doris-lite through a
//! workflow each, from `tests/clients/`: each script asserts the rows it reads and prints `OK`.

use std::process::Command;

use crate::common::{Server, python};

fn run_client(script: &str, s: &Server) -> String {
    let path = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let http_port = s.fe().rsplit(':').next().unwrap_or_default().to_string();
    let out = Command::new(python())
        .arg(&path)
        .arg(s.query_port().to_string())
        .arg(http_port)
        .output()
        .expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.trim_end().ends_with("OK"),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn mysql_connector_python_without_a_database_updates_prepares_and_runs_several_statements() {
    let s = Server::start();
    run_client("mysql_connector.py", &s);
    // What it left is what another client reads.
    assert_eq!(s.sql("SELECT id FROM shop.events ORDER BY id"), vec![vec!["1"], vec!["2"]]);
    assert_eq!(
        s.sql("SELECT id, name, score FROM shop.users ORDER BY id"),
        vec![vec!["1", "ann", "10"], vec!["2", "bobby", "25"]]
    );
    assert_eq!(
        s.sql("SELECT id, amount, at, day, note FROM shop.orders"),
        vec![vec!["7", "12.50", "2026-12-02 10:30:15", "2026-12-02", "it's ?"]]
    );
}

#[test]
fn pydoris_creates_loads_updates_deletes_and_reflects() {
    let s = Server::start();
    run_client("pydoris_workflow.py", &s);
    assert_eq!(
        s.sql("SELECT id, name, score FROM shop.users ORDER BY id"),
        vec![vec!["1", "ann", "10"], vec!["2", "bobby", "25"], vec!["4", "dan", "40"], vec!["5", "eve", "50"]]
    );
    let ddl = s.sql("SHOW CREATE TABLE shop.users");
    assert!(ddl[0][1].contains("UNIQUE KEY(`id`)"), "{ddl:?}");
}

#[test]
fn sqlalchemy_doris_creates_with_its_has_table_updates_deletes_and_reflects() {
    let s = Server::start();
    run_client("sqlalchemy_doris_workflow.py", &s);
    assert_eq!(
        s.sql("SELECT id, score FROM lab.scores ORDER BY id"),
        vec![vec!["3", "30"], vec!["4", "80"], vec!["5", "100"]]
    );
    let ddl = s.sql("SHOW CREATE TABLE lab.visits");
    assert!(ddl[0][1].contains("DUPLICATE KEY(`id`, `page`)"), "{ddl:?}");
    // DESCRIBE of a missing table answers as the dialect's has_table expects.
    assert_eq!(
        s.sql_err("DESCRIBE lab.missing"),
        "ERROR 1105 (HY000) at line 1: errCode = 2, detailMessage = Unknown table 'missing'"
    );
}

#[test]
fn dorisclient_loads_with_a_password_deletes_by_load_updates_and_reads() {
    let s = Server::start_with(doris_lite::Config {
        users: vec![("root".into(), String::new()), ("etl".into(), "s3cret-pw".into())],
        ..doris_lite::Config::ephemeral()
    });
    s.sql("CREATE DATABASE shop");
    run_client("dorisclient_workflow.py", &s);
    assert_eq!(
        s.sql("SELECT id, status, ver FROM shop.orders ORDER BY id"),
        vec![vec!["1", "shipped", "1"], vec!["2", "paid", "2"]]
    );
    assert_eq!(s.sql("SELECT count(*) FROM shop.clicks"), vec![vec!["2"]]);
}

#[test]
fn a_warehouse_day_views_overwrites_schema_changes_parquet_and_show_data() {
    let s = Server::start();
    run_client("warehouse_workflow.py", &s);
    // What it left, read by another client.
    assert_eq!(
        s.sql("SELECT region, total FROM wh.summary ORDER BY region"),
        vec![vec!["east", "100.00"], vec!["south", "27.75"]]
    );
    assert_eq!(
        s.sql("SELECT id, full_name, tier FROM wh.customers WHERE id IN (1, 6) ORDER BY id"),
        vec![vec!["1", "ann", "gold"], vec!["6", "fay", "platinum-plus"]]
    );
    assert_eq!(s.sql("SELECT count(*) FROM wh.sales"), vec![vec!["6"]]);
    let view = s.sql("SHOW CREATE VIEW wh.region_totals");
    assert!(
        view[0][1].starts_with("CREATE VIEW `region_totals` (`region`, `total` COMMENT 'sum of amounts')"),
        "{view:?}"
    );
}
