//! Statements run end to end through an [`Executor`] over an in-memory engine: queries, SHOW,
//! views, INSERT, UPDATE and DELETE (with fuzzed statements), statement splitting.

use super::*;
use crate::engine::EngineConfig;

async fn run(ex: &Executor, s: &mut Session, sql: &str) -> Outcome {
    match ex.execute(s, sql).await {
        Ok(o) => o,
        Err(e) => panic!("{sql}: {e:?}"),
    }
}

fn rows(o: Outcome) -> Vec<Vec<Option<String>>> {
    match o {
        Outcome::Rows(r) => r.rows,
        other => panic!("expected rows, got {other:?}"),
    }
}

#[tokio::test]
async fn insert_select_delete() {
    let (ex, mut s) = test_db().await;
    run(
        &ex,
        &mut s,
        "CREATE TABLE d (k INT, v VARCHAR(20), dt DATETIME) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3",
    )
    .await;
    let o = run(
        &ex,
        &mut s,
        "INSERT INTO d WITH LABEL l1 VALUES (1, \"a\", '2024-01-01 10:00:00'), (2, 'b', NULL), (3, 'c', NULL)",
    )
    .await;
    match o {
        Outcome::Done { affected, info } => {
            assert_eq!(affected, 3);
            assert!(info.starts_with("{'label':'l1', 'status':'VISIBLE', 'txnId':'"), "{info}");
        }
        _ => panic!(),
    }
    let r = rows(run(&ex, &mut s, "SELECT k, v, dt FROM d ORDER BY k").await);
    assert_eq!(r[0], vec![Some("1".into()), Some("a".into()), Some("2024-01-01 10:00:00".into())]);
    run(&ex, &mut s, "DELETE FROM d WHERE k IN (1, 3)").await;
    let r = rows(run(&ex, &mut s, "SELECT count(*) FROM d").await);
    assert_eq!(r[0][0].as_deref(), Some("1"));
    // An alias, or the table's name, qualifies the columns; a statement not understood is an
    // error that changes nothing.
    run(&ex, &mut s, "INSERT INTO d VALUES (1, 'a', NULL), (3, 'c', NULL), (999, 'z', NULL)").await;
    run(&ex, &mut s, "DELETE FROM test.d x WHERE x.k = 999").await;
    assert_eq!(
        rows(run(&ex, &mut s, "SELECT k FROM d ORDER BY k").await),
        [[Some("1".into())], [Some("2".into())], [Some("3".into())]]
    );
    run(&ex, &mut s, "DELETE FROM d AS y WHERE y.k = 3").await;
    run(&ex, &mut s, "DELETE FROM d WHERE d.k = 1").await;
    for bad in [
        "DELETE FROM d x y WHERE k = 1",
        "DELETE FROM d FROM WHERE k = 1",
        "DELETE FROM d LIMIT WHERE k = 1",
        "DELETE FROM d x WHERE",
        "DELETE FROM d WHERE",
        "DELETE FROM d LIMIT 1",
        "DELETE FROM d USING e WHERE d.k = e.k",
        "DELETE FROM d x WHERE z.k = 1",
    ] {
        assert!(ex.execute(&mut s, bad).await.is_err(), "{bad}");
    }
    assert_eq!(rows(run(&ex, &mut s, "SELECT k FROM d ORDER BY k").await), [[Some("2".into())]]);
    let e = ex.execute(&mut s, "SELECT * FROM nope").await.unwrap_err();
    assert_eq!(e.code, 1146);
    let e = ex.execute(&mut s, "SELECT nope FROM d").await.unwrap_err();
    assert_eq!(e.code, 1054);
    let e = ex.execute(&mut s, "SELEC 1").await.unwrap_err();
    assert_eq!(e.code, 1064);
    let e = ex.execute(&mut s, "USE nodb").await.unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (1049, "Unknown database 'nodb'"));
    let r = rows(run(&ex, &mut s, "SELECT FROM_UNIXTIME(1700000000000 / 1000, '%Y-%m-%d %H:%i:%s'), if(k > 1, 'big', 'small'), if(k > 1, k, 0) FROM d").await);
    assert_eq!(r[0], vec![Some("2023-11-14 22:13:20".into()), Some("big".into()), Some("2".into())]);
    let r = rows(run(&ex, &mut s, "SHOW CATALOGS").await);
    assert_eq!(r[0][1].as_deref(), Some("internal"));
    // MySQL's date_format specifiers.
    let r = rows(run(&ex, &mut s, "SELECT date_format('2024-03-05 14:07:09', '%Y-%m-%d %H:%i:%s %M %b %W %a %j %h %p %D %e %c'), date_format(CAST('2024-12-31' AS DATE), '%d/%m/%y')").await);
    assert_eq!(
        r[0],
        vec![Some("2024-03-05 14:07:09 March Mar Tuesday Tue 065 02 PM 5th 5 3".into()), Some("31/12/24".into())]
    );
    // Labels as Doris gives them.
    match run(&ex, &mut s, "SELECT 1, 'a', count(*), k + 1 AS next FROM d GROUP BY k").await {
        Outcome::Rows(r) => {
            let names: Vec<&str> = r.columns.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["1", "a", "count(*)", "next"]);
        }
        other => panic!("{other:?}"),
    }
    let r = rows(run(&ex, &mut s, "select @@version_comment limit 1").await);
    assert!(r[0][0].as_deref().unwrap().contains("Doris"));
    let r = rows(run(&ex, &mut s, "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_SIZE, DECIMAL_DIGITS FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'test' AND TABLE_NAME = 'd'").await);
    assert_eq!(r[1], vec![Some("v".into()), Some("varchar".into()), Some("20".into()), None]);
}

