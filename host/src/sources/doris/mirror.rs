//! A Doris source's table read again for `sluice verify` (a changelog mirror of one Doris table
//! in another): ranges of its integer key, read over Arrow Flight SQL as the snapshot reads it.

use std::sync::Arc;

use anyhow::Context;
use arrow::array::Array;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;

use super::DorisTable;
use crate::doris::scan::quote;
use crate::runtime::mirror::{KeyRange, MirrorSource, MirrorTarget, MirroredTable, RANGE_KEYS};
use crate::sinks::doris::mirror::DorisMirror;

/// The source table, and sessions to read it.
pub(super) struct DorisSourceMirror {
    pub table: DorisTable,
    pub reader: DorisMirror,
}

impl DorisSourceMirror {
    /// The integer key column ranges are cut on: the only column of `primary_key`, when it is one.
    fn range_key(&self) -> Option<String> {
        let key = self.table.config.primary_key_columns();
        let [only] = key.as_slice() else { return None };
        let field = self.table.schema.field_with_name(only).ok()?;
        field.data_type().is_integer().then(|| only.clone())
    }

    fn columns(&self) -> Vec<String> {
        self.table.schema.fields().iter().map(|f| f.name().clone()).collect()
    }
}

#[async_trait]
impl MirrorSource for DorisSourceMirror {
    fn tables(&self) -> Vec<MirroredTable> {
        vec![MirroredTable {
            id: self.table.table.clone(),
            schema: self.table.schema.clone(),
            key: self.table.config.primary_key_columns(),
            range_key: self.range_key(),
        }]
    }

    async fn ranges(&self, _table: &MirroredTable) -> anyhow::Result<Vec<KeyRange>> {
        let Some(key) = self.range_key() else { return Ok(vec![KeyRange::ALL]) };
        let sql = format!("SELECT MIN({0}), MAX({0}) FROM {1}", quote(&key), self.table.quoted());
        let mut flight = self.table.flight().await?;
        let (_, tickets) =
            flight.execute(&sql).await.with_context(|| format!("the bounds of `{}`", self.table.table))?;
        let mut bounds = None;
        for ticket in tickets {
            use futures::TryStreamExt;
            let batches: Vec<RecordBatch> = flight.stream(ticket).await?.try_collect().await?;
            for b in batches.iter().filter(|b| b.num_rows() > 0 && b.num_columns() == 2) {
                let value = |c: usize| -> Option<i64> {
                    let v = arrow::compute::cast(b.column(c), &DataType::Int64).ok()?;
                    let v = v.as_any().downcast_ref::<arrow::array::Int64Array>()?;
                    v.is_valid(0).then(|| v.value(0))
                };
                bounds = value(0).zip(value(1));
            }
        }
        Ok(match bounds {
            Some((low, high)) => KeyRange::split(low, high, RANGE_KEYS),
            None => vec![KeyRange::ALL],
        })
    }

    async fn read(&self, table: &MirroredTable, range: &KeyRange) -> anyhow::Result<RecordBatch> {
        let name = format!("{}.{}", self.table.db, self.table.name);
        let batches = self.reader.read(&name, &self.columns(), table.range_key.as_deref(), range).await?;
        let schema = self.table.schema.clone();
        let batches: Vec<RecordBatch> = batches
            .into_iter()
            .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
            .collect::<Result<_, _>>()?;
        Ok(arrow::compute::concat_batches(&schema, &batches)?)
    }
}

impl DorisTable {
    /// This table, read again by key range for `sluice verify`.
    pub(super) fn mirror_of(&self) -> Arc<dyn MirrorSource> {
        let reader = DorisMirror::reader(self.conn.clone(), format!("{}.{}", self.db, self.name));
        Arc::new(DorisSourceMirror { table: self.clone(), reader })
    }
}
