//! Queries through DataFusion (SELECT, WITH, VALUES, EXPLAIN) over snapshots of the committed
//! data, with `TABLET(…)` and `@incr(…)` references, as text or Arrow results; views' plans and
//! `CREATE VIEW`.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider, SchemaProvider};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::variable::VarType;

use super::catalog::{DorisCatalog, INFO_SCHEMA_UPPER, mem_table, string_batch};
use super::error::NO_DB;
use super::session::SessionVars;
use super::table_refs::RefKind;
use super::udfs::{register_from_unixtime, register_session_functions};
use super::{
    Executor, Outcome, ResultSet, Session, SqlError, batches_to_result, df_error, register_doris_functions,
    strip_leading_comments,
};
use crate::engine::{Engine, EngineError};

impl Executor {
    /// `CREATE [OR REPLACE] VIEW` / `ALTER VIEW`: the query must plan (against the view's
    /// database) before the view is stored.
    pub(super) async fn create_view(&self, s: &Session, sql: &str) -> Result<Outcome, SqlError> {
        let def = crate::engine::parse_view(sql)?;
        let mut vs = s.clone();
        vs.db = Some(self.resolve(s, &def.name)?);
        self.engine.lock().db(vs.db.as_deref().unwrap_or_default())?;
        let plan = view_plan(&self.engine, &vs, &def.view).await.map_err(|e| df_error(e, vs.db.as_deref()))?;
        if !def.view.columns.is_empty() && def.view.columns.len() != plan.schema().fields().len() {
            return Err(SqlError::other(format!(
                "The number of columns of view `{}` ({}) does not match the number of its query's columns ({})",
                def.name.name,
                def.view.columns.len(),
                plan.schema().fields().len()
            )));
        }
        let info = self.engine.ddl(s.db.as_deref(), sql)?;
        Ok(Outcome::Done { affected: 0, info })
    }
}

/// A session's DataFusion context: the internal catalog over the engine, session variables and
/// Doris' functions.
pub(super) fn session_context(engine: &Arc<Engine>, s: &Session) -> SessionContext {
    let config = SessionConfig::new()
        .with_default_catalog_and_schema("internal", s.db.as_deref().unwrap_or(NO_DB))
        .with_information_schema(false)
        .with_target_partitions(2)
        .set_str("datafusion.sql_parser.dialect", "MySQL")
        // `1.25` is a DECIMAL, as in Doris (exact: a DECIMAL key compared with it, `0.1 + 0.2 = 0.3`).
        .set_bool("datafusion.sql_parser.parse_float_as_decimal", true);
    let ctx = SessionContext::new_with_config(config);
    ctx.register_catalog("internal", Arc::new(DorisCatalog { engine: engine.clone(), session: Arc::new(s.clone()) }));
    ctx.register_variable(VarType::System, Arc::new(SessionVars(s.vars.clone())));
    ctx.register_variable(VarType::UserDefined, Arc::new(SessionVars(BTreeMap::new())));
    register_doris_functions(&ctx);
    register_session_functions(&ctx, s);
    register_from_unixtime(
        &ctx,
        super::changelog::tz_offset_ms(s.vars.get("time_zone").map(String::as_str).unwrap_or("UTC")),
    );
    ctx
}

/// The logical plan of a view's query, in a session whose database is the view's.
pub(super) async fn view_plan(
    engine: &Arc<Engine>,
    s: &Session,
    view: &crate::engine::View,
) -> datafusion::error::Result<LogicalPlan> {
    let ctx = session_context(engine, s);
    let query = super::functions::rewrite_group_concat(&crate::ddl::lower_quoted_idents(&view.query));
    let sql = if view.columns.is_empty() {
        query
    } else {
        let names: Vec<String> = view.columns.iter().map(|(c, _)| format!("`{}`", c.to_ascii_lowercase())).collect();
        format!("SELECT * FROM ({query}) AS __view({})", names.join(", "))
    };
    ctx.state().create_logical_plan(&sql).await
}

impl Executor {
    pub(super) async fn run_df(&self, ctx: &SessionContext, s: &Session, sql: &str) -> Result<ResultSet, SqlError> {
        let (schema, batches) = self.run_df_batches(ctx, s, sql).await?;
        batches_to_result(&schema, &batches)
    }