fn executor() -> Executor {
    Executor {
        engine: Arc::new(Engine::new(EngineConfig::default(), None).unwrap()),
        info: Arc::new(ServerInfo::default()),
    }
}

async fn all_rows(ex: &Executor, s: &mut Session, t: &str) -> Vec<Vec<Option<String>>> {
    rows(run(ex, s, &format!("SELECT * FROM {t} ORDER BY 1")).await)
}

fn some(v: &[&str]) -> Vec<Option<String>> {
    v.iter().map(|x| if *x == "NULL" { None } else { Some(x.to_string()) }).collect()
}

#[test]
fn statements_split_at_semicolons_outside_quotes_and_comments() {
    assert_eq!(
        split_statements("SELECT 1; SELECT 'a;b' ;\n-- c;\nSELECT `x;`"),
        vec!["SELECT 1", " SELECT 'a;b' ", "\n-- c;\nSELECT `x;`"]
    );
    assert_eq!(split_statements("SELECT 1;"), vec!["SELECT 1"]);
    assert_eq!(split_statements("SELECT 'open"), vec!["SELECT 'open"]);
    let sql = "SELECT ? , '?', `?` FROM t WHERE a = ? -- ?\n";
    let holes = placeholders(sql).unwrap();
    assert_eq!(holes.len(), 2);
    let bound = bind(sql, &holes, &["1".into(), quote_literal("it's \\ ok")]);
    assert_eq!(bound, "SELECT 1 , '?', `?` FROM t WHERE a = 'it''s \\\\ ok' -- ?\n");
}

#[tokio::test]
async fn show_table_status_and_processlist() {
    let (ex, mut s) = test_db().await;
    run(&ex, &mut s, "CREATE TABLE t (k INT) DUPLICATE KEY(k) COMMENT 'ticks' DISTRIBUTED BY HASH(k) BUCKETS 2").await;
    run(&ex, &mut s, "INSERT INTO t VALUES (1), (2), (3)").await;
    let o = run(&ex, &mut s, "SHOW TABLE STATUS FROM test LIKE 't%'").await;
    let Outcome::Rows(rs) = o else { panic!("{o:?}") };
    assert_eq!(rs.columns.len(), 18);
    assert_eq!(rs.rows.len(), 1);
    let r = &rs.rows[0];
    assert_eq!(
        (r[0].as_deref(), r[1].as_deref(), r[4].as_deref(), r[17].as_deref()),
        (Some("t"), Some("Doris"), Some("3"), Some("ticks"))
    );
    assert!(rows(run(&ex, &mut s, "SHOW TABLE STATUS LIKE 'zz'").await).is_empty());
    let p = rows(run(&ex, &mut s, "SHOW FULL PROCESSLIST").await);
    assert_eq!((p[0][1].as_deref(), p[0][2].as_deref(), p[0][6].as_deref()), (Some("1"), Some("root"), Some("test")));
}

