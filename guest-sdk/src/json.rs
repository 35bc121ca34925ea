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
