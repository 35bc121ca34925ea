//! The source of `sluice dlq replay`: chosen dead letters, read back as rows with their own
//! columns and row kinds, each once. Its position is the set of letters it has delivered, so a
//! replay stopped at any moment goes on where its last checkpoint left it, and a letter
//! delivered in a completed checkpoint is never delivered again.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::runtime::{Event, Position, Source, SourceReader, SplitEnumerator, TableId};
use crate::{Batch, RowKind};

/// A dead letter to send back through the pipeline.
#[derive(Debug, Clone)]
pub struct Letter {
    /// Names it within the dead-letter target: `pipeline/checkpoint/worker/seq`.
    pub key: String,
    /// The table its rows are of, as the source named it (or for Doris' refusals, `db.table`).
    pub table: String,
    /// The table it goes to, when it was routed (or refused by Doris): the batch's `table`.
    pub target: Option<String>,
    /// Its columns in Doris syntax.
    pub columns: String,
    pub kind: RowKind,
    /// The row, column name → value.
    pub record: serde_json::Map<String, serde_json::Value>,
}

impl Letter {
    /// `letter` of a dead-letter target (`dlq show --json`'s object) as a row to replay, or why
    /// it cannot be one.
    pub fn read(letter: &serde_json::Value) -> Result<Letter, (String, String)> {
        let text = |k: &str| field_text(&letter[k]);
        let key = key_of(letter);
        let columns = text("columns");
        if columns.is_empty() {
            return Err((
                key,
                "only Doris' text of this row is known (a load without two-phase commit); it cannot be replayed".into(),
            ));
        }
        let kind = [RowKind::Insert, RowKind::UpdateBefore, RowKind::UpdateAfter, RowKind::Delete]
            .into_iter()
            .find(|k| k.short() == text("row_kind"))
            .ok_or_else(|| (key.clone(), format!("row kind {:?} is none of +I, -U, +U, -D", text("row_kind"))))?;
        let record = match &letter["record"] {
            serde_json::Value::Object(o) => o.clone(),
            serde_json::Value::String(s) => serde_json::from_str(s).map_err(|e| (key.clone(), e.to_string()))?,
            other => return Err((key, format!("record {other} is not a row"))),
        };
        let target = match text("stage").as_str() {
            "plugin" => None,
            "route" => Some(text("refused_by")),
            // Doris' refusals name the Doris table they were loaded into.
            "doris" => Some(text("source_table")),
            other => return Err((key, format!("stage {other:?} is none of plugin, route, doris"))),
        };
        Ok(Letter { key, table: text("source_table"), target, columns, kind, record })
    }
}

/// `pipeline/checkpoint/worker/seq` of a dead letter (`dlq show --json`'s object).
pub fn key_of(letter: &serde_json::Value) -> String {
    let part = |k: &str| field_text(&letter[k]);
    format!("{}/{}/{}/{}", part("pipeline"), part("checkpoint"), part("worker"), part("seq"))
}

/// A field of a dead letter as text: a string as it is, a missing field or null as nothing,
/// anything else as JSON.
pub fn field_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Where a replay stands: the letters it has delivered.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Replayed {
    pub replayed: BTreeSet<String>,
}

impl Position for Replayed {}

/// The letters to replay; one worker reads them.
pub struct LetterSource {
    name: String,
    letters: Arc<Vec<Letter>>,
}

impl LetterSource {
    pub fn new(name: &str, letters: Vec<Letter>) -> LetterSource {
        LetterSource { name: name.to_string(), letters: Arc::new(letters) }
    }
}

#[async_trait]
impl Source for LetterSource {
    fn schema(&self) -> Option<SchemaRef> {
        None
    }

    async fn enumerator(&self, _restored: &[Option<serde_json::Value>]) -> anyhow::Result<Box<dyn SplitEnumerator>> {
        Ok(Box::new(Enumerator { name: self.name.clone(), letters: self.letters.clone() }))
    }

    fn describe(&self) -> String {
        format!("{} dead letters", self.letters.len())
    }
}

struct Enumerator {
    name: String,
    letters: Arc<Vec<Letter>>,
}