#[tokio::test]
async fn mysql_date_functions_answer_as_mysql() {
    let (ex, mut s) = test_db().await;
    for (sql, want) in [
        ("SELECT date_add('2024-01-31 10:00:00', INTERVAL 1 DAY)", "2024-02-01 10:00:00"),
        ("SELECT date_sub(CAST('2024-03-01' AS DATE), INTERVAL 1 MONTH)", "2024-02-01"),
        ("SELECT adddate(CAST('2024-03-01' AS DATE), 2)", "2024-03-03"),
        ("SELECT datediff('2024-03-01 23:59:59', '2024-02-28 00:00:01')", "2"),
        ("SELECT unix_timestamp('2024-01-01 00:00:10')", "1704067210"),
        ("SELECT str_to_date('02/12/2026 10:30:15', '%d/%m/%Y %H:%i:%s')", "2026-12-02 10:30:15"),
        ("SELECT str_to_date('December 2, 2026', '%M %e, %Y')", "2026-12-02"),
        ("SELECT str_to_date('not a date', '%Y-%m-%d')", "NULL"),
        ("SELECT curdate() = current_date()", "1"),
    ] {
        let got = rows(run(&ex, &mut s, sql).await);
        assert_eq!(got, vec![some(&[want])], "{sql}");
    }
    let now: i64 = rows(run(&ex, &mut s, "SELECT unix_timestamp()").await)[0][0].clone().unwrap().parse().unwrap();
    assert!(now > 1_700_000_000, "unix_timestamp() = {now}");
}

#[tokio::test]
async fn group_concat_answers_as_doris() {
    let (ex, mut s) = test_db().await;
    run(&ex, &mut s, "CREATE TABLE g (k INT, v VARCHAR(10)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1").await;
    run(&ex, &mut s, "INSERT INTO g VALUES (1, 'b'), (1, 'a'), (2, 'c'), (1, 'a')").await;
    for (sql, want) in [
        ("SELECT group_concat(v ORDER BY v) FROM g WHERE k = 1", "a, a, b"),
        ("SELECT group_concat(DISTINCT v ORDER BY v SEPARATOR '|') FROM g", "a|b|c"),
        ("SELECT GROUP_CONCAT(v, '-' ORDER BY v DESC) FROM g WHERE k = 1", "b-a-a"),
        ("SELECT group_concat(k ORDER BY k) FROM g WHERE v = 'a'", "1, 1"),
        ("SELECT group_concat(DISTINCT k + 8 ORDER BY k + 8 DESC) FROM g", "10, 9"),
        ("SELECT group_concat(DISTINCT v) FROM g WHERE k = 1 AND v = 'a'", "a"),
    ] {
        assert_eq!(rows(run(&ex, &mut s, sql).await), vec![some(&[want])], "{sql}");
    }
    let r = rows(run(&ex, &mut s, "SELECT k, group_concat(v ORDER BY v) AS vs FROM g GROUP BY k ORDER BY k").await);
    assert_eq!(r, vec![some(&["1", "a, a, b"]), some(&["2", "c"])]);
}

