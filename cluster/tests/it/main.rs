//! The cluster protocol against real servers: etcd (3 members) and an S3 server.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_cluster::testing::{Etcd, S3};
use sluice_cluster::{ClusterError, Coordinator, Manifest, Member, StateStore, store::MANIFEST_VERSION};

fn install_tls_provider() {
    #[allow(deprecated)]
    let _ = rustls::crypto::ring::default_provider().install_default();
}

const TTL: Duration = Duration::from_secs(2);

fn manifest(checkpoint: u64, epoch: i64, leader: &str) -> Manifest {
    Manifest {
        version: MANIFEST_VERSION,
        checkpoint,
        epoch,
        leader: leader.into(),
        units: [("w0".to_string(), format!("state/{checkpoint:020}/w0"))].into(),
        committables: serde_json::json!({"doris": [[{"label": format!("l-{checkpoint}")}]]}),
    }
}

#[tokio::test]
async fn one_leader_at_a_time_and_a_deposed_leader_decides_nothing() {
    let etcd = Etcd::start(3);
    let a = Member::join(&etcd.endpoints, "/sluice/p1", "a", TTL).await.unwrap();
    let b = Member::join(&etcd.endpoints, "/sluice/p1", "b", TTL).await.unwrap();
    let mut members = a.members().await.unwrap();
    members.sort();
    assert_eq!(members, ["a", "b"]);
    // A second process under a name already taken is refused.
    let e = Member::join(&etcd.endpoints, "/sluice/p1", "a", TTL).await.err().unwrap().to_string();
    assert!(e.contains("another process is a member as `a` already"), "{e}");

    let la = a.campaign().await.unwrap();
    assert_eq!(a.leader().await.unwrap(), Some(("a".to_string(), la.epoch())));
    let waiting = tokio::spawn(async move {
        let lb = b.campaign().await.unwrap();
        (b, lb)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "b leads while a does");
    assert_eq!((la.next_checkpoint().await.unwrap(), la.next_checkpoint().await.unwrap()), (1, 2));
    la.publish(2).await.unwrap();
    assert_eq!(la.latest().await.unwrap(), Some(2));

    // a's process is gone (its lease with it); what it left in memory is a zombie.
    a.leave().await;
    let (b, lb) = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("b leads within 10s").unwrap();
    assert!(lb.epoch() > la.epoch(), "epochs grow: {} then {}", la.epoch(), lb.epoch());
    let e = la.publish(3).await.unwrap_err();
    assert!(e.is_fenced());
    assert_eq!(
        e.to_string(),
        format!(
            "fenced: this process led epoch {} but its election key is gone when it published checkpoint 3 (`b` leads with epoch {}); it decides and commits nothing more (a newer leader goes on from the latest checkpoint)",
            la.epoch(),
            lb.epoch()
        )
    );
    assert!(la.next_checkpoint().await.unwrap_err().is_fenced());
    assert!(!la.holds().await.unwrap());
    assert_eq!(lb.latest().await.unwrap(), Some(2), "the zombie's publish left no trace");
    assert_eq!(lb.next_checkpoint().await.unwrap(), 3, "numbers are never handed out twice");
    drop(b);
}

#[tokio::test]
async fn losing_one_etcd_member_of_three_changes_nothing() {
    let mut etcd = Etcd::start(3);
    let ttl = Duration::from_secs(5);
    let a = Member::join(&etcd.endpoints, "/sluice/p2", "a", ttl).await.unwrap();
    let la = a.campaign().await.unwrap();
    assert_eq!(la.next_checkpoint().await.unwrap(), 1);
    etcd.kill(0);
    // The lease lives on (renewed through the other members), and decisions still pass.
    for n in 2..=4 {
        assert_eq!(la.next_checkpoint().await.unwrap(), n);
        la.publish(n).await.unwrap();
        tokio::time::sleep(ttl / 2).await;
    }
    assert!(!*a.lost().borrow(), "the lease was lost with one etcd member of three down");
    assert!(la.holds().await.unwrap());
    assert_eq!(la.latest().await.unwrap(), Some(4));
}

/// What every store must do: create-only state and manifests, the label journal.
async fn store_contract(store: &StateStore) {
    let path = store.put_state(7, "w0", b"position 10".to_vec()).await.unwrap();
    assert_eq!(path, "state/00000000000000000007/w0");
    // The same bytes again (a retry) pass; other bytes are refused, and the state stays.
    store.put_state(7, "w0", b"position 10".to_vec()).await.unwrap();
    let e = store.put_state(7, "w0", b"position 99".to_vec()).await.unwrap_err().to_string();
    assert!(e.contains("unit `w0` already has other state at checkpoint 7"), "{e}");
    assert_eq!(&store.state(&path).await.unwrap()[..], b"position 10");
    // Older checkpoints' state goes once a later one is published.
    store.put_state(6, "w0", b"position 5".to_vec()).await.unwrap();
    store.put_state(6, "w1", b"position 6".to_vec()).await.unwrap();
    assert_eq!(store.state_checkpoints().await.unwrap().into_iter().collect::<Vec<_>>(), [6, 7]);
    assert_eq!(store.delete_states_before(7).await.unwrap(), 2);
    assert_eq!(store.state_checkpoints().await.unwrap().into_iter().collect::<Vec<_>>(), [7]);

    let first = manifest(7, 10, "a");
    store.put_manifest(&first).await.unwrap();
    store.put_manifest(&first).await.unwrap();
    let e = store.put_manifest(&manifest(7, 12, "b")).await.unwrap_err();
    assert!(matches!(e, ClusterError::ManifestTaken { checkpoint: 7, by: 10, .. }), "{e}");
    assert_eq!(store.manifest(7).await.unwrap(), Some(first));
    assert_eq!(store.manifest(8).await.unwrap(), None);

    // A journal: entries added once each, listed, deleted.
    let entry = |label: &str| format!("{{\"label\":\"{label}\",\"checkpoint\":5}}").into_bytes();
    let k1 = store.put_entry("doris", &entry("l1")).await.unwrap();
    let k2 = store.put_entry("doris", &entry("l2")).await.unwrap();
    assert_eq!(store.put_entry("doris", &entry("l1")).await.unwrap(), k1, "the same entry again");
    store.put_entry("other sink", &entry("l3")).await.unwrap();
    let mut expected = vec![(k1.clone(), entry("l1")), (k2.clone(), entry("l2"))];
    expected.sort();
    let got: Vec<(String, Vec<u8>)> =
        store.entries("doris").await.unwrap().into_iter().map(|(k, b)| (k, b.to_vec())).collect();
    assert_eq!(got, expected);
    store.delete_entries("doris", std::slice::from_ref(&k1)).await.unwrap();
    let left: Vec<String> = store.entries("doris").await.unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(left, [k2]);
    assert_eq!(store.entries("other sink").await.unwrap().len(), 1);
    assert!(store.entries("none").await.unwrap().is_empty());
}

#[tokio::test]
async fn s3_state_and_manifests_are_create_only() {
    install_tls_provider();
    let s3 = S3::start("sluice-state");
    store_contract(&s3.store("pipelines/p3")).await;
}

#[tokio::test]
async fn a_local_directory_store_keeps_the_same_contract() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&format!("file://{}", dir.path().display())).unwrap();
    store_contract(&store).await;
    assert!(dir.path().join("manifests/00000000000000000007.json").is_file());
}

