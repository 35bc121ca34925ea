//! A CDC source's tables read again for `sluice verify`: ranges of the integer key, or of the
//! integer first column of a composite key, or between values read from the table's index of
//! another first key column (decimals, dates, UUIDs, text) — the whole table when it has none of
//! them — each read in one statement and turned into the batch the snapshot would send, through
//! the same dialect.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;

use super::chunks::Keyset;
use super::snapshot::{batch_of, cut_values};
use super::{CdcTable, Dialect, Found};
use crate::runtime::mirror::{Fingerprint, KeyRange, MAX_RANGES, MirrorSource, MirroredTable, RANGE_KEYS};

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

    /// ` WHERE …` of `range` of `table` (`t`), or nothing.
    fn filter(&self, t: &D::Table, table: &MirroredTable, range: &KeyRange) -> String {
        let Some(key) = table.range_key.as_deref() else { return String::new() };
        let literal = self.dialect.key_literal(t, &[key.to_string()]).map(|l| l[0]);
        range.filter(&self.dialect.quote(key), |v| literal.map_or_else(|| format!("'{v}'"), |l| l(v)))
    }

    /// The ranges of `t` in `key`: `RANGE_KEYS` wide of an integer, else between values about
    /// that many rows apart (at most about [`MAX_RANGES`]).
    async fn ranges_of(&self, session: &mut D::Session, t: &D::Table, key: &str) -> anyhow::Result<Vec<KeyRange>> {
        let field = t.schema().field_with_name(key)?.clone();
        if field.data_type().is_integer() {
            return Ok(match self.dialect.bounds(session, t, key).await? {
                Some((low, high)) => KeyRange::split(low, high, RANGE_KEYS),
                None => vec![KeyRange::ALL],
            });
        }
        let Some(literals) = self.dialect.key_literal(t, &[key.to_string()]) else { return Ok(vec![KeyRange::ALL]) };
        let by = Keyset { columns: vec![self.dialect.quote(key)], names: vec![key.to_string()], literals };
        let estimated = self.dialect.estimated_rows(session, t).await.unwrap_or(0);
        let rows = RANGE_KEYS.max(estimated.div_ceil(MAX_RANGES));
        let values = cut_values(&*self.dialect, session, t, &by, rows).await?;
        let values: Vec<String> = values.into_iter().filter_map(|v| v.into_iter().next()).collect();
        Ok(KeyRange::between(&values, field.data_type().is_numeric()))
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
                range_key: range_key(&*self.dialect, t),
            })
            .collect()
    }

    async fn ranges(&self, table: &MirroredTable) -> anyhow::Result<Vec<KeyRange>> {
        let t = self.table(table)?;
        let Some(key) = table.range_key.as_deref() else { return Ok(vec![KeyRange::ALL]) };
        let mut session = self.dialect.session(None).await?;
        let ranges = self.ranges_of(&mut session, &t, key).await;
        self.dialect.close(session).await;
        ranges
    }

    async fn read(&self, table: &MirroredTable, range: &KeyRange) -> anyhow::Result<RecordBatch> {
        let t = self.table(table)?;
        let filter = self.filter(&t, table, range);
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

    async fn fingerprint(&self, table: &MirroredTable, range: &KeyRange) -> anyhow::Result<Option<Fingerprint>> {
        let t = self.table(table)?;
        let Some((hash, text, sql)) = self.dialect.fingerprint(&t) else { return Ok(None) };
        let filter = self.filter(&t, table, range);
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
/// when that is an integer (both sides cut ranges of it alike, whatever their collations) or has
/// values the server compares as their literals say ([`Dialect::key_literal`]: numbers, dates,
/// UUIDs, text; a row whose text the server's collation and Doris sort apart falls in different
/// ranges on each side, which `sluice verify` pairs up again).
fn range_key<D: Dialect>(dialect: &D, t: &D::Table) -> Option<String> {
    let first = t.primary_key().first()?;
    let integer = t.schema().field_with_name(first).is_ok_and(|f| f.data_type().is_integer());
    let cut = integer || dialect.key_literal(t, std::slice::from_ref(first)).is_some();
    t.integer_key().or(cut.then_some(first.as_str())).map(str::to_string)
}