#[tokio::test]
async fn views_are_queried_described_shown_and_dropped() {
    let (ex, mut s) = test_db().await;
    run(
        &ex,
        &mut s,
        "CREATE TABLE o (id INT, amount INT, kind VARCHAR(8)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 2",
    )
    .await;
    run(&ex, &mut s, "INSERT INTO o VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'a')").await;
    run(&ex, &mut s, "CREATE VIEW big_a (id COMMENT 'order', total) COMMENT 'a orders' AS SELECT id, amount * 2 FROM o WHERE kind = 'a'").await;
    assert_eq!(
        rows(run(&ex, &mut s, "SELECT id, total FROM big_a ORDER BY id").await),
        vec![some(&["1", "20"]), some(&["3", "60"])]
    );
    // A view reads the data as it is now, through another view too.
    run(&ex, &mut s, "CREATE VIEW test.top AS SELECT max(total) AS m FROM big_a").await;
    run(&ex, &mut s, "INSERT INTO o VALUES (4, 50, 'a')").await;
    assert_eq!(rows(run(&ex, &mut s, "SELECT m FROM top").await), vec![some(&["100"])]);
    assert_eq!(
        rows(run(&ex, &mut s, "SHOW FULL TABLES").await),
        vec![some(&["big_a", "VIEW"]), some(&["o", "BASE TABLE"]), some(&["top", "VIEW"])]
    );
    let create = rows(run(&ex, &mut s, "SHOW CREATE VIEW big_a").await);
    assert_eq!(
        create[0][1].as_deref(),
        Some(
            "CREATE VIEW `big_a` (`id` COMMENT 'order', `total`) COMMENT 'a orders' AS SELECT id, amount * 2 FROM o WHERE kind = 'a'"
        )
    );
    let desc = rows(run(&ex, &mut s, "DESC big_a").await);
    assert_eq!(desc.iter().map(|r| r[0].clone().unwrap()).collect::<Vec<_>>(), ["id", "total"]);
    let err = |o: Result<Outcome, SqlError>| o.err().map(|e| (e.code, e.message)).expect("an error");
    assert_eq!(
        err(ex.execute(&mut s, "CREATE VIEW big_a AS SELECT 1").await),
        (1050, "Table 'big_a' already exists".into())
    );
    assert_eq!(
        err(ex.execute(&mut s, "CREATE TABLE top (k INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1").await).0,
        1050
    );
    assert_eq!(err(ex.execute(&mut s, "CREATE VIEW bad AS SELECT nope FROM o").await).0, 1054);
    assert_eq!(err(ex.execute(&mut s, "CREATE VIEW bad2 (a, b) AS SELECT id FROM o").await).0, 1105);
    run(&ex, &mut s, "CREATE OR REPLACE VIEW top AS SELECT count(*) AS n FROM o").await;
    assert_eq!(rows(run(&ex, &mut s, "SELECT n FROM top").await), vec![some(&["4"])]);
    run(&ex, &mut s, "DROP VIEW top").await;
    assert_eq!(err(ex.execute(&mut s, "DROP VIEW top").await).0, 1146);
    run(&ex, &mut s, "DROP VIEW IF EXISTS top").await;
    assert_eq!(err(ex.execute(&mut s, "SELECT * FROM top").await).0, 1146);
}

#[tokio::test]
async fn insert_overwrite_replaces_every_row_at_once() {
    let (ex, mut s) = test_db().await;
    run(&ex, &mut s, "CREATE TABLE u (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3").await;
    run(&ex, &mut s, "CREATE TABLE src (k INT, v VARCHAR(8)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1").await;
    run(&ex, &mut s, "INSERT INTO u VALUES (1, 'a'), (2, 'b'), (3, 'c')").await;
    run(&ex, &mut s, "INSERT INTO src VALUES (2, 'x'), (9, 'y')").await;
    run(&ex, &mut s, "INSERT OVERWRITE TABLE u WITH LABEL ow1 SELECT k, v FROM src").await;
    assert_eq!(all_rows(&ex, &mut s, "u").await, vec![some(&["2", "x"]), some(&["9", "y"])]);
    run(&ex, &mut s, "INSERT OVERWRITE TABLE u VALUES (5, 'z')").await;
    assert_eq!(all_rows(&ex, &mut s, "u").await, vec![some(&["5", "z"])]);
    // A partition cannot be overwritten alone here: an error, and nothing changes.
    let e = ex.execute(&mut s, "INSERT OVERWRITE TABLE u PARTITION(p1) VALUES (6, 'q')").await.expect_err("refused");
    assert!(e.message.contains("single partitions"), "{}", e.message);
    assert_eq!(all_rows(&ex, &mut s, "u").await, vec![some(&["5", "z"])]);
    // A failing query leaves the table as it was.
    assert!(ex.execute(&mut s, "INSERT OVERWRITE TABLE u SELECT nope FROM src").await.is_err());
    assert_eq!(all_rows(&ex, &mut s, "u").await, vec![some(&["5", "z"])]);
}

