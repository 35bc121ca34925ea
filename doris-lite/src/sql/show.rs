//! The SHOW statements: catalogs, databases, tables and their columns, partitions, tablets and
//! data sizes, `CREATE` statements, variables, transactions, schema-change jobs, and this
//! process as the cluster's one frontend and backend.

use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::catalog::{mem_table, string_batch, table_bytes, time_with_ms};
use super::describe::described;
use super::{
    Executor, Outcome, ResultSet, Session, SqlError, VERSION_COMMENT, batches_to_result, default_vars, df_error,
};
use crate::ddl::Parser;
use crate::engine::{EngineError, show_create_table};

impl Executor {
    /// `SHOW …` but SHOW ALTER: the form named by the words after SHOW (and FULL).
    pub(super) fn show(&self, s: &mut Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.advance();
        let full = p.eat_kw("FULL");
        if p.eat_kw("CATALOGS") {
            self.show_catalogs(p)
        } else if p.eat_kw("DATABASES") || p.eat_kw("SCHEMAS") {
            self.show_databases(p)
        } else if p.eat_kws(&["TABLE", "STATUS"]) {
            self.show_table_status(s, p)
        } else if p.eat_kw("PROCESSLIST") {
            self.show_processlist(s, p, full)
        } else if p.eat_kw("DATA") {
            self.show_data(s, p)
        } else if p.eat_kw("TABLES") {
            self.show_tables(s, p, full)
        } else if p.eat_kws(&["CREATE", "TABLE"]) || p.eat_kws(&["CREATE", "VIEW"]) {
            self.show_create_table_or_view(s, p)
        } else if p.eat_kws(&["CREATE", "DATABASE"]) {
            self.show_create_database(p)
        } else if p.eat_kw("COLUMNS") || p.eat_kw("FIELDS") {
            self.show_columns(s, p, full)
        } else if p.eat_kw("VARIABLES") || p.eat_kw("STATUS") {
            self.show_variables(s, p)
        } else if p.eat_kw("FRONTENDS") {
            self.show_frontends()
        } else if p.eat_kw("BACKENDS") {
            self.show_backends()
        } else if p.eat_kw("TRANSACTION") {
            self.show_transaction(s, p)
        } else if p.eat_kw("PARTITIONS") {
            self.show_partitions(s, p)
        } else if p.eat_kw("TABLETS") {
            self.show_tablets(s, p)
        } else if p.eat_kw("WARNINGS")
            || p.eat_kw("ERRORS")
            || p.eat_kw("ENGINES")
            || p.eat_kw("COLLATION")
            || p.eat_kw("CHARSET")
            || p.eat_kw("PROCESSLIST")
        {
            Ok(Outcome::Rows(ResultSet::strings(&["Level", "Code", "Message"], Vec::new())))
        } else {
            Err(SqlError {
                code: 1064,
                message: format!("Syntax error: doris-lite does not support SHOW {}", p.rest()),
            })
        }
    }

    /// `SHOW CATALOGS [LIKE …]`.
    fn show_catalogs(&self, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        // doris-lite has the internal catalog only, shown as Doris shows it.
        let like = like_or_where(p)?;
        let rows = [("0", "internal", "internal", "Yes", "UNRECORDED", None, "Doris internal catalog")]
            .into_iter()
            .filter(|r| like.as_deref().is_none_or(|l| like_match(l, r.1)))
            .map(|(id, name, ty, current, created, updated, comment)| {
                vec![
                    Some(id.to_string()),
                    Some(name.to_string()),
                    Some(ty.to_string()),
                    Some(current.to_string()),
                    Some(created.to_string()),
                    updated,
                    Some(comment.to_string()),
                ]
            })
            .collect();
        p.expect_end()?;
        let names = ["CatalogId", "CatalogName", "Type", "IsCurrent", "CreateTime", "LastUpdateTime", "Comment"];
        Ok(Outcome::Rows(ResultSet::strings(&names, rows)))
    }

