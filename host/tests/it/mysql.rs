//! The MySQL source against a MariaDB this test starts (its own data dir and loopback port,
//! binlog on), writing into doris-lite through the Doris sink's `database` mode.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use sluice::runtime::{self, RunOptions};
use tokio::sync::watch;

use crate::common::{Doris, mysql, pipeline_file, verify};

/// A MariaDB server of this test: `mariadb-install-db` into a temp dir, `mariadbd` on a free
/// loopback port with the binlog in ROW format. Stopped when dropped.
pub struct MariaDb {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl MariaDb {
    pub fn start() -> MariaDb {
        MariaDb::start_with(true)
    }

    /// A server with the binlog on (ROW format) or off.
    pub fn start_with(binlog: bool) -> MariaDb {
        MariaDb::start_as(binlog, 1, &[])
    }

    /// A replica of `primary` (server_id 2, writing what it replicates to its own binlog), which
    /// replicates everything `primary` wrote by its GTIDs.
    pub fn replica_of(primary_port: u16) -> MariaDb {
        let replica = MariaDb::start_as(true, 2, &["--log-slave-updates"]);
        replica.sql(&format!(
            "SET GLOBAL gtid_slave_pos = ''; CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = 'root', MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos; START SLAVE",
            primary_port
        ));
        replica
    }

    /// A server with the binlog on or off, as `server_id`, with `extra` options.
    pub fn start_as(binlog: bool, server_id: u32, extra: &[&str]) -> MariaDb {
        let dir = tempfile::tempdir().unwrap();
        let data: PathBuf = dir.path().join("data");
        // Its own temp dir too: servers bootstrapping at once in one /tmp can take each other's
        // temporary table files.
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let install = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--auth-root-authentication-method=normal", "--skip-test-db", "--user=root"])
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .output()
            .expect("mariadb-install-db runs");
        assert!(install.status.success(), "{}", String::from_utf8_lossy(&install.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let root = dir.path().to_path_buf();
        let p = |name: &str| root.join(name).display().to_string();
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", p("sock")))
            .arg(format!("--pid-file={}", p("pid")))
            .arg(format!("--log-error={}", p("error.log")))
            .args(binlog.then(|| format!("--log-bin={}", p("binlog"))))
            .args(["--user=root", "--binlog-format=ROW", "--character-set-server=utf8mb4"])
            .arg(format!("--server-id={server_id}"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd starts");
        let server = MariaDb { child, port, _dir: dir };
        for _ in 0..300 {
            let ok = Command::new("mysql")
                .args(["-h127.0.0.1", "-P", &port.to_string(), "-uroot", "-e", "SELECT 1"])
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "MariaDB did not answer on port {port}: {}",
            std::fs::read_to_string(p("error.log")).unwrap_or_default()
        );
    }

    /// Rows through the mysql CLI, in utf8mb4.
    pub fn sql(&self, sql: &str) -> Vec<String> {
        mysql(self.port, &format!("SET NAMES utf8mb4; {sql}"))
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_snapshot_creates_each_table_in_doris_and_copies_every_row() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; \
         CREATE TABLE app.users (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL, score DECIMAL(10,2), born DATE, \
           seen DATETIME(3), active BIT(1), big BIGINT UNSIGNED, note TEXT) DEFAULT CHARSET = utf8mb4; \
         CREATE TABLE app.logs (msg VARCHAR(20), at DATETIME); \
         CREATE TABLE app.skipped (id INT PRIMARY KEY)",
    );
    let mut values = Vec::new();
    for i in 1..=25 {
        values.push(format!(
            "({i}, 'user {i} 🦀', {i}.25, '2000-01-{:02}', '2026-12-01 10:00:{:02}.123', {}, 18446744073709551615, {})",
            i % 28 + 1,
            i % 60,
            i % 2,
            if i % 5 == 0 { "NULL".to_string() } else { format!("'note {i}'") }
        ));
    }
    maria.sql(&format!("INSERT INTO app.users VALUES {}", values.join(", ")));
    maria.sql("INSERT INTO app.logs VALUES ('a', '2026-01-01 00:00:00'), ('b', NULL), (NULL, '2026-01-02 03:04:05')");
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"mirror\"\nparallelism = 2\ncheckpoint_interval = \"500ms\"\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\nuser = \"root\"\n\n\
         [doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nexclude = \"skipped\"\nscan.startup.mode = \"snapshot\"\nchunk_size = 10\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\ntable_prefix = \"app_\"\n",
        maria.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path).unwrap()).await.unwrap();
    let (_stop, rx) = watch::channel(false);
    let report = runtime::run(&prepared, &RunOptions { quiet: true, status_interval: None, ..Default::default() }, rx)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.finished, "{report:?}");
    // Tables as the connector creates them: UNIQUE on the primary key, DUPLICATE without one.
    let users = doris.sql("SHOW CREATE TABLE ods.app_users").join(" ");
    assert!(users.contains("UNIQUE KEY(`id`)"), "{users}");
    // (Doris shows STRING as `text`.)
    for column in [
        "`id` int NOT NULL",
        "`name` varchar(128) NOT NULL",
        "`score` decimal(10,2) NULL",
        "`seen` datetime(3) NULL",
        "`active` boolean NULL",
        "`big` largeint NULL",
        "`note` text NULL",
    ] {
        assert!(users.contains(column), "{column} in {users}");
    }
    let logs = doris.sql("SHOW CREATE TABLE ods.app_logs").join(" ");
    assert!(logs.contains("DUPLICATE KEY(`msg`)"), "{logs}");
    assert!(doris.sql("SHOW TABLES FROM ods").iter().all(|t| t != "app_skipped"), "`exclude` left it out");
    // Every row, every column.
    let query = "SELECT id, name, score, born, seen, active, big, note FROM {db}.{t} ORDER BY id";
    let source = maria.sql(&query.replace("{db}", "app").replace("{t}", "users").replace("active", "active + 0"));
    let target =
        doris.sql(&query.replace("{db}", "ods").replace("{t}", "app_users").replace("active", "CAST(active AS INT)"));
    // doris-lite prints DATETIME(3) with six fraction digits where MariaDB prints three.
    let fraction_as_written = |rows: Vec<String>| -> Vec<String> {
        rows.into_iter()
            .map(|r| {
                let mut cells: Vec<String> = r.split('\t').map(str::to_string).collect();
                if cells[4].contains('.') {
                    cells[4] = cells[4].trim_end_matches('0').to_string();
                }
                cells.join("\t")
            })
            .collect()
    };
    assert_eq!(target.len(), 25);
    assert_eq!(fraction_as_written(target), fraction_as_written(source));
    // (NULLs sort differently in the two servers.)
    let sorted = |mut rows: Vec<String>| {
        rows.sort();
        rows
    };
    assert_eq!(
        sorted(doris.sql("SELECT msg, at FROM ods.app_logs")),
        sorted(maria.sql("SELECT msg, at FROM app.logs"))
    );
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// What a reader returns until it ends: `(table, first column)` of every row.
async fn read_rows(reader: &mut Box<dyn sluice::runtime::SourceReader>, events: Option<usize>) -> Vec<(String, i64)> {
    use arrow::array::AsArray;
    let mut out = Vec::new();
    let mut seen = 0;
    while events.is_none_or(|n| seen < n) {
        let Some(event) = reader.next().await.unwrap() else { break };
        seen += 1;
        if let sluice::runtime::Event::Data { table, batch } = event {
            let ids = batch.data.column(0).as_primitive::<arrow::datatypes::Int32Type>();
            out.extend((0..ids.len()).map(|i| (table.to_string(), i64::from(ids.value(i)))));
        }
    }
    out
}

/// A reader started again at the position it reported (as after a crash, from the last
/// checkpoint) reads every row it had not returned yet, and none twice: keyset pages inside a
/// chunk, chunks of a table keyed by text and a number (quotes and backslashes in its values) cut
/// at key values read from it and paged after the last key, chunks of a table without a key cut
/// at its `chunk_key_column` (duplicate values and NULLs), offset pages of a table without a key,
/// and keys deleted and added between the runs. The chunks cut at values are shared by both
/// workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_resumed_at_its_position_reads_every_remaining_row_once() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; CREATE TABLE app.keyed (id INT PRIMARY KEY, v INT); CREATE TABLE app.loose (v INT); \
         CREATE TABLE app.pair (g INT, name VARCHAR(20), PRIMARY KEY (name, g)); CREATE TABLE app.sack (v INT, d DATE); \
         USE app; INSERT INTO app.keyed SELECT seq, seq FROM seq_1_to_12000; INSERT INTO app.loose SELECT seq FROM seq_1_to_6000; \
         INSERT INTO app.pair SELECT seq, CONCAT('n''', seq % 3000, '\\\\') FROM seq_1_to_9000; \
         INSERT INTO app.sack SELECT seq, IF(seq % 10 = 0, NULL, '2024-01-01' + INTERVAL seq % 50 DAY) FROM seq_1_to_14000",
    );
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"resume\"\nparallelism = 2\n\n[connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nscan.startup.mode = \"snapshot\"\nchunk_size = 5000\nchunk_key_column = \"app[.]sack:d\"\n\n\
         [[sink]]\ntype = \"blackhole\"\n",
        maria.port
    );
    let path = pipeline_file(dir.path(), &text);
    let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path).unwrap()).await.unwrap();
    let source = &prepared.source.component;
    let (mut all, mut stops, mut by_worker) = (Vec::new(), Vec::new(), std::collections::HashMap::new());
    for worker in 0..2 {
        // Stopped twice, as crashes would: once inside a keyed chunk (after its schema change and a
        // page), once further on (for worker 1: inside the table without a key).
        let mut position = None;
        for (segment, events) in [Some(2), Some(5), Some(2), Some(2), None].into_iter().enumerate() {
            if (worker, segment) == (0, 1) {
                // Between runs the lowest keys go and a higher one comes: chunks are known by
                // their start, so the position still names the same rows.
                maria.sql("DELETE FROM app.keyed WHERE id <= 100; INSERT INTO app.keyed VALUES (20000, 20000)");
            }
            let restored = [position.clone(), position.clone()];
            let mut splits = source.enumerator(&restored).await.unwrap();
            let mut reader = splits.reader(worker, position.as_ref()).await.unwrap();
            let rows = read_rows(&mut reader, events).await;
            assert!(segment > 1 || events.is_none() || !rows.is_empty(), "worker {worker} read nothing before a stop");
            by_worker.entry(worker).or_insert_with(Vec::new).extend(rows.iter().map(|(t, _)| t.clone()));
            all.extend(rows);
            position = Some(reader.position());
            stops.extend(position.clone().filter(|_| events.is_some()));
        }
    }
    assert!(stops.iter().any(|p| !p["cursor"].is_null()), "a stop inside a keyed chunk: {stops:?}");
    assert!(stops.iter().any(|p| !p["after"].is_null()), "a stop inside the table keyed by text: {stops:?}");
    assert!(stops.iter().any(|p| p["cuts"]["pair"].as_array().is_some_and(|c| !c.is_empty())), "{stops:?}");
    for table in ["app.pair", "app.sack"] {
        assert!(by_worker.values().all(|w| w.iter().any(|t| t == table)), "both workers read chunks of {table}");
    }
    assert!(
        stops.iter().any(|p| p["cursor"].is_null() && p["rows"].as_u64() > Some(0)),
        "a stop inside the table without a key: {stops:?}"
    );
    all.sort();
    let mut expected: Vec<(String, i64)> = (1..=12000).chain([20000]).map(|i| ("app.keyed".to_string(), i)).collect();
    expected.extend((1..=6000).map(|i| ("app.loose".to_string(), i)));
    expected.extend((1..=9000).map(|i| ("app.pair".to_string(), i)));
    expected.extend((1..=14000).map(|i| ("app.sack".to_string(), i)));
    expected.sort();
    assert_eq!(all.len(), expected.len(), "rows read in all, over both workers and their restarts");
    assert_eq!(all, expected);
}

