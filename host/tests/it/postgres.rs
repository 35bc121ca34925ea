//! The `postgres` source against a PostgreSQL server each test starts (initdb into a temp dir,
//! `wal_level = logical`, a free loopback port), writing into doris-lite.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::common::{Background, Doris, pipeline_file, verify};

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL server of this test, run as the `postgres` user (it refuses root). Stopped
/// when dropped.
pub struct Postgres {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "postgres"]).output().expect("id runs");
        String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().expect("a postgres user exists")
    };
    (id("-u"), id("-g"))
}

impl Postgres {
    pub fn start() -> Postgres {
        Postgres::start_with("logical")
    }

    pub fn start_with(wal_level: &str) -> Postgres {
        let (uid, gid) = postgres_ids();
        let dir = tempfile::tempdir().unwrap();
        let data: PathBuf = dir.path().join("data");
        assert!(Command::new("chown").arg("postgres:postgres").arg(dir.path()).status().unwrap().success());
        let init = Command::new(format!("{BIN}/initdb"))
            .args(["--auth=trust", "--username=postgres", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"])
            .arg("-D")
            .arg(&data)
            .uid(uid)
            .gid(gid)
            .output()
            .expect("initdb runs");
        assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = dir.path().join("server.log");
        let child = Command::new(format!("{BIN}/postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.path().display()))
            .args(["-c", &format!("wal_level={wal_level}"), "-c", "max_replication_slots=8", "-c", "max_wal_senders=8"])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .uid(uid)
            .gid(gid)
            .spawn()
            .expect("postgres starts");
        let server = Postgres { child, port, dir };
        for _ in 0..300 {
            let ok = Command::new("psql")
                .args(["-h127.0.0.1", "-p", &port.to_string(), "-Upostgres", "-dpostgres", "-Atc", "SELECT 1"])
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("PostgreSQL did not answer on port {port}: {}", std::fs::read_to_string(&log).unwrap_or_default());
    }

    /// Rows of `sql` (psql, fields tab separated, NULL empty).
    pub fn sql(&self, sql: &str) -> Vec<String> {
        let mut command = Command::new("psql");
        command
            .args([
                "-h127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-Upostgres",
                "-dpostgres",
                "-At",
                "-F\t",
                "-Pnull=NULL",
            ])
            .args(["-v", "ON_ERROR_STOP=1"]);
        let out = crate::common::run_sql(command, "-c", sql);
        assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// A superuser role `user` that logs in over TCP only with `password`, by `scram-sha-256`
    /// (the `postgres` role keeps `trust`, for the test's own queries).
    pub fn require_password(&self, user: &str, password: &str) {
        self.sql(&format!(
            "SET password_encryption = 'scram-sha-256'; CREATE ROLE {user} LOGIN SUPERUSER REPLICATION PASSWORD '{}'",
            password.replace('\'', "''")
        ));
        let hba = self.dir.path().join("data").join("pg_hba.conf");
        let rules = format!(
            "host all {user} 127.0.0.1/32 scram-sha-256\nhost replication {user} 127.0.0.1/32 scram-sha-256\n{}",
            std::fs::read_to_string(&hba).unwrap()
        );
        std::fs::write(&hba, rules).unwrap();
        assert_eq!(self.sql("SELECT pg_reload_conf()"), ["t"]);
        let out = Command::new("psql")
            .args(["-h127.0.0.1", "-p", &self.port.to_string(), "-U", user, "-dpostgres", "-w", "-Atc", "SELECT 1"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{user} logged in without a password");
    }

    /// `confirmed_flush_lsn` of `slot`, as a number.
    pub fn confirmed(&self, slot: &str) -> Option<u64> {
        let rows = self
            .sql(&format!("SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = '{slot}'"));
        rows.first().and_then(|r| r.parse().ok())
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pipeline(pg: &Postgres, doris: &Doris, name: &str, source: &str) -> String {
    format!(
        "[pipeline]\nname = \"{name}\"\ncheckpoint_interval = \"300ms\"\n\n\
         [connections.pg]\ntype = \"postgres\"\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\n\n\
         [doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"postgres\"\nconnection = \"pg\"\ndatabase = \"postgres\"\nslot_name = \"{name}\"\n{source}\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\n",
        pg.port,
        doris.fenodes()
    )
}

/// Polls until `doris` answers `target` with what PostgreSQL answers `source` (60 s at most).
async fn converges(pg: &Postgres, doris: &Doris, source: &str, target: &str) -> Result<(), String> {
    crate::common::converges(|| pg.sql(source), doris, target, 60).await
}

/// Every type of the connector's map, NULLs, emoji and bytes that are not UTF-8 (base64 by
/// default), through the snapshot (rows 1, 3) and the
/// stream (rows 2, 4), then updates, a delete, a primary-key change, added / dropped / retyped
/// columns and a TRUNCATE: the Doris table equals the source's, column by column, each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_mirrors_every_type_then_follows_changes_and_columns() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    let columns = "id INT PRIMARY KEY, s SMALLINT, big BIGINT, n NUMERIC(38,10), free NUMERIC, r REAL, d DOUBLE PRECISION, \
         ts TIMESTAMP(3), tz TIMESTAMPTZ, day DATE, ok BOOLEAN, b1 BIT(1), b8 BIT(8), c CHAR(3), v VARCHAR(10), t TEXT, \
         tm TIME, iv INTERVAL, u UUID, by BYTEA, j JSON, jb JSONB, ints INT[], texts TEXT[], m mood, ip INET";
    let row = |id: i32| {
        format!(
            "({id}, -32768, 9223372036854775807, 1234567890123456789012345678.0123456789, 3.14159265358979, 1.5, 2.5e-3, \
             '2026-12-01 23:59:59.123', '2026-07-01 16:30:00.25+02', '2026-02-28', true, B'1', B'10100101', 'ab', 'naïve 😀', \
             'text ✓', '12:34:56', '1 day 02:03:04', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x6f6bff', '{{\"k\": [1, \"😀\"]}}', \
             '{{\"b\": 2, \"a\": 1}}', '{{1,NULL,3}}', '{{\"a b\",\"c,d\"}}', 'sad', '10.0.0.1')"
        )
    };
    let nulls = |id: i32| format!("({id}{})", ", NULL".repeat(25));
    pg.sql(&format!(
        "CREATE TYPE mood AS ENUM ('happy', 'sad'); CREATE TABLE all_types ({columns}); \
         INSERT INTO all_types VALUES {}, {}; CREATE TABLE skipped (id INT PRIMARY KEY)",
        row(1),
        nulls(3)
    ));
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = pipeline(&pg, &doris, "types", "include = \"all_types\"\nscan.startup.mode = \"initial\"")
        + "schema_change.truncate = true\n";
    let path = pipeline_file(dir.path(), &text);
    let mut run = Background::start(&path);
    // The source's values printed as Doris prints its columns.
    let source = "SELECT id, s, big, n, free, r, d, to_char(ts, 'YYYY-MM-DD HH24:MI:SS.US'), \
         to_char(tz AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), day, ok::int, b1::int, \
         b8, c, v, t, tm, iv, u, encode(by, 'base64'), j, jb, array_to_json(ints), array_to_json(texts), m, ip \
         FROM all_types ORDER BY id";
    let target = "SELECT id, s, big, n, free, r, d, ts, tz, day, CAST(ok AS INT), CAST(b1 AS INT), b8, c, v, t, tm, iv, u, \
         `by`, j, jb, ints, texts, m, ip FROM ods.all_types ORDER BY id";
    let show = |doris: &Doris| doris.sql(target).join("\n");
    if let Err(e) = converges(&pg, &doris, source, target).await {
        panic!("snapshot: {e}\n{}\n{}", run.log(), pg.log());
    }
    run.until(60, "the stream", |r| r.log().contains("following replication slot `types`")).await;
    pg.sql(&format!("INSERT INTO all_types VALUES {}, {}", row(2), nulls(4)));
    converges(&pg, &doris, source, target).await.unwrap_or_else(|e| panic!("stream: {e}\n{}", show(&doris)));
    assert_eq!(doris.sql(target).len(), 4);
    // `sluice verify` beside the running pipeline: every type compares equal as Doris keeps it.
    let (ok, out) = verify(&path, &[]).await;
    assert!(ok, "{out}");
    assert!(out.contains("public.all_types → ods.all_types: 4 rows compared, 4 equal, 0 differing"), "{out}");

    pg.sql("UPDATE all_types SET v = 'changed', t = NULL WHERE id = 1; DELETE FROM all_types WHERE id = 3; UPDATE all_types SET id = 30 WHERE id = 4");
    converges(&pg, &doris, source, target).await.unwrap();
    assert_eq!(doris.sql("SELECT id FROM ods.all_types ORDER BY id"), ["1", "2", "30"]);

    // A column added with a default: the rows from before it hold the default in Doris too.
    pg.sql(
        "ALTER TABLE all_types ADD COLUMN extra INT; ALTER TABLE all_types ADD COLUMN status TEXT DEFAULT 'new'; \
         ALTER TABLE all_types DROP COLUMN ip; INSERT INTO all_types (id, extra, status) VALUES (5, 55, 'paid')",
    );
    let (source, target) = (source.replace(", ip", ", extra, status"), target.replace(", ip", ", extra, status"));
    converges(&pg, &doris, &source, &target).await.unwrap_or_else(|e| panic!("columns: {e}\n{}", run.log()));
    pg.sql("ALTER TABLE all_types ALTER COLUMN s TYPE INT; UPDATE all_types SET s = 100000 WHERE id = 5");
    converges(&pg, &doris, &source, &target).await.unwrap_or_else(|e| panic!("retype: {e}\n{}", run.log()));
    // A rename keeps the column's values in Doris (the column keeps its number in pg_attribute).
    pg.sql("ALTER TABLE all_types RENAME COLUMN v TO label; UPDATE all_types SET big = 1 WHERE id = 5");
    let (source, target) = (source.replace(", v,", ", label,"), target.replace(", v,", ", label,"));
    converges(&pg, &doris, &source, &target).await.unwrap_or_else(|e| panic!("rename: {e}\n{}", run.log()));
    assert_eq!(doris.sql("SELECT label FROM ods.all_types WHERE id = 1"), ["changed"]);
    assert!(run.log().contains("rename column `v` to `label`"), "{}", run.log());

    pg.sql("TRUNCATE all_types; INSERT INTO all_types (id) VALUES (7)");
    converges(&pg, &doris, &source, &target).await.unwrap_or_else(|e| panic!("truncate: {e}\n{}", run.log()));
    assert!(doris.sql("SHOW TABLES FROM ods").iter().all(|t| t != "skipped"));
    let (ok, out) = verify(&path, &[]).await;
    assert!(ok && out.contains("1 rows compared, 1 equal"), "after the column changes: {out}");
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// `kill -9` five times while the snapshot is read and five times while the slot is followed
/// under a steady stream of inserts, updates, deletes and key changes: each Doris table ends
/// equal to its source (a table without a primary key, DUPLICATE in Doris, shows any row loaded
/// twice), and after every kill the slot's confirmed LSN is not past the LSN of
/// the last checkpoint (PostgreSQL still holds every change Doris may lack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_the_snapshot_and_the_stream_loses_and_repeats_nothing() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql(
        "CREATE TABLE items (id INT PRIMARY KEY, v INT, s VARCHAR(20)); \
         INSERT INTO items SELECT g, g % 97, 'item-' || g FROM generate_series(1, 600000) g; \
         CREATE TABLE notes (n INT, txt VARCHAR(20)); ALTER TABLE notes REPLICA IDENTITY FULL; \
         INSERT INTO notes SELECT g, 'note-' || g FROM generate_series(1, 20000) g; \
         CREATE TABLE tags (name TEXT, day DATE, n INT, PRIMARY KEY (name, day)); \
         INSERT INTO tags SELECT 'tag ''' || (g % 997) || ' ü', DATE '2020-01-01' + g / 997, g FROM generate_series(1, 60000) g; \
         CREATE TABLE events (id UUID PRIMARY KEY, n INT); \
         INSERT INTO events SELECT gen_random_uuid(), g FROM generate_series(1, 30000) g",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let source = "scan.startup.mode = \"initial\"\nchunk_size = 500\nchunk_key_column = \"notes:n\"";
    let text =
        pipeline(&pg, &doris, "crash", source).replace("checkpoint_interval", "parallelism = 2\ncheckpoint_interval");
    let path = pipeline_file(dir.path(), &text);
    let state = dir.path().join(".sluice").join("crash");
    let following = |run: &Background| run.log().contains("following replication slot");
    // The slot's confirmed LSN is not past the last checkpoint's.
    let check_slot = |when: &str| {
        let Some(confirmed) = pg.confirmed("crash") else { return };
        let st = sluice::state::StateDir::open(&state).unwrap();
        let lsn =
            st.checkpoint().unwrap().and_then(|cp| cp.sources["postgres"][0]["lsn"].as_str().map(str::to_string)).map(
                |l| {
                    let (hi, lo) = l.split_once('/').unwrap();
                    u64::from_str_radix(hi, 16).unwrap() << 32 | u64::from_str_radix(lo, 16).unwrap()
                },
            );
        if let Some(lsn) = lsn {
            assert!(confirmed <= lsn, "{when}: the slot confirmed {confirmed:x}, past the checkpoint's {lsn:x}");
        }
    };
    let (mut in_snapshot, mut in_stream) = (0, 0);
    let mut done = false;
    let doris_port = doris.h().query_addr().port();
    let landed_in = |table: &str| crate::common::rows_in(doris_port, &format!("ods.{table}"));
    let landed = || ["items", "notes", "tags", "events"].into_iter().map(&landed_in).sum::<usize>();
    // Each round is killed as soon as it has committed something new, so every kill lands inside
    // the snapshot with progress behind it, however fast the machine reads.
    while !done && in_snapshot < 8 {
        let before = landed();
        let run = Background::start(&path);
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while landed() == before && !following(&run) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        done = following(&run);
        run.kill_9();
        check_slot("in the snapshot");
        if !done {
            assert!(landed() > before, "round {} made no progress in 120 s", in_snapshot + 1);
            in_snapshot += 1;
        }
    }
    assert!(in_snapshot >= 5, "the snapshot was read before five kills ({in_snapshot})");
    // The rest of the snapshot, before the writes begin (a snapshot resumed after a crash reads
    // the rows as they are then, and replays the changes since the slot was made).
    let mut run = Background::start(&path);
    run.until(120, "the stream", following).await;
    run.kill_9();

    let port = pg.port;
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let on = writing.clone();
    let writer = std::thread::spawn(move || {
        let mut n = 1_000_000;
        while on.load(std::sync::atomic::Ordering::Relaxed) {
            let mut script = String::new();
            for _ in 0..20 {
                n += 1;
                script.push_str(&format!(
                    "INSERT INTO items VALUES ({n}, 1, 'new'); UPDATE items SET v = v + 1 WHERE id = {}; \
                     DELETE FROM items WHERE id = {}; UPDATE items SET id = {} WHERE id = {}; \
                     INSERT INTO notes VALUES ({n}, 'later'); ",
                    n % 600_000 + 1,
                    (n * 7) % 600_000 + 1,
                    n + 10_000_000,
                    (n * 13) % 600_000 + 1,
                ));
            }
            let out = Command::new("psql")
                .args([
                    "-h127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-Upostgres",
                    "-dpostgres",
                    "-q",
                    "-v",
                    "ON_ERROR_STOP=1",
                ])
                .args([
                    "-c",
                    &format!("BEGIN; {script} COMMIT;"),
                    "-c",
                    &format!("INSERT INTO notes VALUES ({n}, 'single')"),
                ])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let first = pg.confirmed("crash").unwrap_or(0);
    // Each round is killed once it has committed changes read from the stream (`notes` is only
    // inserted into, and keyless: a DUPLICATE table in Doris, where a change applied twice is a
    // row too many), with more changes in flight.
    for round in 1..=5 {
        let before = landed_in("notes");
        let mut run = Background::start(&path);
        run.until(60, "the stream", following).await;
        let committed = || landed_in("notes") > before;
        crate::common::wait_for(&format!("round {round}'s first committed changes"), committed).await;
        tokio::time::sleep(Duration::from_millis(fastrand::u64(..300))).await;
        run.kill_9();
        check_slot("in the stream");
        in_stream += 1;
    }
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(pg.confirmed("crash").unwrap() > first, "the slot was never confirmed past where the stream began");

    let run = Background::start(&path);
    let items = ("SELECT id, v, s FROM items ORDER BY id", "SELECT id, v, s FROM ods.items ORDER BY id");
    let notes = ("SELECT n, txt FROM notes ORDER BY n, txt", "SELECT n, txt FROM ods.notes ORDER BY n, txt");
    let tags = ("SELECT name, day, n FROM tags ORDER BY n", "SELECT name, day, n FROM ods.tags ORDER BY n");
    let events = ("SELECT id, n FROM events ORDER BY n", "SELECT id, n FROM ods.events ORDER BY n");
    for (source, target) in [items, notes, tags, events] {
        if let Err(e) = converges(&pg, &doris, source, target).await {
            panic!("after {in_snapshot} + {in_stream} kills: {}\n{}", &e[..e.len().min(2000)], run.log());
        }
    }
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert!(doris.open_txns().is_empty(), "{:?}", doris.open_txns());
}

/// What stops a pipeline before it reads: a server without `wal_level = logical`, a table
/// PostgreSQL would send no old key for, a slot of another plugin — each named with what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_logical_wal_or_a_table_without_identity_is_named() {
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let attempt = |text: String| {
        let path = pipeline_file(dir.path(), &text);
        async move {
            let file = sluice::pipeline::load_file(&path).unwrap();
            sluice::pipeline::prepare(&path, file).await.map(drop)
        }
    };
    let replica = tokio::task::spawn_blocking(|| Postgres::start_with("replica")).await.unwrap();
    replica.sql("CREATE TABLE t (id INT PRIMARY KEY)");
    let e =
        format!("{:#}", attempt(pipeline(&replica, &doris, "w", "scan.startup.mode = \"initial\"")).await.unwrap_err());
    assert!(e.contains("has wal_level = replica: reading changes needs wal_level = logical"), "{e}");
    // A snapshot needs no slot.
    attempt(pipeline(&replica, &doris, "w", "scan.startup.mode = \"snapshot\"")).await.unwrap();

    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql("CREATE TABLE keyless (a INT, b TEXT)");
    let e = format!("{:#}", attempt(pipeline(&pg, &doris, "k", "scan.startup.mode = \"initial\"")).await.unwrap_err());
    assert!(
        e.contains("table `public.keyless` has no primary key and REPLICA IDENTITY DEFAULT")
            && e.contains("ALTER TABLE \"public\".\"keyless\" REPLICA IDENTITY FULL"),
        "{e}"
    );
    pg.sql("ALTER TABLE keyless REPLICA IDENTITY FULL");
    pg.sql("SELECT pg_create_logical_replication_slot('other', 'test_decoding')");
    let text = pipeline(&pg, &doris, "other", "scan.startup.mode = \"initial\"");
    let path = pipeline_file(dir.path(), &text);
    let prepared = sluice::pipeline::prepare(&path, sluice::pipeline::load_file(&path).unwrap()).await.unwrap();
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let options = sluice::runtime::RunOptions { quiet: true, status_interval: None, ..Default::default() };
    let e = format!("{:#}", sluice::runtime::run(&prepared, &options, rx).await.unwrap_err());
    assert!(e.contains("replication slot `other` exists for plugin test_decoding"), "{e}");
}

/// `latest-offset`: no snapshot; the tables are created in Doris and only the changes made after
/// the slot was created arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_offset_reads_only_the_changes_from_now() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql("CREATE TABLE t (id INT PRIMARY KEY, note TEXT); INSERT INTO t VALUES (1, 'before'), (2, 'before')");
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let path = pipeline_file(dir.path(), &pipeline(&pg, &doris, "late", "scan.startup.mode = \"latest-offset\""));
    let mut run = Background::start(&path);
    run.until(60, "the stream", |r| r.log().contains("following replication slot `late`")).await;
    pg.sql("INSERT INTO t VALUES (3, 'after'); UPDATE t SET note = 'changed' WHERE id = 1");
    let source = "SELECT id, note FROM t WHERE note <> 'before' ORDER BY id";
    converges(&pg, &doris, source, "SELECT id, note FROM ods.t ORDER BY id").await.unwrap();
    assert_eq!(doris.sql("SELECT id, note FROM ods.t ORDER BY id"), ["1\tchanged", "3\tafter"]);
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// The seed's `postgres-sync-database` command, as written after `sluice` (host, port and Doris
/// addresses of this test; the server trusts the connection, so the given password is not
/// asked for): `tbl1` and `tbl2` are created in Doris with their rows, then a change made while
/// it runs follows; `other` is not included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sync_database_runs_the_connectors_command_as_written() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql(
        "CREATE TABLE tbl1 (id INT PRIMARY KEY, v VARCHAR(8)); CREATE TABLE tbl2 (k BIGINT PRIMARY KEY, at TIMESTAMPTZ); \
         CREATE TABLE other (id INT PRIMARY KEY); INSERT INTO tbl1 VALUES (1, 'a'), (2, 'b'); \
         INSERT INTO tbl2 VALUES (7, '2026-12-01 10:00:00+00')",
    );
    let doris = Doris::start().await;
    let dir = tempfile::tempdir().unwrap();
    let fe = doris.h().fe_http_addr().to_string();
    let jdbc = format!("jdbc-url=jdbc:mysql://127.0.0.1:{}", doris.h().query_addr().port());
    let port = format!("port={}", pg.port);
    let fenodes = format!("fenodes={fe}");
    let args = [
        "postgres-sync-database",
        "-Dexecution.checkpointing.interval=1s",
        "-Dparallelism.default=1",
        "--database",
        "db1",
        "--postgres-conf",
        "hostname=127.0.0.1",
        "--postgres-conf",
        &port,
        "--postgres-conf",
        "username=postgres",
        "--postgres-conf",
        "password=123456",
        "--postgres-conf",
        "database-name=postgres",
        "--postgres-conf",
        "schema-name=public",
        "--postgres-conf",
        "slot.name=test",
        "--postgres-conf",
        "decoding.plugin.name=pgoutput",
        "--including-tables",
        "tbl1|tbl2",
        "--sink-conf",
        &fenodes,
        "--sink-conf",
        "username=root",
        "--sink-conf",
        "password=",
        "--sink-conf",
        &jdbc,
        "--sink-conf",
        "sink.label-prefix=label",
        "--table-conf",
        "replication_num=1",
    ];
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("sync.log")).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(dir.path().join("sync.log")).unwrap_or_default();
    let source = "SELECT id, v FROM tbl1 ORDER BY id";
    let result = converges(&pg, &doris, source, "SELECT id, v FROM db1.tbl1 ORDER BY id").await;
    result.unwrap_or_else(|e| panic!("{e}\n{}", log()));
    let tbl2 = "SELECT k, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') FROM tbl2";
    converges(&pg, &doris, tbl2, "SELECT k, at FROM db1.tbl2").await.unwrap();
    pg.sql("INSERT INTO tbl1 VALUES (3, 'c'); DELETE FROM tbl1 WHERE id = 1");
    converges(&pg, &doris, source, "SELECT id, v FROM db1.tbl1 ORDER BY id").await.unwrap();
    assert!(doris.sql("SHOW TABLES FROM db1").iter().all(|t| t != "other"), "--including-tables");
    assert_eq!(pg.sql("SELECT slot_name, plugin FROM pg_replication_slots"), ["test\tpgoutput"]);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A table created while the slot is followed joins the publication and is read (the rows from
/// before it joined are not in the stream), then followed; a table the patterns cover only after
/// a restart with a wider `include` is read before the stream goes on. Each ends equal to its
/// source, every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_created_while_following_or_newly_matched_are_read_then_followed() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql(
        "CREATE TABLE users (id INT PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'ann'); \
         CREATE TABLE later (id INT PRIMARY KEY, v INT); INSERT INTO later VALUES (1, 10), (2, 20)",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = |include: &str| {
        pipeline(
            &pg,
            &doris,
            "joining",
            &format!("include = \"{include}\"\nscan.startup.mode = \"initial\"\nchunk_size = 2"),
        )
        .replace("checkpoint_interval = \"300ms\"\n", "checkpoint_interval = \"300ms\"\nparallelism = 2\n")
    };
    let path = pipeline_file(dir.path(), &text("users|fresh"));
    let mut run = Background::start(&path);
    run.until(60, "the stream", |r| r.log().contains("following replication slot `joining`")).await;
    pg.sql(
        "CREATE TABLE fresh (id INT PRIMARY KEY, v TEXT); INSERT INTO fresh SELECT g, 'r' || g FROM generate_series(1, 9) g; \
         INSERT INTO fresh VALUES (10, 'after'); UPDATE fresh SET v = 'changed' WHERE id = 3; DELETE FROM fresh WHERE id = 4",
    );
    let table = |t: &str| (format!("SELECT * FROM {t} ORDER BY id"), format!("SELECT * FROM ods.{t} ORDER BY id"));
    let (source, target) = table("fresh");
    converges(&pg, &doris, &source, &target).await.unwrap_or_else(|e| panic!("{e}\n{}", run.log()));
    assert!(run.log().contains("`public.fresh` is new to the sync: restarting to read its rows"), "{}", run.log());
    pg.sql("INSERT INTO fresh VALUES (11, 'streamed'); UPDATE fresh SET v = 'again' WHERE id = 1; INSERT INTO users VALUES (2, 'bob')");
    for t in ["fresh", "users"] {
        let (source, target) = table(t);
        converges(&pg, &doris, &source, &target).await.unwrap_or_else(|e| panic!("{t}: {e}\n{}", run.log()));
    }
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");

    pg.sql("INSERT INTO later VALUES (3, 30)");
    let path = pipeline_file(dir.path(), &text("users|fresh|later"));
    let run = Background::start(&path);
    pg.sql("UPDATE later SET v = 11 WHERE id = 1; INSERT INTO later VALUES (4, 40); INSERT INTO fresh VALUES (12, 'later')");
    for t in ["later", "fresh", "users"] {
        let (source, target) = table(t);
        converges(&pg, &doris, &source, &target).await.unwrap_or_else(|e| panic!("{t}: {e}\n{}", run.log()));
    }
    let (ok, out) = verify(&path, &[]).await;
    assert!(ok && out.contains("public.later → ods.later: 4 rows compared, 4 equal"), "{out}");
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// A sync whose slot went away while it was down, or resumed against another PostgreSQL server,
/// stops and says so (a new slot would start from now, and the changes in between would be lost
/// without a word), naming the slot, the servers and how to start over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_slot_or_another_server_stops_the_resumed_sync_naming_them() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 1)");
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let path = pipeline_file(dir.path(), &pipeline(&pg, &doris, "moved", "scan.startup.mode = \"initial\""));
    let mut run = Background::start(&path);
    run.until(60, "the stream", |r| r.log().contains("following replication slot `moved`")).await;
    pg.sql("INSERT INTO t VALUES (2, 2)");
    converges(&pg, &doris, "SELECT * FROM t ORDER BY id", "SELECT * FROM ods.t ORDER BY id").await.unwrap();
    let (code, log) = run.stop().await;
    assert_eq!(code, Some(0), "{log}");

    let fails = |path: std::path::PathBuf| async move {
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_sluice")).arg("run").arg(&path).output().unwrap()
        })
        .await
        .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Another server: its own system identifier.
    let other = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    other.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT)");
    let moved = pipeline_file(dir.path(), &pipeline(&other, &doris, "moved", "scan.startup.mode = \"initial\""));
    let e = fails(moved).await;
    let system = |pg: &Postgres| pg.sql("SELECT system_identifier FROM pg_control_system()")[0].clone();
    assert!(e.contains("read through replication slot `moved` of another PostgreSQL server"), "{e}");
    assert!(e.contains(&format!("system {}", system(&pg))) && e.contains(&format!("system {}", system(&other))), "{e}");
    assert!(e.contains("start over with `scan.startup.mode = \"initial\"` and a new `pipeline.state_dir`"), "{e}");

    // The same server, its slot dropped while the sync was down.
    pg.sql("INSERT INTO t VALUES (3, 3); SELECT pg_drop_replication_slot('moved')");
    let path = pipeline_file(dir.path(), &pipeline(&pg, &doris, "moved", "scan.startup.mode = \"initial\""));
    let e = fails(path).await;
    assert!(e.contains("replication slot `moved` is gone from"), "{e}");
    assert!(e.contains("start over with `scan.startup.mode = \"initial\"` and a new `pipeline.state_dir`"), "{e}");
    assert!(pg.sql("SELECT slot_name FROM pg_replication_slots").is_empty(), "no slot is made in its place");
}

/// A column dropped under the snapshot before its table's turn: the reader stops, naming the
/// table and what to do, and a restart is not tried (it would read the table in a newer shape
/// than the stream replays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_dropped_before_its_tables_snapshot_stops_the_reader_naming_it() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql(
        "CREATE TABLE a (id INT PRIMARY KEY, v INT); INSERT INTO a VALUES (1, 1), (2, 2); \
         CREATE TABLE b (id INT PRIMARY KEY, gone INT, v INT); INSERT INTO b VALUES (1, 1, 1)",
    );
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"under\"\n\n[connections.pg]\ntype = \"postgres\"\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\n\n\
         [[source]]\ntype = \"postgres\"\nconnection = \"pg\"\ndatabase = \"postgres\"\nslot_name = \"under\"\nscan.startup.mode = \"snapshot\"\n\n\
         [[sink]]\ntype = \"blackhole\"\n",
        pg.port
    );
    let crate::common::FirstReader { splits: _splits, mut reader, .. } =
        crate::common::first_reader(dir.path(), &text).await;
    // Table a's schema, then its rows: the snapshot transaction has read a, not b.
    let mut tables = Vec::new();
    while !tables.iter().any(|t: &String| t == "public.a") {
        if let Some(sluice::runtime::Event::Data { table, .. }) = reader.next().await.unwrap() {
            tables.push(table.to_string());
        }
    }
    pg.sql("ALTER TABLE b DROP COLUMN gone");
    let e = loop {
        match reader.next().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the snapshot ended without table b"),
            Err(e) => break e,
        }
    };
    let text = format!("{e:#}");
    assert!(text.starts_with("reading `public.b`: "), "{text}");
    assert!(text.contains("a column of the table was dropped or renamed while the snapshot was read"), "{text}");
    assert!(!sluice::runtime::is_restartable(&e), "{text}");
}

/// How far a PostgreSQL source is: each table's snapshot, then the lag behind the slot's WAL —
/// the age of the last transaction read while the server's WAL goes on past it, 0 (and 0 bytes)
/// once its messages say the WAL ends there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshots_progress_and_the_lag_behind_the_wal_are_shown() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 1), (2, 2), (3, 3); ANALYZE t");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"progress\"\n\n[connections.pg]\ntype = \"postgres\"\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\n\n\
         [[source]]\nname = \"pg_db\"\ntype = \"postgres\"\nconnection = \"pg\"\ndatabase = \"postgres\"\nslot_name = \"progress\"\nchunk_size = 2\n\n\
         [[sink]]\ntype = \"blackhole\"\n",
        pg.port
    );
    let crate::common::FirstReader { prepared, splits: _splits, mut reader } =
        crate::common::first_reader(dir.path(), &text).await;
    crate::common::read_rows_of(&mut reader, 3).await;
    let source = || prepared.stats.sources().into_iter().next().expect("the source's progress");
    let t = source()["tables"]["public.t"].clone();
    assert_eq!(
        (&t["rows_read"], &t["chunks"], &t["chunks_read"], &t["rows_estimated"]),
        (&json!(3), &json!(2), &json!(2), &json!(3)),
        "{t}"
    );
    assert_eq!(source()["source"], "pg_db");
    pg.sql("INSERT INTO t VALUES (4, 4)");
    crate::common::read_rows_of(&mut reader, 1).await;
    // Read to the end of the WAL the server sent: no lag, in time or in bytes.
    let s = source();
    assert!(s["lag_seconds"].as_f64().is_some_and(|l| l < 30.0) && s["lag_bytes"].as_u64().is_some(), "{s}");
}

/// `sluice verify` of a table whose every column PostgreSQL writes as Sluice writes its Doris
/// value: the server sums each range's rows' `hashtext` and Sluice those of Doris' rows, so equal
/// ranges are not read from the source row by row (edges: text with `|` and 4-byte UTF-8, NULLs,
/// negative numerics, UUIDs, dates, TIMESTAMP and TIMESTAMPTZ). A row missing from Doris makes its
/// range's fingerprint differ: that range's rows are compared, and the row named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_agrees_by_fingerprint_and_compares_the_rows_of_a_range_that_differs() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql(
        "CREATE TABLE t (id BIGINT PRIMARY KEY, s SMALLINT, n INT NOT NULL, v VARCHAR(20), txt TEXT, \
         amount NUMERIC(12,2), u UUID, day DATE, ts TIMESTAMP(3), tz TIMESTAMPTZ); \
         INSERT INTO t SELECT g, (g % 30000)::smallint, -g, 'a|' || g || ' 😀', CASE WHEN g % 3 = 0 THEN NULL ELSE repeat('x', g % 50) END, \
         g / 100.0 - 10, md5(g::text)::uuid, DATE '2024-02-29' + (g % 9000), TIMESTAMP '1999-12-31 23:59:59.5' + g * INTERVAL '1001 us', \
         CASE WHEN g % 5 = 0 THEN NULL ELSE to_timestamp(1700000000 + g) END FROM generate_series(1, 120000) g",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nname = \"summed\"\n\n[connections.pg]\ntype = \"postgres\"\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\n\n\
         [doris]\nfenodes = {}\n\n\
         [[source]]\ntype = \"postgres\"\nconnection = \"pg\"\ndatabase = \"postgres\"\nslot_name = \"summed\"\nscan.startup.mode = \"snapshot\"\n\n\
         [[sink]]\ntype = \"doris\"\ndatabase = \"ods\"\n",
        pg.port,
        doris.fenodes()
    );
    let path = pipeline_file(dir.path(), &text);
    crate::common::run_file(&path).await.unwrap();
    let report = crate::common::verify_json(&path, &[]).await;
    assert_eq!(report.counts(), (120_000, 120_000, 120_000, 0), "{report:?}");

    doris.sql("DELETE FROM ods.t WHERE id = 110000");
    let report = crate::common::verify_json(&path, &["--recheck-after", "0s"]).await;
    // Ranges of 50,000 keys: the two others agree by fingerprint, the one that lost a row row by row.
    assert_eq!(report.counts(), (120_000, 119_999, 100_000, 0), "{report:?}");
    assert_eq!((report.0["missing"].as_u64(), &report.0["samples"][0]["key"]), (Some(1), &json!("id=110000")));
}