    /// `SHOW DATABASES | SCHEMAS [LIKE …]`.
    fn show_databases(&self, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        let like = like_or_where(p)?;
        let mut names = vec!["information_schema".to_string()];
        names.extend(self.engine.lock().dbs.keys().cloned());
        let rows = names
            .into_iter()
            .filter(|n| like.as_deref().is_none_or(|l| like_match(l, n)))
            .map(|n| vec![Some(n)])
            .collect();
        Ok(Outcome::Rows(ResultSet::strings(&["Database"], rows)))
    }

    /// `SHOW TABLE STATUS [FROM db] [LIKE …]`.
    fn show_table_status(&self, s: &Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        // MySQL's columns, as Doris fills them for OLAP tables.
        let db = if p.eat_kw("FROM") || p.eat_kw("IN") {
            p.ident()?
        } else {
            s.db.clone().ok_or(EngineError::NoDatabase)?
        };
        let like = like_or_where(p)?;
        p.expect_end()?;
        let st = self.engine.lock();
        let rows = st
            .db(&db)?
            .tables
            .values()
            .filter(|t| like.as_deref().is_none_or(|l| like_match(l, &t.name)))
            .map(|t| {
                let n = t.row_count().to_string();
                let mut r: Vec<Option<String>> = vec![Some(t.name.clone()), Some("Doris".into())];
                r.extend([None, None, Some(n), Some("0".into()), Some("0".into())]);
                r.extend([None, None, None, None, None, None, None]);
                r.extend([Some("utf-8".into()), None, Some(String::new()), Some(t.schema.comment.clone())]);
                r
            })
            .collect();
        let names = [
            "Name",
            "Engine",
            "Version",
            "Row_format",
            "Rows",
            "Avg_row_length",
            "Data_length",
            "Max_data_length",
            "Index_length",
            "Data_free",
            "Auto_increment",
            "Create_time",
            "Update_time",
            "Check_time",
            "Collation",
            "Checksum",
            "Create_options",
            "Comment",
        ];
        Ok(Outcome::Rows(ResultSet::strings(&names, rows)))
    }

    /// `SHOW [FULL] PROCESSLIST`.
    fn show_processlist(&self, s: &Session, p: &mut Parser<'_>, full: bool) -> Result<Outcome, SqlError> {
        // doris-lite keeps no registry of connections: the one asking is the one listed.
        p.expect_end()?;
        let fe = format!("{}:{}", self.info.host, self.info.query_port);
        let row = vec![
            Some("Yes".into()),
            Some(s.connection_id.to_string()),
            Some(s.user.clone()),
            Some(self.info.host.clone()),
            None,
            Some("internal".into()),
            s.db.clone(),
            Some("Query".into()),
            Some("0".into()),
            Some("OK".into()),
            None,
            Some(if full { "SHOW FULL PROCESSLIST" } else { "SHOW PROCESSLIST" }.into()),
            Some(fe),
            Some(String::new()),
        ];
        let names = [
            "CurrentConnected",
            "Id",
            "User",
            "Host",
            "LoginTime",
            "Catalog",
            "Db",
            "Command",
            "Time",
            "State",
            "QueryId",
            "Info",
            "FE",
            "CloudCluster",
        ];
        Ok(Outcome::Rows(ResultSet::strings(&names, vec![row])))
    }

