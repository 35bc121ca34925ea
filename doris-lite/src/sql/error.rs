//! Statement errors: MySQL error codes and the detail text Doris sends, from the engine's,
//! the parser's and DataFusion's errors.

use datafusion::error::DataFusionError;

use crate::engine::EngineError;

/// A statement error: MySQL code and the detail message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct SqlError {
    /// MySQL error number.
    pub code: u16,
    /// Detail text (without the `errCode = 2, detailMessage = ` prefix).
    pub message: String,
}

impl SqlError {
    pub(super) fn other(message: impl Into<String>) -> SqlError {
        SqlError { code: 1105, message: message.into() }
    }
    /// The text Doris sends: `errCode = 2, detailMessage = …`.
    pub fn doris_text(&self) -> String {
        format!("errCode = 2, detailMessage = {}", self.message)
    }
}

impl From<EngineError> for SqlError {
    fn from(e: EngineError) -> Self {
        SqlError { code: e.mysql_code(), message: e.to_string() }
    }
}

impl From<crate::ddl::SyntaxError> for SqlError {
    fn from(e: crate::ddl::SyntaxError) -> Self {
        SqlError { code: 1064, message: e.0 }
    }
}

/// Strips DataFusion's context prefixes from an error for display.
pub fn clean_df_error(e: &DataFusionError) -> String {
    let s = e.find_root().to_string();
    for p in [
        "Error during planning: ",
        "Schema error: ",
        "SQL error: ",
        "Execution error: ",
        "Arrow error: ",
        "This feature is not implemented: ",
    ] {
        if let Some(r) = s.strip_prefix(p) {
            return r.to_string();
        }
    }
    s
}

pub(super) fn df_error(e: DataFusionError, current_db: Option<&str>) -> SqlError {
    let root = e.find_root();
    match root {
        DataFusionError::SQL(pe, _) => SqlError { code: 1064, message: format!("Syntax error: {pe}") },
        DataFusionError::SchemaError(se, _) => {
            let msg = se.to_string();
            if let datafusion::common::SchemaError::FieldNotFound { field, .. } = se.as_ref() {
                return SqlError { code: 1054, message: format!("Unknown column '{}' in 'table list'", field.name()) };
            }
            SqlError::other(msg)
        }
        _ => {
            let msg = clean_df_error(&e);
            if let Some(rest) = msg.split_once("table '").map(|x| x.1)
                && msg.contains("not found")
            {
                let full = rest.split('\'').next().unwrap_or("");
                let parts: Vec<&str> = full.split('.').collect();
                let table = parts.last().copied().unwrap_or(full).to_string();
                let db = if parts.len() >= 2 {
                    parts[parts.len() - 2].to_string()
                } else {
                    current_db.unwrap_or("").to_string()
                };
                if db == NO_DB {
                    return EngineError::NoDatabase.into();
                }
                return EngineError::UnknownTable(table, db).into();
            }
            SqlError::other(msg)
        }
    }
}

pub(super) const NO_DB: &str = "__doris_lite_no_database__";
