//! Reading Doris over Arrow Flight SQL: the FE's Flight SQL service takes a statement (a snapshot
//! of some tablets, `SELECT … FROM db.t TABLET(…)`) and returns tickets whose `DoGet` streams
//! Arrow record batches.

use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow_flight::Ticket;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;

/// The largest Arrow Flight message read or sent: Doris' largest STRING value.
const MAX_MESSAGE: usize = i32::MAX as usize;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::{Credentials, DorisError};

/// A Flight SQL session with the FE (Basic auth once, then its bearer token).
pub struct FlightReader {
    client: FlightSqlServiceClient<Channel>,
    url: String,
}

/// A failed Flight SQL call as a [`DorisError`]: an error status the FE sent becomes
/// [`DorisError::Flight`] with its gRPC code and Doris' `doris-error-code` / `doris-error-name`
/// metadata; anything else (a reply that does not decode) is [`DorisError::Protocol`].
pub fn flight_error(url: &str, e: FlightError) -> DorisError {
    match e {
        FlightError::Tonic(status) => status_error(url, &status),
        other => protocol_error(url, other),
    }
}

fn status_error(url: &str, status: &tonic::Status) -> DorisError {
    let text = |key: &str| status.metadata().get(key).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_string());
    DorisError::Flight {
        url: url.to_string(),
        status: status.code(),
        code: text("doris-error-code").and_then(|c| c.parse().ok()),
        name: text("doris-error-name"),
        message: status.message().to_string(),
    }
}

fn protocol_error(url: &str, e: impl std::fmt::Display) -> DorisError {
    DorisError::Protocol { url: url.to_string(), detail: format!("Arrow Flight SQL: {e}") }
}

impl FlightReader {
    /// Connect to the Flight SQL service at `addr` (`host:port`) and log in.
    /// With `tls`, over TLS (`https://`).
    pub async fn connect(
        addr: &str,
        credentials: &Credentials,
        timeout: Duration,
        tls: Option<&ClientTlsConfig>,
    ) -> Result<Self, DorisError> {
        let url = format!("{}://{addr}", if tls.is_some() { "https" } else { "http" });
        let mut endpoint =
            Endpoint::from_shared(url.clone()).map_err(|e| protocol_error(&url, e))?.connect_timeout(timeout);
        if let Some(tls) = tls {
            endpoint = endpoint.tls_config(tls.clone()).map_err(|e| protocol_error(&url, e))?;
        }
        let channel = endpoint.connect().await.map_err(|e| DorisError::Connect {
            url: url.clone(),
            detail: format!("Arrow Flight SQL: {}", super::fe::error_chain(&e)),
        })?;
        // A batch of wide rows (STRING values of up to 2 GB) is one message: gRPC's 4 MB default
        // would refuse it.
        let inner = arrow_flight::flight_service_client::FlightServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let mut client = FlightSqlServiceClient::new_from_inner(inner);
        client.handshake(&credentials.user, credentials.password()).await.map_err(|e| match flight_error(&url, e) {
            DorisError::Flight { status: tonic::Code::Unauthenticated | tonic::Code::PermissionDenied, .. } => {
                DorisError::Unauthorized { url: url.clone(), user: credentials.user.clone() }
            }
            other => other,
        })?;
        Ok(Self { client, url })
    }

    /// Connect to the first of `addrs` (`host:port`, one per FE) that accepts a connection, and
    /// log in there. Only a failure to connect moves on to the next; when all fail, the error
    /// names each address and what it said.
    pub async fn connect_any(
        addrs: &[String],
        credentials: &Credentials,
        timeout: Duration,
        tls: Option<&ClientTlsConfig>,
    ) -> Result<Self, DorisError> {
        let mut failures = Vec::new();
        for addr in addrs {
            match Self::connect(addr, credentials, timeout, tls).await {
                Err(DorisError::Connect { url, detail }) => failures.push((url, detail)),
                other => return other,
            }
        }
        match failures.len() {
            0 => Err(DorisError::Connect { url: String::new(), detail: "no Arrow Flight SQL address to try".into() }),
            1 => {
                let (url, detail) = failures.remove(0);
                Err(DorisError::Connect { url, detail })
            }
            n => Err(DorisError::Connect {
                url: addrs.join(", "),
                detail: format!(
                    "none of the {n} FEs answered ({})",
                    failures.iter().map(|(url, detail)| format!("{url}: {detail}")).collect::<Vec<_>>().join("; ")
                ),
            }),
        }
    }