    /// `SHOW [FULL] TABLES [FROM db] [LIKE …]`: tables and views.
    fn show_tables(&self, s: &Session, p: &mut Parser<'_>, full: bool) -> Result<Outcome, SqlError> {
        let db = if p.eat_kw("FROM") || p.eat_kw("IN") {
            p.ident()?
        } else {
            s.db.clone().ok_or(EngineError::NoDatabase)?
        };
        let like = like_or_where(p)?;
        let st = self.engine.lock();
        let d = st.db(&db)?;
        let mut named: Vec<(&String, &str)> = d.tables.keys().map(|n| (n, "BASE TABLE")).collect();
        named.extend(d.views.keys().map(|n| (n, "VIEW")));
        named.sort();
        let rows = named
            .into_iter()
            .filter(|(n, _)| like.as_deref().is_none_or(|l| like_match(l, n)))
            .map(|(n, ty)| {
                let mut r = vec![Some(n.clone())];
                if full {
                    r.push(Some(ty.into()));
                }
                r
            })
            .collect();
        let col = format!("Tables_in_{db}");
        let mut names = vec![col.as_str()];
        if full {
            names.push("Table_type");
        }
        Ok(Outcome::Rows(ResultSet::strings(&names, rows)))
    }

    /// `SHOW CREATE TABLE | VIEW [db.]name`.
    fn show_create_table_or_view(&self, s: &Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        let name = p.object_name()?;
        let db = self.resolve(s, &name)?;
        let st = self.engine.lock();
        if let Some(v) = st.db(&db)?.views.get(&name.name) {
            return Ok(Outcome::Rows(ResultSet::strings(
                &["View", "Create View", "character_set_client", "collation_connection"],
                vec![vec![
                    Some(name.name.clone()),
                    Some(show_create_view(&name.name, v)),
                    Some("utf8mb4".into()),
                    Some("utf8mb4_0900_bin".into()),
                ]],
            )));
        }
        let t = described(&st, &db, &name.name)?;
        Ok(Outcome::Rows(ResultSet::strings(
            &["Table", "Create Table"],
            vec![vec![Some(t.name.clone()), Some(show_create_table(t))]],
        )))
    }

    /// `SHOW CREATE DATABASE db`.
    fn show_create_database(&self, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        let db = p.ident()?;
        self.engine.lock().db(&db)?;
        Ok(Outcome::Rows(ResultSet::strings(
            &["Database", "Create Database"],
            vec![vec![Some(db.clone()), Some(format!("CREATE DATABASE `{db}`"))]],
        )))
    }

    /// `SHOW [FULL] COLUMNS | FIELDS FROM [db.]table [FROM db] [LIKE …]`.
    fn show_columns(&self, s: &Session, p: &mut Parser<'_>, full: bool) -> Result<Outcome, SqlError> {
        if !(p.eat_kw("FROM") || p.eat_kw("IN")) {
            return Err(SqlError { code: 1064, message: "Syntax error: expecting FROM".into() });
        }
        let mut name = p.object_name()?;
        if p.eat_kw("FROM") || p.eat_kw("IN") {
            name.db = Some(p.ident()?);
        }
        let like = like_or_where(p)?;
        let db = self.resolve(s, &name)?;
        let st = self.engine.lock();
        let t = described(&st, &db, &name.name)?;
        let mut rows = Vec::new();
        for (i, c) in t.schema.columns.iter().enumerate() {
            if like.as_deref().is_some_and(|l| !like_match(l, &c.name)) {
                continue;
            }
            let default = match &c.default {
                Some(crate::storage::DefaultValue::Literal(v)) => Some(v.clone()),
                Some(crate::storage::DefaultValue::CurrentTimestamp(_)) => Some("CURRENT_TIMESTAMP".into()),
                _ => None,
            };
            let key = Some(if i < t.schema.key_count { "YES" } else { "NO" }.to_string());
            let null = Some(if c.nullable { "YES" } else { "NO" }.to_string());
            let extra = Some(c.agg.map(|a| a.sql().to_string()).unwrap_or_default());
            if full {
                rows.push(vec![
                    Some(c.name.clone()),
                    Some(c.ty.sql_name()),
                    None,
                    null,
                    key,
                    default,
                    extra,
                    Some("select,insert,update,references".into()),
                    Some(c.comment.clone()),
                ]);
            } else {
                rows.push(vec![Some(c.name.clone()), Some(c.ty.sql_name()), null, key, default, extra]);
            }
        }
        let names: &[&str] = if full {
            &["Field", "Type", "Collation", "Null", "Key", "Default", "Extra", "Privileges", "Comment"]
        } else {
            &["Field", "Type", "Null", "Key", "Default", "Extra"]
        };
        Ok(Outcome::Rows(ResultSet::strings(names, rows)))
    }