/// An update that keeps its key is read as its row after alone where nothing after the source
/// uses the row before (the Doris sink's defaults), and as both rows where something does (the
/// Doris sink writing them as deletes, a file sink); a key change is a delete and an insert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_before_an_update_is_read_only_where_the_pipeline_uses_it() {
    use sluice::RowKind::{Delete, Insert, UpdateAfter, UpdateBefore};
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, v INT); INSERT INTO app.t VALUES (1, 1); \
         UPDATE app.t SET v = 2 WHERE id = 1; UPDATE app.t SET id = 5 WHERE id = 1",
    );
    let doris = Doris::start().await;
    let doris_sink = "[[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\n";
    let cases = [
        (doris_sink.to_string(), vec![Insert, UpdateAfter, Delete, Insert]),
        (
            format!("{doris_sink}ignore.update_before = false\n"),
            vec![Insert, UpdateBefore, UpdateAfter, Delete, Insert],
        ),
        (
            "[[sink]]\ntype = \"file\"\npath = \"out.jsonl\"\n".to_string(),
            vec![Insert, UpdateBefore, UpdateAfter, Delete, Insert],
        ),
    ];
    for (sink, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[pipeline]\nname = \"kinds\"\n\n[doris]\nfenodes = {}\n\n[connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n\
             [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nscan.startup.mode = \"earliest-offset\"\n\n{sink}",
            doris.fenodes(),
            maria.port
        );
        let mut first = crate::common::first_reader(dir.path(), &text).await;
        let mut kinds = Vec::new();
        let read = async {
            while kinds.len() < want.len() {
                if let Some(runtime::Event::Data { batch, .. }) = first.reader.next().await.unwrap() {
                    kinds.extend((0..batch.num_rows()).map(|r| batch.row_kind(r)));
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read).await.expect("the binlog's rows within a minute");
        assert_eq!(kinds, want, "{sink}");
    }
}

/// `initial`: the snapshot, then inserts, updates, a primary-key change and deletes from the
/// binlog, while the pipeline runs; TIMESTAMP values the same in both phases; changes made while
/// it is stopped arrive after it resumes from its checkpoint's binlog position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_mirrors_the_snapshot_then_follows_the_binlog() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; CREATE TABLE app.accounts (id INT PRIMARY KEY, owner VARCHAR(20), balance DECIMAL(12,2), \
         opened TIMESTAMP NULL, flags BIT(1)); \
         INSERT INTO app.accounts VALUES (1, 'ann', 10.50, '2026-01-01 08:00:00', 1), (2, 'bob', 20.00, NULL, 0), \
         (3, 'cid', 0.01, '2026-06-30 23:59:59', 1); \
         CREATE TABLE app.pairs (a VARCHAR(8), b INT, PRIMARY KEY (a, b)); \
         INSERT INTO app.pairs VALUES ('x', 1), ('x', 2), ('y', 1), ('z', 9)",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"follow\"\nparallelism = 2\ncheckpoint_interval = \"300ms\"\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\nserver_id = 7001\n\n\
         [doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nscan.startup.mode = \"initial\"\nchunk_size = 2\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\n",
        maria.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path).unwrap()).await.unwrap();
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        let r =
            runtime::run(&prepared, &RunOptions { quiet: true, status_interval: None, ..Default::default() }, rx).await;
        (r, prepared)
    });
    let source = "SELECT id, owner, balance, opened, flags + 0 FROM app.accounts ORDER BY id";
    let target = "SELECT id, owner, balance, opened, CAST(flags AS INT) FROM ods.accounts ORDER BY id";
    let utc = |sql: &str| maria.sql(&format!("SET time_zone = '+00:00'; {sql}"));
    let converged = |want: Vec<String>| {
        let d = &doris;
        async move {
            for _ in 0..300 {
                let tables = d.sql("SHOW TABLES FROM ods");
                if tables.iter().any(|t| t == "accounts") && d.sql(target) == want {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        }
    };
    assert!(converged(utc(source)).await, "the snapshot: {:?} against {:?}", doris.sql(target), utc(source));
    maria.sql(
        "INSERT INTO app.accounts VALUES (4, 'dan', 4.44, '2026-12-01 12:00:00', 0); \
         UPDATE app.accounts SET balance = balance + 1, flags = 0 WHERE id = 1; \
         UPDATE app.accounts SET id = 30 WHERE id = 3; \
         DELETE FROM app.accounts WHERE id = 2",
    );
    assert!(converged(utc(source)).await, "the changes: {:?} against {:?}", doris.sql(target), utc(source));
    // Cut at its key's values into two chunks, one per worker, the last chunk worker 1's: worker 0
    // learns it has no more only after its last rows, and still says so before the binlog.
    assert_eq!(doris.sql("SELECT a, b FROM ods.pairs ORDER BY a, b"), ["x\t1", "x\t2", "y\t1", "z\t9"]);
    stop.send(true).unwrap();
    let (report, prepared) = task.await.unwrap();
    let report = report.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(!report.finished && report.restarts == 0, "{report:?}");
    // Worker 0's position holds the binlog position after the last transaction.
    let cp = prepared.state.dir().unwrap().checkpoint().unwrap().unwrap();
    let binlog = &cp.sources["mysql"][0]["binlog"];
    assert!(binlog["file"].as_str().is_some_and(|f| f.starts_with("binlog.")), "{binlog}");
    assert!(binlog["pos"].as_u64() > Some(4), "{binlog}");
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
    drop(prepared);

    // Changes made while the pipeline is down arrive after it starts again from its checkpoint.
    maria.sql("INSERT INTO app.accounts VALUES (5, 'eve', 5.00, NULL, 1); DELETE FROM app.accounts WHERE id = 4");
    let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path).unwrap()).await.unwrap();
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        let r =
            runtime::run(&prepared, &RunOptions { quiet: true, status_interval: None, ..Default::default() }, rx).await;
        (r, prepared)
    });
    assert!(converged(utc(source)).await, "after the restart: {:?} against {:?}", doris.sql(target), utc(source));
    stop.send(true).unwrap();
    task.await.unwrap().0.unwrap_or_else(|e| panic!("{e:#}"));
}

