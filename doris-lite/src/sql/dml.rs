//! Statements that change rows: `INSERT [OVERWRITE]`, `DELETE` and `UPDATE`, each committed as
//! one load transaction.

use std::sync::Arc;

use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider, SchemaProvider};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::catalog::{lower_case_fields, mem_table};
use super::{Executor, Outcome, Session, SqlError};
use crate::ddl::Parser;
use crate::engine::EngineError;
use crate::storage::{DELETE_SIGN, KeysType, ROWID_COL, RowOp, SEQUENCE_COL, TableWrite};
use crate::types::Value;

fn hex_id() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let n = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:016x}{:016x}", n as u64, (n >> 64) as u64 ^ 0x9e3779b97f4a7c15)
}

impl Executor {
    pub(super) async fn insert(&self, s: &mut Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.advance();
        let overwrite = !p.eat_kw("INTO");
        if overwrite {
            p.expect_kw("OVERWRITE")?;
        }
        p.eat_kw("TABLE");
        let name = p.object_name()?;
        let db = self.resolve(s, &name)?;
        if p.is_kw("PARTITION") || p.is_kw("PARTITIONS") {
            if overwrite {
                // Rows are not partitioned here: replacing the whole table would destroy the
                // other partitions' rows.
                return Err(SqlError::other(format!(
                    "doris-lite does not support INSERT OVERWRITE of single partitions (table `{}`); \
                     overwrite the whole table instead",
                    name.name
                )));
            }
            p.advance();
            p.ident_list()?;
        }
        let mut label = None;
        if p.eat_kws(&["WITH", "LABEL"]) {
            label = Some(p.ident()?);
        }
        let cols = if matches!(p.peek(), Token::LParen) && !p.is_kw_at(1, "SELECT") && !p.is_kw_at(1, "WITH") {
            Some(p.ident_list()?)
        } else {
            None
        };
        let query = p.rest().to_string();
        if query.is_empty() {
            return Err(SqlError { code: 1064, message: "Syntax error: INSERT needs VALUES or SELECT".into() });
        }
        let schema = self.engine.lock().table(&db, &name.name)?.schema.clone();
        if overwrite && schema.changelog_enabled() {
            return Err(SqlError::other(format!(
                "doris-lite does not support INSERT OVERWRITE into table `{}`, whose changelog would not record \
                 the rows it replaces",
                name.name
            )));
        }
        let targets: Vec<String> = match &cols {
            Some(c) => c.clone(),
            None => schema.columns.iter().map(|c| c.name.clone()).collect(),
        };
        for c in &targets {
            if schema.column_index(c).is_none()
                && !c.eq_ignore_ascii_case(DELETE_SIGN)
                && !c.eq_ignore_ascii_case(SEQUENCE_COL)
            {
                return Err(EngineError::UnknownColumn(c.clone(), name.name.clone()).into());
            }
        }
        let ctx = self.context(s);
        let rs = self.run_df(&ctx, s, &query).await?;
        if rs.columns.len() != targets.len() {
            return Err(SqlError::other("Column count doesn't match value count"));
        }
        let partial = !overwrite
            && s.var_true("enable_unique_key_partial_update")
            && cols.is_some()
            && schema.keys_type == KeysType::Unique;
        let strict = s.var_true("enable_insert_strict");
        let map: Vec<Option<usize>> =
            schema.columns.iter().map(|c| targets.iter().position(|t| t.eq_ignore_ascii_case(&c.name))).collect();
        let del_idx = targets.iter().position(|t| t.eq_ignore_ascii_case(DELETE_SIGN));
        let seq_idx = targets.iter().position(|t| t.eq_ignore_ascii_case(SEQUENCE_COL));
        let seq_type = schema.sequence_type();
        let mut ops = Vec::with_capacity(rs.rows.len());
        let mut filtered = 0u64;
        for row in &rs.rows {
            let mut values = Vec::with_capacity(schema.columns.len());
            let mut ok = true;
            for (ci, c) in schema.columns.iter().enumerate() {
                let v = match map[ci] {
                    Some(i) => match &row[i] {
                        None if c.nullable => Ok(Value::Null),
                        None => {
                            Err(format!("Insert has filtered data in strict mode. column `{}` is not nullable", c.name))
                        }
                        Some(text) => c.ty.parse_text(text),
                    },
                    None => c.default_value(),
                };
                match v {
                    Ok(v) => values.push(v),
                    Err(e) => {
                        if strict {
                            return Err(SqlError::other(format!("Insert has filtered data in strict mode. {e}")));
                        }
                        ok = false;
                        break;
                    }
                }
            }
            if !ok {
                filtered += 1;
                continue;
            }
            let delete = del_idx.and_then(|i| row[i].as_deref()).is_some_and(|v| v != "0");
            let seq = match (seq_idx, &seq_type) {
                (Some(i), Some(t)) => row[i].as_deref().and_then(|v| t.parse_text(v).ok()).unwrap_or(Value::Null),
                _ => Value::Null,
            };
            ops.push(RowOp { values, delete, seq });
        }
        let _ = filtered;
        let affected = ops.len() as u64;
        let mask = partial.then(|| map.iter().map(|m| m.is_some()).collect());
        let label = label.unwrap_or_else(|| format!("insert_{}", hex_id()));
        let begun = self.engine.begin(&db, &name.name, &label)?;
        let txn = begun.txn_id;
        let write = if overwrite { TableWrite::Overwrite(ops) } else { TableWrite::Rows { ops, partial: mask } };
        if let Err(e) = self.engine.commit(txn, write) {
            self.engine.abort(txn, &e.to_string());
            return Err(e.into());
        }
        Ok(Outcome::Done { affected, info: format!("{{'label':'{label}', 'status':'VISIBLE', 'txnId':'{txn}'}}") })
    }