    /// `SHOW VARIABLES | STATUS [LIKE …]`: the session's variables.
    fn show_variables(&self, s: &Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        let like = like_or_where(p)?;
        let defaults = default_vars();
        let rows = s
            .vars
            .iter()
            .filter(|(k, _)| like.as_deref().is_none_or(|l| like_match(l, k)))
            .map(|(k, v)| {
                let d = defaults.get(k).cloned().unwrap_or_default();
                let changed = if d == *v { "0" } else { "1" };
                vec![Some(k.clone()), Some(v.clone()), Some(d), Some(changed.into())]
            })
            .collect();
        Ok(Outcome::Rows(ResultSet::strings(&["Variable_name", "Value", "Default_Value", "Changed"], rows)))
    }

    /// `SHOW FRONTENDS`: this process, as the one FE.
    fn show_frontends(&self) -> Result<Outcome, SqlError> {
        let i = &self.info;
        let row = vec![
            Some(format!("fe_{}", i.query_port)),
            Some(i.host.clone()),
            Some("9010".into()),
            Some(i.fe_http_port.to_string()),
            Some(i.query_port.to_string()),
            Some("9020".into()),
            Some(if i.flight_port == 0 { "-1".into() } else { i.flight_port.to_string() }),
            Some("FOLLOWER".into()),
            Some("true".into()),
            Some("1".into()),
            Some("true".into()),
            Some("true".into()),
            Some("1".into()),
            None,
            None,
            Some("true".into()),
            Some(String::new()),
            Some(VERSION_COMMENT.into()),
            Some("Yes".into()),
        ];
        Ok(Outcome::Rows(ResultSet::strings(
            &[
                "Name",
                "Host",
                "EditLogPort",
                "HttpPort",
                "QueryPort",
                "RpcPort",
                "ArrowFlightSqlPort",
                "Role",
                "IsMaster",
                "ClusterId",
                "Join",
                "Alive",
                "ReplayedJournalId",
                "LastStartTime",
                "LastHeartbeat",
                "IsHelper",
                "ErrMsg",
                "Version",
                "CurrentConnected",
            ],
            vec![row],
        )))
    }

    /// `SHOW BACKENDS`: this process, as the one BE.
    fn show_backends(&self) -> Result<Outcome, SqlError> {
        let i = &self.info;
        let row = vec![
            Some("10001".into()),
            Some(i.host.clone()),
            Some("9050".into()),
            Some("9060".into()),
            Some(i.be_http_port.to_string()),
            Some("8060".into()),
            Some(if i.flight_port == 0 { "-1".into() } else { i.flight_port.to_string() }),
            Some("true".into()),
            Some(VERSION_COMMENT.into()),
        ];
        Ok(Outcome::Rows(ResultSet::strings(
            &[
                "BackendId",
                "Host",
                "HeartbeatPort",
                "BePort",
                "HttpPort",
                "BrpcPort",
                "ArrowFlightSqlPort",
                "Alive",
                "Version",
            ],
            vec![row],
        )))
    }

