//! Reading Doris over Arrow Flight SQL: the FE's Flight SQL service takes a statement (a snapshot
//! of some tablets, `SELECT … FROM db.t TABLET(…)`) and returns tickets whose `DoGet` streams
//! Arrow record batches.

use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow_flight::Ticket;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::sql::client::FlightSqlServiceClient;
use tonic::transport::{Channel, Endpoint};

use super::{Credentials, DorisError};

/// A Flight SQL session with the FE (Basic auth once, then its bearer token).
pub struct FlightReader {
    client: FlightSqlServiceClient<Channel>,
    url: String,
}

fn flight_error(url: &str, e: impl std::fmt::Display) -> DorisError {
    DorisError::Protocol { url: url.to_string(), detail: format!("Arrow Flight SQL: {e}") }
}

impl FlightReader {
    /// Connect to the Flight SQL service at `addr` (`host:port`) and log in.
    pub async fn connect(addr: &str, credentials: &Credentials, timeout: Duration) -> Result<Self, DorisError> {
        let url = format!("http://{addr}");
        let channel = Endpoint::from_shared(url.clone())
            .map_err(|e| flight_error(&url, e))?
            .connect_timeout(timeout)
            .connect()
            .await
            .map_err(|e| DorisError::Connect { url: url.clone(), detail: format!("Arrow Flight SQL: {e}") })?;
        let mut client = FlightSqlServiceClient::new(channel);
        client.handshake(&credentials.user, credentials.password()).await.map_err(|e| {
            let text = e.to_string();
            if text.contains("Unauthenticated") || text.contains("UNAUTHENTICATED") || text.contains("denied") {
                DorisError::Unauthorized { url: url.clone(), user: credentials.user.clone() }
            } else {
                flight_error(&url, text)
            }
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
    ) -> Result<Self, DorisError> {
        let mut failures = Vec::new();
        for addr in addrs {
            match Self::connect(addr, credentials, timeout).await {
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
        let schema = info.clone().try_decode_schema().map_err(|e| flight_error(&self.url, e))?;
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
    #[test]
    fn tablet_statements_quote_identifiers() {
        assert_eq!(
            super::tablet_sql("`id`, `na``me`", "test", "t", &[3, 1], Some("id > 5")),
            "/* ApplicationName=Sluice ArrowFlightSQL Query */ SELECT `id`, `na``me` FROM `test`.`t` TABLET(3,1) WHERE id > 5"
        );
    }
}
