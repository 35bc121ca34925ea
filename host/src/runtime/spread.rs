//! A pipeline spread over the processes of a `[cluster]` (the keys: `sluice_cluster::work`).
//!
//! Its units are the workers `w0`…`w{parallelism-1}`. Every process runs [`member`]: [`work`],
//! the units the leader's plan gives it, from the plan's checkpoint (at each barrier it writes
//! each unit's state of the checkpoint to `state/N/<unit>` and acknowledges it in etcd), while it
//! stands by to lead. The process that leads also runs [`lead_once`] (through [`super::lead`],
//! which restarts it): it recovers from the latest published checkpoint, places the units on the
//! live members (sticky), asks for checkpoints, and once every unit has acknowledged one, writes
//! the pipeline's checkpoint and its manifest, publishes it (the commit point), commits the
//! sinks' transactions and tells the members. A member lost or a unit failed: a new plan, every
//! unit resuming from the latest published checkpoint. Units move only at checkpoint boundaries.

use std::collections::BTreeMap;
use std::time::Instant;

use sluice_cluster::assign::assign;
use sluice_cluster::work::ack_key;
use sluice_cluster::{Barrier, Done, Failure, Plan, Report, View};
use tokio::sync::watch;

use super::worker::{Ack, Trigger};
use super::{
    Prepared, Restartable, RunOptions, RunReport, SplitEnumerator, Workers, assemble_checkpoint, checkpoint_timed_out,
    commit_checkpoint, is_restartable, notified, recover, restored_positions, start_workers,
};
use crate::metrics;
use crate::state::cluster::{Clustered, classify};

fn unit_name(w: usize) -> String {
    format!("w{w}")
}

fn unit_index(unit: &str) -> Option<usize> {
    unit.strip_prefix('w')?.parse().ok()
}

/// A member's units of one plan, running.
struct Units {
    plan: Plan,
    enumerator: Box<dyn SplitEnumerator>,
    workers: Workers,
    /// The barrier being answered.
    barrier: Option<Barrier>,
}

impl Units {
    async fn start(p: &Prepared, c: &Clustered, plan: Plan, mine: &[usize]) -> anyhow::Result<Units> {
        let checkpoint = match plan.from {
            Some(id) => Some(c.checkpoint(id).await?),
            None => None,
        };
        let positions = restored_positions(p, checkpoint.as_ref())?;
        let mut enumerator = p.source.component.enumerator(&positions).await?;
        // The plan's generation is the run: no two plans share one, so neither do their labels.
        let (cp, run) = (checkpoint.as_ref(), plan.generation);
        let workers = start_workers(p, enumerator.as_mut(), cp, run, mine, &positions).await?;
        Ok(Units { plan, enumerator, workers, barrier: None })
    }

    /// Pass the leader's barrier on to the readers, if it is this plan's and new.
    fn ask(&mut self, b: Barrier) {
        let newer = self.barrier.is_none_or(|old| b.checkpoint > old.checkpoint);
        if b.generation == self.plan.generation && newer && Some(b.checkpoint) > self.plan.from {
            self.barrier = Some(b);
            self.workers.trigger_tx.send_replace(Trigger { id: b.checkpoint, last: b.last });
        }
    }

    /// A worker's acknowledgement: its unit's state written to the store, then reported.
    async fn acknowledge(&mut self, c: &Clustered, ack: Ack) -> anyhow::Result<()> {
        let Some(barrier) = self.barrier.filter(|b| b.checkpoint == ack.id) else {
            anyhow::bail!("worker {} acknowledged checkpoint {}, which was not asked for", ack.worker, ack.id);
        };
        let unit = unit_name(ack.worker);
        let bytes = serde_json::to_vec(&ack).expect("an acknowledgement serialises");
        let path = c.store().put_state(ack.id, &unit, bytes).await.map_err(classify)?;
        c.member().ack(&barrier, &unit, &path).await.map_err(classify)
    }

    /// Checkpoint `done` is committed: the readers and the enumerator hear it.
    async fn completed(&mut self, p: &Prepared, c: &Clustered, done: Done) -> anyhow::Result<()> {
        if Some(done.checkpoint) <= self.plan.from || done.checkpoint <= *self.workers.completed_tx.borrow() {
            return Ok(());
        }
        self.workers.completed_tx.send_replace(done.checkpoint);
        let cp = c.checkpoint(done.checkpoint).await?;
        let positions = cp.sources.get(&p.source.name).map(Vec::as_slice).unwrap_or_default();
        self.enumerator.on_checkpoint_complete(done.checkpoint, positions).await
    }
}