    /// `SHOW TRANSACTION [FROM db] WHERE id = … | label = … | status = …`.
    fn show_transaction(&self, s: &Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        let db = if p.eat_kw("FROM") || p.eat_kw("IN") {
            p.ident()?
        } else {
            s.db.clone().ok_or(EngineError::NoDatabase)?
        };
        // Doris: `WHERE id = 123`, `label = 'l'` or `status = 'precommitted'` (every
        // transaction of the database in that state); anything else is refused.
        const WHERE_FORMS: &str = "Where clause should looks like one of them: id = 123 or label = 'label' \
                                   or status = 'prepare/precommitted/committed/visible/aborted'";
        let form = || EngineError::Other(WHERE_FORMS.into());
        p.expect_kw("WHERE").map_err(|_| EngineError::Other("Missing transaction id".into()))?;
        let key = p.ident().map_err(|_| form())?.to_ascii_lowercase();
        p.expect(&Token::Eq).map_err(|_| form())?;
        let val = p.literal_text().map_err(|_| form())?;
        let status = match key.as_str() {
            "id" if val.parse::<i64>().is_ok() => None,
            "label" => None,
            "status" => match val.to_ascii_uppercase().as_str() {
                s @ ("PREPARE" | "PRECOMMITTED" | "COMMITTED" | "VISIBLE" | "ABORTED") => Some(s.to_string()),
                _ => {
                    return Err(EngineError::Other(
                        "status should be prepare/precommitted/committed/visible/aborted".into(),
                    )
                    .into());
                }
            },
            _ => return Err(form().into()),
        };
        let st = self.engine.lock();
        st.db(&db)?;
        let mut txns: Vec<_> = st
            .txns
            .values()
            .filter(|t| {
                t.db == db
                    && match (key.as_str(), &status) {
                        ("label", _) => t.label == val,
                        (_, Some(s)) => t.status.name() == s,
                        _ => t.id.to_string() == val,
                    }
            })
            .collect();
        txns.sort_by_key(|t| t.id);
        let rows = txns
            .into_iter()
            .map(|t| {
                vec![
                    Some(t.id.to_string()),
                    Some(t.label.clone()),
                    Some("BE: 127.0.0.1".into()),
                    Some(t.status.name().into()),
                    Some("BACKEND_STREAMING".into()),
                    Some(t.reason.clone()),
                ]
            })
            .collect();
        Ok(Outcome::Rows(ResultSet::strings(
            &["TransactionId", "Label", "Coordinator", "TransactionStatus", "LoadJobSourceType", "Reason"],
            rows,
        )))
    }

    /// `SHOW PARTITIONS FROM [db.]table`: one partition per table.
    fn show_partitions(&self, s: &Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.expect_kw("FROM")?;
        let name = p.object_name()?;
        let db = self.resolve(s, &name)?;
        let st = self.engine.lock();
        let t = st.table(&db, &name.name)?;
        let buckets = t.tablets.len().to_string();
        let dist = match &t.schema.distribution {
            crate::storage::Distribution::Hash(cols, _) => cols.join(", "),
            crate::storage::Distribution::Random(_) => "RANDOM".into(),
        };
        let row = vec![
            Some(t.id.to_string()),
            Some(t.name.clone()),
            Some(t.version.to_string()),
            Some("NORMAL".into()),
            Some(String::new()),
            Some(String::new()),
            Some(dist),
            Some(buckets),
            Some("1".into()),
            Some(t.row_count().to_string()),
        ];
        Ok(Outcome::Rows(ResultSet::strings(
            &[
                "PartitionId",
                "PartitionName",
                "VisibleVersion",
                "State",
                "PartitionKey",
                "Range",
                "DistributionKey",
                "Buckets",
                "ReplicationNum",
                "RowCount",
            ],
            vec![row],
        )))
    }

    /// `SHOW TABLETS FROM [db.]table`.
    fn show_tablets(&self, s: &Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.expect_kw("FROM")?;
        let name = p.object_name()?;
        let db = self.resolve(s, &name)?;
        let st = self.engine.lock();
        let t = st.table(&db, &name.name)?;
        let rows = t
            .tablets
            .iter()
            .map(|tb| {
                vec![
                    Some(tb.id.to_string()),
                    Some((tb.id + 1).to_string()),
                    Some("10001".into()),
                    Some(t.version.to_string()),
                    Some(tb.row_count().to_string()),
                ]
            })
            .collect();
        Ok(Outcome::Rows(ResultSet::strings(&["TabletId", "ReplicaId", "BackendId", "Version", "RowCount"], rows)))
    }

