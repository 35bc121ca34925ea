//! Rows as JSON: the metadata that marks a column of JSON text, and a batch's rows as JSON
//! objects (what the file sink writes and what a dead letter keeps of its row).

/// The Arrow field metadata key and value that mark a column of JSON text.
pub const EXTENSION_NAME: &str = "ARROW:extension:name";
pub const JSON_EXTENSION: &str = "arrow.json";

/// Each row of `data` as a JSON object, column name → value: Arrow's JSON form of each value,
/// nulls written out, `arrow.json` columns as JSON values rather than strings.
pub fn json_objects(
    data: &arrow::array::RecordBatch,
) -> anyhow::Result<Vec<serde_json::Map<String, serde_json::Value>>> {
    let schema = data.schema();
    let json_columns: Vec<&str> = schema
        .fields()
        .iter()
        .filter(|f| f.metadata().get(EXTENSION_NAME).is_some_and(|v| v == JSON_EXTENSION))
        .map(|f| f.name().as_str())
        .collect();
    let mut writer = arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow::json::writer::JsonArray>(Vec::new());
    writer.write(data)?;
    writer.finish()?;
    let mut rows: Vec<serde_json::Map<String, serde_json::Value>> = serde_json::from_slice(&writer.into_inner())?;
    for row in &mut rows {
        for name in &json_columns {
            if let Some(v) = row.get_mut(*name)
                && let Some(text) = v.as_str()
            {
                *v = serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_string()));
            }
        }
    }
    Ok(rows)
}