#[tokio::test]
async fn update_changes_only_the_matching_rows_of_a_unique_table() {
    let (ex, mut s) = test_db().await;
    run(&ex, &mut s, "CREATE TABLE u (k INT, v VARCHAR(20), n INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3")
        .await;
    run(&ex, &mut s, "INSERT INTO u VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)").await;
    let o = run(&ex, &mut s, "UPDATE u SET n = n + 1, v = concat(v, '!') WHERE k = 2").await;
    assert!(matches!(o, Outcome::Done { affected: 1, ref info } if info.contains("'label':'update_")), "{o:?}");
    let want = |r: &[[&str; 3]]| r.iter().map(|x| some(x)).collect::<Vec<_>>();
    assert_eq!(all_rows(&ex, &mut s, "u").await, want(&[["1", "a", "10"], ["2", "b!", "21"], ["3", "c", "30"]]));
    // By alias, qualified as SQLAlchemy writes it, and by database.table.column.
    run(&ex, &mut s, "UPDATE u AS x SET x.n = 0 WHERE x.k = 3").await;
    run(&ex, &mut s, "UPDATE test.u SET test.u.v = NULL WHERE u.k = 1").await;
    assert_eq!(all_rows(&ex, &mut s, "u").await, want(&[["1", "NULL", "10"], ["2", "b!", "21"], ["3", "c", "0"]]));
    // A condition nothing matches changes nothing.
    let o = run(&ex, &mut s, "UPDATE u SET n = 99 WHERE k = 999").await;
    assert!(matches!(o, Outcome::Done { affected: 0, .. }), "{o:?}");
    // FROM another table, joined as Doris does (`insert into u select … from u, src …`).
    run(&ex, &mut s, "CREATE TABLE src (id INT, name VARCHAR(20)) DUPLICATE KEY(id) DISTRIBUTED BY HASH(id) BUCKETS 1")
        .await;
    run(&ex, &mut s, "INSERT INTO src VALUES (1, 'one'), (3, 'three'), (7, 'seven')").await;
    let o = run(&ex, &mut s, "UPDATE u SET v = s2.name FROM src s2 WHERE u.k = s2.id").await;
    assert!(matches!(o, Outcome::Done { affected: 2, .. }), "{o:?}");
    assert_eq!(
        all_rows(&ex, &mut s, "u").await,
        want(&[["1", "one", "10"], ["2", "b!", "21"], ["3", "three", "0"]]),
        "row 7 of src has no row in u: nothing is added"
    );
    // Without WHERE: every row, as written.
    run(&ex, &mut s, "UPDATE u SET n = 5").await;
    assert_eq!(rows(run(&ex, &mut s, "SELECT count(*) FROM u WHERE n = 5").await), vec![some(&["3"])]);
}

