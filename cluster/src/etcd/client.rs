//! A client of the etcd v3 calls Sluice makes, over tonic: the KV, Watch, Lease and Election
//! services of the stubs in [`super::pb`] (generated from `cluster/proto/`, kept in the
//! repository so that building needs no `protoc`), on one channel balanced over every member.

use std::time::Duration;

use futures::SinkExt;
use futures::channel::mpsc;
use tonic::transport::{Channel, Endpoint};

use super::pb::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use super::pb::etcdserverpb::kv_client::KvClient;
use super::pb::etcdserverpb::lease_client::LeaseClient;
use super::pb::etcdserverpb::request_op::Request;
use super::pb::etcdserverpb::watch_client::WatchClient;
use super::pb::etcdserverpb::watch_request::RequestUnion;
use super::pb::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseRevokeRequest,
    PutRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest, WatchCreateRequest, WatchRequest, WatchResponse,
};
use super::pb::v3electionpb::election_client::ElectionClient;
use super::pb::v3electionpb::{CampaignRequest, CampaignResponse};

/// What an etcd call failed with: etcd's (or the transport's) gRPC status, or a connection that
/// could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EtcdError {
    #[error("{} ({:?})", .0.message(), .0.code())]
    Status(#[from] tonic::Status),
    #[error("{0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("`{url}` is not a valid etcd address: {detail}")]
    Endpoint { url: String, detail: String },
}

impl EtcdError {
    /// Whether the member the call went to did not answer (the next attempt may reach another).
    /// etcd's own transient refusals — no leader, leader changed, its request timed out — come as
    /// `Unavailable`; a connection that broke mid-call comes back as `Unknown` with the transport's
    /// error as its source.
    pub(crate) fn unanswered(&self) -> bool {
        match self {
            EtcdError::Status(s) => {
                s.code() == tonic::Code::Unavailable
                    || std::error::Error::source(s).is_some_and(|e| e.is::<tonic::transport::Error>())
            }
            EtcdError::Transport(_) => true,
            EtcdError::Endpoint { .. } => false,
        }
    }

    /// Whether a call that waits (a campaign) ran out of time or was cut off before it was answered.
    pub(crate) fn waited_too_long(&self) -> bool {
        matches!(self, EtcdError::Status(s) if matches!(s.code(), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled))
    }
}

type Answer<T> = std::result::Result<T, EtcdError>;

/// How a connection to the members is made.
pub(crate) struct ConnectOptions {
    /// How long making a connection to one member may take.
    pub connect_timeout: Duration,
    /// How long a call may wait for its answer (for a stream: for the stream to open).
    pub call_timeout: Duration,
    /// HTTP/2 pings: their interval, and how long an unanswered one is waited for.
    pub keep_alive: (Duration, Duration),
}

/// One channel to every member of an etcd cluster, balanced; cheap to clone.
#[derive(Clone)]
pub(crate) struct Client {
    channel: Channel,
}

impl Client {
    /// A client of the members at `endpoints` (`http://host:port`). Connections are made when
    /// the first call needs them; a member that does not answer is left for another.
    pub(crate) async fn connect(endpoints: &[String], options: &ConnectOptions) -> Answer<Client> {
        let (channel, changes) = Channel::balance_channel(endpoints.len().max(1));
        for url in endpoints {
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| EtcdError::Endpoint { url: url.clone(), detail: e.to_string() })?
                .connect_timeout(options.connect_timeout)
                .timeout(options.call_timeout)
                .http2_keep_alive_interval(options.keep_alive.0)
                .keep_alive_timeout(options.keep_alive.1)
                .keep_alive_while_idle(true);
            let uri = endpoint.uri().clone();
            changes.send(tonic::transport::channel::Change::Insert(uri, endpoint)).await.map_err(|_| {
                EtcdError::Endpoint { url: url.clone(), detail: "the balanced channel is closed".into() }
            })?;
        }
        Ok(Client { channel })
    }

    /// The key-values of `request`'s key or range.
    pub(crate) async fn range(&self, request: RangeRequest) -> Answer<RangeResponse> {
        Ok(KvClient::new(self.channel.clone()).range(request).await?.into_inner())
    }

    pub(crate) async fn put(&self, request: PutRequest) -> Answer<()> {
        KvClient::new(self.channel.clone()).put(request).await?;
        Ok(())
    }

    pub(crate) async fn delete(&self, request: DeleteRangeRequest) -> Answer<()> {
        KvClient::new(self.channel.clone()).delete_range(request).await?;
        Ok(())
    }

    /// Run a transaction; whether its comparisons held.
    pub(crate) async fn txn(&self, request: TxnRequest) -> Answer<bool> {
        Ok(KvClient::new(self.channel.clone()).txn(request).await?.into_inner().succeeded)
    }

    /// A new lease of `ttl_s` seconds; its id.
    pub(crate) async fn lease_grant(&self, ttl_s: i64) -> Answer<i64> {
        let request = LeaseGrantRequest { ttl: ttl_s, id: 0 };
        Ok(LeaseClient::new(self.channel.clone()).lease_grant(request).await?.into_inner().id)
    }

    pub(crate) async fn lease_revoke(&self, lease: i64) -> Answer<()> {
        LeaseClient::new(self.channel.clone()).lease_revoke(LeaseRevokeRequest { id: lease }).await?;
        Ok(())
    }

    /// Open the renewals of `lease`, renewing it once: each [`Renewals::renew`] is answered with
    /// the lease's TTL left.
    pub(crate) async fn lease_keep_alive(&self, lease: i64) -> Answer<Renewals> {
        let (mut requests, rx) = mpsc::channel(1);
        // etcd opens the stream (sends its headers) only with its first answer: the first renewal
        // goes before the call.
        requests.send(LeaseKeepAliveRequest { id: lease }).await.map_err(|_| closed("renewal"))?;
        let answers = LeaseClient::new(self.channel.clone()).lease_keep_alive(rx).await?.into_inner();
        Ok(Renewals { lease, requests, answers, sent: true })
    }

    /// Watch the key (or range) of `request`; the stream stays open while the returned [`Watch`]
    /// lives.
    pub(crate) async fn watch(&self, request: WatchCreateRequest) -> Answer<Watch> {
        let (mut requests, rx) = mpsc::channel(1);
        // Sent before the call: etcd answers a watch's opening with the creation of the first.
        let create = WatchRequest { request_union: Some(RequestUnion::CreateRequest(request)) };
        requests.send(create).await.map_err(|_| closed("watch"))?;
        let answers = WatchClient::new(self.channel.clone()).watch(rx).await?.into_inner();
        Ok(Watch { _requests: requests, answers })
    }

    /// Campaign in election `name` with `value`, under `lease`: answered once this campaign leads.
    pub(crate) async fn campaign(&self, name: &str, value: &str, lease: i64) -> Answer<CampaignResponse> {
        let request = CampaignRequest { name: name.into(), lease, value: value.into() };
        Ok(ElectionClient::new(self.channel.clone()).campaign(request).await?.into_inner())
    }
}

