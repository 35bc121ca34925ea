//! `DESC` / `DESCRIBE [ALL]` of tables and views.

use super::query::view_plan;
use super::{ColKind, Executor, Outcome, ResultSet, Session, SqlError, df_error};
use crate::ddl::ObjectName;
use crate::engine::{EngineError, desc_type};
use crate::storage::KeysType;
use crate::types::DorisType;

impl Executor {
    /// DESCRIBE of a view: its query's columns, all nullable, none a key.
    pub(super) async fn desc_view(&self, s: &Session, db: &str, v: &crate::engine::View) -> Result<Outcome, SqlError> {
        let mut vs = s.clone();
        vs.db = Some(db.to_string());
        let plan = view_plan(&self.engine, &vs, v).await.map_err(|e| df_error(e, Some(db)))?;
        let spellings = self.column_spellings();
        let rows = plan
            .schema()
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name = match v.columns.get(i) {
                    Some((c, _)) => c.clone(),
                    None => spellings.get(f.name().as_str()).cloned().unwrap_or_else(|| f.name().clone()),
                };
                vec![
                    Some(name),
                    Some(ColKind::of(f.data_type()).doris_name().to_ascii_lowercase()),
                    Some("Yes".into()),
                    Some("false".into()),
                    None,
                    Some("NONE".into()),
                ]
            })
            .collect();
        Ok(Outcome::Rows(ResultSet::strings(&["Field", "Type", "Null", "Key", "Default", "Extra"], rows)))
    }

    pub(super) fn desc(&self, s: &Session, name: &ObjectName, all: bool) -> Result<Outcome, SqlError> {
        let db = self.resolve(s, name)?;
        let st = self.engine.lock();
        let t = described(&st, &db, &name.name)?;
        let mut cols: Vec<(String, DorisType, bool, bool, Option<String>, String)> = t
            .schema
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let extra = match (t.schema.keys_type, i < t.schema.key_count) {
                    (_, true) => String::new(),
                    (KeysType::Aggregate, false) => c.agg.map(|a| a.sql().to_string()).unwrap_or_default(),
                    (KeysType::Unique, false) => "REPLACE".into(),
                    (KeysType::Duplicate, false) => "NONE".into(),
                };
                let default = match &c.default {
                    Some(crate::storage::DefaultValue::Literal(v)) => Some(v.clone()),
                    Some(crate::storage::DefaultValue::CurrentTimestamp(_)) => Some("CURRENT_TIMESTAMP".into()),
                    _ => None,
                };
                (c.name.clone(), c.ty.clone(), c.nullable, i < t.schema.key_count, default, extra)
            })
            .collect();
        if s.var_true("show_hidden_columns") {
            for (n, ty) in t.schema.hidden_columns() {
                cols.push((n.to_string(), ty, false, false, Some("0".into()), "REPLACE".into()));
            }
        }
        let bool_s = |b: bool, t: &str, f: &str| Some(if b { t } else { f }.to_string());
        if all {
            let rows = cols
                .into_iter()
                .enumerate()
                .map(|(i, (n, ty, null, key, def, extra))| {
                    vec![
                        if i == 0 { Some(t.name.clone()) } else { Some(String::new()) },
                        if i == 0 { Some(t.schema.keys_type.api_name().into()) } else { Some(String::new()) },
                        Some(n),
                        Some(desc_type(&ty)),
                        Some(ty.primitive_name()),
                        bool_s(null, "Yes", "No"),
                        bool_s(key, "true", "false"),
                        def,
                        Some(extra),
                        Some("true".into()),
                        Some(String::new()),
                        Some(String::new()),
                    ]
                })
                .collect();
            return Ok(Outcome::Rows(ResultSet::strings(
                &[
                    "IndexName",
                    "IndexKeysType",
                    "Field",
                    "Type",
                    "InternalType",
                    "Null",
                    "Key",
                    "Default",
                    "Extra",
                    "Visible",
                    "DefineExpr",
                    "WhereClause",
                ],
                rows,
            )));
        }
        let rows = cols
            .into_iter()
            .map(|(n, ty, null, key, def, extra)| {
                vec![
                    Some(n),
                    Some(desc_type(&ty)),
                    bool_s(null, "Yes", "No"),
                    bool_s(key, "true", "false"),
                    def,
                    Some(extra),
                ]
            })
            .collect();
        Ok(Outcome::Rows(ResultSet::strings(&["Field", "Type", "Null", "Key", "Default", "Extra"], rows)))
    }
}

/// The table DESCRIBE, SHOW CREATE TABLE and SHOW COLUMNS name. A missing one is answered as
/// Doris' catalog lookup reports it: 1105 `Unknown table 't'` (what SQLAlchemy dialects'
/// `has_table`, which runs DESCRIBE, reads), not the 1146 of a query.
pub(super) fn described<'s>(
    st: &'s crate::engine::State,
    db: &str,
    table: &str,
) -> Result<&'s crate::storage::Table, SqlError> {
    st.table(db, table).map_err(|e| match e {
        EngineError::UnknownTable(t, _) => SqlError::other(format!("Unknown table '{t}'")),
        other => other.into(),
    })
}
