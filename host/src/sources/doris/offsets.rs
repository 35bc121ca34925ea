//! The changelog offset table (`changelog.offset_table`, `changelog.consumer_id`): after each
//! completed checkpoint the next inclusive start of a changelog consumer is upserted into a Doris
//! table over the MySQL protocol, and a new run without a checkpoint resumes from it.
//!
//! ```sql
//! CREATE TABLE ops.sluice_source_offsets (consumer_id VARCHAR(256) NOT NULL,
//!     offset_timestamp DATETIME NOT NULL, update_time DATETIME(3) NOT NULL)
//! UNIQUE KEY(consumer_id) DISTRIBUTED BY HASH(consumer_id) BUCKETS 1;
//! ```

use std::time::Duration;

use anyhow::{Context, bail};
use backon::BackoffBuilder;
use mysql_async::prelude::Queryable;
use tokio::sync::watch;

use crate::doris::scan::quote;

/// One consumer's row of an offset table.
#[derive(Debug, Clone)]
pub struct OffsetTable {
    pool: mysql_async::Pool,
    table: String,
    quoted: String,
    consumer: String,
}

fn literal(s: &str) -> String {
    mysql_async::Value::from(s).as_sql(false)
}

impl OffsetTable {
    /// `jdbc_url` is `jdbc:mysql://host:port`; `table` is `db.tbl`.
    /// With `ssl`, over TLS.
    pub fn new(
        jdbc_url: &str,
        user: &str,
        password: &str,
        table: &str,
        consumer: &str,
        ssl: Option<mysql_async::SslOpts>,
    ) -> anyhow::Result<Self> {
        let (host, port) = crate::transforms::lookup::fetch::host_port(jdbc_url).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (db, tbl) = table.split_once('.').context("changelog.offset_table: expected `db.table`")?;
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname(host)
            .tcp_port(port)
            .user(Some(user.to_string()))
            .pass(Some(password.to_string()))
            .prefer_socket(false)
            .stmt_cache_size(0)
            .ssl_opts(ssl)
            .pool_opts(
                mysql_async::PoolOpts::default()
                    .with_constraints(mysql_async::PoolConstraints::new(0, 1).expect("0 <= 1")),
            );
        Ok(Self {
            pool: mysql_async::Pool::new(opts),
            table: table.to_string(),
            quoted: format!("{}.{}", quote(db), quote(tbl)),
            consumer: consumer.to_string(),
        })
    }

    /// The recorded next start of this consumer, if any. A missing or unreadable table, or more
    /// than one row for the consumer, is an error: the start is never guessed.
    pub async fn read(&self) -> anyhow::Result<Option<String>> {
        let sql = format!(
            "SELECT CAST(offset_timestamp AS STRING) FROM {} WHERE consumer_id = {}",
            self.quoted,
            literal(&self.consumer)
        );
        let mut conn =
            self.pool.get_conn().await.with_context(|| format!("changelog.offset_table `{}`", self.table))?;
        let rows: Vec<Option<String>> = conn.query(&sql).await.with_context(|| {
            format!("changelog.offset_table `{}`: cannot read the offset of consumer `{}`", self.table, self.consumer)
        })?;
        match rows.as_slice() {
            [] => Ok(None),
            [Some(ts)] => {
                // `yyyy-MM-dd HH:mm:ss`, whichever way the server renders a DATETIME as text.
                let ts: String = ts.chars().take(19).map(|c| if c == 'T' { ' ' } else { c }).collect();
                if sluice_guest::batch::parse_datetime_micros(&ts).is_err() || ts.len() != 19 {
                    bail!(
                        "changelog.offset_table `{}`: consumer `{}` has an invalid offset {ts:?}",
                        self.table,
                        self.consumer
                    );
                }
                Ok(Some(ts))
            }
            [None] => bail!("changelog.offset_table `{}`: consumer `{}` has a NULL offset", self.table, self.consumer),
            more => bail!(
                "changelog.offset_table `{}`: {} rows for consumer `{}`; keep one (the table should be UNIQUE KEY(consumer_id))",
                self.table,
                more.len(),
                self.consumer
            ),
        }
    }

    /// Record `start` (the next inclusive window start) for this consumer.
    pub async fn write(&self, start: &str) -> anyhow::Result<()> {
        let sql = format!(
            "INSERT INTO {} (`consumer_id`, `offset_timestamp`, `update_time`) VALUES ({}, {}, CURRENT_TIMESTAMP)",
            self.quoted,
            literal(&self.consumer),
            literal(start)
        );
        let mut conn = self.pool.get_conn().await?;
        conn.query_drop(&sql).await?;
        Ok(())
    }

    /// A background writer: [`OffsetPublisher::publish`] hands it the latest start; it writes the
    /// newest value it has, retrying, and may lag behind.
    pub fn publisher(self) -> OffsetPublisher {
        let (tx, mut rx) = watch::channel::<Option<String>>(None);
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let Some(start) = rx.borrow_and_update().clone() else { continue };
                let mut waits = crate::retry::backoff(Duration::from_millis(400), 5).build();
                while let Err(e) = self.write(&start).await {
                    let wait = waits.next().filter(|_| !rx.has_changed().unwrap_or(true));
                    let Some(wait) = wait else {
                        tracing::warn!(table = %self.table, consumer = %self.consumer, "offset not written: {e:#}");
                        break;
                    };
                    tokio::time::sleep(wait).await;
                }
            }
        });
        OffsetPublisher { tx }
    }
}

/// Hands completed checkpoints' starts to the offset writer.
#[derive(Debug)]
pub struct OffsetPublisher {
    tx: watch::Sender<Option<String>>,
}

impl OffsetPublisher {
    pub fn publish(&self, start: &str) {
        self.tx.send_replace(Some(start.to_string()));
    }
}