/// The Flink connector's command, run as `sluice mysql-sync-database` with its flags: the
/// database's tables land in Doris; `--print-pipeline` writes the same pipeline without secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_sync_database_runs_the_connectors_command_as_written() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE mysql_db; CREATE TABLE mysql_db.tbl1 (id INT PRIMARY KEY, v VARCHAR(8)); \
         CREATE TABLE mysql_db.other (id INT PRIMARY KEY); INSERT INTO mysql_db.tbl1 VALUES (1, 'a'), (2, 'b')",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE test_db");
    let dir = tempfile::tempdir().unwrap();
    let port = maria.port.to_string();
    let fe = doris.h().fe_http_addr().to_string();
    let command = [
        "-Dexecution.checkpointing.interval=1s",
        "-Dparallelism.default=1",
        "mysql-sync-database",
        "--database",
        "test_db",
        "--mysql-conf",
        "hostname=127.0.0.1",
        "--mysql-conf",
        &format!("port={port}"),
        "--mysql-conf",
        "username=root",
        "--mysql-conf",
        "password=",
        "--mysql-conf",
        "database-name=mysql_db",
        "--mysql-conf",
        "scan.startup.mode=snapshot",
        "--including-tables",
        "tbl1|test.*",
        "--sink-conf",
        &format!("fenodes={fe}"),
        "--sink-conf",
        "username=root",
        "--sink-conf",
        "sink.label-prefix=label",
        "--table-conf",
        "replication_num=1",
    ];
    // The subcommand first, then its flags (the -D options are the command's own).
    let mut args: Vec<&str> = vec![command[2]];
    args.extend(command.iter().enumerate().filter(|(i, _)| *i != 2).map(|(_, a)| *a));
    let run = |args: Vec<String>| {
        let dir = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_sluice")).args(&args).current_dir(dir).output().unwrap()
        })
    };
    let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = run(owned.clone()).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(doris.sql("SELECT id, v FROM test_db.tbl1 ORDER BY id"), ["1\ta", "2\tb"]);
    assert!(doris.sql("SHOW TABLES FROM test_db").iter().all(|t| t != "other"), "--including-tables");
    // (Doris shows `replication_num = 1` as its replication_allocation.)
    let ddl = doris.sql("SHOW CREATE TABLE test_db.tbl1").join(" ");
    assert!(ddl.contains("UNIQUE KEY(`id`)") && ddl.contains("\"tag.location.default: 1\""), "{ddl}");

    let mut print = owned.clone();
    print.push("--print-pipeline".into());
    let out = run(print).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("checkpoint_interval = \"1s\"") && text.contains("database = \"test_db\""), "{text}");
    assert!(sluice::pipeline::load_str(&dir.path().join("p.toml"), &text).is_ok(), "{text}");

    let mut bad = owned;
    bad.push("--mysql-conf".into());
    bad.push("hostnme=x".into());
    let out = run(bad).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with("error: --mysql-conf hostnme: not an option Sluice takes; accepted: hostname"),
        "{stderr}"
    );
}

/// Bad input gets an error that says what is wrong and what to do, and never shows a password:
/// the binlog off, a wrong password, a server that is not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_binlog_a_wrong_password_or_none_at_all_is_named() {
    let maria = tokio::task::spawn_blocking(|| MariaDb::start_with(false)).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY); \
         CREATE USER 'sync'@'%' IDENTIFIED BY 'right-password'; GRANT ALL ON *.* TO 'sync'@'%'",
    );
    let dir = tempfile::tempdir().unwrap();
    let file = |port: u16, auth: &str, mode: &str| {
        let text = format!(
            "[pipeline]\nname = \"bad\"\n\n[connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {port}\n{auth}\n\n\
             [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nscan.startup.mode = \"{mode}\"\n\n\
             [[sink]]\ntype = \"blackhole\"\n"
        );
        pipeline_file(&dir.path().join(format!("{port}-{mode}-{}", auth.len())), &text)
    };
    let attempt = |path: std::path::PathBuf| async move {
        let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path)?).await?;
        let (_stop, rx) = watch::channel(false);
        runtime::run(&prepared, &RunOptions { quiet: true, status_interval: None, ..Default::default() }, rx).await
    };
    let e = format!("{:#}", attempt(file(maria.port, "user = \"root\"", "initial")).await.unwrap_err());
    assert!(e.contains("the MySQL server has no binlog") && e.contains("`log_bin` on, `binlog_format = ROW`"), "{e}");
    // The snapshot alone needs no binlog.
    assert!(attempt(file(maria.port, "user = \"root\"", "snapshot")).await.unwrap().finished);

    let wrong = "user = \"sync\"\npassword = \"wrong-password-123\"";
    let e = format!("{:#}", attempt(file(maria.port, wrong, "snapshot")).await.unwrap_err());
    assert!(e.contains("reading the tables of `app` at 127.0.0.1") && e.contains("Access denied"), "{e}");
    assert!(!e.contains("wrong-password-123"), "{e}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let e = format!("{:#}", attempt(file(closed, "user = \"root\"", "snapshot")).await.unwrap_err());
    assert!(e.contains("reading the tables of `app` at 127.0.0.1"), "{e}");
}

/// Runs `text` until stopped; the pipeline and its result come back.
fn spawn_run(
    path: &std::path::Path,
) -> (watch::Sender<bool>, tokio::task::JoinHandle<(anyhow::Result<runtime::RunReport>, sluice::runtime::Prepared)>) {
    let path = path.to_path_buf();
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path).unwrap()).await.unwrap();
        let r =
            runtime::run(&prepared, &RunOptions { quiet: true, status_interval: None, ..Default::default() }, rx).await;
        (r, prepared)
    });
    (stop, task)
}

/// Polls until `doris` answers `target` with what MariaDB answers `source` (30 s at most).
async fn converges(maria: &MariaDb, doris: &Doris, source: &str, target: &str) -> Result<(), String> {
    crate::common::converges(|| maria.sql(source), doris, target, 30).await
}

