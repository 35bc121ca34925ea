//! Membership, leader election and fencing on etcd v3.
//!
//! Keys, under the pipeline's namespace `<ns>`:
//! - `<ns>/members/<id>`: one per live process, attached to its lease;
//! - `<ns>/leader/…`: the election (etcd's election API); the leader's key's creation revision
//!   is its epoch;
//! - `<ns>/counter`: the last checkpoint number handed out;
//! - `<ns>/latest`: the last published checkpoint — the commit point;
//! - `<ns>/committed`: the last checkpoint whose transactions are all committed;
//! - `<ns>/runs`, `<ns>/plans`: counters of runs and plans;
//! - `<ns>/work/…`: the plan, barriers and acks of the work spread over members (see [`crate::work`]).

use std::time::Duration;

use tokio::sync::watch;

pub(crate) use client::Client;
use client::{ConnectOptions, EtcdError, created_at, put_op, range, version_is};
use pb::etcdserverpb::range_request::{SortOrder, SortTarget};
use pb::etcdserverpb::{Compare, TxnRequest};
use pb::mvccpb::KeyValue;

pub(crate) mod client;
/// etcd's gRPC API, generated from `cluster/proto/` by `cluster/proto/generate` (no `protoc`
/// needed to build).
#[allow(clippy::all, missing_docs)]
pub(crate) mod pb {
    pub mod mvccpb {
        include!("pb/mvccpb.rs");
    }
    pub mod etcdserverpb {
        include!("pb/etcdserverpb.rs");
    }
    pub mod v3electionpb {
        include!("pb/v3electionpb.rs");
    }
}

use crate::{ClusterError, Result};

/// `etcd://host:port[,host:port…][/]` → the members' gRPC addresses (`http://host:port`).
pub fn parse_etcd_url(url: &str) -> Result<Vec<String>> {
    let bad = |detail: &str| ClusterError::Address { url: url.to_string(), detail: detail.to_string() };
    let rest = url.strip_prefix("etcd://").ok_or_else(|| bad("write it as etcd://host:port[,host:port…]"))?;
    let hosts = rest.trim_end_matches('/');
    if hosts.contains('/') || hosts.contains('@') {
        return Err(bad("only host:port pairs separated by commas may follow etcd://"));
    }
    let endpoints: Vec<String> =
        hosts.split(',').map(str::trim).filter(|h| !h.is_empty()).map(|h| format!("http://{h}")).collect();
    if endpoints.is_empty() {
        return Err(bad("no etcd member given"));
    }
    for e in &endpoints {
        let port = e.rsplit_once(':').map(|(_, p)| p).unwrap_or("");
        if port.parse::<u16>().is_err() {
            return Err(bad(&format!("`{}` needs a port (etcd's client port is usually 2379)", &e[7..])));
        }
    }
    Ok(endpoints)
}

/// How long a gRPC call to etcd may take before it counts as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

fn etcd_err(endpoints: &str) -> impl Fn(EtcdError) -> ClusterError + '_ {
    move |e| ClusterError::Etcd { endpoints: endpoints.to_string(), detail: e.to_string() }
}

/// Run an etcd call, asking again for about five seconds while members do not answer: with one
/// member of three down, a later attempt goes to another. Every call Sluice makes may be asked
/// twice (gets, puts of the same value, guarded transactions whose guard a first success fails).
pub(crate) async fn call<T, F, Fut>(endpoints: &str, f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, EtcdError>>,
{
    use backon::Retryable;
    let policy = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(1))
        .with_max_times(10)
        .with_total_delay(Some(Duration::from_secs(5)));
    f.retry(policy).when(EtcdError::unanswered).await.map_err(etcd_err(endpoints))
}

/// A transaction that puts `puts` (key, value, lease) when every one of `when` holds.
fn guarded(when: Vec<Compare>, puts: Vec<(&str, String, i64)>) -> TxnRequest {
    let success = puts.into_iter().map(|(key, value, lease)| put_op(key, value, lease)).collect();
    TxnRequest { compare: when, success, failure: Vec::new() }
}

/// `txn`, asked again while members do not answer; whether its guard held.
async fn txn(client: &Client, endpoints: &str, txn: TxnRequest) -> Result<bool> {
    call(endpoints, || {
        let txn = txn.clone();
        async move { client.txn(txn).await }
    })
    .await
}