    pub(super) async fn delete(&self, s: &mut Session, p: &mut Parser<'_>) -> Result<Outcome, SqlError> {
        p.advance();
        p.expect_kw("FROM")?;
        let name = p.object_name()?;
        let db = self.resolve(s, &name)?;
        // Doris' grammar: `DELETE FROM t [alias] [PARTITION …] [USING …] [WHERE …]`. Anything
        // else is a syntax error — never a condition wider than the one written.
        let alias = if p.eat_kw("AS") {
            Some(p.ident()?)
        } else {
            match p.peek() {
                Token::Word(w) if w.quote_style.is_some() || !reserved_word(&w.value) => Some(p.ident()?),
                _ => None,
            }
        };
        if p.eat_kw("PARTITION") || p.eat_kw("PARTITIONS") {
            if matches!(p.peek(), Token::LParen) {
                p.ident_list()?;
            } else {
                p.ident()?;
            }
        }
        if p.is_kw("USING") {
            return Err(SqlError::other(
                "DELETE … USING is not supported by doris-lite; delete by a condition on the table's own columns",
            ));
        }
        let cond = if p.eat_kw("WHERE") {
            let cond = p.rest().to_string();
            if cond.is_empty() {
                p.unexpected_here("a condition after WHERE")?;
            }
            cond
        } else {
            p.expect_end()?;
            "true".to_string()
        };
        // Columns may be qualified by the alias, else by the table's name (`t.col`, as SQLAlchemy
        // writes them).
        let qualifier = alias.unwrap_or_else(|| name.name.clone()).replace('`', "``");
        for _attempt in 0..5 {
            let target = self.dml_target(s, &db, &name.name)?;
            let (version, keys_type, hidden) = (target.version, target.keys_type, target.hidden);
            let q = format!("SELECT * FROM {TARGET} AS `{qualifier}` WHERE {cond}");
            let rs = self.run_df(&target.ctx, s, &q).await?;
            let rowid_col = rs.columns.iter().position(|(n, _)| n == ROWID_COL).unwrap_or(0);
            let affected = rs.rows.len() as u64;
            let write = match keys_type {
                KeysType::Duplicate => TableWrite::DeleteRowIds(
                    rs.rows.iter().filter_map(|r| r[rowid_col].as_deref().and_then(|v| v.parse().ok())).collect(),
                ),
                _ => {
                    let st = self.engine.lock();
                    let t = st.table(&db, &name.name)?;
                    let seq_pos = rs.columns.iter().position(|(n, _)| n.eq_ignore_ascii_case(SEQUENCE_COL));
                    let seq_ty = t.schema.sequence_type();
                    let ops = rs
                        .rows
                        .iter()
                        .map(|r| {
                            let values = t
                                .schema
                                .columns
                                .iter()
                                .enumerate()
                                .map(|(i, c)| {
                                    r[i].as_deref().and_then(|v| c.ty.parse_text(v).ok()).unwrap_or(Value::Null)
                                })
                                .collect();
                            let seq = match (seq_pos, &seq_ty) {
                                (Some(i), Some(ty)) if hidden => {
                                    r[i].as_deref().and_then(|v| ty.parse_text(v).ok()).unwrap_or(Value::Null)
                                }
                                _ => Value::Null,
                            };
                            RowOp { values, delete: true, seq }
                        })
                        .collect();
                    TableWrite::Rows { ops, partial: None }
                }
            };
            match self.commit_unless_changed(&db, &name.name, "delete", version, affected, write)? {
                Some(done) => return Ok(done),
                None => continue,
            }
        }
        Err(SqlError::other("DELETE conflicted with concurrent loads, please retry"))
    }