    /// `SHOW ALTER TABLE COLUMN [FROM db] [WHERE …] [ORDER BY …] [LIMIT …]`: the schema-change
    /// jobs of a database, filtered and ordered as asked.
    pub(super) async fn show_alter(&self, s: &Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.advance();
        p.expect_kw("ALTER")?;
        p.expect_kw("TABLE")?;
        if !p.eat_kw("COLUMN") {
            return Err(SqlError::other(format!(
                "doris-lite does not support SHOW ALTER TABLE {}: it has schema-change jobs only (SHOW ALTER TABLE COLUMN)",
                p.peek()
            )));
        }
        let db = if p.eat_kw("FROM") || p.eat_kw("IN") {
            p.ident()?
        } else {
            s.db.clone().ok_or(EngineError::NoDatabase)?
        };
        let rest = p.rest().to_string();
        const NAMES: [&str; 13] = [
            "JobId",
            "TableName",
            "CreateTime",
            "FinishTime",
            "IndexName",
            "IndexId",
            "OriginIndexId",
            "SchemaVersion",
            "TransactionId",
            "State",
            "Msg",
            "Progress",
            "Timeout",
        ];
        let rows: Vec<Vec<Option<String>>> = {
            let st = self.engine.lock();
            st.db(&db)?;
            st.alter_jobs
                .iter()
                .filter(|j| j.db == db)
                .map(|j| {
                    vec![
                        Some(j.job_id.to_string()),
                        Some(j.table.clone()),
                        Some(time_with_ms(j.create_ms)),
                        Some(time_with_ms(j.finish_ms)),
                        Some(j.table.clone()),
                        Some(j.index_id.to_string()),
                        Some(j.origin_index_id.to_string()),
                        Some(format!("{}:{}", j.schema_version, j.index_id)),
                        Some(j.txn_id.to_string()),
                        Some("FINISHED".into()),
                        Some(String::new()),
                        Some("N/A".into()),
                        Some("2592000".into()),
                    ]
                })
                .collect()
        };
        let batch = string_batch(&NAMES, rows).map_err(|e| SqlError::other(e.to_string()))?;
        let ctx = SessionContext::new();
        ctx.register_table("__alter_jobs", mem_table(vec![batch]).map_err(|e| SqlError::other(e.to_string()))?)
            .map_err(|e| SqlError::other(e.to_string()))?;
        let sql = format!("SELECT * FROM __alter_jobs {}", crate::ddl::lower_quoted_idents(&rest));
        let df = ctx.sql(&sql).await.map_err(|e| df_error(e, Some(&db)))?;
        let batches = df.collect().await.map_err(|e| df_error(e, Some(&db)))?;
        let mut out = ResultSet::strings(&NAMES, Vec::new());
        for b in &batches {
            let rs = batches_to_result(&b.schema(), std::slice::from_ref(b))?;
            out.rows.extend(rs.rows);
        }
        Ok(Outcome::Rows(out))
    }