    /// Runs a query in DataFusion; fields are named as the user wrote them in the statement,
    /// else as the table defines them (DataFusion works in lower case).
    async fn run_df_batches(
        &self,
        ctx: &SessionContext,
        s: &Session,
        sql: &str,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), SqlError> {
        let db = s.db.as_deref();
        let lowered = super::functions::rewrite_group_concat(&crate::ddl::lower_quoted_idents(sql));
        let df = ctx.sql(&lowered).await.map_err(|e| df_error(e, db))?;
        let schema = df.schema().as_arrow().clone();
        let batches = df.collect().await.map_err(|e| df_error(e, db))?;
        let originals = self.column_spellings();
        let labels = select_labels(sql).filter(|l| l.len() == schema.fields().len());
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name = spelling_in_sql(sql, f.name())
                    .or_else(|| originals.get(f.name().as_str()).cloned())
                    .or_else(|| labels.as_ref().and_then(|l| l[i].clone()))
                    .unwrap_or_else(|| f.name().clone());
                f.as_ref().clone().with_name(name)
            })
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        let batches = batches
            .into_iter()
            .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SqlError::other(e.to_string()))?;
        Ok((schema, batches))
    }

    /// Runs a SELECT, with `TABLET(...)` and `@incr(...)` references, into Arrow batches.
    pub async fn query_batches(&self, s: &Session, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), SqlError> {
        let ctx = self.context(s);
        let (sql, refs) = super::table_refs::extract(sql)?;
        if !refs.is_empty() {
            let schema = Arc::new(MemorySchemaProvider::new());
            for r in &refs {
                let db = match &r.db {
                    Some(d) => d.clone(),
                    None => s.db.clone().ok_or(EngineError::NoDatabase)?,
                };
                let batches = match &r.kind {
                    RefKind::Tablets(ids) => {
                        self.tablet_batches(&db, &r.table, ids, s.var_true("show_hidden_columns"))?
                    }
                    RefKind::Incr(pairs) => vec![super::changelog::read(&self.engine, &db, &r.table, pairs, s).await?],
                };
                let name = r.relation.rsplit('.').next().unwrap_or_default().to_string();
                let table = mem_table(batches).map_err(|e| SqlError::other(e.to_string()))?;
                schema.register_table(name, table).map_err(|e| SqlError::other(e.to_string()))?;
            }
            let catalog = MemoryCatalogProvider::new();
            catalog.register_schema("refs", schema).map_err(|e| SqlError::other(e.to_string()))?;
            ctx.register_catalog("__dl", Arc::new(catalog));
        }
        self.run_df_batches(&ctx, s, &sql).await
    }

    /// The snapshots of the named tablets of a table.
    fn tablet_batches(&self, db: &str, table: &str, ids: &[i64], hidden: bool) -> Result<Vec<RecordBatch>, SqlError> {
        let mut st = self.engine.lock();
        let t = st.table_mut(db, table)?;
        let all = t.tablet_snapshots(hidden).map_err(SqlError::other)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match t.tablets.iter().position(|tb| tb.id == *id) {
                Some(i) => out.push(all[i].clone()),
                None => {
                    return Err(SqlError::other(format!("tablet [{id}] does not exist in table [{table}]")));
                }
            }
        }
        Ok(out)
    }

    /// Runs one statement for Arrow Flight SQL: query results as Arrow batches, other results as
    /// UTF-8 columns, statements without a result as the one-column `StatusResult` table (`0`).
    pub async fn execute_arrow(&self, s: &mut Session, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), SqlError> {
        let trimmed = sql.trim().trim_end_matches(';').trim();
        let stripped = strip_leading_comments(trimmed);
        let first: String = stripped.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
        if ["SELECT", "WITH", "VALUES"].iter().any(|k| first.eq_ignore_ascii_case(k)) || stripped.starts_with('(') {
            return self.query_batches(s, stripped).await;
        }
        let rs = match self.execute(s, sql).await? {
            Outcome::Rows(rs) => rs,
            Outcome::Done { .. } => ResultSet::strings(&["StatusResult"], vec![vec![Some("0".into())]]),
        };
        let names: Vec<&str> = rs.columns.iter().map(|(n, _)| n.as_str()).collect();
        let batch = string_batch(&names, rs.rows).map_err(|e| SqlError::other(e.to_string()))?;
        Ok((batch.schema(), vec![batch]))
    }

    pub(super) fn column_spellings(&self) -> std::collections::HashMap<String, String> {
        let st = self.engine.lock();
        let mut m = std::collections::HashMap::new();
        for d in st.dbs.values() {
            for t in d.tables.values() {
                for c in &t.schema.columns {
                    m.entry(c.name.to_ascii_lowercase()).or_insert_with(|| c.name.clone());
                }
                for (h, _) in t.schema.hidden_columns() {
                    m.entry(h.to_ascii_lowercase()).or_insert_with(|| h.to_string());
                }
            }
        }
        for n in [super::changelog::BINLOG_OP, super::changelog::BINLOG_TSO, super::changelog::BINLOG_LSN] {
            m.entry(n.to_ascii_lowercase()).or_insert_with(|| n.to_string());
        }
        for n in INFO_SCHEMA_UPPER {
            m.entry(n.to_ascii_lowercase()).or_insert_with(|| n.to_string());
        }
        m
    }

    pub(super) async fn query(&self, s: &Session, sql: &str) -> Result<Outcome, SqlError> {
        let (schema, batches) = self.query_batches(s, sql).await?;
        Ok(Outcome::Rows(batches_to_result(&schema, &batches)?))
    }
}

/// The labels Doris gives the items of a plain `SELECT` (as MySQL does): an expression's text as
/// written (`1`, `sum(x)`), a string literal's value (`'a'` → `a`), an alias. `None` where the
/// statement is not one plain SELECT without `*`.
fn select_labels(sql: &str) -> Option<Vec<Option<String>>> {
    use datafusion::sql::sqlparser::ast::{Expr, SelectItem, SetExpr, Statement, Value};
    let dialect = datafusion::sql::sqlparser::dialect::MySqlDialect {};
    let statements = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, sql).ok()?;
    let [Statement::Query(q)] = statements.as_slice() else { return None };
    let SetExpr::Select(select) = q.body.as_ref() else { return None };
    select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(Expr::Value(v)) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(Some(s.clone())),
                other => Some(Some(other.to_string())),
            },
            SelectItem::UnnamedExpr(e) => Some(Some(e.to_string())),
            SelectItem::ExprWithAlias { alias, .. } => Some(Some(alias.value.clone())),
            _ => None,
        })
        .collect()
}

/// The spelling of identifier `name` in `sql` (case-insensitive whole-word match).
fn spelling_in_sql(sql: &str, name: &str) -> Option<String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let lower = sql.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut from = 0;
    while let Some(i) = lower[from..].find(name) {
        let at = from + i;
        let end = at + name.len();
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let before_ok = at == 0 || !word(bytes[at - 1]);
        let after_ok = end >= bytes.len() || !word(bytes[end]);
        if before_ok && after_ok {
            return Some(sql[at..end].to_string());
        }
        from = end;
    }
    None
}
