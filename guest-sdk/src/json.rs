//! Building rows from JSON objects, for decoders of JSON change events.

use arrow_schema::SchemaRef;
use serde_json::{Map, Value as Json};

use crate::Error;
use crate::batch::{BatchBuilder, RowKind, Value};

/// The SDK value of a JSON value. Objects and arrays become their JSON text (how ARRAY, MAP,
/// STRUCT and JSON columns travel); numbers that are not integers arrive as doubles.
pub fn value_of(json: &Json) -> Value<'_> {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(f)) => Value::Float(f),
            (None, None) => Value::Null,
        },
        Json::String(s) => Value::Str(s),
        other => Value::String(other.to_string()),
    }
}

/// Whether a double's shortest decimal form has at most 15 significant digits, so that it is the
/// number that was written.
fn exact_double(f: f64) -> bool {
    let sci = format!("{f:e}");
    let mantissa = sci.split('e').next().unwrap_or_default();
    f.is_finite() && mantissa.bytes().filter(u8::is_ascii_digit).count() <= 15
}

/// Append the fields of `object` as one row, in schema order; fields the schema does not name are
/// ignored and missing ones are null. A JSON number bound for a column that is not FLOAT or DOUBLE
/// (DECIMAL, LARGEINT, text) is written out in full; a double holds 15 significant digits
/// exactly, so a longer one may already have lost digits and is refused rather than stored changed
/// (such values must be sent as JSON strings).
pub fn push_object(
    builder: &mut BatchBuilder,
    schema: &SchemaRef,
    kind: RowKind,
    object: &Map<String, Json>,
) -> Result<(), Error> {
    let values = schema
        .fields()
        .iter()
        .map(|f| match object.get(f.name()).map(value_of) {
            None => Ok(Value::Null),
            Some(Value::Float(x)) if !f.data_type().is_floating() => {
                if exact_double(x) {
                    Ok(Value::String(format!("{x}")))
                } else {
                    Err(Error::new(format!(
                        "column `{}`: the JSON number {x:e} has more than 15 significant digits and would lose \
                         some; send it as a string (\"…\") to keep every digit",
                        f.name()
                    )))
                }
            }
            Some(v) => Ok(v),
        })
        .collect::<Result<Vec<Value<'_>>, Error>>()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{arrow_schema, parse_columns};

    fn schema() -> SchemaRef {
        arrow_schema(&parse_columns("id BIGINT, name VARCHAR(16), amount DECIMAL(20,2), tags JSON").unwrap())
    }

    /// `(kind, values)` of every row a decoding step produced.
    fn decoded(step: impl FnOnce(&mut BatchBuilder) -> Result<(), Error>) -> Result<Vec<String>, Error> {
        let mut b = BatchBuilder::new(schema()).unwrap();
        step(&mut b)?;
        let batch = b.finish()?;
        Ok(batch
            .rows()
            .map(|r| {
                let values: Vec<String> = r.values().iter().map(|v| v.to_string()).collect();
                format!("{} {}", r.kind().short(), values.join("|"))
            })
            .collect())
    }

    #[test]
    fn objects_fill_columns_by_name_and_never_lose_digits() {
        let object =
            parse_object(br#"{"amount": 123456789012.25, "id": 7, "extra": true, "tags": {"a": [1, 2]}}"#, 0).unwrap();
        let rows = decoded(|b| push_object(b, &schema(), RowKind::Insert, &object)).unwrap();
        assert_eq!(rows, [r#"+I 7|NULL|123456789012.25|{"a":[1,2]}"#]);
        // Large and tiny doubles are written out, not in exponent form.
        let object = parse_object(br#"{"amount": 1e15}"#, 0).unwrap();
        assert_eq!(
            decoded(|b| push_object(b, &schema(), RowKind::Insert, &object)).unwrap(),
            ["+I NULL|NULL|1000000000000000.00|NULL"]
        );
        // A double cannot hold 17 digits: refused, not rounded; as a string it loads whole.
        let object = parse_object(br#"{"amount": 12345678901234567.89}"#, 3).unwrap();
        let err = decoded(|b| push_object(b, &schema(), RowKind::Insert, &object)).unwrap_err();
        assert!(
            err.message.starts_with(
                "column `amount`: the JSON number 1.2345678901234568e16 has more than 15 significant digits and would lose some"
            ),
            "{err}"
        );
        let object = parse_object(br#"{"amount": "12345678901234567.89"}"#, 0).unwrap();
        let doubles = arrow_schema(&parse_columns("x DOUBLE").unwrap());
        let mut b = BatchBuilder::new(doubles.clone()).unwrap();
        push_object(&mut b, &doubles, RowKind::Insert, &parse_object(br#"{"x": 0.30000000000000004}"#, 0).unwrap())
            .unwrap();
        assert_eq!(b.finish().unwrap().rows().next().unwrap().values(), [Value::Float(0.30000000000000004)]);
        assert_eq!(
            decoded(|b| push_object(b, &schema(), RowKind::Insert, &object)).unwrap(),
            ["+I NULL|NULL|12345678901234567.89|NULL"]
        );
    }

    #[test]
    fn debezium_events_become_row_kinds() {
        let key = vec!["id".to_string()];
        let events: [&[u8]; 6] = [
            br#"{"op": "c", "after": {"id": 1, "name": "a"}}"#,
            br#"{"payload": {"op": "u", "before": {"id": 1, "name": "a"}, "after": {"id": 1, "name": "b"}}}"#,
            br#"{"op": "u", "before": {"id": 1, "name": "b"}, "after": {"id": 2, "name": "b"}}"#,
            br#"{"op": "d", "before": {"id": 2, "name": "b"}, "after": null}"#,
            b"null",
            br#"{"op": "t"}"#,
        ];
        let rows =
            decoded(|b| events.iter().enumerate().try_for_each(|(i, e)| push_debezium(b, &schema(), &key, e, i)))
                .unwrap();
        // A key change is a delete and an insert, not an update.
        assert_eq!(
            rows,
            [
                "+I 1|a|NULL|NULL",
                "-U 1|a|NULL|NULL",
                "+U 1|b|NULL|NULL",
                "-D 1|b|NULL|NULL",
                "+I 2|b|NULL|NULL",
                "-D 2|b|NULL|NULL"
            ]
        );
    }

    #[test]
    fn bad_debezium_events_name_the_message_and_the_fault() {
        let key = vec!["id".to_string()];
        let fail = |m: &[u8]| decoded(|b| push_debezium(b, &schema(), &key, m, 4)).unwrap_err().to_string();
        assert_eq!(fail(b"{not json"), "row 4: invalid JSON: key must be a string at line 1 column 2");
        assert_eq!(fail(b"[1]"), "row 4: expected a JSON object, got an array");
        assert_eq!(fail(br#"{"after": {"id": 1}}"#), "row 4: event has no `op`");
        assert_eq!(fail(br#"{"op": "d", "after": {"id": 1}}"#), "row 4: op `d` needs a `before` image");
        assert_eq!(fail(br#"{"op": "c", "after": 3}"#), "row 4: `after` must be an object, got a number");
        assert_eq!(fail(br#"{"op": "x", "after": {}}"#), "row 4: unknown op `x` (expected c, r, u, d)");
    }

    #[test]
    fn op_type_messages_delete_or_upsert() {
        let messages: [&[u8]; 2] = [
            br#"{"op_type": "insert", "data": {"id": 1, "name": "a"}}"#,
            br#"{"op_type": "DELETE", "data": {"id": 1}}"#,
        ];
        let rows = decoded(|b| {
            messages.iter().enumerate().try_for_each(|(i, m)| push_op_type(b, &schema(), "op_type", "data", m, i))
        })
        .unwrap();
        assert_eq!(rows, ["+I 1|a|NULL|NULL", "-D 1|NULL|NULL|NULL"]);
        let fail = |m: &[u8]| decoded(|b| push_op_type(b, &schema(), "op_type", "data", m, 1)).unwrap_err().to_string();
        assert_eq!(fail(br#"{"op_type": 1, "data": {}}"#), "row 1: `op_type` must be a string, got a number");
        assert_eq!(fail(br#"{"op_type": "delete"}"#), "row 1: message has no `data` object");
    }

    #[test]
    fn canal_updates_rebuild_the_old_row() {
        let messages: [&[u8]; 3] = [
            br#"{"type": "INSERT", "data": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}], "isDdl": false}"#,
            br#"{"type": "UPDATE", "data": [{"id": 1, "name": "z"}], "old": [{"name": "a"}]}"#,
            br#"{"type": "ALTER", "isDdl": true, "data": null}"#,
        ];
        let rows =
            decoded(|b| messages.iter().enumerate().try_for_each(|(i, m)| push_canal(b, &schema(), m, i))).unwrap();
        assert_eq!(rows, ["+I 1|a|NULL|NULL", "+I 2|b|NULL|NULL", "-U 1|a|NULL|NULL", "+U 1|z|NULL|NULL"]);
        let err = decoded(|b| push_canal(b, &schema(), br#"{"type": "MERGE", "data": []}"#, 2)).unwrap_err();
        assert_eq!(err.to_string(), "row 2: unknown type `MERGE` (expected INSERT, UPDATE, DELETE)");
    }
}