    /// `SHOW DATA [FROM [db.]table]`: the data size of each table of the current database (with
    /// the database's Total / Quota / Left), or of one table's index. doris-lite keeps one
    /// replica, no remote storage, and measures a table as the Arrow size of its rows.
    fn show_data(&self, s: &Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        let from = if p.eat_kw("FROM") { Some(p.object_name()?) } else { None };
        if !p.at_end() {
            return Err(SqlError::other(format!("doris-lite does not support this SHOW DATA clause: {}", p.rest())));
        }
        let mut st = self.engine.lock();
        if let Some(name) = from {
            let db = self.resolve(s, &name)?;
            let t = st.table_mut(&db, &name.name)?;
            let bytes = table_bytes(t)?;
            let rows = t.row_count().to_string();
            let tablets = t.tablets.len().to_string();
            let names = ["TableName", "IndexName", "Size", "ReplicaCount", "RowCount", "RemoteSize"];
            let row = vec![
                Some(name.name.clone()),
                Some(name.name.clone()),
                Some(byte_units(bytes)),
                Some(tablets.clone()),
                Some(rows),
                Some(byte_units(0)),
            ];
            let total =
                vec![None, Some("Total".into()), Some(byte_units(bytes)), Some(tablets), None, Some(byte_units(0))];
            return Ok(Outcome::Rows(ResultSet::strings(&names, vec![row, total])));
        }
        let db = s.db.clone().ok_or(EngineError::NoDatabase)?;
        let d = st.db_mut(&db)?;
        let mut rows = Vec::new();
        let (mut total, mut replicas) = (0u64, 0usize);
        for t in d.tables.values_mut() {
            let bytes = table_bytes(t)?;
            total += bytes;
            replicas += t.tablets.len();
            rows.push(vec![
                Some(t.name.clone()),
                Some(byte_units(bytes)),
                Some(t.tablets.len().to_string()),
                Some(byte_units(0)),
            ]);
        }
        // Doris' default quotas: 1 PiB of data and 1073741824 replicas a database.
        let (quota, replica_quota) = (1u64 << 50, 1_073_741_824usize);
        rows.push(vec![Some("Total".into()), Some(byte_units(total)), Some(replicas.to_string()), Some(byte_units(0))]);
        rows.push(vec![
            Some("Quota".into()),
            Some(byte_units(quota)),
            Some(replica_quota.to_string()),
            Some(String::new()),
        ]);
        rows.push(vec![
            Some("Left".into()),
            Some(byte_units(quota.saturating_sub(total))),
            Some(replica_quota.saturating_sub(replicas).to_string()),
            Some(String::new()),
        ]);
        Ok(Outcome::Rows(ResultSet::strings(&["TableName", "Size", "ReplicaCount", "RemoteSize"], rows)))
    }
}

fn like_match(pattern: &str, s: &str) -> bool {
    fn rec(p: &[char], s: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('%') => (0..=s.len()).any(|i| rec(&p[1..], &s[i..])),
            Some('_') => !s.is_empty() && rec(&p[1..], &s[1..]),
            Some(c) => s.first().is_some_and(|x| x.eq_ignore_ascii_case(c)) && rec(&p[1..], &s[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = s.chars().collect();
    rec(&p, &s)
}

/// The `LIKE 'pattern'` or `WHERE name = 'x'` filter of a SHOW statement, if any.
fn like_or_where(p: &mut Parser<'_>) -> Result<Option<String>, SqlError> {
    if p.eat_kw("LIKE") {
        Ok(Some(p.string()?))
    } else if p.eat_kw("WHERE") {
        // `WHERE Variable_name = 'x'` style filters.
        p.ident()?;
        if !p.eat(&Token::Eq) {
            p.expect_kw("LIKE")?;
        }
        Ok(Some(p.string()?))
    } else {
        Ok(None)
    }
}

/// A byte count as Doris prints sizes: three decimals and the largest unit it exceeds
/// (`0.000 ` for nothing, `512.000 B`, `1.500 KB`, … `TB`).
fn byte_units(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "TB"), (1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB")];
    if bytes == 0 {
        return "0.000 ".into();
    }
    for (size, unit) in UNITS {
        if bytes > size {
            return format!("{:.3} {unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes}.000 B")
}

/// `SHOW CREATE VIEW` text.
fn show_create_view(name: &str, v: &crate::engine::View) -> String {
    let mut out = format!("CREATE VIEW `{name}`");
    if !v.columns.is_empty() {
        let cols: Vec<String> = v
            .columns
            .iter()
            .map(
                |(c, comment)| {
                    if comment.is_empty() { format!("`{c}`") } else { format!("`{c}` COMMENT '{comment}'") }
                },
            )
            .collect();
        out.push_str(&format!(" ({})", cols.join(", ")));
    }
    if !v.comment.is_empty() {
        out.push_str(&format!(" COMMENT '{}'", v.comment));
    }
    out.push_str(" AS ");
    out.push_str(&v.query);
    out
}
