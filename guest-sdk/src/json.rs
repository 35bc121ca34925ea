//! Building rows from JSON objects, for decoders of JSON change events.

use arrow_schema::SchemaRef;
use serde_json::{Map, Value as Json};

use crate::Error;
use crate::batch::{BatchBuilder, RowKind, Value};

/// The SDK value of a JSON value. Objects and arrays become their JSON text (how ARRAY, MAP,
/// STRUCT and JSON columns travel).
pub fn value_of(json: &Json) -> Value<'_> {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => match n.as_f64() {
                // Keep big or fractional numbers as text so DECIMAL columns get every digit.
                Some(_) => Value::String(n.to_string()),
                None => Value::Null,
            },
        },
        Json::String(s) => Value::Str(s),
        other => Value::String(other.to_string()),
    }
}

/// Append the fields of `object` as one row, in schema order; fields the schema does not name are
/// ignored and missing ones are null.
pub fn push_object(
    builder: &mut BatchBuilder,
    schema: &SchemaRef,
    kind: RowKind,
    object: &Map<String, Json>,
) -> Result<(), Error> {
    let values: Vec<Value<'_>> =
        schema.fields().iter().map(|f| object.get(f.name()).map(value_of).unwrap_or(Value::Null)).collect();
    builder.push(kind, &values)
}

/// Parse one message as a JSON object, naming the message on failure.
pub fn parse_object(message: &[u8], index: usize) -> Result<Map<String, Json>, Error> {
    match serde_json::from_slice::<Json>(message) {
        Ok(Json::Object(map)) => Ok(map),
        Ok(other) => Err(Error::new(format!("expected a JSON object, got {}", kind_of(&other))).at_row(index)),
        Err(e) => Err(Error::new(format!("invalid JSON: {e}")).at_row(index)),
    }
}

pub fn kind_of(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// Whether a message is empty or `null` (a Kafka tombstone), which carries no row.
pub fn is_tombstone(message: &[u8]) -> bool {
    message.iter().all(u8::is_ascii_whitespace) || message.trim_ascii() == b"null"
}

/// Append the rows of a Debezium JSON change event (`{"before", "after", "op"}`, optionally in a
/// `payload` envelope): `c`/`r` insert `after`, `d` deletes `before`, `u` is update-before/after
/// (delete + insert when a column of `key` changed), `t`/`m` and tombstones carry no rows.
pub fn push_debezium(
    builder: &mut BatchBuilder,
    schema: &SchemaRef,
    key: &[String],
    message: &[u8],
    index: usize,
) -> Result<(), Error> {
    if is_tombstone(message) {
        return Ok(());
    }
    let mut event = parse_object(message, index)?;
    if let Some(Json::Object(payload)) = event.remove("payload") {
        event = payload;
    }
    let image = |name: &str| -> Result<Option<&Map<String, Json>>, Error> {
        match event.get(name) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Object(row)) => Ok(Some(row)),
            Some(other) => Err(Error::new(format!("`{name}` must be an object, got {}", kind_of(other))).at_row(index)),
        }
    };
    let (before, after) = (image("before")?, image("after")?);
    let op = event.get("op").and_then(Json::as_str).ok_or_else(|| Error::new("event has no `op`").at_row(index))?;
    let missing = |name: &str| Error::new(format!("op `{op}` needs a `{name}` image")).at_row(index);
    let mut push = |kind, row| push_object(builder, schema, kind, row).map_err(|e| e.at_row(index));
    match op {
        "c" | "r" => push(RowKind::Insert, after.ok_or_else(|| missing("after"))?),
        "d" => push(RowKind::Delete, before.ok_or_else(|| missing("before"))?),
        "u" => {
            let after = after.ok_or_else(|| missing("after"))?;
            match before {
                Some(before) if key.iter().any(|k| before.get(k) != after.get(k)) => {
                    push(RowKind::Delete, before)?;
                    push(RowKind::Insert, after)
                }
                Some(before) => {
                    push(RowKind::UpdateBefore, before)?;
                    push(RowKind::UpdateAfter, after)
                }
                None => push(RowKind::UpdateAfter, after),
            }
        }
        "t" | "m" => Ok(()),
        other => Err(Error::new(format!("unknown op `{other}` (expected c, r, u, d)")).at_row(index)),
    }
}

/// Append the row of an `op_type` message (`{"op_type": "delete", "data": {…}}`, the Doris
/// documentation's example): `delete` deletes, any other operation (or none) upserts.
pub fn push_op_type(
    builder: &mut BatchBuilder,
    schema: &SchemaRef,
    op_field: &str,
    data_field: &str,
    message: &[u8],
    index: usize,
) -> Result<(), Error> {
    let object = parse_object(message, index)?;
    let kind = match object.get(op_field) {
        Some(Json::String(op)) if op.eq_ignore_ascii_case("delete") => RowKind::Delete,
        Some(Json::String(_)) | None => RowKind::Insert,
        Some(other) => {
            return Err(Error::new(format!("`{op_field}` must be a string, got {}", kind_of(other))).at_row(index));
        }
    };
    let data = match object.get(data_field) {
        Some(Json::Object(data)) => data,
        Some(other) => {
            return Err(Error::new(format!("`{data_field}` must be an object, got {}", kind_of(other))).at_row(index));
        }
        None => return Err(Error::new(format!("message has no `{data_field}` object")).at_row(index)),
    };
    push_object(builder, schema, kind, data).map_err(|e| e.at_row(index))
}

/// Append the rows of a Canal JSON message (`{"data": [{…}], "old": [{…}], "type": "INSERT" |
/// "UPDATE" | "DELETE", "isDdl": false}`): an update's old row is its new row with the fields
/// `old` lists; DDL messages carry no rows.
pub fn push_canal(builder: &mut BatchBuilder, schema: &SchemaRef, message: &[u8], index: usize) -> Result<(), Error> {
    if is_tombstone(message) {
        return Ok(());
    }
    let event = parse_object(message, index)?;
    if event.get("isDdl").and_then(Json::as_bool) == Some(true) {
        return Ok(());
    }
    let rows = |name: &str| -> Result<Vec<&Map<String, Json>>, Error> {
        match event.get(name) {
            None | Some(Json::Null) => Ok(Vec::new()),
            Some(Json::Array(items)) => items
                .iter()
                .map(|i| match i {
                    Json::Object(row) => Ok(row),
                    other => {
                        Err(Error::new(format!("`{name}` must hold objects, got {}", kind_of(other))).at_row(index))
                    }
                })
                .collect(),
            Some(other) => Err(Error::new(format!("`{name}` must be an array, got {}", kind_of(other))).at_row(index)),
        }
    };
    let data = rows("data")?;
    let kind =
        event.get("type").and_then(Json::as_str).ok_or_else(|| Error::new("message has no `type`").at_row(index))?;
    let mut push = |kind, row: &Map<String, Json>| push_object(builder, schema, kind, row).map_err(|e| e.at_row(index));
    match kind {
        "INSERT" => data.into_iter().try_for_each(|row| push(RowKind::Insert, row)),
        "DELETE" => data.into_iter().try_for_each(|row| push(RowKind::Delete, row)),
        "UPDATE" => {
            let old = rows("old")?;
            for (i, row) in data.into_iter().enumerate() {
                let mut before = row.clone();
                if let Some(changed) = old.get(i) {
                    before.extend(changed.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                push(RowKind::UpdateBefore, &before)?;
                push(RowKind::UpdateAfter, row)?;
            }
            Ok(())
        }
        other => Err(Error::new(format!("unknown type `{other}` (expected INSERT, UPDATE, DELETE)")).at_row(index)),
    }
}