/// What running units say next: an acknowledgement, or a task that ended.
enum FromUnits {
    Ack(Ack),
    /// A reader asks for a checkpoint now.
    Now,
    Exit(Result<anyhow::Result<()>, tokio::task::JoinError>),
}

async fn next(units: &mut Option<Units>) -> FromUnits {
    if let Some(u) = units {
        tokio::select! {
            Some(ack) = u.workers.ack_rx.recv() => return FromUnits::Ack(ack),
            Some(exit) = u.workers.tasks.join_next() => return FromUnits::Exit(exit),
            Some(()) = u.workers.now_rx.recv() => return FromUnits::Now,
            else => {}
        }
    }
    std::future::pending().await
}

/// Tell the leader that a unit of this member failed in `generation`; its units stop until the
/// next plan.
async fn report(c: &Clustered, generation: u64, e: &anyhow::Error) {
    tracing::error!("a unit of member `{}` failed: {e:#}", c.member().id());
    if let Err(r) = c.member().fail(generation, is_restartable(e), &format!("{e:#}")).await {
        tracing::error!("the failure could not be reported to the leader ({r}); it finds the unit silent");
    }
}

/// This process as a member of the pipeline's cluster: it runs the units the leader's plans give
/// it and stands by to lead; once elected it leads ([`super::lead`]) until the pipeline finishes
/// or `stop` turns true. A member that never led returns when the pipeline finishes or `stop`
/// turns true (`led` false). The lease lost (etcd did not hear from this process), it stops at
/// once, deciding nothing more: another process leads.
pub(super) async fn member(
    p: &Prepared,
    c: &Clustered,
    opts: &RunOptions,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<RunReport> {
    let member = c.member().id().to_string();
    let lost_lease = || {
        anyhow::anyhow!(
            "member `{member}` lost its cluster lease (etcd did not hear from it for `lease_ttl`); it stops, and the process that leads next resumes from the last published checkpoint"
        )
    };
    let standby = |finished: bool| RunReport {
        checkpoint: 0,
        finished,
        restarts: 0,
        commit_retries: 0,
        load_retries: 0,
        led: false,
    };
    let work = work(p, c);
    tokio::pin!(work);
    let mut lost = c.member().lost();
    eprintln!("member `{member}` of pipeline `{}`: standing by to lead", p.name);
    tokio::select! {
        epoch = c.lead() => eprintln!("member `{member}` leads pipeline `{}` (epoch {})", p.name, epoch?),
        finished = &mut work => {
            finished?;
            eprintln!("member `{member}`: pipeline `{}` finished", p.name);
            c.leave().await;
            return Ok(standby(true));
        }
        _ = async { stop.wait_for(|s| *s).await.is_ok() } => {
            eprintln!("member `{member}` stopped while standing by");
            c.leave().await;
            return Ok(standby(false));
        }
        _ = async { lost.wait_for(|l| *l).await.is_ok() } => return Err(lost_lease()),
    }
    let lead = super::lead(p, opts, stop);
    tokio::pin!(lead);
    let mut working = true;
    loop {
        tokio::select! {
            report = &mut lead => return report,
            done = &mut work, if working => {
                done?;
                working = false;
            }
            _ = async { lost.wait_for(|l| *l).await.is_ok() } => return Err(lost_lease()),
        }
    }
}

/// This process's part of the pipeline: the units the leader's plans give it. Returns once the
/// pipeline has finished.
async fn work(p: &Prepared, c: &Clustered) -> anyhow::Result<()> {
    let me = c.member();
    let (mut plans, mut barriers, mut dones) = (me.plan_view(), me.barrier_view(), me.done_view());
    let mut units: Option<Units> = None;
    loop {
        if dones.value::<Done>().is_some_and(|d| d.finished) {
            return Ok(());
        }
        tokio::select! {
            _ = plans.changed() => {
                let Some(plan) = plans.value::<Plan>() else { continue };
                if units.as_ref().is_some_and(|u| u.plan.generation >= plan.generation) {
                    continue;
                }
                // The old plan's workers stop here; a load they had open is broken off.
                units = None;
                let mine: Vec<usize> = plan.units_of(me.id()).iter().filter_map(|u| unit_index(u)).collect();
                if mine.is_empty() {
                    continue;
                }
                let from = plan.from.map_or_else(|| "the start".to_string(), |n| format!("checkpoint {n}"));
                tracing::info!("member `{}` runs units {mine:?} of plan {} from {from}", me.id(), plan.generation);
                let generation = plan.generation;
                match Units::start(p, c, plan, &mine).await {
                    Ok(mut u) => {
                        if let Some(b) = barriers.value::<Barrier>() {
                            u.ask(b);
                        }
                        units = Some(u);
                    }
                    Err(e) => report(c, generation, &e).await,
                }
            }
            _ = barriers.changed() => {
                if let (Some(u), Some(b)) = (units.as_mut(), barriers.value::<Barrier>()) {
                    u.ask(b);
                }
            }
            _ = dones.changed() => {
                if let (Some(u), Some(d)) = (units.as_mut(), dones.value::<Done>())
                    && let Err(e) = u.completed(p, c, d).await
                {
                    report(c, u.plan.generation, &e).await;
                    units = None;
                }
            }
            from_units = next(&mut units) => {
                let u = units.as_mut().expect("only running units say anything");
                let error = match from_units {
                    FromUnits::Ack(ack) => match u.acknowledge(c, ack).await {
                        Ok(()) => continue,
                        Err(e) => e,
                    },
                    FromUnits::Now => {
                        if let Err(e) = me.ask_checkpoint().await {
                            tracing::warn!("could not ask the leader for a checkpoint ({e}); the next one comes at the interval");
                        }
                        continue;
                    }
                    FromUnits::Exit(Ok(Ok(()))) => continue,
                    FromUnits::Exit(Ok(Err(e))) => e,
                    FromUnits::Exit(Err(e)) => anyhow::anyhow!("a worker failed: {e}"),
                };
                report(c, u.plan.generation, &error).await;
                units = None;
            }
        }
    }
}

/// Every live member's capacity, as it said when it joined.
fn capacities(members: &View) -> BTreeMap<String, u32> {
    members.now().into_iter().map(|(m, value)| (m, sluice_cluster::etcd::member_capacity(&value))).collect()
}

/// Whether the plan still stands: every member it names alive, no unit failed.
fn check(plan: &Plan, members: &View, failures: &View) -> anyhow::Result<()> {
    let live = members.now();
    if let Some((unit, member)) = plan.units.iter().find(|(_, m)| !live.contains_key(*m)) {
        return Err(Restartable::error(format!(
            "member `{member}` (unit {unit}) left the cluster; every unit resumes from the last checkpoint on the members that remain"
        )));
    }
    if let Some(f) = failures.values::<Failure>().into_values().next() {
        let message = format!("member `{}`: {}", f.member, f.message);
        return Err(if f.restartable { Restartable::error(message) } else { anyhow::anyhow!(message) });
    }
    Ok(())
}

/// The plan of `units` on the live members, published from checkpoint `from`.
async fn plan(
    c: &Clustered,
    members: &View,
    units: &[String],
    from: Option<u64>,
    placed: &mut BTreeMap<String, String>,
) -> anyhow::Result<Plan> {
    let plan =
        c.leadership()?.publish_plan(from, assign(units, &capacities(members), placed)).await.map_err(classify)?;
    let shown: Vec<String> = plan.units.iter().map(|(u, m)| format!("{u}→{m}")).collect();
    tracing::info!("plan {}: {}", plan.generation, shown.join(" "));
    placed.clone_from(&plan.units);
    Ok(plan)
}

/// One run of the leader: recover, plan, and checkpoint until the pipeline finishes, `stop`
/// turns true, or the plan breaks (a member lost, a unit failed: an error [`super::lead`]
/// restarts from). `placed` is the last plan's placement, kept across restarts.
pub(super) async fn lead_once(
    p: &Prepared,
    c: &Clustered,
    opts: &RunOptions,
    mut stop: watch::Receiver<bool>,
    placed: &mut BTreeMap<String, String>,
) -> anyhow::Result<(u64, bool)> {
    let (_, checkpoint) = recover(p).await?;
    let leader = c.leadership()?;
    let mut completed = checkpoint.as_ref().map_or(0, |cp| cp.id);
    if checkpoint.as_ref().is_some_and(|cp| cp.finished) {
        tracing::info!("the pipeline finished at checkpoint {completed}; nothing to do");
        leader.done(completed, true).await.map_err(classify)?;
        return Ok((completed, true));
    }
    restored_positions(p, checkpoint.as_ref())?;
    let me = c.member();
    let mut members = me.members_view();
    let seen = async {
        while !members.now().contains_key(me.id()) {
            members.changed().await;
        }
    };
    if tokio::time::timeout(std::time::Duration::from_secs(10), seen).await.is_err() {
        return Err(Restartable::error("etcd did not show this process among the members within 10 s"));
    }
    let units: Vec<String> = (0..p.parallelism).map(unit_name).collect();
    let mut plan = plan(c, &members, &units, checkpoint.as_ref().map(|cp| cp.id), placed).await?;
    let mut acks = me.acks_view(plan.generation);
    let mut failures = me.failures_view(plan.generation);
    let mut asks = me.asks_view();
    let status_every = opts.status_interval.unwrap_or(std::time::Duration::from_secs(5));
    let mut next_status = tokio::time::Instant::now() + status_every;
    let mut next_checkpoint = tokio::time::Instant::now() + p.checkpoint_interval;
    let mut last_completed_at = Instant::now();
    let mut stopping = false;
    loop {
        // Until the next checkpoint is due, with an eye on the members and the units.
        while !stopping && tokio::time::Instant::now() < next_checkpoint {
            check(&plan, &members, &failures)?;
            tokio::select! {
                _ = tokio::time::sleep_until(next_checkpoint) => {}
                _ = tokio::time::sleep_until(next_status) => {
                    next_status = tokio::time::Instant::now() + status_every;
                    if !opts.quiet {
                        metrics::status_line(&p.stats, completed, last_completed_at);
                    }
                }
                _ = members.changed() => {}
                _ = failures.changed() => {}
                _ = notified(&opts.checkpoint_now) => next_checkpoint = tokio::time::Instant::now(),
                // A unit asked for one (a schema change waits for it).
                _ = asks.changed() => next_checkpoint = tokio::time::Instant::now(),
                changed = stop.changed() => stopping = changed.is_err() || *stop.borrow(),
            }
        }
        let id = leader.next_checkpoint().await.map_err(classify)?;
        let started = Instant::now();
        let barrier = leader.barrier(plan.generation, id, stopping).await.map_err(classify)?;
        let overdue = tokio::time::Instant::now() + p.checkpoint_timeout;
        // Every unit's acknowledgement.
        while !units.iter().all(|u| acks.now().contains_key(&ack_key(id, u))) {
            if let Err(e) = check(&plan, &members, &failures) {
                if stopping {
                    tracing::warn!("{e:#}; stopping at checkpoint {completed}");
                    return Ok((completed, false));
                }
                return Err(e);
            }
            tokio::select! {
                _ = acks.changed() => {}
                _ = members.changed() => {}
                _ = failures.changed() => {}
                changed = stop.changed(), if !stopping => stopping = changed.is_err() || *stop.borrow(),
                _ = tokio::time::sleep_until(overdue) => {
                    let acked = acks.now();
                    let late: Vec<String> = units
                        .iter()
                        .filter(|u| !acked.contains_key(&ack_key(id, u)))
                        .map(|u| format!("{u} (member `{}`)", plan.units.get(u).map_or("?", String::as_str)))
                        .collect();
                    return Err(checkpoint_timed_out(p, id, &late, completed));
                }
            }
        }
        let reports = acks.values::<Report>();
        let mut unit_acks = Vec::with_capacity(units.len());
        let mut paths = BTreeMap::new();
        for unit in &units {
            let report = reports.get(&ack_key(id, unit)).ok_or_else(|| {
                anyhow::anyhow!("etcd holds an acknowledgement of unit {unit} for checkpoint {id} that is not Sluice's")
            })?;
            let bytes = c.store().state(&report.path).await.map_err(classify)?;
            let ack: Ack = serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("{}/{}: {e}", c.store().location(), report.path))?;
            paths.insert(unit.clone(), report.path.clone());
            unit_acks.push(ack);
        }
        unit_acks.sort_by_key(|a| a.worker);
        let finished = unit_acks.iter().all(|a| a.exhausted);
        let cp = assemble_checkpoint(p, plan.generation, id, &unit_acks, finished);
        c.publish(&cp, paths).await?;
        commit_checkpoint(p, &cp, None, started).await?;
        leader.done(id, finished).await.map_err(classify)?;
        leader.forget_acks(plan.generation, id).await;
        // Earlier checkpoints' state is read no more (a takeover resumes from this one).
        if let Err(e) = c.store().delete_states_before(id).await {
            tracing::warn!("the state of checkpoints before {id} stays in the store for now: {e}");
        }
        completed = id;
        last_completed_at = Instant::now();
        if finished || barrier.last {
            if !opts.quiet {
                metrics::status_line(&p.stats, completed, last_completed_at);
            }
            return Ok((id, finished));
        }
        next_checkpoint = tokio::time::Instant::now() + p.checkpoint_interval;
        // Units move only here, at a checkpoint boundary, when members came or went.
        if assign(&units, &capacities(&members), &plan.units) != plan.units {
            plan = self::plan(c, &members, &units, Some(id), placed).await?;
            acks = me.acks_view(plan.generation);
            failures = me.failures_view(plan.generation);
        }
    }
}