#[tokio::test]
async fn update_refuses_what_doris_refuses() {
    let (ex, mut s) = test_db().await;
    run(&ex, &mut s, "CREATE TABLE u (k INT, v VARCHAR(20) NOT NULL) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
        .await;
    run(&ex, &mut s, "CREATE TABLE d (k INT, v VARCHAR(20)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1").await;
    run(&ex, &mut s, "INSERT INTO u VALUES (1, 'a'), (2, 'b')").await;
    run(&ex, &mut s, "INSERT INTO d VALUES (1, 'a')").await;
    for (sql, code, text) in [
        ("UPDATE d SET v = 'x' WHERE k = 1", 1105, "Only unique table could be updated."),
        ("UPDATE u SET k = 5 WHERE k = 1", 1105, "Only value columns of unique table could be updated"),
        ("UPDATE u SET zz = 1, v = 'x'", 1105, "unknown column in assignment list: zz"),
        ("UPDATE u SET other.v = 'x'", 1105, "column in assignment list is invalid, other.v"),
        ("UPDATE u x SET u.v = 'x'", 1105, "column in assignment list is invalid, u.v"),
        ("UPDATE u SET v = NULL WHERE k = 1", 1105, "column `v` is not nullable"),
        ("UPDATE u SET v = 'x' WHERE k = 1 LIMIT 1", 1064, "Syntax error"),
        ("UPDATE u SET v = 'x' ORDER BY k", 1064, "Syntax error"),
        ("UPDATE u JOIN d ON u.k = d.k SET u.v = 'x'", 1064, "Syntax error"),
        ("UPDATE u SET v = 'x' WHERE", 1064, "Syntax error"),
        ("UPDATE u v = 'x'", 1064, "Syntax error"),
        ("UPDATE u SET v = 'x'; DELETE FROM u", 1064, "Syntax error"),
        ("UPDATE nope SET v = 'x'", 1146, "nope"),
    ] {
        match ex.execute(&mut s, sql).await {
            Err(e) => {
                assert_eq!(e.code, code, "{sql}: {e:?}");
                assert!(e.message.contains(text), "{sql}: {e:?}");
            }
            Ok(o) => panic!("{sql} was accepted: {o:?}"),
        }
    }
    let want: Vec<Vec<Option<String>>> = vec![some(&["1", "a"]), some(&["2", "b"])];
    assert_eq!(all_rows(&ex, &mut s, "u").await, want, "no refused UPDATE changed a row");
}

/// 200 UPDATE statements on a UNIQUE and a DUPLICATE table, well-formed and mangled: each is
/// refused and changes nothing, or changes exactly the rows its WHERE selects (each sets a
/// marker no row had), never adds or removes a row; the DUPLICATE table refuses every one.
#[tokio::test]
async fn no_update_changes_rows_its_condition_does_not_match() {
    let (ex, mut s, _) = fuzz_tables().await;
    let mut next = seeded(0x0bda_7e26);
    let forms = [
        "UPDATE {t} SET v = '{m}' WHERE k = {n}",
        "UPDATE {t} x SET x.v = '{m}' WHERE x.k = {n}",
        "UPDATE {t} AS x SET v = '{m}' WHERE x.k >= {n}",
        "UPDATE test.{t} SET {t}.v = '{m}' WHERE {t}.k = {n}",
        "UPDATE `{t}` `y` SET `y`.`v` = '{m}' WHERE `y`.`k` IN ({n}, {n})",
        "UPDATE {t} SET v = '{m}' WHERE k < {n} AND k > 3",
    ];
    let dump = |rows: Vec<Vec<Option<String>>>| -> Vec<(String, String)> {
        rows.into_iter().map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap_or_default())).collect()
    };
    let mut accepted = 0;
    for i in 0..200 {
        let t = if i % 5 == 0 { "d" } else { "u" };
        let n = 1 + next(20);
        let marker = format!("m{i}");
        let mut words: Vec<String> = forms[next(forms.len())]
            .replace("{t}", t)
            .replace("{n}", &n.to_string())
            .replace("{m}", &marker)
            .split(' ')
            .map(str::to_string)
            .collect();
        let mangled = i % 4 != 0;
        if mangled {
            let at = 2 + next(words.len() - 1);
            words.insert(at, JUNK[next(JUNK.len())].to_string());
        }
        let stmt = words.join(" ");
        // The same statement as a SELECT of the keys it matches: the SET clause dropped.
        let set = words.iter().position(|w| w == "SET").unwrap();
        let end = words[set + 1..]
            .iter()
            .position(|w| w.eq_ignore_ascii_case("WHERE") || w.eq_ignore_ascii_case("FROM"))
            .map_or(words.len(), |p| set + 1 + p);
        let twin = format!("SELECT k FROM {} {}", words[1..set].join(" "), words[end..].join(" "));
        let before = dump(all_rows(&ex, &mut s, t).await);
        let matched = ex.execute(&mut s, &twin).await;
        let result = ex.execute(&mut s, &stmt).await;
        let after = dump(all_rows(&ex, &mut s, t).await);
        assert_eq!(after.len(), 20, "`{stmt}` added or removed rows");
        if !mangled && t == "u" {
            assert!(result.is_ok(), "`{stmt}` is well-formed but failed: {result:?}");
        }
        match result {
            Err(_) => assert_eq!(after, before, "`{stmt}` failed but changed rows"),
            Ok(_) => {
                assert_eq!(t, "u", "`{stmt}` updated a DUPLICATE table");
                accepted += 1;
                let Ok(Outcome::Rows(m)) = matched else { panic!("`{stmt}` updated, but `{twin}` does not select") };
                let mut want: Vec<String> = m.rows.into_iter().map(|r| r[0].clone().unwrap()).collect();
                want.sort_by_key(|k| k.parse::<i64>().unwrap());
                want.dedup();
                let changed: Vec<String> =
                    before.iter().zip(&after).filter(|(b, a)| b != a).map(|(b, _)| b.0.clone()).collect();
                assert_eq!(changed, want, "`{stmt}` changed other rows than `{twin}` selects");
                assert!(after.iter().filter(|r| want.contains(&r.0)).all(|r| r.1 == marker), "`{stmt}`");
            }
        }
    }
    assert!(accepted >= 40, "only {accepted} of 200 statements ran");
}

/// An executor with an empty database `test`, in use.
async fn test_db() -> (Executor, Session) {
    let ex = executor();
    let mut s = Session::new("root", 1);
    run(&ex, &mut s, "CREATE DATABASE test").await;
    run(&ex, &mut s, "USE test").await;
    (ex, s)
}