/// `sluice verify` of tables keyed by a UUID, and by a date and a number: each is compared in
/// ranges between values read from PostgreSQL's index (UUIDs sort alike in PostgreSQL and, as
/// lowercase text, in Doris), so a lost row costs one range read row by row, not the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_cuts_tables_keyed_by_uuids_or_dates_into_ranges_of_their_values() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    pg.sql(
        "CREATE TABLE by_uuid (id UUID PRIMARY KEY, n INT NOT NULL, v TEXT); \
         INSERT INTO by_uuid SELECT md5(g::text)::uuid, g, 'v' || g FROM generate_series(1, 120000) g; \
         CREATE TABLE by_day (day DATE, n INT, v TEXT, PRIMARY KEY (day, n)); \
         INSERT INTO by_day SELECT DATE '2024-01-01' + g / 1000, g, 'd' || g FROM generate_series(1, 130000) g",
    );
    let doris = Doris::start().await;
    doris.sql("CREATE DATABASE ods");
    let dir = tempfile::tempdir().unwrap();
    let text = pipeline(&pg, &doris, "cuts", "scan.startup.mode = \"snapshot\"");
    let path = pipeline_file(dir.path(), &text);
    crate::common::run_file(&path).await.unwrap();
    let reports = crate::common::verify_tables(&path, &[]).await;
    assert_eq!(reports["public.by_uuid"].counts(), (120_000, 120_000, 120_000, 0), "{reports:?}");
    assert_eq!(reports["public.by_day"].counts(), (130_000, 130_000, 130_000, 0), "{reports:?}");

    let lost = pg.sql("SELECT id FROM by_uuid WHERE n = 77777")[0].clone();
    doris.sql(&format!("DELETE FROM ods.by_uuid WHERE id = '{lost}'"));
    doris.sql("UPDATE ods.by_day SET v = 'drift' WHERE day = '2024-03-01' AND n = 60500");
    let reports = crate::common::verify_tables(&path, &["--recheck-after", "0s"]).await;
    let (uuid, day) = (&reports["public.by_uuid"], &reports["public.by_day"]);
    // Ranges of 50,000 rows: the others agree by fingerprint, the one that lost a row row by row.
    let (compared, equal, summed, differing) = uuid.counts();
    assert_eq!((compared, equal, differing), (120_000, 119_999, 0), "{uuid:?}");
    assert!(summed == 70_000 || summed == 100_000, "one range of 20,000 or 50,000 rows compared row by row: {uuid:?}");
    assert_eq!(&uuid.0["samples"][0]["key"], &json!(format!("id={lost}")), "{uuid:?}");
    let (compared, equal, summed, differing) = day.counts();
    assert_eq!((compared, equal, differing), (130_000, 129_999, 1), "{day:?}");
    assert!((70_000..129_999).contains(&summed), "the other ranges agree by fingerprint: {day:?}");
}
