//! A CDC source's tables read again for `sluice verify`: ranges of the integer key, or of the
//! integer first column of a composite key (the whole table when it has neither), each read in one
//! statement and turned into the batch the snapshot would send, through the same dialect.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;

use super::snapshot::batch_of;
use super::{CdcTable, Dialect, Found};
use crate::runtime::mirror::{Fingerprint, KeyRange, MirrorSource, MirroredTable, RANGE_KEYS};

/// The tables of a CDC source (as its last run found them), with the dialect that reads them.
pub(crate) struct Mirror<D: Dialect> {
    pub dialect: Arc<D>,
    pub tables: Arc<Found<D::Table>>,
}

impl<D: Dialect> Mirror<D> {
    fn table(&self, t: &MirroredTable) -> anyhow::Result<D::Table> {
        self.tables
            .get()
            .iter()
            .find(|x| x.id() == &t.id)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("the source no longer reads `{}`", t.id))
    }
}

#[async_trait]
impl<D: Dialect> MirrorSource for Mirror<D> {
    fn tables(&self) -> Vec<MirroredTable> {
        self.tables
            .get()
            .iter()
            .map(|t| MirroredTable {
                id: t.id().clone(),
                schema: t.schema().clone(),
                key: t.primary_key().to_vec(),
                range_key: range_key(t),
            })
            .collect()
    }

    async fn ranges(&self, table: &MirroredTable) -> anyhow::Result<Vec<KeyRange>> {
        let t = self.table(table)?;
        let Some(key) = table.range_key.as_deref() else { return Ok(vec![KeyRange::ALL]) };
        let mut session = self.dialect.session(None).await?;
        let bounds = self.dialect.bounds(&mut session, &t, key).await;
        self.dialect.close(session).await;
        Ok(match bounds? {
            Some((low, high)) => KeyRange::split(low, high, RANGE_KEYS),
            None => vec![KeyRange::ALL],
        })
    }

    async fn read(&self, table: &MirroredTable, range: KeyRange) -> anyhow::Result<RecordBatch> {
        let t = self.table(table)?;
        let filter = table.range_key.as_deref().map(|k| range.filter(&self.dialect.quote(k))).unwrap_or_default();
        let sql = format!("{}{filter}", self.dialect.select(&t));
        let mut session = self.dialect.session(None).await?;
        let rows = self.dialect.rows(&mut session, &t, &sql).await;
        self.dialect.close(session).await;
        Ok(batch_of(&t, &rows?)?.data)
    }

    async fn unmirrored(&self, table: &MirroredTable) -> anyhow::Result<Vec<String>> {
        let t = self.table(table)?;
        let mut session = self.dialect.session(None).await?;
        let columns = self.dialect.unmirrored(&mut session, &t).await;
        self.dialect.close(session).await;
        columns
    }

    async fn fingerprint(&self, table: &MirroredTable, range: KeyRange) -> anyhow::Result<Option<Fingerprint>> {
        let t = self.table(table)?;
        let Some((hash, text, sql)) = self.dialect.fingerprint(&t) else { return Ok(None) };
        let filter = table.range_key.as_deref().map(|k| range.filter(&self.dialect.quote(k))).unwrap_or_default();
        let mut session = self.dialect.session(None).await?;
        let row = self.dialect.scalars(&mut session, &format!("{sql}{filter}")).await;
        self.dialect.close(session).await;
        let row = row?;
        let number = |i: usize| -> anyhow::Result<i128> {
            match row.get(i).cloned().flatten() {
                None => Ok(0),
                Some(v) => v.parse().map_err(|_| anyhow::anyhow!("`{}`: {v:?} is not a count or sum", t.id())),
            }
        };
        Ok(Some(Fingerprint { hash, text, rows: number(0)? as u64, sum: number(1)? }))
    }
}

/// The column `t` is compared in ranges of: its integer key, or its composite key's first column
/// when that is an integer (both sides cut ranges of it alike, whatever their collations).
fn range_key<T: CdcTable>(t: &T) -> Option<String> {
    let first = t.primary_key().first()?;
    let integer = t.schema().field_with_name(first).is_ok_and(|f| f.data_type().is_integer());
    t.integer_key().or(integer.then_some(first.as_str())).map(str::to_string)
}