/// Every DDL kind in the binlog while another client inserts, deletes and re-keys rows of the
/// same table: the Doris tables end equal to the source's, in the columns the source has now,
/// and a restart reads the binlog after the DDL with the table's new columns.
async fn ddl_is_followed(mode: &str) {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; CREATE TABLE app.users (id INT PRIMARY KEY, name VARCHAR(20), old INT); \
         INSERT INTO app.users VALUES (1, 'ann', 1), (2, 'bob', 2), (3, 'cid', 3); \
         CREATE TABLE app.skip_me (id INT PRIMARY KEY)",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"ddl\"\ncheckpoint_interval = \"300ms\"\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\nserver_id = 7002\n\n\
         [doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nexclude = \"skip_.*\"\nscan.startup.mode = \"initial\"\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\ntable_properties.replication_num = \"1\"\n\
         schema_change.mode = \"{mode}\"\nschema_change.truncate = true\n",
        maria.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    let (stop, task) = spawn_run(&path);
    converges(
        &maria,
        &doris,
        "SELECT id, name, old FROM app.users ORDER BY id",
        "SELECT id, name, old FROM ods.users ORDER BY id",
    )
    .await
    .unwrap();

    // Another client writes the table all along (only `id`, which every shape of it has).
    let port = maria.port;
    let writer = std::thread::spawn(move || {
        let mut script = String::new();
        for n in 100..400 {
            script.push_str(&format!("INSERT INTO app.users (id) VALUES ({n}); "));
            if n % 3 == 0 {
                script.push_str(&format!("DELETE FROM app.users WHERE id = {}; ", n - 1));
            }
            if n % 5 == 0 {
                script.push_str(&format!("UPDATE app.users SET id = {} WHERE id = {}; ", n + 1000, n - 2));
            }
        }
        crate::common::mysql(port, &script);
    });
    maria.sql(
        "INSERT INTO app.users VALUES (4, 'dan', 4); \
         ALTER TABLE app.users ADD COLUMN age INT DEFAULT 18 COMMENT 'years' AFTER name; \
         INSERT INTO app.users VALUES (5, 'eve', 30, 5); UPDATE app.users SET age = 40 WHERE id = 1; \
         ALTER TABLE app.users DROP COLUMN old; INSERT INTO app.users VALUES (6, 'fay', 50); \
         ALTER TABLE app.users CHANGE name full_name VARCHAR(40); INSERT INTO app.users VALUES (7, 'gus😀', 60); \
         USE app; ALTER TABLE users MODIFY age BIGINT; UPDATE users SET age = 9999999999 WHERE id = 7; \
         UPDATE app.users SET id = 70 WHERE id = 7; \
         CREATE TABLE app.orders (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, note TEXT, at DATETIME(3)); \
         INSERT INTO app.orders VALUES (18446744073709551615, 'max', '2026-12-01 10:00:00.123'); \
         CREATE TABLE app.skip_me_too (id INT PRIMARY KEY); INSERT INTO app.skip_me_too VALUES (1); \
         CREATE TABLE app.scratch (id INT PRIMARY KEY); INSERT INTO app.scratch VALUES (1), (2); \
         TRUNCATE TABLE app.scratch; INSERT INTO app.scratch VALUES (3)",
    );
    writer.join().unwrap();
    let users = (
        "SELECT id, full_name, age FROM app.users ORDER BY id",
        "SELECT id, full_name, age FROM ods.users ORDER BY id",
    );
    converges(&maria, &doris, users.0, users.1).await.unwrap();
    let orders = "SELECT id, note, DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f') FROM app.orders";
    converges(&maria, &doris, orders, "SELECT id, note, at FROM ods.orders").await.unwrap();
    converges(&maria, &doris, "SELECT id FROM app.scratch", "SELECT id FROM ods.scratch").await.unwrap();
    let created = doris.sql("SHOW CREATE TABLE ods.users").join(" ");
    assert!(!created.contains("`old`") && !created.contains("`name`"), "{created}");
    assert!(created.contains("`full_name` varchar(160)") && created.contains("`age` bigint"), "{created}");
    assert_eq!(doris.sql("SHOW TABLES FROM ods"), ["orders", "scratch", "users"]);

    // Down: more changes, a new column among them; the restart reads them with the shape the
    // checkpoint kept.
    stop.send(true).unwrap();
    task.await.unwrap().0.unwrap_or_else(|e| panic!("{e:#}"));
    maria.sql(
        "INSERT INTO app.users VALUES (8, 'hal', 8); ALTER TABLE app.users ADD COLUMN tag VARCHAR(5); \
         INSERT INTO app.users VALUES (9, 'ivy', 9, 'x'); UPDATE app.users SET tag = 'y' WHERE id = 1",
    );
    let (stop, task) = spawn_run(&path);
    let users = (
        "SELECT id, full_name, age, tag FROM app.users ORDER BY id",
        "SELECT id, full_name, age, tag FROM ods.users ORDER BY id",
    );
    converges(&maria, &doris, users.0, users.1).await.unwrap();
    stop.send(true).unwrap();
    let (report, _) = task.await.unwrap();
    report.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_is_followed_from_the_tables_structure() {
    ddl_is_followed("debezium_structure").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_is_followed_from_the_statements() {
    ddl_is_followed("sql_parser").await;
}

/// `schema_change.behavior = "exception"`: the first DDL of a followed table stops the pipeline,
/// naming the table and the statement; rows before it are in Doris.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ddl_under_exception_stops_the_pipeline_naming_it() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY); INSERT INTO app.t VALUES (1)");
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"strict\"\ncheckpoint_interval = \"300ms\"\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n[doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nscan.startup.mode = \"initial\"\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\nschema_change.behavior = \"exception\"\n",
        maria.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    let (_stop, task) = spawn_run(&path);
    converges(&maria, &doris, "SELECT id FROM app.t", "SELECT id FROM ods.t").await.unwrap();
    maria.sql("INSERT INTO app.t VALUES (2); ALTER TABLE app.t ADD COLUMN c INT; INSERT INTO app.t VALUES (3, 3)");
    let (report, _) = tokio::time::timeout(Duration::from_secs(60), task).await.expect("the pipeline stops").unwrap();
    let error = format!("{:#}", report.unwrap_err());
    assert!(
        error.contains("`app.t` changed (`ALTER TABLE app.t ADD COLUMN c INT`) and `schema_change.behavior = \"exception\"` stops on any change"),
        "{error}"
    );
    assert_eq!(doris.sql("SELECT id FROM ods.t ORDER BY id"), ["1", "2"]);
}

/// A pipeline of the `app` database of `maria` into Doris database `db`, the source's
/// `scan.startup` given as TOML lines.
fn startup_pipeline(dir: &std::path::Path, maria: &MariaDb, doris: &Doris, db: &str, startup: &str) -> PathBuf {
    let text = format!(
        "[pipeline]\nname = \"{db}\"\ncheckpoint_interval = \"300ms\"\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n[doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\n{startup}\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"{db}\"\n",
        maria.port,
        doris.fenodes()
    );
    let path = dir.join(format!("{db}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// A pipeline `name` (checkpoint every `interval`) from MariaDB's `database` (as written in TOML)
/// into a Doris sink with `sink` keys, started in the background once the binlog is followed.
async fn follow_into_doris(
    dir: &std::path::Path,
    maria: &MariaDb,
    doris: &Doris,
    (name, interval): (&str, &str),
    database: &str,
    sink: &str,
) -> (PathBuf, crate::common::Background) {
    let text = format!(
        "[pipeline]\nname = \"{name}\"\ncheckpoint_interval = \"{interval}\"\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n[doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = {database}\n\n\
         [[sink]]\ntype = \"doris\"\n{sink}\n",
        maria.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir, &text);
    let mut run = crate::common::Background::start(&path);
    run.until(90, "the binlog", |r| r.log().contains("following the binlog")).await;
    (path, run)
}

/// The binlog-only startup modes start where they say, and the checkpoint keeps the GTIDs read;
/// `schema_only` creates the tables and stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_modes_read_the_binlog_from_where_they_say() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, note VARCHAR(8)); INSERT INTO app.t VALUES (1, 'one')");
    let status = maria.sql("SHOW MASTER STATUS");
    let fields: Vec<&str> = status[0].split('\t').collect();
    let (file, pos) = (fields[0].to_string(), fields[1].to_string());
    let gtid = maria.sql("SELECT @@gtid_binlog_pos")[0].clone();
    maria.sql("INSERT INTO app.t VALUES (2, 'two')");
    // Binlog timestamps are whole seconds.
    std::thread::sleep(Duration::from_millis(1100));
    let from = maria.sql("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS UNSIGNED)")[0].clone();
    std::thread::sleep(Duration::from_millis(1100));
    maria.sql("INSERT INTO app.t VALUES (3, 'three'); UPDATE app.t SET note = 'uno' WHERE id = 1");
    let doris = Doris::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("earliest", "scan.startup.mode = \"earliest-offset\"".to_string(), vec!["1\tuno", "2\ttwo", "3\tthree"]),
        (
            "by_pos",
            format!(
                "scan.startup.mode = \"specific-offset\"\nscan.startup.specific_offset = {{ file = \"{file}\", pos = {pos} }}"
            ),
            vec!["1\tuno", "2\ttwo", "3\tthree"],
        ),
        (
            "by_gtid",
            format!("scan.startup.mode = \"specific-offset\"\nscan.startup.specific_offset.gtid_set = \"{gtid}\""),
            vec!["1\tuno", "2\ttwo", "3\tthree"],
        ),
        (
            "by_time",
            format!("scan.startup.mode = \"timestamp\"\nscan.startup.timestamp_millis = {from}"),
            vec!["1\tuno", "3\tthree"],
        ),
    ];
    for (db, startup, want) in cases {
        doris.sql(&format!("CREATE DATABASE {db}"));
        let path = startup_pipeline(dir.path(), &maria, &doris, db, &startup);
        let (stop, task) = spawn_run(&path);
        let query = format!("SELECT id, note FROM {db}.t ORDER BY id");
        let mut got = Vec::new();
        for _ in 0..300 {
            got = std::panic::catch_unwind(|| doris.sql(&query)).unwrap_or_default();
            if got == want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // `by_pos` and `by_gtid` start after row 1's insert: row 1 is there only as updated.
        assert_eq!(got, want, "{db}");
        tokio::time::sleep(Duration::from_millis(700)).await;
        stop.send(true).unwrap();
        let (report, prepared) = task.await.unwrap();
        report.unwrap_or_else(|e| panic!("{db}: {e:#}"));
        let cp = prepared.state.dir().unwrap().checkpoint().unwrap().unwrap();
        let at = &cp.sources["mysql"][0]["binlog"];
        assert!(at["gtid"].as_str().is_some_and(|g| g.starts_with("0-1-")), "{db}: {at}");
    }

    let path =
        startup_pipeline(dir.path(), &maria, &doris, "shapes", "scan.startup.mode = \"initial\"\nschema_only = true");
    doris.sql("CREATE DATABASE shapes");
    let (_stop, task) = spawn_run(&path);
    let (report, _) = tokio::time::timeout(Duration::from_secs(60), task).await.expect("it stops by itself").unwrap();
    assert!(report.unwrap().finished);
    assert_eq!(doris.sql("SHOW TABLES FROM shapes"), ["t"]);
    assert!(doris.sql("SELECT id FROM shapes.t").is_empty());
}

/// `kill -9` of `sluice run` five times while it reads the snapshot and five times while it
/// follows the binlog under a steady stream of inserts, updates, deletes and primary-key changes:
/// in the end each Doris table equals its source table, every row once (a table without a
/// primary key, DUPLICATE in Doris, shows any row loaded twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_the_snapshot_and_in_the_binlog_loses_and_repeats_nothing() {
    use crate::common::Background;
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; CREATE TABLE app.items (id INT PRIMARY KEY, v INT, s VARCHAR(20)); \
         INSERT INTO app.items SELECT seq, seq % 97, CONCAT('item-', seq) FROM app.seq_1_to_300000; \
         CREATE TABLE app.notes (n INT, txt VARCHAR(20)); \
         INSERT INTO app.notes SELECT seq, CONCAT('note-', seq) FROM app.seq_1_to_20000",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"crash\"\nparallelism = 2\ncheckpoint_interval = \"200ms\"\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\nserver_id = 7003\n\n[doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nscan.startup.mode = \"initial\"\nchunk_size = 500\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\n",
        maria.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    let following = |run: &Background| run.log().contains("following the binlog from");
    let (mut in_snapshot, mut in_binlog) = (0, 0);
    let mut done = false;
    // Each round is killed as soon as it has committed something new, so every kill lands inside
    // the snapshot with progress behind it, however fast the machine reads.
    let doris_port = doris.h().query_addr().port();
    let landed_in = |table: &str| crate::common::rows_in(doris_port, &format!("ods.{table}"));
    let landed = || landed_in("items");
    while !done && in_snapshot < 8 {
        let before = landed();
        let run = Background::start(&path);
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while landed() == before && !following(&run) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        done = following(&run);
        run.kill_9();
        if !done {
            assert!(landed() > before, "round {} made no progress in 120 s", in_snapshot + 1);
            in_snapshot += 1;
        }
    }
    assert!(in_snapshot >= 5, "the snapshot was read before five kills ({in_snapshot})");
    // The rest of the snapshot, before the writes begin.
    let mut run = Background::start(&path);
    run.until(120, "the binlog phase", following).await;
    run.kill_9();

    let port = maria.port;
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let on = writing.clone();
    let writer = std::thread::spawn(move || {
        let mut n = 400_000;
        while on.load(std::sync::atomic::Ordering::Relaxed) {
            let mut script = String::new();
            for _ in 0..20 {
                n += 1;
                script.push_str(&format!(
                    "INSERT INTO app.items VALUES ({n}, 1, 'new'); UPDATE app.items SET v = v + 1 WHERE id = {}; \
                     DELETE FROM app.items WHERE id = {}; UPDATE app.items SET id = {} WHERE id = {}; \
                     INSERT INTO app.notes VALUES ({n}, 'later'); ",
                    n % 300_000 + 1,
                    (n * 7) % 300_000 + 1,
                    n + 1_000_000,
                    (n * 13) % 300_000 + 1,
                ));
            }
            // One transaction of many changes, as well as single statements.
            crate::common::mysql(
                port,
                &format!("BEGIN; {script} COMMIT; INSERT INTO app.notes VALUES ({n}, 'single')"),
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    // Each round is killed once it has committed changes read from the binlog (`app.notes` is
    // only inserted into, and keyless: a DUPLICATE table in Doris, where a change applied twice
    // is a row too many), with more changes in flight.
    for round in 1..=5 {
        let before = landed_in("notes");
        let mut run = Background::start(&path);
        run.until(60, "the binlog phase", following).await;
        let committed = || landed_in("notes") > before;
        crate::common::wait_for(&format!("round {round}'s first committed changes"), committed).await;
        tokio::time::sleep(Duration::from_millis(fastrand::u64(..300))).await;
        run.kill_9();
        in_binlog += 1;
    }
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();

    let run = Background::start(&path);
    let items = ("SELECT id, v, s FROM app.items ORDER BY id", "SELECT id, v, s FROM ods.items ORDER BY id");
    let notes = ("SELECT n, txt FROM app.notes ORDER BY n, txt", "SELECT n, txt FROM ods.notes ORDER BY n, txt");
    let count = |sql: &str| maria.sql(sql).len();
    if let Err(e) = converges(&maria, &doris, items.0, items.1).await {
        panic!(
            "items after {in_snapshot} + {in_binlog} kills ({} rows): {}\n{}",
            count(items.0),
            &e[..e.len().min(2000)],
            run.log()
        );
    }
    if let Err(e) = converges(&maria, &doris, notes.0, notes.1).await {
        panic!(
            "notes after {in_snapshot} + {in_binlog} kills ({} rows): {}\n{}",
            count(notes.0),
            &e[..e.len().min(2000)],
            run.log()
        );
    }
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// Every type of the connector's map, NULLs and emoji, read by the snapshot (row 1, 3) and from
/// the binlog (row 2, 4): the Doris rows equal the source's, column by column. TIMESTAMP values
/// are shown in `server_time_zone`; BLOB bytes that are not text arrive as base64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_arrives_unchanged_from_the_snapshot_and_the_binlog() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    let columns = "id INT PRIMARY KEY, flag TINYINT(1), b BIT(1), tu TINYINT UNSIGNED, su SMALLINT UNSIGNED, \
         iu INT UNSIGNED, bu BIGINT UNSIGNED, d DECIMAL(38,10), f DOUBLE, dt DATETIME(6), ts TIMESTAMP(3) NULL, \
         day DATE, e ENUM('small','large'), st SET('a','b','c'), j JSON, bl BLOB, vb VARBINARY(8), \
         v VARCHAR(10), t TEXT, y YEAR, tm TIME(3)";
    let row = |id: i32| {
        format!(
            "({id}, 1, b'1', 255, 65535, 4294967295, 18446744073709551615, 1234567890123456789012345678.0123456789, \
             2.5e-3, '2026-12-01 23:59:59.123456', '2026-07-01 16:30:00.250', '2026-02-28', 'large', 'a,c', \
             '{{\"k\": [1, \"😀\"]}}', X'FF00C3', X'0102', 'naïve 😀', 'text ✓', 2026, '-01:02:03.500')"
        )
    };
    let nulls = |id: i32| format!("({id}{})", ", NULL".repeat(20));
    maria.sql(&format!(
        "CREATE DATABASE app; CREATE TABLE app.all_types ({columns}); INSERT INTO app.all_types VALUES {}, {}",
        row(1),
        nulls(3)
    ));
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"types\"\ncheckpoint_interval = \"300ms\"\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\nserver_time_zone = \"Asia/Shanghai\"\n\n\
         [doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nscan.startup.mode = \"initial\"\nbinary_handling = \"base64\"\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\n",
        maria.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    let (stop, task) = spawn_run(&path);
    // The source's values as text in the shape Doris prints them (Asia/Shanghai is +08:00).
    let source = "SET time_zone = '+08:00'; SELECT id, flag, b + 0, tu, su, iu, bu, d, f, DATE_FORMAT(dt, '%Y-%m-%d %H:%i:%s.%f'), \
         DATE_FORMAT(ts, '%Y-%m-%d %H:%i:%s.%f'), day, e, st, j, TO_BASE64(bl), TO_BASE64(vb), v, t, y, tm \
         FROM app.all_types ORDER BY id";
    let target = "SELECT id, flag, CAST(b AS INT), tu, su, iu, bu, d, f, dt, ts, day, e, st, j, bl, vb, v, t, y, tm \
         FROM ods.all_types ORDER BY id";
    converges(&maria, &doris, source, target).await.unwrap();
    maria.sql(&format!("INSERT INTO app.all_types VALUES {}, {}", row(2), nulls(4)));
    converges(&maria, &doris, source, target).await.unwrap();
    assert_eq!(doris.sql(target).len(), 4);
    // `sluice verify` beside the running pipeline: every type compares equal as Doris keeps it.
    let (ok, out) = verify(&path, &[]).await;
    assert!(ok, "{out}");
    assert!(
        out.contains("app.all_types → ods.all_types: 4 rows compared, 4 equal, 0 differing, 0 missing, 0 extra"),
        "{out}"
    );
    stop.send(true).unwrap();
    task.await.unwrap().0.unwrap_or_else(|e| panic!("{e:#}"));

    // A copy changed behind the pipeline's back: each row that differs is named, with both values.
    doris.sql("UPDATE ods.all_types SET v = 'tampered', y = NULL WHERE id = 1");
    doris.sql("DELETE FROM ods.all_types WHERE id = 3");
    doris.sql("INSERT INTO ods.all_types (id, v) VALUES (99, 'stray')");
    let (ok, out) = verify(&path, &["--recheck-after", "0s"]).await;
    assert!(!ok, "{out}");
    for line in [
        "app.all_types → ods.all_types: 4 rows compared, 2 equal, 1 differing, 1 missing, 1 extra — DIFFERS",
        "  differing id=1: v: source \"naïve 😀\", doris \"tampered\"; y: source \"2026\", doris NULL",
        "  missing id=3",
        "  extra id=99",
        "error: 1 of 1 tables differ from their source",
    ] {
        assert!(out.lines().any(|l| l == line), "no line {line:?} in:\n{out}");
    }
    let (_, json) = verify(&path, &["--recheck-after", "0s", "--json", "--samples", "1"]).await;
    let report: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(
        (report["differing"].as_u64(), report["samples"].as_array().map(Vec::len)),
        (Some(1), Some(1)),
        "{json}"
    );
}

/// `[verify] every`: the running pipeline compares its copy now and then; `/metrics` shows the
/// last result per table, and a row changed behind its back is counted and logged by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_every_shows_the_last_comparison_in_metrics() {
    use crate::common::Background;
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(8)); INSERT INTO app.t VALUES (1, 'a'), (2, 'b')");
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"checked\"\ncheckpoint_interval = \"300ms\"\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n\
         [doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\n\n\
         [verify]\nevery = \"1s\"\n",
        maria.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    let mut run = Background::start_with(&path, &["--metrics-addr", "127.0.0.1:0"], &[]);
    let mut url = None;
    run.until(60, "the metrics address", |r| {
        url = r.log().lines().find_map(|l| l.split_once("metrics: ").map(|(_, u)| u.trim().to_string()));
        url.is_some()
    })
    .await;
    let url = url.unwrap();
    sluice::doris::tls::install_provider();
    let series = |text: &str, name: &str| -> Option<i64> {
        let prefix = format!("sluice_{name}{{pipeline=\"checked\",table=\"app.t\"}} ");
        text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).and_then(|v| v.parse().ok())
    };
    let until = |want: &'static [(&'static str, i64)]| {
        let url = url.clone();
        async move {
            let mut text = String::new();
            for _ in 0..300 {
                text = reqwest::get(&url).await.unwrap().text().await.unwrap();
                if want.iter().all(|(name, v)| series(&text, name) == Some(*v)) {
                    return text;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("{want:?} not within 30 s:\n{text}");
        }
    };
    let text = until(&[("verify_rows_compared", 2), ("verify_rows_differing", 0), ("verify_rows_missing", 0)]).await;
    assert!(text.contains("# TYPE sluice_verify_rows_differing gauge\n"), "{text}");
    assert!(series(&text, "verify_failed") == Some(0), "{text}");
    doris.sql("UPDATE ods.t SET v = 'tampered' WHERE id = 2");
    until(&[("verify_rows_compared", 2), ("verify_rows_differing", 1)]).await;
    run.until(30, "the difference logged", |r| {
        r.log().contains("verify: `app.t` differs from its copy `ods.t`: 1 differing, 0 missing, 0 extra of 2 rows; first: differing id=2")
    })
    .await;
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// `[[sink.route]]` (the connector's multi-to-one): tables whose names match go to one Doris
/// table, created once and checked for the others; the rest get the prefix and suffix. A table
/// that exists without a source column is an error saying what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tables_route_to_one_and_an_existing_table_is_checked() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; CREATE TABLE app.order_1 (id INT PRIMARY KEY, amount INT); \
         CREATE TABLE app.order_2 (id INT PRIMARY KEY, amount INT); CREATE TABLE app.users (id INT PRIMARY KEY); \
         INSERT INTO app.order_1 VALUES (1, 10), (2, 20); INSERT INTO app.order_2 VALUES (3, 30); INSERT INTO app.users VALUES (7)",
    );
    let doris = Doris::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pipeline = |name: &str, sink: &str| {
        let text = format!(
            "[pipeline]\nname = \"{name}\"\n\n[connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n\
             [doris]\nfenodes = {}\n\n[[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\n\
             scan.startup.mode = \"snapshot\"\n\n[[sink]]\ntype = \"doris\"\n{sink}\n",
            maria.port,
            doris.fenodes()
        );
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let routed = pipeline(
        "routed",
        "database = \"ods\"\ntable_prefix = \"src_\"\ntable_suffix = \"_v1\"\n\
         [[sink.route]]\norigin = \"order_\\\\d+\"\ntarget = \"orders\"",
    );
    let (_stop, task) = spawn_run(&routed);
    let (report, _) = tokio::time::timeout(Duration::from_secs(60), task).await.unwrap().unwrap();
    assert!(report.unwrap().finished);
    assert_eq!(doris.sql("SHOW TABLES FROM ods"), ["orders", "src_users_v1"]);
    assert_eq!(doris.sql("SELECT id, amount FROM ods.orders ORDER BY id"), ["1\t10", "2\t20", "3\t30"]);
    assert_eq!(doris.sql("SELECT id FROM ods.src_users_v1"), ["7"]);

    doris.sql(
        "CREATE TABLE ods.users (id INT NOT NULL) UNIQUE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1 \
         PROPERTIES (\"replication_num\" = \"1\")",
    );
    maria.sql("ALTER TABLE app.users ADD COLUMN name VARCHAR(10)");
    let checked = pipeline("checked", "database = \"ods\"");
    let (_stop, task) = spawn_run(&checked);
    let (report, _) = tokio::time::timeout(Duration::from_secs(60), task).await.unwrap().unwrap();
    let error = format!("{:#}", report.unwrap_err());
    assert!(
        error.contains("the Doris table `ods.users` exists without column `name` of `app.users`; its columns are id"),
        "{error}"
    );
}

/// The binlog file a checkpoint points into is purged while the pipeline is down: the restart
/// stops at once, naming the file and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_binlog_stops_the_restart_naming_the_file() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY); INSERT INTO app.t VALUES (1)");
    let doris = Doris::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = startup_pipeline(dir.path(), &maria, &doris, "ods", "scan.startup.mode = \"initial\"");
    let (stop, task) = spawn_run(&path);
    converges(&maria, &doris, "SELECT id FROM app.t", "SELECT id FROM ods.t").await.unwrap();
    stop.send(true).unwrap();
    task.await.unwrap().0.unwrap();
    maria.sql("FLUSH BINARY LOGS; INSERT INTO app.t VALUES (2); FLUSH BINARY LOGS");
    // The server keeps a file a replica connection still reads (the stopped run's may linger).
    let kept = |maria: &MariaDb| maria.sql("SHOW BINARY LOGS").iter().any(|f| f.starts_with("binlog.000001"));
    for _ in 0..100 {
        for id in maria.sql("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump'") {
            // It may have ended since: a failed KILL is fine.
            let _ = Command::new("mysql")
                .args(["-h127.0.0.1", "-P", &maria.port.to_string(), "-uroot", "-e", &format!("KILL {id}")])
                .output();
        }
        maria.sql("PURGE BINARY LOGS TO 'binlog.000003'");
        if !kept(&maria) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!kept(&maria), "binlog.000001 is purged");
    let (_stop, task) = spawn_run(&path);
    let (report, _) = tokio::time::timeout(Duration::from_secs(60), task).await.expect("it stops").unwrap();
    let error = format!("{:#}", report.unwrap_err());
    assert!(error.contains("the binlog at binlog.000001:"), "{error}");
    assert!(error.contains("is gone from the server"), "{error}");
    assert!(
        error.contains("start over with `scan.startup.mode = \"initial\"` and a new `pipeline.state_dir`"),
        "{error}"
    );
}

/// A DDL Doris refuses (dropping the key column of a UNIQUE table) stops the pipeline under
/// `evolve`, naming the Doris statement, the source's DDL and Doris' error; the rows before it
/// are in Doris.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ddl_doris_refuses_stops_the_pipeline_naming_it_and_the_error() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, v INT); INSERT INTO app.t VALUES (1, 1)");
    let doris = Doris::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = startup_pipeline(dir.path(), &maria, &doris, "ods", "scan.startup.mode = \"initial\"");
    let (_stop, task) = spawn_run(&path);
    converges(&maria, &doris, "SELECT id, v FROM app.t", "SELECT id, v FROM ods.t").await.unwrap();
    maria.sql("INSERT INTO app.t VALUES (2, 2); ALTER TABLE app.t DROP COLUMN id; INSERT INTO app.t VALUES (3)");
    let (report, _) = tokio::time::timeout(Duration::from_secs(60), task).await.expect("it stops").unwrap();
    let error = format!("{:#}", report.unwrap_err());
    assert!(
        error.contains("`ods.t`: Doris refused `ALTER TABLE `ods`.`t` DROP COLUMN `id`` for `ALTER TABLE app.t DROP COLUMN id` of `app.t`"),
        "{error}"
    );
    assert!(error.contains("Can not drop key column in Unique data model table: id"), "{error}");
    assert!(error.contains("set `schema_change.behavior = \"try_evolve\"` to go on without it"), "{error}");
    assert_eq!(doris.sql("SELECT id, v FROM ods.t ORDER BY id"), ["1\t1", "2\t2"]);
}

/// Tables that join a running sync: one renamed into the patterns and one created `LIKE` another
/// (their rows are not in the binlog: the run restarts and reads them, with two workers), and one
/// the patterns cover only after a restart with a wider `include` (read before the binlog goes
/// on). Each ends equal to its source, every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_renamed_in_created_like_or_newly_matched_are_read_then_followed() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; CREATE TABLE app.users (id INT PRIMARY KEY, name VARCHAR(20)); \
         INSERT INTO app.users VALUES (1, 'ann'), (2, 'bob'); \
         CREATE TABLE app.later (id INT PRIMARY KEY, v INT); INSERT INTO app.later VALUES (1, 10), (2, 20)",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = |include: &str| {
        format!(
            "[pipeline]\nname = \"joining\"\ncheckpoint_interval = \"300ms\"\nparallelism = 2\n\n\
             [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\nserver_id = 7011\n\n\
             [doris]\nfenodes = {}\n\n\
             [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\ninclude = \"{include}\"\n\
             scan.startup.mode = \"initial\"\nchunk_size = 2\n\n\
             [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\ntable_properties.replication_num = \"1\"\n",
            maria.port,
            doris.fenodes()
        )
    };
    let path = pipeline_file(dir.path(), &text("users|moved|twin"));
    let (stop, task) = spawn_run(&path);
    converges(&maria, &doris, "SELECT * FROM app.users ORDER BY id", "SELECT * FROM ods.users ORDER BY id")
        .await
        .unwrap();
    let rows: Vec<String> = (1..=9).map(|i| format!("({i}, 'r{i}')")).collect();
    maria.sql(&format!(
        "CREATE TABLE app.staging (id INT PRIMARY KEY, v VARCHAR(10)); INSERT INTO app.staging VALUES {}; \
         RENAME TABLE app.staging TO app.moved; INSERT INTO app.moved VALUES (10, 'after'); \
         UPDATE app.moved SET v = 'changed' WHERE id = 3; DELETE FROM app.moved WHERE id = 4; \
         CREATE TABLE app.twin LIKE app.users; INSERT INTO app.twin VALUES (7, 'gus'); \
         INSERT INTO app.users VALUES (3, 'cid')",
        rows.join(", ")
    ));
    for t in ["moved", "twin", "users"] {
        let (source, target) =
            (format!("SELECT * FROM app.{t} ORDER BY id"), format!("SELECT * FROM ods.{t} ORDER BY id"));
        converges(&maria, &doris, &source, &target).await.unwrap_or_else(|e| panic!("{t}: {e}"));
    }
    stop.send(true).unwrap();
    let (report, _) = task.await.unwrap();
    let report = report.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(report.restarts >= 1, "the new tables restart the run: {report:?}");

    // Covered only from this run on: its rows from before are read, then its changes followed.
    maria.sql("INSERT INTO app.later VALUES (3, 30); INSERT INTO app.moved VALUES (11, 'down')");
    let path = pipeline_file(dir.path(), &text("users|moved|twin|later"));
    let (stop, task) = spawn_run(&path);
    maria.sql("UPDATE app.later SET v = 11 WHERE id = 1; INSERT INTO app.later VALUES (4, 40)");
    for t in ["later", "moved", "twin", "users"] {
        let (source, target) =
            (format!("SELECT * FROM app.{t} ORDER BY id"), format!("SELECT * FROM ods.{t} ORDER BY id"));
        converges(&maria, &doris, &source, &target).await.unwrap_or_else(|e| panic!("{t}: {e}"));
    }
    let (ok, out) = verify(&path, &[]).await;
    assert!(ok, "{out}");
    assert!(out.contains("app.later → ods.later: 4 rows compared, 4 equal"), "{out}");
    stop.send(true).unwrap();
    let (report, _) = task.await.unwrap();
    report.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// A sync resumed against another server. After a failover to a MariaDB replica (its binlog