#[async_trait]
impl SplitEnumerator for Enumerator {
    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>> {
        let done = Replayed::restore(position, &self.name)?;
        let todo = if worker == 0 {
            self.letters.iter().filter(|l| !done.replayed.contains(&l.key)).cloned().collect()
        } else {
            Vec::new()
        };
        Ok(Box::new(Reader { todo: todo.into_iter().peekable(), done }))
    }

    fn total_rows(&self) -> Option<u64> {
        Some(self.letters.len() as u64)
    }
}

struct Reader {
    todo: std::iter::Peekable<std::vec::IntoIter<Letter>>,
    done: Replayed,
}

#[async_trait]
impl SourceReader for Reader {
    async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        let Some(first) = self.todo.next() else { return Ok(None) };
        // Letters of one table, target and columns in a row go as one batch.
        let mut group = vec![first];
        while let Some(l) = self.todo.next_if(|l| {
            let f = &group[0];
            l.table == f.table && l.target == f.target && l.columns == f.columns
        }) {
            group.push(l);
        }
        let batch = to_batch(&group)?;
        self.done.replayed.extend(group.iter().map(|l| l.key.clone()));
        Ok(Some(Event::data(&TableId::new(group[0].table.as_str()), batch)))
    }

    fn position(&self) -> serde_json::Value {
        self.done.to_value()
    }
}

/// Letters of one table, target and columns as one batch.
fn to_batch(letters: &[Letter]) -> anyhow::Result<Batch> {
    let first = &letters[0];
    let columns = sluice_guest::types::parse_columns(&first.columns)
        .map_err(|e| anyhow::anyhow!("dead letter {}: columns {:?}: {}", first.key, first.columns, e.message))?;
    let schema = sluice_guest::types::arrow_schema(&columns);
    let mut decoder = arrow::json::ReaderBuilder::new(schema).with_batch_size(letters.len().max(1)).build_decoder()?;
    for l in letters {
        decoder
            .serialize(std::slice::from_ref(&l.record))
            .with_context(|| format!("dead letter {}: its record does not fit its columns ({})", l.key, l.columns))?;
    }
    let data = decoder.flush()?.context("no rows decoded")?;
    Ok(Batch { table: first.target.clone(), data, row_kinds: letters.iter().map(|l| l.kind).collect() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(seq: u64, stage: &str, record: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "pipeline": "p", "checkpoint": 3, "worker": 0, "seq": seq, "stage": stage,
            "component": "c", "refused_by": "db.t2", "source_table": "db.t", "reason": "bad",
            "row_kind": "+I", "record": record, "columns": "id BIGINT NOT NULL, name VARCHAR(8), day DATE"
        })
    }

    #[tokio::test]
    async fn letters_come_back_as_rows_with_their_types_and_once() {
        let letters: Vec<Letter> = (0..3)
            .map(|i| {
                Letter::read(&letter(
                    i,
                    "route",
                    serde_json::json!({"id": i, "name": null, "day": format!("2024-05-0{}", i + 1)}),
                ))
            })
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(letters[1].key, "p/3/0/1");
        let source = LetterSource::new("dead_letters", letters);
        let mut e = source.enumerator(&[None]).await.unwrap();
        let mut r = e.reader(0, None).await.unwrap();
        let Some(Event::Data { table, batch }) = r.next().await.unwrap() else { panic!("no batch") };
        assert_eq!((table.as_str(), batch.table.as_deref(), batch.num_rows()), ("db.t", Some("db.t2"), 3));
        assert_eq!(
            sluice_guest::types::format_columns(&sluice_guest::types::columns_of(&batch.schema()).unwrap()),
            "id BIGINT NOT NULL, name VARCHAR(8), day DATE"
        );
        let position = r.position();
        assert!(r.next().await.unwrap().is_none());
        // Resumed from that position, nothing is delivered twice.
        let mut again = e.reader(0, Some(&position)).await.unwrap();
        assert!(again.next().await.unwrap().is_none());
    }

    #[test]
    fn a_letter_known_only_as_doris_text_is_refused_with_its_key() {
        let mut l = letter(7, "doris", serde_json::json!({"src_line": "1,x"}));
        l["columns"] = "".into();
        let (key, why) = Letter::read(&l).unwrap_err();
        assert_eq!(key, "p/3/0/7");
        assert!(why.contains("cannot be replayed"), "{why}");
    }
}
