//! A CPU budget per minute shared by several plugin instances (a tenant's, in `sluice serve`).
//!
//! The budget bounds the CPU the instances spend together, across calls: a plugin that loops,
//! or many busy ones, cannot take more than the budget from the other tenants. It is a bucket
//! that holds at most one minute's CPU time and refills continuously; calls spend from it as they
//! run, measured on the calling thread's CPU clock every epoch tick (so time the thread waits
//! for a core is not charged). A call that finds the bucket empty is not failed: it is paused
//! until the bucket has refilled what was overspent, and the pause does not count toward the
//! call's time limit.
//!
//! Why CPU time and not fuel: a synchronous wasmtime call keeps its fuel counter in a register
//! and writes it back only at calls and when it runs out, so fuel spent by a running loop cannot
//! be seen, charged or paused until the call ends. The thread's CPU clock can.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// An amount per minute: a bucket that holds at most one minute's amount and refills
/// continuously. Spending may overdraw it; the debt is paid back by waiting.
#[derive(Debug)]
pub struct PerMinute {
    per_minute: f64,
    bucket: Mutex<Bucket>,
}

impl PerMinute {
    /// A full bucket of `per_minute` (above zero).
    pub fn new(per_minute: f64) -> Self {
        Self { per_minute, bucket: Mutex::new(Bucket { level: per_minute, at: Instant::now() }) }
    }

    /// Refilled per second.
    fn rate(&self) -> f64 {
        self.per_minute / 60.0
    }

    /// The bucket, refilled up to now.
    fn refilled(&self) -> std::sync::MutexGuard<'_, Bucket> {
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        b.level = (b.level + now.duration_since(b.at).as_secs_f64() * self.rate()).min(self.per_minute);
        b.at = now;
        b
    }

    /// Take `amount`; returns how long until the bucket is out of debt (zero when it is not).
    pub fn spend(&self, amount: f64) -> Duration {
        let mut b = self.refilled();
        b.level -= amount;
        if b.level >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-b.level / self.rate()) }
    }

    /// Take `amount` only if the bucket holds it; else returns how long until it will.
    pub fn try_spend(&self, amount: f64) -> Result<(), Duration> {
        let mut b = self.refilled();
        if b.level >= amount {
            b.level -= amount;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((amount - b.level) / self.rate()))
        }
    }
}

/// CPU time per minute, shared; see the module docs.
#[derive(Debug)]
pub struct CpuBudget {
    bucket: PerMinute,
    /// CPU time spent, in total (nanoseconds).
    spent: AtomicU64,
    /// Time calls were paused for, in total (nanoseconds).
    paused: AtomicU64,
}

#[derive(Debug)]
struct Bucket {
    /// What is left; below zero when overspent.
    level: f64,
    at: Instant,
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

impl CpuBudget {
    /// A full budget of `per_minute` CPU time (at least a millisecond).
    pub fn new(per_minute: Duration) -> Self {
        Self {
            bucket: PerMinute::new(per_minute.max(Duration::from_millis(1)).as_secs_f64()),
            spent: AtomicU64::new(0),
            paused: AtomicU64::new(0),
        }
    }

    /// Take `cpu` from the budget; returns how long the spender must pause for the budget to be
    /// out of debt again (zero when it is not in debt).
    pub fn spend(&self, cpu: Duration) -> Duration {
        self.spent.fetch_add(nanos(cpu), Ordering::Relaxed);
        self.bucket.spend(cpu.as_secs_f64())
    }

    /// How long until the budget is out of debt (zero when it is not in debt).
    pub fn debt(&self) -> Duration {
        self.spend(Duration::ZERO)
    }

    /// CPU time spent since the budget was made.
    pub fn spent(&self) -> Duration {
        Duration::from_nanos(self.spent.load(Ordering::Relaxed))
    }

    /// Time calls spent paused because the budget was in debt.
    pub fn paused(&self) -> Duration {
        Duration::from_nanos(self.paused.load(Ordering::Relaxed))
    }

    /// Pause the calling thread until the budget is out of debt (a call in progress); returns
    /// how long it paused.
    pub(crate) fn pause(&self) -> Duration {
        let mut total = Duration::ZERO;
        loop {
            let wait = self.debt();
            if wait.is_zero() {
                break;
            }
            std::thread::sleep(wait);
            total += wait;
        }
        self.paused.fetch_add(nanos(total), Ordering::Relaxed);
        total
    }

    /// Wait until the budget is out of debt (before a call).
    pub async fn wait(&self) {
        loop {
            let wait = self.debt();
            if wait.is_zero() {
                break;
            }
            tokio::time::sleep(wait).await;
            self.paused.fetch_add(nanos(wait), Ordering::Relaxed);
        }
    }
}

/// CPU time the calling thread has used.
pub(crate) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through the valid pointer it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_allows_a_minute_of_cpu_then_charges_the_debt_at_its_rate() {
        let b = CpuBudget::new(Duration::from_secs(6)); // 0.1 s per second
        assert_eq!(b.spend(Duration::from_secs(6)), Duration::ZERO);
        // 3 s overspent at 0.1 s per second: 30 s, less what refilled meanwhile.
        let wait = b.spend(Duration::from_secs(3));
        assert!(wait > Duration::from_secs(25) && wait <= Duration::from_secs(30), "{wait:?}");
        assert_eq!(b.spent(), Duration::from_secs(9));
        // The bucket never holds more than a minute's CPU.
        let full = CpuBudget::new(Duration::from_secs(6));
        std::thread::sleep(Duration::from_millis(20));
        assert!(full.spend(Duration::from_millis(6001)) > Duration::ZERO);
    }

    #[test]
    fn try_spend_takes_only_what_the_bucket_holds() {
        let b = PerMinute::new(3.0); // one every 20 s
        assert_eq!((b.try_spend(1.0), b.try_spend(1.0), b.try_spend(1.0)), (Ok(()), Ok(()), Ok(())));
        let wait = b.try_spend(1.0).unwrap_err();
        assert!(wait > Duration::from_secs(15) && wait <= Duration::from_secs(20), "{wait:?}");
    }

    #[test]
    fn pause_waits_out_the_debt() {
        let b = CpuBudget::new(Duration::from_secs(60)); // 1 s per second
        b.spend(Duration::from_millis(60_050)); // 50 ms in debt
        let paused = b.pause();
        assert!(paused <= Duration::from_millis(50), "{paused:?}");
        assert_eq!(b.debt(), Duration::ZERO);
        assert_eq!(b.paused(), paused);
    }

    #[test]
    fn the_thread_cpu_clock_counts_work_not_sleep() {
        let start = thread_cpu_time();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu_time() - start;
        let mut x = 0u64;
        let busy = Instant::now();
        while busy.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let worked = thread_cpu_time() - start - slept;
        assert!(slept < Duration::from_millis(20), "{slept:?}");
        assert!(worked > Duration::ZERO && worked > slept, "{worked:?} vs {slept:?}");
    }
}