/// holds the primary's transactions under their GTIDs) it goes on from the GTIDs its position
/// kept: every change once, in a table without a key (DUPLICATE in Doris) too. Against a server
/// that never had those transactions it stops, naming the servers and how to start over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_resumed_against_another_server_goes_on_by_gtid_or_says_whose_state_it_is() {
    let primary = tokio::task::spawn_blocking(|| MariaDb::start_as(true, 1, &[])).await.unwrap();
    primary.sql(
        "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, v INT); CREATE TABLE app.events (id INT, v INT); \
         INSERT INTO app.t VALUES (1, 1), (2, 2); INSERT INTO app.events VALUES (1, 1), (2, 2)",
    );
    let port = primary.port;
    let replica = tokio::task::spawn_blocking(move || MariaDb::replica_of(port)).await.unwrap();
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = |port: u16| {
        format!(
            "[pipeline]\nname = \"failover\"\ncheckpoint_interval = \"300ms\"\n\n\
             [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {port}\nserver_id = 7021\n\n\
             [doris]\nfenodes = {}\n\n\
             [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nscan.startup.mode = \"initial\"\n\n\
             [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\ntable_properties.replication_num = \"1\"\n",
            doris.fenodes()
        )
    };
    const T: (&str, &str) = ("SELECT id, v FROM app.t ORDER BY id", "SELECT id, v FROM ods.t ORDER BY id");
    const EVENTS: (&str, &str) =
        ("SELECT id, v FROM app.events ORDER BY id, v", "SELECT id, v FROM ods.events ORDER BY id, v");
    let path = pipeline_file(dir.path(), &text(primary.port));
    let (stop, task) = spawn_run(&path);
    primary.sql("INSERT INTO app.t VALUES (3, 3); INSERT INTO app.events VALUES (3, 3)");
    for (source, target) in [T, EVENTS] {
        converges(&primary, &doris, source, target).await.unwrap();
    }
    stop.send(true).unwrap();
    task.await.unwrap().0.unwrap_or_else(|e| panic!("{e:#}"));

    // Down: one more change on the primary, which reaches the replica; then the primary goes.
    primary.sql("INSERT INTO app.t VALUES (4, 4); INSERT INTO app.events VALUES (4, 4)");
    for _ in 0..600 {
        if replica.sql(EVENTS.0).len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(replica.sql(EVENTS.0), primary.sql(EVENTS.0), "the replica caught up");
    drop(primary);
    replica.sql(
        "STOP SLAVE; INSERT INTO app.t VALUES (5, 5); UPDATE app.t SET v = 10 WHERE id = 1; \
         INSERT INTO app.events VALUES (5, 5)",
    );
    let path = pipeline_file(dir.path(), &text(replica.port));
    let (stop, task) = spawn_run(&path);
    for (source, target) in [T, EVENTS] {
        converges(&replica, &doris, source, target).await.unwrap();
    }
    replica.sql("INSERT INTO app.events VALUES (6, 6)");
    converges(&replica, &doris, EVENTS.0, EVENTS.1).await.unwrap();
    stop.send(true).unwrap();
    task.await.unwrap().0.unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(doris.sql("SELECT count(*) FROM ods.events"), ["6"]);

    // A server that never had the replica's transactions.
    let other = tokio::task::spawn_blocking(|| MariaDb::start_as(true, 3, &[])).await.unwrap();
    other.sql(
        "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, v INT); CREATE TABLE app.events (id INT, v INT)",
    );
    let path = pipeline_file(dir.path(), &text(other.port));
    let (_stop, task) = spawn_run(&path);
    let (report, _) = task.await.unwrap();
    let e = format!("{:#}", report.unwrap_err());
    assert!(e.contains("server_id 3") && e.contains("server_id 2"), "{e}");
    assert!(e.contains("start over with `scan.startup.mode = \"initial\"` and a new `pipeline.state_dir`"), "{e}");
}