#[tokio::test]
async fn a_new_leader_resumes_from_the_published_manifest_and_a_zombie_commits_nothing() {
    install_tls_provider();
    let etcd = Etcd::start(3);
    let s3 = S3::start("sluice-takeover");
    let a = Member::join(&etcd.endpoints, "/sluice/p4", "a", TTL).await.unwrap();
    let b = Member::join(&etcd.endpoints, "/sluice/p4", "b", TTL).await.unwrap();
    let ca = Coordinator { leadership: a.campaign().await.unwrap(), store: s3.store("p4") };
    let waiting = tokio::spawn(async move {
        let leadership = b.campaign().await.unwrap();
        (b, leadership)
    });

    // Checkpoint 1 all the way through the commit point.
    let run = ca.leadership.next_run().await.unwrap();
    let n = ca.begin().await.unwrap();
    let path = ca.store.put_state(n, "w0", b"{\"offset\": 100}".to_vec()).await.unwrap();
    let m1 = ca.manifest(n, [("w0".to_string(), path)].into(), serde_json::json!(["sluice_p4_1_0"]));
    ca.commit_point(&m1).await.unwrap();
    ca.leadership.mark_committed(n).await.unwrap();
    // Checkpoint 2: state written, then the leader stops before its commit point.
    let n2 = ca.begin().await.unwrap();
    let path2 = ca.store.put_state(n2, "w0", b"{\"offset\": 250}".to_vec()).await.unwrap();
    a.leave().await;

    let (_b, lb) = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("b leads").unwrap();
    let cb = Coordinator { leadership: lb, store: s3.store("p4") };
    assert!(cb.leadership.next_run().await.unwrap() > run, "run numbers are never handed out twice");
    let latest = cb.latest().await.unwrap();
    assert_eq!(latest, Some(m1.clone()), "b resumes from checkpoint 1");
    assert_eq!(cb.leadership.committed().await.unwrap(), Some(1));
    assert_eq!(&cb.store.state(&latest.unwrap().units["w0"]).await.unwrap()[..], b"{\"offset\": 100}");

    // The zombie wakes and finishes checkpoint 2: its manifest lands (N was its own), but its
    // commit point fails, so nothing of it is ever committed or resumed from.
    let m2 = ca.manifest(n2, [("w0".to_string(), path2)].into(), serde_json::json!(["sluice_p4_2_0"]));
    let e = ca.commit_point(&m2).await.unwrap_err();
    assert!(e.is_fenced(), "{e}");
    assert_eq!(cb.leadership.latest().await.unwrap(), Some(1));
    // b goes on with numbers above anything a took.
    let n3 = cb.begin().await.unwrap();
    assert_eq!(n3, 3);
    let m3 = cb.manifest(n3, BTreeMap::new(), serde_json::json!([]));
    cb.commit_point(&m3).await.unwrap();
    assert_eq!(cb.leadership.latest().await.unwrap(), Some(3));
    assert_eq!(cb.latest().await.unwrap().map(|m| m.leader), Some("b".to_string()));
}

