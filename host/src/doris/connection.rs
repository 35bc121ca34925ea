//! A Doris connection of a pipeline, opened: the FE client with its credentials, shared by the
//! sources, sinks and lookups that name it.

use anyhow::Context;

use super::config::DorisSection;
use super::tls::TlsSettings;
use super::{Credentials, FeClient};

/// `[doris]` or a `[connections.<name>] type = "doris"`, ready to use.
#[derive(Debug, Clone)]
pub struct DorisConnection {
    /// Its name in the pipeline file.
    pub name: String,
    pub section: DorisSection,
    /// From `password` or `password_env`; never printed.
    pub password: String,
    pub client: FeClient,
    /// `enable_tls`'s settings.
    pub tls: Option<TlsSettings>,
}

impl DorisConnection {
    /// Read the password and make the client; with `auto_redirect = false`, the BEs are
    /// `benodes`, or those the FE lists.
    pub async fn open(name: &str, section: &DorisSection) -> anyhow::Result<DorisConnection> {
        let key =
            if name == super::config::DEFAULT_DORIS { "doris".to_string() } else { format!("connections.{name}") };
        let password = match &section.password {
            Some(p) => p.clone(),
            None => super::config::password_from_env(section.password_env.as_deref(), &key)
                .map_err(|e| anyhow::anyhow!(e))?
                .unwrap_or_default(),
        };
        let tls = TlsSettings::of(&key, section);
        let client = FeClient::with_tls(
            section.fenodes.addresses(),
            Credentials::new(section.username.clone(), password.clone()),
            section.request_connect_timeout.0,
            section.request_read_timeout.0,
            tls.as_ref().map(TlsSettings::http_config).transpose()?.flatten(),
        )?;
        let client = if section.auto_redirect {
            client
        } else if !section.benodes.is_empty() {
            client.with_backends(section.benodes.clone())
        } else {
            let bes = client.discover_backends().await?;
            if bes.is_empty() {
                anyhow::bail!(
                    "{key}: `auto_redirect = false` and no `benodes`: the FE lists no alive BE in /api/backends"
                );
            }
            client.with_backends(bes)
        };
        Ok(DorisConnection { name: name.to_string(), section: section.clone(), password, client, tls })
    }

    /// The TLS configuration of Arrow Flight SQL, when it goes over TLS.
    pub fn flight_tls(&self) -> anyhow::Result<Option<tonic::transport::ClientTlsConfig>> {
        Ok(self.tls.as_ref().map(TlsSettings::flight_config).transpose()?.flatten())
    }

    /// The FEs' Arrow Flight SQL addresses, the FE that answered last first: `port` when it is
    /// one, else (`-1`) the port the FE reports in `SHOW FRONTENDS`.
    pub async fn flight_addrs(&self, port: i32) -> anyhow::Result<Vec<String>> {
        let port = match u16::try_from(port) {
            Ok(p) if p > 0 => p,
            _ => self.client.flight_sql_port().await?.context(
                "the Doris FE reports no Arrow Flight SQL port (`SHOW FRONTENDS`); set `flight_sql_port` on the source",
            )?,
        };
        Ok(self.client.fe_hosts().into_iter().map(|h| format!("{h}:{port}")).collect())
    }

    /// `jdbc_url`, for reads over the MySQL protocol.
    pub fn jdbc_url(&self) -> anyhow::Result<&str> {
        self.section
            .jdbc_url
            .as_deref()
            .with_context(|| format!("the Doris connection `{}` has no `jdbc_url` (jdbc:mysql://host:9030)", self.name))
    }
}