/// How far a MySQL source is: each table's snapshot (rows read, the server's estimate, chunks
/// planned and read), then how far behind the binlog it reads — the age of the last change
/// read while more may follow, 0 (and 0 bytes) once the server says its binlog ends there — in
/// `/metrics` and in what `sluice serve`'s API shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshots_progress_and_the_lag_behind_the_binlog_are_shown() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, v INT); INSERT INTO app.t VALUES (1, 1), (2, 2), (3, 3)");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"progress\"\n\n[connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n\
         [[source]]\nname = \"app_db\"\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nchunk_size = 2\n\n\
         [[sink]]\ntype = \"blackhole\"\n",
        maria.port
    );
    let crate::common::FirstReader { prepared, splits: _splits, mut reader } =
        crate::common::first_reader(dir.path(), &text).await;
    crate::common::read_rows_of(&mut reader, 3).await;
    let source = || prepared.stats.sources().into_iter().next().expect("the source's progress");
    let t = source()["tables"]["app.t"].clone();
    assert_eq!((&t["rows_read"], &t["chunks"], &t["chunks_read"]), (&json!(3), &json!(2), &json!(2)), "{t}");
    assert!(t["rows_estimated"].as_u64().is_some(), "{t}");
    assert_eq!(source()["source"], "app_db");

    // A change written 2.5 s before it is read: until the server says its binlog ends there,
    // the lag is the change's age.
    maria.sql("INSERT INTO app.t VALUES (4, 4)");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    crate::common::read_rows_of(&mut reader, 1).await;
    let lag = source()["lag_seconds"].as_f64().unwrap();
    assert!(lag >= 2.0, "{}", source());
    let metrics = sluice::metrics::metrics_text(&prepared.stats, "progress");
    assert!(metrics.contains("# TYPE sluice_source_lag_seconds gauge\n"), "{metrics}");
    assert!(
        metrics
            .contains("sluice_snapshot_rows_read_total{pipeline=\"progress\",source=\"app_db\",table=\"app.t\"} 3\n"),
        "{metrics}"
    );
    // The server's binlog ends where it was read (asked every 5 s): no lag.
    for _ in 0..150 {
        if source()["lag_seconds"] == json!(0.0) && source()["lag_bytes"] == json!(0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("still behind: {}", source());
}

/// `sluice verify` of a table whose every column MariaDB writes as Sluice writes its Doris value:
/// the server sums each range's rows' CRC32s and Sluice those of Doris' rows, so equal ranges are
/// not read from the source row by row (edges: text with `|` and 4-byte UTF-8, NULLs, negative
/// decimals, BIGINT UNSIGNED as LARGEINT, dates, years, DATETIME and TIMESTAMP; a composite key,
/// compared in ranges of its integer first column). A value changed in Doris makes its range's
/// fingerprint differ: that range's rows are compared, and the row named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_agrees_by_fingerprint_and_compares_the_rows_of_a_range_that_differs() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; CREATE TABLE app.t (id BIGINT, k TINYINT UNSIGNED, n INT NOT NULL, \
         big BIGINT UNSIGNED, v VARCHAR(20), txt TEXT, amount DECIMAL(12,2), whole DECIMAL(5,0), day DATE, y YEAR, dt DATETIME(3), ts TIMESTAMP NULL, \
         PRIMARY KEY (id, n)) \
         DEFAULT CHARSET utf8mb4; \
         USE app; INSERT INTO app.t SELECT seq, seq % 256, -seq, 18446744073709551615 - seq, CONCAT('a|', seq, ' 😀'), \
         IF(seq % 3 = 0, NULL, REPEAT('x', seq % 50)), seq / 100 - 10, IF(seq % 7 = 0, NULL, -seq % 1000), \
         '2024-02-29' + INTERVAL seq % 9000 DAY, 2000 + seq % 100, '1999-12-31 23:59:59.5' + INTERVAL seq * 1001 MICROSECOND, \
         IF(seq % 5 = 0, NULL, FROM_UNIXTIME(1700000000 + seq)) FROM seq_1_to_120000",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"summed\"\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n\
         [doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nscan.startup.mode = \"snapshot\"\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\n",
        maria.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    crate::common::run_file(&path).await.unwrap();
    let report = crate::common::verify_json(&path, &[]).await;
    assert_eq!(report.counts(), (120_000, 120_000, 120_000, 0), "{report:?}");

    doris.sql("UPDATE ods.t SET txt = 'tampered' WHERE id = 70000");
    let report = crate::common::verify_json(&path, &["--recheck-after", "0s"]).await;
    // Ranges of 50,000 keys: the two others agree by fingerprint, the one with row 70000 row by row.
    assert_eq!(report.counts(), (120_000, 119_999, 70_000, 1), "{report:?}");
    assert_eq!(report.0["samples"][0]["key"], "id=70000, n=-70000", "{report:?}");
}