    /// A snapshot of the table a DELETE or UPDATE changes (with its row ids, and the hidden
    /// columns when it has a sequence), registered as [`TARGET`] in a context that also sees
    /// every table of the catalog (for `UPDATE … FROM`).
    fn dml_target(&self, s: &Session, db: &str, table: &str) -> Result<DmlTarget, SqlError> {
        let (batch, version, keys_type, hidden) = {
            let mut st = self.engine.lock();
            let t = st.table_mut(db, table)?;
            let keys_type = t.schema.keys_type;
            let hidden = keys_type == KeysType::Unique && t.schema.has_sequence();
            let b = lower_case_fields(t.snapshot(hidden, true).map_err(SqlError::other)?)
                .map_err(|e| SqlError::other(e.to_string()))?;
            (b, t.data_version, keys_type, hidden)
        };
        let ctx = self.context(s);
        let schema = Arc::new(MemorySchemaProvider::new());
        let table = mem_table(vec![batch]).map_err(|e| SqlError::other(e.to_string()))?;
        schema.register_table("__target".into(), table).map_err(|e| SqlError::other(e.to_string()))?;
        let catalog = MemoryCatalogProvider::new();
        catalog.register_schema("dml", schema).map_err(|e| SqlError::other(e.to_string()))?;
        ctx.register_catalog("__dl_dml", Arc::new(catalog));
        Ok(DmlTarget { ctx, version, keys_type, hidden })
    }

    /// Commits `write` in a transaction labelled `<kind>_…`, unless the table changed since the
    /// snapshot the write was computed from (then `None`: compute it again).
    fn commit_unless_changed(
        &self,
        db: &str,
        table: &str,
        kind: &str,
        version: u64,
        affected: u64,
        write: TableWrite,
    ) -> Result<Option<Outcome>, SqlError> {
        let label = format!("{kind}_{}", hex_id());
        let begun = self.engine.begin(db, table, &label)?;
        {
            let st = self.engine.lock();
            if st.table(db, table)?.data_version != version {
                drop(st);
                self.engine.abort(begun.txn_id, "concurrent write, retrying");
                return Ok(None);
            }
        }
        self.engine.commit(begun.txn_id, write)?;
        Ok(Some(Outcome::Done {
            affected,
            info: format!("{{'label':'{label}', 'status':'VISIBLE', 'txnId':'{}'}}", begun.txn_id),
        }))
    }