/// The key-values of `request`, asked again while members do not answer.
async fn get(client: &Client, endpoints: &str, request: pb::etcdserverpb::RangeRequest) -> Result<Vec<KeyValue>> {
    call(endpoints, || {
        let request = request.clone();
        async move { client.range(request).await.map(|r| r.kvs) }
    })
    .await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A member's capacity, from the value of its key (`{"member": …, "capacity": N}`); 1 when it
/// names none (a process of an earlier version wrote only its name).
pub fn member_capacity(value: &[u8]) -> u32 {
    serde_json::from_slice::<serde_json::Value>(value)
        .ok()
        .and_then(|v| v.get("capacity")?.as_u64())
        .map_or(1, |c| c.clamp(1, u64::from(u32::MAX)) as u32)
}

/// This process in the cluster: a lease kept alive, and its member key.
pub struct Member {
    pub(crate) client: Client,
    pub(crate) endpoints: String,
    pub(crate) namespace: String,
    pub(crate) id: String,
    pub(crate) lease: i64,
    lost: watch::Receiver<bool>,
    keepalive: tokio::task::JoinHandle<()>,
}

impl Member {
    /// Join the cluster at `endpoints` under `namespace` as `id`, with a lease of `ttl` (whole
    /// seconds, at least 2) that a task keeps alive.
    pub async fn join(endpoints: &[String], namespace: &str, id: &str, ttl: Duration) -> Result<Member> {
        Self::join_with(endpoints, namespace, id, ttl, 1).await
    }

    /// [`Member::join`], saying how many units this process takes relative to the others (its
    /// `capacity`, at least 1), which the leader reads from the member key.
    pub async fn join_with(
        endpoints: &[String],
        namespace: &str,
        id: &str,
        ttl: Duration,
        capacity: u32,
    ) -> Result<Member> {
        let shown = endpoints.join(",");
        let joined = shown.clone();
        let err = etcd_err(&joined);
        let options = ConnectOptions {
            connect_timeout: Duration::from_secs(3),
            call_timeout: CALL_TIMEOUT,
            keep_alive: (Duration::from_secs(2), Duration::from_secs(2)),
        };
        let client = Client::connect(endpoints, &options).await.map_err(&err)?;
        let ttl_s = ttl.as_secs().max(2) as i64;
        let lease = call(&shown, || client.lease_grant(ttl_s)).await?;
        let key = format!("{namespace}/members/{id}");
        let value = serde_json::json!({ "member": id, "capacity": capacity.max(1) }).to_string();
        let put = guarded(vec![version_is(&key, 0)], vec![(&key, value, lease)]);
        let (lost_tx, lost) = watch::channel(false);
        let keepalive = tokio::spawn(keep_alive(client.clone(), lease, Duration::from_secs(ttl_s as u64), lost_tx));
        // A process restarted under its old name (a pod rescheduled) finds its predecessor's key
        // until that one's lease expires: it waits, a lease's length at most.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(ttl_s as u64 + 2);
        let mut warned = false;
        loop {
            // A failed guard after a retry may be this very put: the key then carries this lease.
            if txn(&client, &shown, put.clone()).await?
                || get(&client, &shown, range(&key, false)).await?.first().map(|kv| kv.lease) == Some(lease)
            {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                keepalive.abort();
                let _ = client.lease_revoke(lease).await;
                return Err(ClusterError::Etcd {
                    endpoints: shown,
                    detail: format!(
                        "another process is a member as `{id}` already (waited {ttl_s}s for its lease to expire); give each process its own name (a StatefulSet's pod name)"
                    ),
                });
            }
            if !std::mem::replace(&mut warned, true) {
                tracing::warn!(
                    "member `{id}` is still registered (an earlier process of this name?); waiting up to {ttl_s}s for its lease to expire"
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(Member {
            client,
            endpoints: shown,
            namespace: namespace.to_string(),
            id: id.to_string(),
            lease,
            lost,
            keepalive,
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Turns true once the lease is gone (expired, revoked) or could not be confirmed for its
    /// whole TTL; this process is then no longer a member and must stop what it leads.
    pub fn lost(&self) -> watch::Receiver<bool> {
        self.lost.clone()
    }

    /// The members alive now, by id.
    pub async fn members(&self) -> Result<Vec<String>> {
        let prefix = format!("{}/members/", self.namespace);
        let kvs = get(&self.client, &self.endpoints, range(&prefix, true)).await?;
        Ok(kvs.iter().map(|kv| text(&kv.key).trim_start_matches(&prefix).to_string()).collect())
    }

    /// Wait until this member leads the pipeline; its [`Leadership`] carries the epoch.
    pub async fn campaign(&self) -> Result<Leadership> {
        let name = format!("{}/leader", self.namespace);
        loop {
            if *self.lost.borrow() {
                return Err(ClusterError::Etcd {
                    endpoints: self.endpoints.clone(),
                    detail: format!("the lease of member `{}` expired while it waited to lead", self.id),
                });
            }
            // etcd holds a campaign until the leaders before it are gone.
            let resp = match self.client.campaign(&name, &self.id, self.lease).await {
                Ok(resp) => resp,
                // A member that went away mid-campaign, or a wait longer than a call may take:
                // ask again (another member answers; the lease keeps its place in the queue).
                Err(e) if e.unanswered() || e.waited_too_long() => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(e) => return Err(etcd_err(&self.endpoints)(e)),
            };
            let leader = resp.leader.ok_or_else(|| ClusterError::Etcd {
                endpoints: self.endpoints.clone(),
                detail: "the election answered without a leader key".into(),
            })?;
            return Ok(Leadership {
                client: self.client.clone(),
                endpoints: self.endpoints.clone(),
                namespace: self.namespace.clone(),
                member: self.id.clone(),
                key: leader.key,
                epoch: leader.rev,
            });
        }
    }

    /// The current leader's id and epoch, if there is one.
    pub async fn leader(&self) -> Result<Option<(String, i64)>> {
        current_leader(&self.client, &self.namespace, &self.endpoints).await
    }

    /// Stop renewing the lease without revoking it, as a process that dies does: the member's
    /// keys stay until the lease expires.
    #[cfg(feature = "testing")]
    pub fn crash(self) {
        self.keepalive.abort();
    }

    /// Leave the cluster: revoke the lease (this member's keys, and its leadership, go with it).
    pub async fn leave(&self) {
        self.keepalive.abort();
        let _ = self.client.lease_revoke(self.lease).await;
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.keepalive.abort();
    }
}

async fn current_leader(client: &Client, namespace: &str, endpoints: &str) -> Result<Option<(String, i64)>> {
    let prefix = format!("{namespace}/leader/");
    // The election's leader is the key of the lowest creation revision under its prefix.
    let request = pb::etcdserverpb::RangeRequest {
        sort_target: SortTarget::Create as i32,
        sort_order: SortOrder::Ascend as i32,
        limit: 1,
        ..range(&prefix, true)
    };
    let kvs = get(client, endpoints, request).await?;
    Ok(kvs.first().map(|kv| (text(&kv.value), kv.create_revision)))
}

/// Keep the lease alive at a third of its TTL; report it lost once etcd says it expired, or
/// when no renewal has been confirmed for a whole TTL.
async fn keep_alive(client: Client, lease: i64, ttl: Duration, lost: watch::Sender<bool>) {
    // Renew four times a lease, and give each attempt a quarter of it: an attempt that went to a
    // member that just died gives way to one that reaches another member well before the lease
    // would run out.
    let every = ttl / 4;
    let mut confirmed = tokio::time::Instant::now();
    let mut renewals = None;
    loop {
        // Each renewal must be confirmed before the lease would run out since the last one.
        let deadline = confirmed + ttl;
        let now = tokio::time::Instant::now();
        if now >= deadline {
            tracing::error!("the cluster lease {lease:x} could not be renewed for {ttl:?}");
            break;
        }
        let renew = async {
            if renewals.is_none() {
                renewals = Some(client.lease_keep_alive(lease).await?);
            }
            renewals.as_mut().expect("just opened").renew().await
        };
        match tokio::time::timeout_at(deadline.min(now + every), renew).await {
            Ok(Ok(Some(resp))) if resp.ttl > 0 => {
                confirmed = tokio::time::Instant::now();
                tokio::time::sleep(every).await;
            }
            Ok(Ok(Some(_))) => {
                tracing::error!("the cluster lease {lease:x} expired");
                break;
            }
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                // The member it went to is gone or silent: open the renewals again, elsewhere.
                renewals = None;
                tracing::warn!("renewing the cluster lease {lease:x} failed, trying again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let _ = lost.send(true);
}

/// This process leads the pipeline, for as long as its election key lives.
pub struct Leadership {
    pub(crate) client: Client,
    endpoints: String,
    pub(crate) namespace: String,
    member: String,
    key: Vec<u8>,
    epoch: i64,
}

impl Leadership {
    /// The epoch: the creation revision of this leader's election key. A later leader's is
    /// always greater.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    pub fn member(&self) -> &str {
        &self.member
    }

    /// "This leader's key still exists, with its epoch": the guard of every decision.
    fn guard(&self) -> Compare {
        created_at(&self.key, self.epoch)
    }

    fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.namespace)
    }

    async fn get_u64(&self, name: &str) -> Result<(Option<u64>, i64)> {
        let key = self.key(name);
        match get(&self.client, &self.endpoints, range(&key, false)).await?.first() {
            None => Ok((None, 0)),
            Some(kv) => {
                let n = text(&kv.value).parse::<u64>().map_err(|e| ClusterError::Corrupt {
                    location: format!("etcd key {key}"),
                    detail: e.to_string(),
                })?;
                Ok((Some(n), kv.version))
            }
        }
    }

    /// The fenced error, saying who leads now.
    async fn fenced(&self, what: &str) -> ClusterError {
        let now = match current_leader(&self.client, &self.namespace, &self.endpoints).await {
            Ok(Some((id, epoch))) => format!("`{id}` leads with epoch {epoch}"),
            Ok(None) => "no one leads".to_string(),
            Err(e) => format!("etcd cannot say who leads ({e})"),
        };
        ClusterError::Fenced { epoch: self.epoch, detail: format!("its election key is gone when it {what} ({now})") }
    }

    /// The last published checkpoint.
    pub async fn latest(&self) -> Result<Option<u64>> {
        Ok(self.get_u64("latest").await?.0)
    }

    /// Take the next checkpoint number from the counter, guarded by the epoch.
    pub async fn next_checkpoint(&self) -> Result<u64> {
        self.count("counter", "took a checkpoint number").await
    }

    /// Take the next run number, guarded by the epoch: every start of the pipeline, by any
    /// leader, has its own (labels carry it).
    pub async fn next_run(&self) -> Result<u64> {
        self.count("runs", "took a run number").await
    }

    /// Increment the counter `name`, guarded by the epoch; returns its new value.
    pub(crate) async fn count(&self, name: &str, what: &str) -> Result<u64> {
        let key = self.key(name);
        loop {
            let (last, version) = self.get_u64(name).await?;
            let next = last.unwrap_or(0) + 1;
            let when = vec![self.guard(), version_is(&key, version)];
            if txn(&self.client, &self.endpoints, guarded(when, vec![(&key, next.to_string(), 0)])).await? {
                return Ok(next);
            }
            if !self.holds().await? {
                return Err(self.fenced(what).await);
            }
        }
    }

    /// The last checkpoint whose transactions are all committed.
    pub async fn committed(&self) -> Result<Option<u64>> {
        Ok(self.get_u64("committed").await?.0)
    }

    /// Record that checkpoint `checkpoint`'s transactions are all committed (so that a takeover
    /// does not commit them again), guarded by the epoch.
    pub async fn mark_committed(&self, checkpoint: u64) -> Result<()> {
        self.put_guarded("committed", checkpoint, &format!("marked checkpoint {checkpoint} committed")).await
    }

    /// Whether this leader's key still exists with its epoch.
    pub async fn holds(&self) -> Result<bool> {
        txn(&self.client, &self.endpoints, guarded(vec![self.guard()], Vec::new())).await
    }

    /// Publish checkpoint `checkpoint` (`latest = checkpoint`), guarded by the epoch: the commit
    /// point. Fails with [`ClusterError::Fenced`] if another leader has taken over.
    pub async fn publish(&self, checkpoint: u64) -> Result<()> {
        self.put_guarded("latest", checkpoint, &format!("published checkpoint {checkpoint}")).await
    }

    async fn put_guarded(&self, name: &str, value: u64, what: &str) -> Result<()> {
        self.put_json_guarded(name, value.to_string(), what).await
    }

    /// Put `value` at `name`, guarded by the epoch.
    pub(crate) async fn put_json_guarded(&self, name: &str, value: String, what: &str) -> Result<()> {
        let key = self.key(name);
        let put = guarded(vec![self.guard()], vec![(&key, value, 0)]);
        if txn(&self.client, &self.endpoints, put).await? { Ok(()) } else { Err(self.fenced(what).await) }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_member_key_names_its_capacity() {
        assert_eq!(super::member_capacity(br#"{"member":"a","capacity":3}"#), 3);
        // Written by an earlier version (the name alone), or damaged: capacity 1.
        assert_eq!(super::member_capacity(b"a"), 1);
        assert_eq!(super::member_capacity(br#"{"member":"a","capacity":0}"#), 1);
    }
}