    /// The schema of the result of `sql`, and the tickets that stream it.
    pub async fn execute(&mut self, sql: &str) -> Result<(SchemaRef, Vec<Ticket>), DorisError> {
        let info = self.client.execute(sql.to_string(), None).await.map_err(|e| flight_error(&self.url, e))?;
        let schema = info.clone().try_decode_schema().map_err(|e| protocol_error(&self.url, e))?;
        let tickets = info.endpoint.into_iter().filter_map(|e| e.ticket).collect();
        Ok((std::sync::Arc::new(schema), tickets))
    }

    /// The record batches of one ticket.
    pub async fn stream(&mut self, ticket: Ticket) -> Result<FlightRecordBatchStream, DorisError> {
        self.client.do_get(ticket).await.map_err(|e| flight_error(&self.url, e))
    }

    pub fn url(&self) -> &str {
        &self.url
    }
}

/// A quoted identifier: `` `name` ``.
pub fn quote(ident: &str) -> String {
    format!("`{}`", ident.replace('`', "``"))
}

/// The snapshot statement of a split, in the form the Flink reader sends it.
pub fn tablet_sql(fields: &str, db: &str, table: &str, tablets: &[i64], filter: Option<&str>) -> String {
    let ids: Vec<String> = tablets.iter().map(i64::to_string).collect();
    let mut sql = format!(
        "/* ApplicationName=Sluice ArrowFlightSQL Query */ SELECT {fields} FROM {}.{} TABLET({})",
        quote(db),
        quote(table),
        ids.join(",")
    );
    if let Some(f) = filter.filter(|f| !f.trim().is_empty()) {
        sql.push_str(&format!(" WHERE {f}"));
    }
    sql
}

#[cfg(test)]
mod tests {
    use arrow_flight::error::FlightError;
    use tonic::metadata::{MetadataMap, MetadataValue};

    use crate::doris::DorisError;

    #[test]
    fn flight_statuses_keep_dorises_code_and_name() {
        let mut md = MetadataMap::new();
        md.insert("doris-error-code", MetadataValue::from_static("5101"));
        md.insert("doris-error-name", MetadataValue::from_static("ERR_INCR_VISIBLE_WAIT_TIMEOUT"));
        let status = tonic::Status::with_metadata(tonic::Code::Unavailable, "reason=VISIBLE_WAIT_TIMEOUT", md);
        let e = super::flight_error("http://fe:9090", FlightError::Tonic(Box::new(status)));
        assert!(
            matches!(&e, DorisError::Flight { status: tonic::Code::Unavailable, name: Some(n), .. } if n == "ERR_INCR_VISIBLE_WAIT_TIMEOUT"),
            "{e:?}"
        );
        assert_eq!(e.doris_code(), Some(5101));
        assert!(e.is_window_not_ready());

        let plain =
            super::flight_error("http://fe:9090", FlightError::Tonic(Box::new(tonic::Status::internal("boom"))));
        assert!(matches!(&plain, DorisError::Flight { status: tonic::Code::Internal, code: None, .. }), "{plain:?}");
        assert_eq!(plain.to_string(), "Doris at http://fe:9090: Arrow Flight SQL: Internal: boom");
        let other = super::flight_error("http://fe:9090", FlightError::protocol("bad frame"));
        assert!(matches!(other, DorisError::Protocol { .. }), "{other:?}");
    }

    #[test]
    fn tablet_statements_quote_identifiers() {
        assert_eq!(
            super::tablet_sql("`id`, `na``me`", "test", "t", &[3, 1], Some("id > 5")),
            "/* ApplicationName=Sluice ArrowFlightSQL Query */ SELECT `id`, `na``me` FROM `test`.`t` TABLET(3,1) WHERE id > 5"
        );
    }
}