    /// `UPDATE t [alias] SET col = expr, … [FROM t2 [JOIN …]] [WHERE …]` on a UNIQUE table, as
    /// Doris runs it: an insert of every matching row with the assigned columns replaced, so the
    /// changelog records update-before/after. Anything else Doris' grammar does not have is an
    /// error.
    pub(super) async fn update(&self, s: &mut Session, sql: &str) -> Result<Outcome, SqlError> {
        use datafusion::sql::sqlparser::ast::{
            AssignmentTarget, ObjectNamePart, Statement, TableFactor, UpdateTableFromKind,
        };
        let dialect = datafusion::sql::sqlparser::dialect::MySqlDialect {};
        let syntax =
            |detail: String| SqlError { code: 1064, message: format!("Syntax error in line 1:\n{sql}\n{detail}") };
        let mut statements =
            datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, sql).map_err(|e| syntax(e.to_string()))?;
        let (Some(Statement::Update(u)), None) = (statements.pop(), statements.pop()) else {
            return Err(syntax("Expected: one UPDATE statement".into()));
        };
        if !u.table.joins.is_empty()
            || u.returning.is_some()
            || u.output.is_some()
            || u.or.is_some()
            || !u.order_by.is_empty()
            || u.limit.is_some()
            || !u.optimizer_hints.is_empty()
            || matches!(u.from, Some(UpdateTableFromKind::BeforeSet(_)))
        {
            return Err(syntax(
                "Expected: UPDATE table [alias] SET column = expression, … [FROM relations] [WHERE condition]".into(),
            ));
        }
        let TableFactor::Table { name: tname, alias, args: None, partitions, .. } = &u.table.relation else {
            return Err(syntax("Expected: a table name after UPDATE".into()));
        };
        let parts: Vec<String> = tname
            .0
            .iter()
            .map(|p| match p {
                ObjectNamePart::Identifier(i) => Ok(i.value.clone()),
                other => Err(syntax(format!("Encountered: {other}"))),
            })
            .collect::<Result<_, _>>()?;
        let (db, table) = match parts.as_slice() {
            [t] => (s.db.clone().ok_or(EngineError::NoDatabase)?, t.clone()),
            [d, t] => (d.clone(), t.clone()),
            [_, d, t] => (d.clone(), t.clone()),
            _ => return Err(syntax(format!("Encountered: {tname}"))),
        };
        if !partitions.is_empty() {
            return Err(syntax("Encountered: PARTITION".into()));
        }
        let alias = alias.as_ref().map(|a| a.name.value.clone());
        let schema = self.engine.lock().table(&db, &table)?.schema.clone();
        if schema.keys_type != KeysType::Unique {
            return Err(SqlError::other("Only unique table could be updated."));
        }
        // Each assignment names a column of the target, qualified (if at all) by its alias, or
        // by its name when it has none.
        let qualifier = alias.clone().unwrap_or_else(|| table.clone());
        let mut assigned: Vec<Option<String>> = vec![None; schema.columns.len()];
        let mut unknown = Vec::new();
        for a in &u.assignments {
            let AssignmentTarget::ColumnName(col) = &a.target else {
                return Err(syntax(format!("Encountered: {}", a.target)));
            };
            let names: Vec<String> = col.0.iter().map(|p| p.to_string().trim_matches('`').to_string()).collect();
            let invalid = || SqlError::other(format!("column in assignment list is invalid, {}", names.join(".")));
            match names.as_slice() {
                [_] => {}
                [t, _] if t.eq_ignore_ascii_case(&qualifier) => {}
                [d, t, _] if alias.is_none() && d.eq_ignore_ascii_case(&db) && t.eq_ignore_ascii_case(&table) => {}
                _ => return Err(invalid()),
            }
            let column = names.last().cloned().unwrap_or_default();
            match schema.column_index(&column) {
                Some(i) if i < schema.key_count => {
                    return Err(SqlError::other("Only value columns of unique table could be updated"));
                }
                Some(i) => assigned[i] = Some(a.value.to_string()),
                None => unknown.push(column),
            }
        }
        if !unknown.is_empty() {
            return Err(SqlError::other(format!("unknown column in assignment list: {}", unknown.join(", "))));
        }
        let q = qualifier.replace('`', "``");
        let mut items: Vec<String> = schema
            .columns
            .iter()
            .zip(&assigned)
            .map(|(c, a)| match a {
                Some(expr) => format!("({expr})"),
                None => format!("`{q}`.`{}`", c.name.replace('`', "``")),
            })
            .collect();
        let hidden_seq = schema.sequence_type().is_some();
        if hidden_seq {
            items.push(format!("`{q}`.`{}`", SEQUENCE_COL.to_ascii_lowercase()));
        }
        let from = match &u.from {
            Some(UpdateTableFromKind::AfterSet(from)) => {
                format!(", {}", from.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(", "))
            }
            _ => String::new(),
        };
        let filter = u.selection.as_ref().map(|w| format!(" WHERE {w}")).unwrap_or_default();
        let query = format!("SELECT {} FROM {TARGET} AS `{q}`{from}{filter}", items.join(", "));
        let seq_ty = schema.sequence_type();
        for _attempt in 0..5 {
            let target = self.dml_target(s, &db, &table)?;
            let rs = self.run_df(&target.ctx, s, &query).await?;
            let mut ops = Vec::with_capacity(rs.rows.len());
            for row in &rs.rows {
                let mut values = Vec::with_capacity(schema.columns.len());
                for (i, c) in schema.columns.iter().enumerate() {
                    values.push(match &row[i] {
                        None if c.nullable => Value::Null,
                        None => {
                            return Err(SqlError::other(format!(
                                "Insert has filtered data in strict mode. column `{}` is not nullable",
                                c.name
                            )));
                        }
                        Some(text) => {
                            c.ty.parse_text(text)
                                .map_err(|e| SqlError::other(format!("Insert has filtered data in strict mode. {e}")))?
                        }
                    });
                }
                let seq = match (&seq_ty, hidden_seq) {
                    (Some(ty), true) => {
                        row[schema.columns.len()].as_deref().and_then(|v| ty.parse_text(v).ok()).unwrap_or(Value::Null)
                    }
                    _ => Value::Null,
                };
                ops.push(RowOp { values, delete: false, seq });
            }
            let affected = ops.len() as u64;
            let write = TableWrite::Rows { ops, partial: None };
            if let Some(done) = self.commit_unless_changed(&db, &table, "update", target.version, affected, write)? {
                return Ok(done);
            }
        }
        Err(SqlError::other("UPDATE conflicted with concurrent loads, please retry"))
    }
}

