//! `type = "file"`: a CSV or JSON-lines file, read once (bounded).

use std::fs::File;
use std::io::{BufRead, BufReader, Seek};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use serde::Deserialize;
use sluice_guest::types::{arrow_schema, parse_columns};

use super::RowPosition;
use crate::Batch;
use crate::pipeline::{BuildContext, Checked, PipelineFile, SourceConfig};
use crate::runtime::{Event, Position, Source, SourceReader, SplitEnumerator, TableId};

/// `type = "file"`: the options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSource {
    pub name: Option<String>,
    pub path: PathBuf,
    /// `csv` (default) or `json` (one object per line).
    #[serde(default)]
    pub format: FileFormat,
    /// Columns in Doris syntax.
    pub schema: String,
    /// CSV column separator (default `,`).
    #[serde(default = "default_separator")]
    pub column_separator: String,
}

fn default_separator() -> String {
    ",".into()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    #[default]
    Csv,
    Json,
}

/// The reader of a file: worker 0 reads it; the others have nothing to read.
pub struct FileReader {
    table: TableId,
    path: PathBuf,
    rows: u64,
    inner: Option<FileBatches>,
}

enum FileBatches {
    Csv(Box<arrow::csv::Reader<BufReader<File>>>),
    Json(arrow::json::Reader<BufReader<File>>),
}

const FILE_BATCH_ROWS: usize = 8192;

impl FileReader {
    fn new(source: &FileSourceBuilt, worker: usize, position: Option<&serde_json::Value>) -> anyhow::Result<Self> {
        let (cfg, schema, table) = (&source.config, source.schema.clone(), TableId::new(source.name.as_str()));
        let path = source.path.clone();
        let rows = RowPosition::restore(position, &source.name)?.rows;
        if worker != 0 {
            return Ok(Self { table, path, rows, inner: None });
        }
        let file = File::open(&path).with_context(|| format!("source.path: cannot open {}", path.display()))?;
        let mut reader = BufReader::new(file);
        // Skip the rows already delivered before the checkpoint.
        let mut line = Vec::new();
        for _ in 0..rows {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                break;
            }
        }
        let offset = reader.stream_position()?;
        let mut file = reader.into_inner();
        file.seek(std::io::SeekFrom::Start(offset))?;
        let reader = BufReader::new(file);
        let inner = match cfg.format {
            FileFormat::Csv => {
                let sep = match cfg.column_separator.as_bytes() {
                    [b] => *b,
                    _ => bail!("source.column_separator: expected one character, got {:?}", cfg.column_separator),
                };
                let nulls = regex::Regex::new(r"^(\\N)?$").expect("valid regex");
                FileBatches::Csv(Box::new(
                    arrow::csv::ReaderBuilder::new(schema.clone())
                        .with_delimiter(sep)
                        .with_header(false)
                        .with_null_regex(nulls)
                        .with_batch_size(FILE_BATCH_ROWS)
                        .build(reader)?,
                ))
            }
            FileFormat::Json => FileBatches::Json(
                arrow::json::ReaderBuilder::new(schema.clone()).with_batch_size(FILE_BATCH_ROWS).build(reader)?,
            ),
        };
        Ok(Self { table, path, rows, inner: Some(inner) })
    }
}

#[async_trait]
impl SourceReader for FileReader {
    async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        // Reading and parsing the file blocks: not on an async thread's time.
        let next = tokio::task::block_in_place(|| match &mut self.inner {
            None => None,
            Some(FileBatches::Csv(r)) => r.next(),
            Some(FileBatches::Json(r)) => r.next(),
        });
        match next {
            None => Ok(None),
            Some(Ok(b)) => {
                self.rows += b.num_rows() as u64;
                Ok(Some(Event::data(&self.table, Batch::new(b))))
            }
            Some(Err(e)) => {
                bail!("{}: after row {}: {e}", self.path.display(), self.rows)
            }
        }
    }

    fn position(&self) -> serde_json::Value {
        RowPosition { rows: self.rows }.to_value()
    }
}

#[async_trait]
impl SourceConfig for FileSource {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn reach(&self, _file: &PipelineFile) -> Result<crate::pipeline::Reach, String> {
        Ok(crate::pipeline::Reach { files: vec![self.path.clone()], ..Default::default() })
    }

    fn validate(&self, _file: &PipelineFile) -> Checked {
        parse_columns(&self.schema).map_err(|e| ("source.schema".to_string(), e.message))?;
        Ok(())
    }

    async fn build(&self, name: &str, ctx: &BuildContext<'_>) -> anyhow::Result<Arc<dyn Source>> {
        let schema = arrow_schema(&parse_columns(&self.schema).map_err(|e| anyhow::anyhow!(e.message))?);
        let path = ctx.base_dir.join(&self.path);
        Ok(Arc::new(FileSourceBuilt { name: name.to_string(), config: self.clone(), schema, path }))
    }
}

#[derive(Clone)]
struct FileSourceBuilt {
    name: String,
    config: FileSource,
    schema: SchemaRef,
    path: PathBuf,
}

#[async_trait]
impl Source for FileSourceBuilt {
    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    async fn enumerator(&self, _restored: &[Option<serde_json::Value>]) -> anyhow::Result<Box<dyn SplitEnumerator>> {
        Ok(Box::new(OneFile(self.clone())))
    }

    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }
}

/// One split: the whole file, for worker 0.
struct OneFile(FileSourceBuilt);

#[async_trait]
impl SplitEnumerator for OneFile {
    async fn reader(
        &mut self,
        worker: usize,
        position: Option<&serde_json::Value>,
    ) -> anyhow::Result<Box<dyn SourceReader>> {
        Ok(Box::new(FileReader::new(&self.0, worker, position)?))
    }
}