/// `database` as a regex (Flink CDC's `database-name`): the tables of every matching database are
/// read — their snapshot, their binlog changes, a table created in one of them while running —
/// each into a Doris database named after its own (`database = "ods_{db}"`), so tables of the same
/// name stay apart; a database the pattern does not match is left alone. `sluice verify` compares
/// them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_databases_by_pattern_sync_each_into_a_doris_database_of_its_name() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE shop_1; CREATE DATABASE shop_2; CREATE DATABASE other; \
         CREATE TABLE shop_1.orders (id INT PRIMARY KEY, v VARCHAR(8)); CREATE TABLE shop_2.orders (id INT PRIMARY KEY, v VARCHAR(8)); \
         CREATE TABLE other.orders (id INT PRIMARY KEY, v VARCHAR(8)); \
         INSERT INTO shop_1.orders VALUES (1, 'a'); INSERT INTO shop_2.orders VALUES (1, 'b'), (2, 'c'); INSERT INTO other.orders VALUES (9, 'x')",
    );
    let doris = Doris::start().await;
    let dir = tempfile::tempdir().unwrap();
    let sink = "database = \"ods_{db}\"";
    let (path, run) = follow_into_doris(dir.path(), &maria, &doris, ("shops", "300ms"), "'shop_\\d+'", sink).await;
    maria.sql(
        "INSERT INTO shop_1.orders VALUES (2, 'd'); UPDATE shop_2.orders SET v = 'e' WHERE id = 1; \
         CREATE TABLE shop_2.fresh (id INT PRIMARY KEY); INSERT INTO shop_2.fresh VALUES (5); INSERT INTO other.orders VALUES (10, 'y')",
    );
    for (db, table) in [("shop_1", "orders"), ("shop_2", "orders"), ("shop_2", "fresh")] {
        let (source, target) =
            (format!("SELECT * FROM {db}.{table} ORDER BY id"), format!("SELECT * FROM ods_{db}.{table} ORDER BY id"));
        converges(&maria, &doris, &source, &target)
            .await
            .unwrap_or_else(|e| panic!("{db}.{table}: {e}\n{}", run.log()));
    }
    assert_eq!(doris.sql("SELECT v FROM ods_shop_2.orders ORDER BY id"), ["e", "c"]);
    assert!(doris.sql("SHOW DATABASES").iter().all(|d| !d.contains("other")), "{:?}", doris.sql("SHOW DATABASES"));
    let (ok, out) = verify(&path, &[]).await;
    assert!(ok && out.contains("verify: 3 tables, 5 rows: the copy equals the source"), "{out}");
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// A transaction that touches more tables than Doris lets a database hold loads open for
/// (`max_running_txn_num_per_db`, here 12): the sink keeps its loads under
/// `max_running_txns_per_db` by asking for checkpoints early (their commits free room), so every
/// table gets its row where holding a load per table until the interval's checkpoint would have
/// been refused (`current running txns on db … larger than limit 12`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_tables_than_doris_running_transactions_limit_are_loaded_under_it() {
    const TABLES: usize = 30;
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    let create: Vec<String> = (0..TABLES)
        .map(|i| format!("CREATE TABLE app.t{i} (id INT PRIMARY KEY, v INT); INSERT INTO app.t{i} VALUES (0, 0)"))
        .collect();
    maria.sql(&format!("CREATE DATABASE app; {}", create.join("; ")));
    let doris =
        Doris::start_with(doris_lite::Config { max_running_txn_per_db: 12, ..doris_lite::Config::ephemeral() }).await;
    let dir = tempfile::tempdir().unwrap();
    let sink = "database = \"ods\"\nmax_running_txns_per_db = 12";
    let (_, mut run) = follow_into_doris(dir.path(), &maria, &doris, ("wide", "5s"), "\"app\"", sink).await;
    // One transaction, a row in every table: a load per table in one checkpoint interval.
    let rows: Vec<String> = (0..TABLES).map(|i| format!("INSERT INTO app.t{i} VALUES (1, {i})")).collect();
    maria.sql(&format!("BEGIN; {}; COMMIT", rows.join("; ")));
    let union: Vec<String> = (0..TABLES).map(|i| format!("SELECT {i} AS t, count(*) AS n FROM ods.t{i}")).collect();
    let target = format!("SELECT sum(n) FROM ({}) x", union.join(" UNION ALL "));
    let want = (2 * TABLES).to_string();
    run.until(30, "a row in every table", |r| {
        assert!(!r.log().contains("larger than limit"), "Doris refused a load: {}", r.log());
        doris.sql(&target) == [want.as_str()]
    })
    .await;
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// Tables keyed by a DATETIME and a number, by a DECIMAL past 2^53, and by text in a collation
/// that sorts otherwise than Doris: snapshot chunks and `sluice verify`'s ranges are cut at values
/// read from MariaDB's index (decimals written as numbers, so MariaDB compares them exactly, not as
/// doubles), the snapshot spread over two workers; a tampered row costs one range read row by row.
/// Rows of the text key fall in other ranges in Doris (`B…` sorts before `a…` in bytes, between
/// `a…` and `c…` in `utf8mb4_general_ci`): paired up again, they agree, but the tampered one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_keyed_by_datetimes_or_decimals_are_cut_at_their_values_to_read_and_verify() {
    let maria = tokio::task::spawn_blocking(MariaDb::start).await.unwrap();
    maria.sql(
        "CREATE DATABASE app; USE app; \
         CREATE TABLE by_time (at DATETIME(3), n INT, v VARCHAR(10), PRIMARY KEY (at, n)); \
         INSERT INTO by_time SELECT '2024-01-01 00:00:00.250' + INTERVAL seq DIV 10 SECOND, seq, CONCAT('t', seq) FROM seq_1_to_120000; \
         CREATE TABLE by_amount (amount DECIMAL(20,2) PRIMARY KEY, v VARCHAR(10)); \
         INSERT INTO by_amount SELECT 123456789012345678.25 - seq / 4, CONCAT('a', seq) FROM seq_1_to_110000; \
         CREATE TABLE by_name (name VARCHAR(20) PRIMARY KEY, v INT) DEFAULT CHARSET utf8mb4 COLLATE utf8mb4_general_ci; \
         INSERT INTO by_name SELECT CONCAT(ELT(seq % 3 + 1, 'a', 'B', 'c'), LPAD(seq, 6, '0')), seq FROM seq_1_to_110000",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"cuts\"\nparallelism = 2\n\n\
         [connections.app]\ntype = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n\
         [doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"mysql\"\nconnection = \"app\"\ndatabase = \"app\"\nscan.startup.mode = \"snapshot\"\nchunk_size = 3000\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\n",
        maria.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    crate::common::run_file(&path).await.unwrap();
    let reports = crate::common::verify_tables(&path, &[]).await;
    assert_eq!(reports["app.by_time"].counts(), (120_000, 120_000, 120_000, 0), "{reports:?}");
    assert_eq!(reports["app.by_amount"].counts(), (110_000, 110_000, 110_000, 0), "{reports:?}");
    let (compared, equal, _, differing) = reports["app.by_name"].counts();
    assert_eq!((compared, equal, differing), (110_000, 110_000, 0), "{reports:?}");
    let name = &reports["app.by_name"].0;
    assert_eq!((&name["missing"], &name["extra"]), (&json!(0), &json!(0)), "{name}");

    doris.sql("UPDATE ods.by_time SET v = 'drift' WHERE n = 60005");
    doris.sql("DELETE FROM ods.by_amount WHERE amount = 123456789012345678.25 - 25000");
    doris.sql("UPDATE ods.by_name SET v = -1 WHERE name = 'B000004'");
    let reports = crate::common::verify_tables(&path, &["--recheck-after", "0s"]).await;
    let (time, amount) = (&reports["app.by_time"], &reports["app.by_amount"]);
    let (compared, equal, summed, differing) = time.counts();
    assert_eq!((compared, equal, differing), (120_000, 119_999, 1), "{time:?}");
    assert!((70_000..=100_000).contains(&summed), "one range of about 50,000 rows read row by row: {time:?}");
    assert_eq!(time.0["samples"][0]["key"], "at=2024-01-01T01:40:00.250, n=60005", "{time:?}");
    let (compared, equal, summed, differing) = amount.counts();
    assert_eq!((compared, equal, differing), (110_000, 109_999, 0), "{amount:?}");
    assert!((60_000..=100_000).contains(&summed), "{amount:?}");
    assert_eq!(amount.0["samples"][0]["key"], "amount=123456789012320678.25", "{amount:?}");
    let name = &reports["app.by_name"];
    let (compared, equal, _, differing) = name.counts();
    assert_eq!(
        (compared, equal, differing, &name.0["missing"], &name.0["extra"]),
        (110_000, 109_999, 1, &json!(0), &json!(0)),
        "{name:?}"
    );
    assert_eq!(name.0["samples"][0]["key"], "name=B000004", "{name:?}");
    assert_eq!(name.0["samples"][0]["columns"], json!([{"column": "v", "source": "4", "doris": "-1"}]), "{name:?}");
}
