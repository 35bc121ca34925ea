//! A Stream Load JSON object read straight into the load's fields: each value's text, borrowed
//! from the body where a string has no escapes, without building the document first. What this
//! does not read — anything but one object, or JSON that is not well-formed — the general path
//! reads, so the rows and the errors stay those of the document it builds.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The fields of a load, by name: a key equal to a name, else the first key equal to it but
/// for case.
pub(crate) struct JsonFields {
    exact: HashMap<String, usize>,
    folded: HashMap<String, usize>,
    count: usize,
}

/// How a field was filled by the object being read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Filled {
    No,
    ByFoldedName,
    ByName,
}

impl JsonFields {
    pub fn new(names: &[String]) -> JsonFields {
        let mut exact = HashMap::new();
        let mut folded = HashMap::new();
        for (i, n) in names.iter().enumerate() {
            exact.entry(n.clone()).or_insert(i);
            folded.entry(n.to_ascii_lowercase()).or_insert(i);
        }
        JsonFields { exact, folded, count: names.len() }
    }

    /// The texts of the fields of the object `doc` in `out` (a missing field and `null` are
    /// `None`; booleans `1`/`0`; numbers as serde_json shows them; nested values as compact
    /// JSON); false when `doc` is not one well-formed object.
    pub fn read<'b>(&self, doc: &'b str, out: &mut Vec<Option<Cow<'b, str>>>) -> bool {
        out.clear();
        out.resize(self.count, None);
        let mut filled = vec![Filled::No; self.count];
        let mut de = serde_json::Deserializer::from_str(doc);
        let object = Object { fields: self, out, filled: &mut filled };
        object.deserialize(&mut de).is_ok() && de.end().is_ok()
    }
}

struct Object<'a, 'b> {
    fields: &'a JsonFields,
    out: &'a mut Vec<Option<Cow<'b, str>>>,
    filled: &'a mut Vec<Filled>,
}

impl<'b> DeserializeSeed<'b> for Object<'_, 'b> {
    type Value = ();

    fn deserialize<D: Deserializer<'b>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'b> Visitor<'b> for Object<'_, 'b> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'b>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(Text)? {
            let key = key.unwrap_or_default();
            let value = map.next_value_seed(Text)?;
            // A repeated key: the last one's value, as a document's map keeps it.
            if let Some(&i) = self.fields.exact.get(key.as_ref()) {
                self.out[i] = value;
                self.filled[i] = Filled::ByName;
            } else if let Some(&i) = self.fields.folded.get(&key.to_ascii_lowercase())
                && self.filled[i] == Filled::No
            {
                self.out[i] = value;
                self.filled[i] = Filled::ByFoldedName;
            }
        }
        Ok(())
    }
}

/// A value's text (`None` for `null`).
struct Text;

impl<'b> DeserializeSeed<'b> for Text {
    type Value = Option<Cow<'b, str>>;

    fn deserialize<D: Deserializer<'b>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'b> Visitor<'b> for Text {
    type Value = Option<Cow<'b, str>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'b str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v)))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(if v { "1" } else { "0" })))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(serde_json::Value::from(v).to_string())))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'b>>(self, map: A) -> Result<Self::Value, A::Error> {
        let v = serde_json::Value::deserialize(MapAccessDeserializer::new(map))?;
        Ok(Some(Cow::Owned(v.to_string())))
    }

    fn visit_seq<A: SeqAccess<'b>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let v = serde_json::Value::deserialize(SeqAccessDeserializer::new(seq))?;
        Ok(Some(Cow::Owned(v.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::JsonFields;

    /// What the general path reads from the same object.
    fn document(names: &[String], doc: &str) -> Vec<Option<String>> {
        let v: serde_json::Value = serde_json::from_str(doc).unwrap();
        let obj = v.as_object().unwrap();
        names
            .iter()
            .map(|n| {
                let v = obj.get(n).or_else(|| obj.iter().find(|(k, _)| k.eq_ignore_ascii_case(n)).map(|(_, v)| v))?;
                match v {
                    serde_json::Value::Null => None,
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Bool(b) => Some(if *b { "1" } else { "0" }.to_string()),
                    other => Some(other.to_string()),
                }
            })
            .collect()
    }

    #[test]
    fn fields_read_straight_are_the_documents_fields() {
        let names: Vec<String> = ["id", "Name", "amount", "flag", "doc", "list", "gone", "f"].map(String::from).into();
        let fields = JsonFields::new(&names);
        for doc in [
            r#"{"id": 1, "name": "a\tb \"q\" \u00e9", "amount": 12.50, "flag": true, "doc": {"b": [1, 2.0]}, "list": [1, null], "f": -1.5e3}"#,
            r#"{"ID": 7, "id": 8, "NAME": "upper", "Name": "exact", "amount": null, "x": {"deep": 1}}"#,
            r#"{"id": 18446744073709551615, "name": "", "id": -9223372036854775808, "flag": false}"#,
            r#"{}"#,
        ] {
            let mut out = Vec::new();
            assert!(fields.read(doc, &mut out), "{doc}");
            let got: Vec<Option<String>> = out.iter().map(|t| t.as_deref().map(String::from)).collect();
            assert_eq!(got, document(&names, doc), "{doc}");
        }
        let mut out = Vec::new();
        for not_one_object in [r#"[{"id": 1}]"#, r#"{"id": 1} {"id": 2}"#, r#"{"id": 1"#, "7", r#"{"id": 1,}"#] {
            assert!(!fields.read(not_one_object, &mut out), "{not_one_object}");
        }
    }

    #[test]
    fn a_string_without_escapes_is_borrowed_from_the_body() {
        let fields = JsonFields::new(&["name".to_string()]);
        let mut out = Vec::new();
        assert!(fields.read(r#"{"name": "plain"}"#, &mut out));
        assert!(matches!(out[0], Some(std::borrow::Cow::Borrowed("plain"))));
    }
}
