//! Point and `IN` lookups on the key of UNIQUE and AGGREGATE tables, answered from the tablets'
//! key maps rather than by filtering the whole table: the role Doris' short-key index and
//! short-circuit point queries play. Anything else, or a key not fully bound, is a full scan.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::ScalarValue;
use datafusion::datasource::{MemTable, TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use crate::engine::Engine;
use crate::storage::{KeysType, Table};
use crate::types::{DorisType, Value};

/// More candidate keys than this (the product of the values of each key column) scan instead.
const MAX_KEYS: usize = 65_536;

/// A table as DataFusion reads it: its committed rows, and for a keyed table the key columns
/// through which `k = v` and `k IN (…)` filters look rows up directly. The tablets' batches are
/// taken only when the scan needs the whole table, so a lookup after a write does not rebuild
/// them.
#[derive(Debug)]
pub struct KeyedScan {
    engine: Arc<Engine>,
    db: String,
    table: String,
    /// The table's columns (with the hidden ones when asked), names in lower case.
    schema: SchemaRef,
    hidden: bool,
    /// Lower-case name and type of each key column; empty when lookups do not apply.
    key: Vec<(String, DorisType)>,
}

impl KeyedScan {
    /// `table` of `db`, with its hidden columns when `hidden`.
    pub fn new(engine: Arc<Engine>, db: &str, table: &Table, hidden: bool) -> KeyedScan {
        // Lookups apply to UNIQUE and AGGREGATE tables read without hidden columns.
        let key = if hidden || table.schema.keys_type == KeysType::Duplicate {
            Vec::new()
        } else {
            let keys = &table.schema.columns[..table.schema.key_count];
            keys.iter().map(|c| (c.name.to_ascii_lowercase(), c.ty.clone())).collect()
        };
        let stored = table.arrow_schema(hidden, false);
        let fields: Vec<_> =
            stored.fields().iter().map(|f| f.as_ref().clone().with_name(f.name().to_ascii_lowercase())).collect();
        let schema = Arc::new(arrow::datatypes::Schema::new(fields));
        KeyedScan { engine, db: db.to_string(), table: table.name.clone(), schema, hidden, key }
    }

    /// The key column a filter binds and the values it allows, if it is `k = literal` or
    /// `k IN (literal, …)` on a key column with values of the column's type.
    fn key_terms(&self, e: &Expr) -> Option<(usize, Vec<Value>)> {
        let (column, literals): (&Expr, Vec<&Expr>) = match e {
            Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) => match (left.as_ref(), right.as_ref()) {
                (c @ Expr::Column(_), l @ Expr::Literal(..)) | (l @ Expr::Literal(..), c @ Expr::Column(_)) => {
                    (c, vec![l])
                }
                _ => return None,
            },
            Expr::InList(list) if !list.negated => (list.expr.as_ref(), list.list.iter().collect()),
            _ => return None,
        };
        let Expr::Column(col) = column else { return None };
        let idx = self.key.iter().position(|(name, _)| name.eq_ignore_ascii_case(&col.name))?;
        let ty = &self.key[idx].1;
        let values = literals
            .into_iter()
            .map(|l| match l {
                Expr::Literal(v, _) => key_value(v, ty),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some((idx, values))
    }

    /// The rows whose keys the filters bind, or `None` when they do not bind every key column.
    fn lookup(&self, filters: &[Expr]) -> Result<Option<arrow::record_batch::RecordBatch>> {
        if self.key.is_empty() {
            return Ok(None);
        }
        let mut bound: Vec<Option<Vec<Value>>> = vec![None; self.key.len()];
        for (idx, values) in filters.iter().filter_map(|f| self.key_terms(f)) {
            // Two filters on one column: the first is enough (DataFusion applies both after).
            bound[idx].get_or_insert(values);
        }
        let Some(columns) = bound.into_iter().collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        if columns.iter().map(Vec::len).try_fold(1usize, |n, c| n.checked_mul(c)).is_none_or(|n| n > MAX_KEYS) {
            return Ok(None);
        }
        let mut keys: BTreeSet<Vec<Value>> = BTreeSet::new();
        keys.insert(Vec::new());
        for values in columns {
            keys = keys
                .into_iter()
                .flat_map(|prefix| {
                    values.iter().map(move |v| {
                        let mut k = prefix.clone();
                        k.push(v.clone());
                        k
                    })
                })
                .collect();
        }
        let st = self.engine.lock();
        let table = st.table(&self.db, &self.table).map_err(|e| DataFusionError::Execution(e.to_string()))?;
        // Tablet order, then key order: the order a full scan returns them in.
        let rows: Vec<Vec<Value>> = table
            .tablets
            .iter()
            .flat_map(|tablet| keys.iter().filter_map(|k| tablet.keyed.get(k)).filter(|r| !r.deleted))
            .map(|r| r.values.clone())
            .collect();
        let types: Vec<DorisType> = table.schema.columns.iter().map(|c| c.ty.clone()).collect();
        let batch = crate::storage::batch_of(&self.schema, &types, &rows).map_err(DataFusionError::Execution)?;
        Ok(Some(batch))
    }
}

/// A literal as the stored value of a key column of type `ty`; `None` for a literal of another
/// kind (the filter is then applied by a scan, as written).
fn key_value(v: &ScalarValue, ty: &DorisType) -> Option<Value> {
    let integral = matches!(ty, DorisType::TinyInt | DorisType::SmallInt | DorisType::Int | DorisType::BigInt);
    let text = matches!(ty, DorisType::Char(_) | DorisType::Varchar(_) | DorisType::String);
    let parsed = match v {
        ScalarValue::Int8(Some(_))
        | ScalarValue::Int16(Some(_))
        | ScalarValue::Int32(Some(_))
        | ScalarValue::Int64(Some(_))
        | ScalarValue::UInt8(Some(_))
        | ScalarValue::UInt16(Some(_))
        | ScalarValue::UInt32(Some(_))
        | ScalarValue::UInt64(Some(_))
            if integral =>
        {
            ty.parse_text(&v.to_string())
        }
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)) if text => {
            ty.parse_text(s)
        }
        _ => return None,
    };
    parsed.ok()
}

