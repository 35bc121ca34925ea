//! mysql_async, the driver the Sluice host uses, against the query port.

use mysql_async::prelude::Queryable;

use crate::common::Server;

#[test]
fn mysql_async_bootstrap_and_queries() {
    let s = Server::start();
    let url = format!("mysql://root@127.0.0.1:{}", s.query_port());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut conn = mysql_async::Conn::from_url(url.as_str()).await.expect("connect");
        conn.query_drop("CREATE DATABASE d").await.unwrap();
        conn.query_drop("CREATE TABLE d.t (k INT, v VARCHAR(8), amount DECIMAL(10,2)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
            .await
            .unwrap();
        conn.query_drop("INSERT INTO d.t VALUES (1, 'a', 1.50), (2, 'b', NULL)").await.unwrap();
        let rows: Vec<(i32, String, Option<String>)> = conn.query("SELECT k, v, amount FROM d.t ORDER BY k").await.unwrap();
        assert_eq!(rows, vec![(1, "a".to_string(), Some("1.50".to_string())), (2, "b".to_string(), None)]);
        let err = conn.query_drop("SELECT * FROM d.nope").await.unwrap_err();
        match err {
            mysql_async::Error::Server(e) => {
                assert_eq!(e.code, 1146);
                assert_eq!(e.message, "errCode = 2, detailMessage = Table [nope] does not exist in database [d].");
            }
            other => panic!("unexpected {other:?}"),
        }
        // A fresh connection with a default database.
        let mut c2 = mysql_async::Conn::from_url(format!("{url}/d").as_str()).await.expect("connect with db");
        let n: Option<i64> = c2.query_first("SELECT count(*) FROM t").await.unwrap();
        assert_eq!(n, Some(2));
        c2.disconnect().await.unwrap();
        conn.disconnect().await.unwrap();
    });
}