#[tokio::test]
async fn an_object_store_lost_during_a_manifest_write_publishes_nothing() {
    install_tls_provider();
    let etcd = Etcd::start(3);
    let mut s3 = S3::start("sluice-down");
    let a = Member::join(&etcd.endpoints, "/sluice/p5", "a", TTL).await.unwrap();
    let c = Coordinator { leadership: a.campaign().await.unwrap(), store: s3.store("p5") };
    let n = c.begin().await.unwrap();
    c.commit_point(&c.manifest(n, BTreeMap::new(), serde_json::json!([]))).await.unwrap();
    let n = c.begin().await.unwrap();
    s3.kill();
    // The deadline only catches a write retried forever.
    let manifest = c.manifest(n, BTreeMap::new(), serde_json::json!([]));
    let write = c.commit_point(&manifest);
    let e = tokio::time::timeout(Duration::from_secs(120), write).await.expect("the write gives up").unwrap_err();
    let e = e.to_string();
    assert!(e.starts_with(&format!("object store s3://sluice-down/p5/manifests/{n:020}.json: ")), "{e}");
    assert_eq!(c.leadership.latest().await.unwrap(), Some(1), "checkpoint {n} was published without its manifest");
}

/// Until `view` satisfies `ok`, for at most 10 s.
async fn until(view: &mut sluice_cluster::View, what: &str, ok: impl Fn(&sluice_cluster::View) -> bool) {
    let wait = async {
        while !ok(view) {
            view.changed().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait).await.unwrap_or_else(|_| panic!("waited 10 s for {what}"));
}

#[tokio::test]
async fn units_are_planned_acknowledged_and_reported_through_etcd() {
    use sluice_cluster::work::ack_key;
    use sluice_cluster::{Barrier, Failure, Plan, Report, assign::assign};
    let etcd = Etcd::start(3);
    let ns = "/sluice/p5";
    let ttl = Duration::from_secs(4);
    let a = Member::join(&etcd.endpoints, ns, "a", ttl).await.unwrap();
    let b = Member::join(&etcd.endpoints, ns, "b", ttl).await.unwrap();
    let c = Member::join(&etcd.endpoints, ns, "c", ttl).await.unwrap();
    let la = a.campaign().await.unwrap();
    let mut members = a.members_view();
    until(&mut members, "three members", |v| v.now().len() == 3).await;
    assert_eq!(members.now().keys().collect::<Vec<_>>(), ["a", "b", "c"]);

    // The plan: one unit each, seen by every member.
    let units: Vec<String> = (0..3).map(|w| format!("w{w}")).collect();
    let capacity: BTreeMap<String, u32> = members.now().keys().map(|m| (m.clone(), 1)).collect();
    let plan = la.publish_plan(None, assign(&units, &capacity, &BTreeMap::new())).await.unwrap();
    assert_eq!(plan.generation, 1);
    let mut seen = b.plan_view();
    until(&mut seen, "b sees the plan", |v| v.value::<Plan>().as_ref() == Some(&plan)).await;
    let mine: Vec<String> = [&a, &b, &c].iter().flat_map(|m| plan.units_of(m.id())).collect();
    assert_eq!(mine.len(), 3, "every unit has exactly one member: {plan:?}");

    // A barrier; each member acknowledges its unit; the leader sees all three.
    let mut acks = a.acks_view(plan.generation);
    let barrier = la.barrier(plan.generation, 1, false).await.unwrap();
    let mut at_c = c.barrier_view();
    until(&mut at_c, "c sees the barrier", |v| v.value::<Barrier>() == Some(barrier)).await;
    for m in [&a, &b, &c] {
        for unit in plan.units_of(m.id()) {
            m.ack(&barrier, &unit, &format!("state/{:020}/{unit}", 1)).await.unwrap();
        }
    }
    until(&mut acks, "three acks", |v| v.now().len() == 3).await;
    let reports = acks.values::<Report>();
    for unit in &units {
        let r = &reports[&ack_key(1, unit)];
        assert_eq!((r.member.as_str(), r.path.clone()), (plan.units[unit].as_str(), format!("state/{:020}/{unit}", 1)));
    }

    // A unit asks for a checkpoint now: the leader sees it.
    let mut asks = a.asks_view();
    b.ask_checkpoint().await.unwrap();
    until(&mut asks, "b's request of a checkpoint", |v| v.now().contains_key("b")).await;

    // A failure is reported; a member that left can no longer ack, and its keys are gone.
    b.fail(plan.generation, true, "stream load of `db.t` failed").await.unwrap();
    let mut failures = a.failures_view(plan.generation);
    until(&mut failures, "b's failure", |v| !v.now().is_empty()).await;
    assert_eq!(
        failures.values::<Failure>()["b"],
        Failure {
            member: "b".into(),
            generation: 1,
            restartable: true,
            message: "stream load of `db.t` failed".into()
        }
    );
    c.leave().await;
    until(&mut members, "c gone", |v| !v.now().contains_key("c")).await;
    let c_unit = plan.units_of("c").remove(0);
    assert!(c.ack(&barrier, &c_unit, "state/x").await.is_err(), "a member without a lease acknowledged");
    until(&mut acks, "c's ack gone with its lease", |v| !v.now().contains_key(&ack_key(1, &c_unit))).await;

    // The next plan moves c's unit and nothing else; the old generation's keys go.
    let capacity: BTreeMap<String, u32> = members.now().keys().map(|m| (m.clone(), 1)).collect();
    let next = la.publish_plan(Some(1), assign(&units, &capacity, &plan.units)).await.unwrap();
    assert_eq!(next.generation, 2);
    for unit in &units {
        if plan.units[unit] != "c" {
            assert_eq!(next.units[unit], plan.units[unit], "{unit} moved");
        }
    }
    until(&mut acks, "generation 1's acks deleted", |v| v.now().is_empty()).await;
    until(&mut seen, "b sees plan 2", |v| v.value::<Plan>().is_some_and(|p| p.generation == 2)).await;

    // A deposed leader asks for nothing.
    a.leave().await;
    let lb = b.campaign().await.unwrap();
    let e = la.barrier(next.generation, 2, false).await.unwrap_err();
    assert!(e.is_fenced(), "{e}");
    assert!(la.publish_plan(Some(1), next.units.clone()).await.unwrap_err().is_fenced());
    assert_eq!(lb.publish_plan(Some(1), next.units).await.unwrap().generation, 3, "generations never repeat");
}

#[tokio::test]
async fn a_process_restarted_under_its_name_waits_for_the_old_lease() {
    let etcd = Etcd::start(1);
    let old = Member::join(&etcd.endpoints, "/sluice/p6", "pod-0", TTL).await.unwrap();
    old.crash();
    let started = std::time::Instant::now();
    let new = Member::join(&etcd.endpoints, "/sluice/p6", "pod-0", TTL).await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(500), "joined after {waited:?}, while the old lease lived");
    assert_eq!(new.members().await.unwrap(), ["pod-0"]);
}