#[async_trait]
impl TableProvider for KeyedScan {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| match self.key_terms(f) {
                Some(_) => TableProviderFilterPushDown::Inexact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match self.lookup(filters)? {
            Some(batch) => {
                MemTable::try_new(self.schema(), vec![vec![batch]])?.scan(state, projection, &[], limit).await
            }
            None => {
                // Only the columns the query reads are converted.
                let batches = {
                    let mut st = self.engine.lock();
                    let table =
                        st.table_mut(&self.db, &self.table).map_err(|e| DataFusionError::Execution(e.to_string()))?;
                    table
                        .tablet_columns(self.hidden, projection.map(Vec::as_slice))
                        .map_err(DataFusionError::Execution)?
                };
                crate::sql::mem_table(batches)?.scan(state, None, &[], limit).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::{col, lit};

    use super::*;
    use crate::engine::EngineConfig;

    fn scan(ddl: &str) -> KeyedScan {
        let engine = Arc::new(Engine::new(EngineConfig::default(), None).unwrap());
        engine.ddl(None, "CREATE DATABASE d").unwrap();
        engine.ddl(Some("d"), ddl).unwrap();
        let st = engine.lock();
        let t = st.table("d", "t").unwrap();
        let s = KeyedScan::new(engine.clone(), "d", t, false);
        drop(st);
        s
    }

    #[test]
    fn lookups_need_every_key_column_bound_by_literals_of_its_type() {
        let s = scan("CREATE TABLE t (a INT, b VARCHAR(4), v INT) UNIQUE KEY(a, b) DISTRIBUTED BY HASH(a) BUCKETS 2");
        let a = col("a").in_list(vec![lit(1i64), lit(2i64)], false);
        let b = col("b").eq(lit("x"));
        assert!(s.lookup(&[a.clone(), b.clone()]).unwrap().is_some());
        assert!(s.lookup(std::slice::from_ref(&a)).unwrap().is_none(), "b is not bound");
        assert!(s.key_terms(&col("v").eq(lit(1i64))).is_none(), "v is not a key column");
        assert!(s.key_terms(&col("a").eq(lit("1"))).is_none(), "a string for an INT key scans");
        assert!(s.key_terms(&col("b").eq(lit("toolong"))).is_none(), "longer than the column");
        assert!(s.key_terms(&col("a").in_list(vec![lit(1i64)], true)).is_none(), "NOT IN scans");
        let many = col("a").in_list((0..300i64).map(lit).collect(), false);
        let many_b = col("b").in_list((0..300).map(|i| lit(i.to_string())).collect(), false);
        assert!(s.lookup(&[many, many_b]).unwrap().is_none(), "90,000 candidate keys scan");
        let dup = scan("CREATE TABLE t (a INT, v INT) DUPLICATE KEY(a) DISTRIBUTED BY HASH(a) BUCKETS 2");
        assert!(dup.key_terms(&col("a").eq(lit(1i64))).is_none(), "DUPLICATE tables scan");
    }
}
