//! The mysql CLI against the query port: quick-start DDL from the seed, DML, SHOW, errors.

use crate::common::{STUDENT_DDL, STUDENT_TRANS_DDL, Server};

#[test]
fn quick_start_with_the_mysql_cli() {
    let s = Server::start();
    let out = s.mysql_raw(&[], "select @@version_comment limit 1");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Doris version"), "{out:?}");
    s.sql("CREATE DATABASE test");
    s.sql(STUDENT_DDL);
    s.sql(STUDENT_TRANS_DDL);
    s.sql("INSERT INTO test.student values(1, \"James\", 18);");
    s.sql("INSERT INTO test.student values(2, \"Emily\", 28);");
    assert_eq!(
        s.sql("select * from test.student order by id"),
        vec![vec!["1", "James", "18"], vec!["2", "Emily", "28"]]
    );
    // What the Flink job of the quick start does, expressed in SQL.
    s.sql("INSERT INTO test.student_trans SELECT id, concat('prefix_', name), age + 1 FROM test.student");
    assert_eq!(
        s.sql("select * from test.student_trans order by id"),
        vec![vec!["1", "prefix_James", "19"], vec!["2", "prefix_Emily", "29"]]
    );
    let out = s.mysql_raw(&["-N", "-B", "-r"], "SHOW CREATE TABLE test.student");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.starts_with("student\tCREATE TABLE `student` (\n  `id` int NULL,\n  `name` varchar(256) NULL,\n  `age` int NULL\n) ENGINE=OLAP\nUNIQUE KEY(`id`)\n"), "{text}");
    assert!(text.contains("DISTRIBUTED BY HASH(`id`) BUCKETS 1\nPROPERTIES (\n\"replication_allocation\" = \"tag.location.default: 3\""), "{text}");
    assert_eq!(
        s.sql("SELECT COLUMN_NAME,DATA_TYPE,COLUMN_SIZE,DECIMAL_DIGITS FROM `information_schema`.`COLUMNS` WHERE `TABLE_SCHEMA`='test' AND `TABLE_NAME`='student'"),
        vec![vec!["id", "int", "10", "0"], vec!["name", "varchar", "256", "NULL"], vec!["age", "int", "10", "0"]]
    );
    assert_eq!(s.sql("SHOW TABLES FROM test"), vec![vec!["student"], vec!["student_trans"]]);
    assert_eq!(
        s.sql("USE test; DESC student"),
        vec![
            vec!["id", "INT", "Yes", "true", "NULL", ""],
            vec!["name", "VARCHAR(256)", "Yes", "false", "NULL", "REPLACE"],
            vec!["age", "INT", "Yes", "false", "NULL", "REPLACE"],
        ]
    );
    assert_eq!(s.sql("SHOW FULL COLUMNS FROM `test`.`student`").len(), 3);
    assert_eq!(
        s.sql("SELECT SCHEMA_NAME FROM INFORMATION_SCHEMA.SCHEMATA WHERE SCHEMA_NAME='test'"),
        vec![vec!["test"]]
    );
    // UNIQUE upsert through SQL, then DELETE.
    s.sql("INSERT INTO test.student WITH LABEL ins_1 VALUES (1, 'Jim', 19)");
    assert_eq!(s.sql("SELECT name, age FROM test.student WHERE id = 1"), vec![vec!["Jim", "19"]]);
    let err = s.sql_err("INSERT INTO test.student WITH LABEL ins_1 VALUES (3, 'x', 1)");
    assert!(err.contains("Label [ins_1] has already been used, relate to txn ["), "{err}");
    s.sql("DELETE FROM test.student WHERE age > 20");
    assert_eq!(s.sql("SELECT id FROM test.student"), vec![vec!["1"]]);
}

#[test]
fn auto_increment_fills_missing_ids() {
    let s = Server::start();
    s.sql("CREATE DATABASE d");
    s.sql("CREATE TABLE d.t (id BIGINT NOT NULL AUTO_INCREMENT, v VARCHAR(8)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2");
    s.sql("INSERT INTO d.t (v) VALUES ('a'), ('b')");
    s.sql("INSERT INTO d.t (v) VALUES ('c')");
    assert_eq!(s.sql("SELECT id, v FROM d.t ORDER BY id"), vec![vec!["1", "a"], vec!["2", "b"], vec!["3", "c"]]);
}

#[test]
fn insert_ok_info_string() {
    let s = Server::start();
    s.sql("CREATE DATABASE d");
    s.sql("CREATE TABLE d.t (k INT, v STRING) DUPLICATE KEY(k) DISTRIBUTED BY RANDOM BUCKETS AUTO");
    let out = s.mysql_raw(&["-vvv"], "INSERT INTO d.t WITH LABEL my_label VALUES (1, 'a'), (2, 'b')");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Query OK, 2 rows affected"), "{text}");
    assert!(text.contains("{'label':'my_label', 'status':'VISIBLE', 'txnId':'"), "{text}");
}