/// Tables `d` (DUPLICATE) and `u` (UNIQUE) of `test`, each with keys 1..=20 (`fill`, the
/// VALUES that put them back).
async fn fuzz_tables() -> (Executor, Session, String) {
    let (ex, mut s) = test_db().await;
    let fill: String = (1..=20).map(|k| format!("({k}, 'v{k}')")).collect::<Vec<_>>().join(", ");
    for (t, keys) in [("d", "DUPLICATE KEY(k)"), ("u", "UNIQUE KEY(k)")] {
        let ddl = format!("CREATE TABLE {t} (k INT, v VARCHAR(20)) {keys} DISTRIBUTED BY HASH(k) BUCKETS 3");
        run(&ex, &mut s, &ddl).await;
        run(&ex, &mut s, &format!("INSERT INTO {t} VALUES {fill}")).await;
    }
    (ex, s, fill)
}

/// Tokens put into well-formed DELETE and UPDATE statements to mangle them.
const JUNK: &[&str] = &[
    "x",
    "AS",
    "LIMIT 1",
    "ORDER BY k",
    ",",
    "USING e",
    "FROM",
    "SET",
    "JOIN d",
    "WHERE",
    "OR",
    "AND",
    "1",
    "(",
    ")",
    ";",
    "'",
    "`",
    "t2",
    "x.k",
    "= 1",
    "NOT",
    "*",
];

/// A xorshift generator of indexes below `n`, from a printed seed.
fn seeded(seed: u64) -> impl FnMut(usize) -> usize {
    eprintln!("seed {seed:#x}");
    let mut x = seed;
    move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    }
}

async fn table_keys(ex: &Executor, s: &mut Session, t: &str) -> Vec<String> {
    rows(run(ex, s, &format!("SELECT k FROM {t} ORDER BY k")).await)
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect()
}

/// 200 DELETE statements, well-formed and mangled (a junk token put anywhere): each either
/// fails and changes nothing, or deletes exactly the rows its SELECT twin (`SELECT k FROM` the
/// same text) returns — never more than its condition matches.
#[tokio::test]
async fn no_delete_removes_rows_its_condition_does_not_match() {
    let (ex, mut s, fill) = fuzz_tables().await;
    let mut next = seeded(0x5eed_2026);
    let forms = [
        "DELETE FROM {t} WHERE k = {n}",
        "DELETE FROM {t} x WHERE x.k = {n}",
        "DELETE FROM {t} AS x WHERE x.k = {n}",
        "DELETE FROM test.{t} WHERE {t}.k = {n}",
        "DELETE FROM `{t}` `y` WHERE `y`.`k` = {n}",
        "DELETE FROM {t} WHERE k IN ({n}, {n})",
    ];
    let mut accepted = 0;
    for i in 0..200 {
        let t = if i % 2 == 0 { "d" } else { "u" };
        let n = 1 + next(20);
        let mut words: Vec<String> = forms[next(forms.len())]
            .replace("{t}", t)
            .replace("{n}", &n.to_string())
            .split(' ')
            .map(str::to_string)
            .collect();
        if i % 4 != 0 {
            let at = 2 + next(words.len() - 1);
            words.insert(at, JUNK[next(JUNK.len())].to_string());
        }
        let stmt = words.join(" ");
        let before = table_keys(&ex, &mut s, t).await;
        let twin = stmt.replacen("DELETE FROM", "SELECT k FROM", 1);
        let matched = ex.execute(&mut s, &twin).await;
        let result = ex.execute(&mut s, &stmt).await;
        let after = table_keys(&ex, &mut s, t).await;
        match result {
            Err(_) => assert_eq!(after, before, "`{stmt}` failed but changed rows"),
            Ok(_) => {
                accepted += 1;
                let Ok(Outcome::Rows(m)) = matched else { panic!("`{stmt}` deleted, but `{twin}` does not select") };
                let matched: Vec<String> = m.rows.into_iter().map(|r| r[0].clone().unwrap()).collect();
                let gone: Vec<&String> = before.iter().filter(|k| !after.contains(k)).collect();
                let mut want: Vec<&String> = before.iter().filter(|k| matched.contains(k)).collect();
                want.dedup();
                assert_eq!(gone, want, "`{stmt}` deleted other rows than `{twin}` selects");
            }
        }
        if after.len() != 20 {
            run(&ex, &mut s, &format!("DELETE FROM {t}")).await;
            run(&ex, &mut s, &format!("INSERT INTO {t} VALUES {fill}")).await;
        }
    }
    assert!(accepted >= 50, "only {accepted} of 200 statements ran");
}