/// A word that cannot be an unquoted table alias: the keywords sqlparser reserves after a table
/// name, and those of conditions and statements.
fn reserved_word(word: &str) -> bool {
    use datafusion::sql::sqlparser::keywords::{ALL_KEYWORDS, ALL_KEYWORDS_INDEX, RESERVED_FOR_TABLE_ALIAS};
    const MORE: &[&str] = &[
        "FROM",
        "AND",
        "OR",
        "NOT",
        "IN",
        "IS",
        "NULL",
        "LIKE",
        "BETWEEN",
        "PARTITIONS",
        "TABLE",
        "INTO",
        "VALUES",
        "DELETE",
        "UPDATE",
        "INSERT",
        "AS",
        "BY",
    ];
    let upper = word.to_ascii_uppercase();
    MORE.contains(&upper.as_str())
        || ALL_KEYWORDS
            .binary_search(&upper.as_str())
            .is_ok_and(|i| RESERVED_FOR_TABLE_ALIAS.contains(&ALL_KEYWORDS_INDEX[i]))
}

/// Where a DELETE or UPDATE reads the rows it changes.
const TARGET: &str = "__dl_dml.dml.__target";

/// See [`Executor::dml_target`].
struct DmlTarget {
    ctx: SessionContext,
    version: u64,
    keys_type: KeysType,
    hidden: bool,
}