#[test]
fn errors_have_doris_codes_and_texts() {
    let s = Server::start();
    s.sql("CREATE DATABASE d");
    s.sql("CREATE TABLE d.t (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1");
    let cases = [
        ("SELEC 1", "ERROR 1064 (42000)"),
        (
            "SELECT * FROM d.nope",
            "ERROR 1146 (42S02) at line 1: errCode = 2, detailMessage = Table [nope] does not exist in database [d].",
        ),
        ("USE nodb", "ERROR 1049 (42000) at line 1: errCode = 2, detailMessage = Unknown database 'nodb'"),
        (
            "CREATE TABLE d.t (k INT) DUPLICATE KEY(k)",
            "ERROR 1050 (42S01) at line 1: errCode = 2, detailMessage = Table 't' already exists",
        ),
        (
            "SELECT nope FROM d.t",
            "ERROR 1054 (42S22) at line 1: errCode = 2, detailMessage = Unknown column 'nope' in 'table list'",
        ),
        (
            "CREATE DATABASE d",
            "ERROR 1007 (HY000) at line 1: errCode = 2, detailMessage = Can't create database 'd'; database exists",
        ),
        (
            "CREATE TABLE d.x (k INT, v INT SUM) DUPLICATE KEY(k)",
            "ERROR 1105 (HY000) at line 1: errCode = 2, detailMessage = Key column v can not set aggregation type",
        ),
        (
            "INSERT INTO d.t VALUES (1)",
            "ERROR 1105 (HY000) at line 1: errCode = 2, detailMessage = Column count doesn't match value count",
        ),
    ];
    for (sql, want) in cases {
        let err = s.sql_err(sql);
        assert!(err.starts_with(want), "{sql}: got {err}");
    }
    // The server keeps serving after every error.
    assert_eq!(s.sql("SELECT count(*) FROM d.t"), vec![vec!["0"]]);
    // Wrong password is rejected.
    let port = s.query_port().to_string();
    let out = std::process::Command::new("mysql")
        .args(["-h127.0.0.1", "-P", &port, "-uroot", "-pwrong", "-e", "select 1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn alter_table_and_queries() {
    let s = Server::start();
    s.sql("CREATE DATABASE d");
    s.sql("CREATE TABLE d.t (k INT, v INT, name VARCHAR(10)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4");
    s.sql("INSERT INTO d.t VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c')");
    s.sql("ALTER TABLE d.t ADD COLUMN (x INT DEFAULT \"5\", y VARCHAR(3)) AFTER v");
    s.sql("ALTER TABLE d.t DROP COLUMN name");
    s.sql("ALTER TABLE d.t RENAME COLUMN y z");
    s.sql("ALTER TABLE d.t MODIFY COLUMN v BIGINT COMMENT 'value'");
    assert_eq!(
        s.sql("SELECT * FROM d.t ORDER BY k"),
        vec![vec!["1", "10", "5", "NULL"], vec!["2", "20", "5", "NULL"], vec!["3", "30", "5", "NULL"]]
    );
    assert_eq!(
        s.sql("SELECT k % 2 AS g, sum(v), count(*) FROM d.t WHERE k IN (1, 2, 3) AND (v > 5 OR k = 0) GROUP BY k % 2 ORDER BY g"),
        vec![vec!["0", "20", "1"], vec!["1", "40", "2"]]
    );
    s.sql("CREATE TABLE d.u LIKE d.t");
    s.sql("INSERT INTO d.u SELECT * FROM d.t WHERE k < 3");
    assert_eq!(s.sql("SELECT a.k FROM d.t a JOIN d.u b ON a.k = b.k ORDER BY a.k"), vec![vec!["1"], vec!["2"]]);
    s.sql("TRUNCATE TABLE d.u");
    assert_eq!(s.sql("SELECT count(*) FROM d.u"), vec![vec!["0"]]);
    s.sql("ALTER TABLE d.u RENAME u2");
    s.sql("DROP TABLE d.u2");
    assert_eq!(s.sql("SHOW TABLES FROM d"), vec![vec!["t"]]);
    assert_eq!(s.sql("SHOW VARIABLES LIKE 'version_comment'")[0][0], "version_comment");
    // Of the four changes only MODIFY INT → BIGINT rewrites data: one (finished) schema-change job.
    let jobs = s.sql("SHOW ALTER TABLE COLUMN FROM d");
    assert_eq!(jobs.iter().map(|j| (j[1].as_str(), j[9].as_str())).collect::<Vec<_>>(), [("t", "FINISHED")]);
    assert_eq!(s.sql("SHOW TABLETS FROM d.t").len(), 4);
    assert_eq!(s.sql("SHOW PARTITIONS FROM d.t")[0][6], "k");
    assert_eq!(s.sql("SELECT @@max_allowed_packet,@@wait_timeout,@@socket"), vec![vec!["67108864", "28800", "NULL"]]);
    s.sql("DROP DATABASE d");
    assert_eq!(s.sql("SHOW DATABASES"), vec![vec!["information_schema"]]);
}

#[test]
fn insert_partial_update_and_hidden_delete_sign() {
    let s = Server::start();
    s.sql("CREATE DATABASE d");
    s.sql("CREATE TABLE d.u (k INT, a INT, b VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2");
    s.sql("INSERT INTO d.u VALUES (1, 10, 'x'), (2, 20, 'y')");
    s.sql("SET enable_unique_key_partial_update = true; INSERT INTO d.u (k, a) VALUES (1, 11)");
    assert_eq!(s.sql("SELECT k, a, b FROM d.u ORDER BY k"), vec![vec!["1", "11", "x"], vec!["2", "20", "y"]]);
    s.sql("INSERT INTO d.u (k, a, b, __DORIS_DELETE_SIGN__) VALUES (2, 0, '', 1)");
    assert_eq!(s.sql("SELECT k FROM d.u"), vec![vec!["1"]]);
    assert_eq!(
        s.sql("SET show_hidden_columns = true; DESC d.u").iter().map(|r| r[0].clone()).collect::<Vec<_>>(),
        vec!["k", "a", "b", "__DORIS_DELETE_SIGN__", "__DORIS_VERSION_COL__"]
    );
}

/// Key lookups (`k = v`, `k IN (…)`, every column of a composite key bound) are answered from the
/// key index; each answers exactly what the same filter over a full scan answers, including
/// deleted keys, keys that do not exist, literals of another type, and extra conditions.
#[test]
fn key_lookups_answer_what_a_full_scan_answers() {
    let s = Server::start();
    s.sql("CREATE DATABASE d");
    s.sql("CREATE TABLE d.u (k BIGINT, v VARCHAR(20), n INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4");
    s.sql("CREATE TABLE d.c (a VARCHAR(8), b INT, v INT) UNIQUE KEY(a, b) DISTRIBUTED BY HASH(a) BUCKETS 3");
    s.sql("CREATE TABLE d.g (k INT, total BIGINT SUM) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2");
    let rows: Vec<String> = (0..200).map(|i| format!("({}, 'v{i}', {})", i * 10, i % 7)).collect();
    s.sql(&format!("INSERT INTO d.u VALUES {}", rows.join(",")));
    s.sql("INSERT INTO d.u VALUES (20, 'changed', 99)");
    s.sql("DELETE FROM d.u WHERE k = 30");
    let rows: Vec<String> = (0..60).map(|i| format!("('a{}', {}, {i})", i % 6, i / 6)).collect();
    s.sql(&format!("INSERT INTO d.c VALUES {}", rows.join(",")));
    s.sql("INSERT INTO d.g VALUES (1, 5), (2, 7), (1, 10)");
    let cases = [
        ("d.u", "k = 20", "k + 0 = 20"),
        ("d.u", "k = 30", "k + 0 = 30"),
        ("d.u", "k IN (0, 10, 30, 35, 1990, 5000)", "k + 0 IN (0, 10, 30, 35, 1990, 5000)"),
        ("d.u", "k IN (10, 20, 40) AND n = 3", "k + 0 IN (10, 20, 40) AND n = 3"),
        ("d.u", "k = '40'", "k + 0 = 40"),
        ("d.u", "20 = k", "k + 0 = 20"),
        ("d.u", "k IN (10, 20) AND k = 20", "k + 0 = 20"),
        ("d.c", "a = 'a1' AND b IN (0, 3, 9, 12)", "concat(a, '') = 'a1' AND b IN (0, 3, 9, 12)"),
        ("d.c", "a IN ('a0', 'a5', 'zz') AND b = 2", "concat(a, '') IN ('a0', 'a5', 'zz') AND b = 2"),
        ("d.c", "a = 'a2'", "concat(a, '') = 'a2'"),
        ("d.g", "k IN (1, 2, 3)", "k + 0 IN (1, 2, 3)"),
    ];
    for (table, lookup, scan) in cases {
        let q = |w: &str| s.sql(&format!("SELECT * FROM {table} WHERE {w} ORDER BY 1, 2"));
        let (got, want) = (q(lookup), q(scan));
        assert_eq!(got, want, "{table} WHERE {lookup}");
    }
    assert_eq!(s.sql("SELECT v, n FROM d.u WHERE k = 20"), vec![vec!["changed", "99"]]);
    assert_eq!(s.sql("SELECT count(*) FROM d.u WHERE k IN (0, 10, 30, 35)"), vec![vec!["2"]]);
    assert_eq!(s.sql("SELECT total FROM d.g WHERE k = 1"), vec![vec!["15"]]);
}