/// The error of a request stream that closed under a call.
fn closed(what: &str) -> tonic::Status {
    tonic::Status::cancelled(format!("the {what} stream closed"))
}

/// The renewals of one lease, on one stream.
pub(crate) struct Renewals {
    lease: i64,
    requests: mpsc::Sender<LeaseKeepAliveRequest>,
    answers: tonic::Streaming<LeaseKeepAliveResponse>,
    /// A renewal was sent whose answer is not read yet (the one that opened the stream).
    sent: bool,
}

impl Renewals {
    /// Renew the lease once; its answer (`None`: the stream ended).
    pub(crate) async fn renew(&mut self) -> Answer<Option<LeaseKeepAliveResponse>> {
        if !std::mem::take(&mut self.sent) {
            self.requests.send(LeaseKeepAliveRequest { id: self.lease }).await.map_err(|_| closed("renewal"))?;
        }
        Ok(self.answers.message().await?)
    }
}

/// An open watch.
pub(crate) struct Watch {
    _requests: mpsc::Sender<WatchRequest>,
    answers: tonic::Streaming<WatchResponse>,
}

impl Watch {
    /// The next answer (`None`: the stream ended).
    pub(crate) async fn message(&mut self) -> Answer<Option<WatchResponse>> {
        Ok(self.answers.message().await?)
    }
}

/// The end of the range of every key that starts with `key` (etcd's prefix convention: the key
/// with its last byte below 0xff incremented, what follows dropped; `\0` — every key — if none).
pub(crate) fn prefix_end(key: &[u8]) -> Vec<u8> {
    match key.iter().rposition(|&b| b < 0xff) {
        Some(i) => {
            let mut end = key[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

/// A read of `key`, or of every key under it when `prefix`.
pub(crate) fn range(key: &str, prefix: bool) -> RangeRequest {
    let key = key.as_bytes().to_vec();
    let range_end = if prefix { prefix_end(&key) } else { Vec::new() };
    RangeRequest { key, range_end, ..Default::default() }
}

/// "The key's version is `version`" (0: the key does not exist).
pub(crate) fn version_is(key: &str, version: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Version as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(TargetUnion::Version(version)),
        range_end: Vec::new(),
    }
}

/// "The key was created at revision `revision`".
pub(crate) fn created_at(key: &[u8], revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.to_vec(),
        target_union: Some(TargetUnion::CreateRevision(revision)),
        range_end: Vec::new(),
    }
}

/// The put of `value` at `key`, attached to `lease` (0: none), as a transaction's operation.
pub(crate) fn put_op(key: &str, value: String, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.into_bytes(),
            lease,
            ..Default::default()
        })),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_end_of_a_prefix_is_etcds() {
        assert_eq!(super::prefix_end(b"ns/members/"), b"ns/members0");
        assert_eq!(super::prefix_end(b"a\xff"), b"b");
        assert_eq!(super::prefix_end(b"\xff\xff"), b"\0");
    }
}
