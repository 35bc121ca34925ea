//! The one retry policy of the crate.

use std::time::Duration;

/// The one retry policy for what may pass on a second try (a load, a commit, a query, a restart):
/// the first retry waits `initial`, each next one twice as long up to 32 × `initial`, every wait
/// stretched by a random 0–100 % so that workers that failed together do not retry together;
/// at most `max_times` retries, so `max_times + 1` attempts.
///
/// Around an async call, with [`backon::Retryable`]; `when` says which errors retry, `notify`
/// logs each one with the wait that follows:
///
/// ```no_run
/// # async fn f(client: sluice::doris::FeClient) -> Result<(), sluice::doris::DorisError> {
/// use backon::Retryable;
/// use std::time::Duration;
///
/// (|| client.commit("db", sluice::doris::TxnId(42)))
///     .retry(sluice::retry::backoff(Duration::from_millis(200), 5))
///     .when(|e| !e.is_txn_gone())
///     .notify(|e, wait| tracing::warn!("commit failed, retrying in {wait:?}: {e}"))
///     .await?;
/// # Ok(()) }
/// ```
///
/// Where the loop is not one call (a pipeline restarting from its checkpoint), the waits are an
/// iterator: `let mut waits = backoff(…).build();` and `waits.next()` is the next wait, or `None`
/// once the retries are spent. Build a new one to start counting again.
pub fn backoff(initial: Duration, max_times: usize) -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(initial)
        .with_factor(2.0)
        .with_max_delay(initial.saturating_mul(32))
        .with_jitter()
        .with_max_times(max_times)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use backon::{BackoffBuilder, Retryable};

    #[test]
    fn backoff_doubles_from_initial_to_a_cap_with_jitter_and_stops_after_max_times() {
        let initial = Duration::from_millis(100);
        let waits: Vec<Duration> = super::backoff(initial, 8).build().collect();
        assert_eq!(waits.len(), 8);
        for (i, wait) in waits.iter().enumerate() {
            let base = initial * 2u32.pow(i as u32).min(32);
            assert!(*wait >= base && *wait <= base * 2, "retry {i}: {wait:?} not in [{base:?}, {:?}]", base * 2);
        }
        assert_eq!(super::backoff(initial, 0).build().next(), None, "no retries");
    }

    #[tokio::test]
    async fn backoff_retries_what_when_allows_and_gives_up_after_max_times() {
        let calls = AtomicU32::new(0);
        let fail = || async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err::<(), &str>("refused")
        };
        let policy = super::backoff(Duration::from_millis(1), 3);
        assert_eq!(fail.retry(policy).await, Err("refused"));
        assert_eq!(calls.load(Ordering::Relaxed), 4, "one attempt and three retries");

        calls.store(0, Ordering::Relaxed);
        assert_eq!(fail.retry(policy).when(|_| false).await, Err("refused"));
        assert_eq!(calls.load(Ordering::Relaxed), 1, "an error `when` refuses is not retried");

        calls.store(0, Ordering::Relaxed);
        let flaky = || async { if calls.fetch_add(1, Ordering::Relaxed) < 2 { Err("refused") } else { Ok("done") } };
        assert_eq!(flaky.retry(policy).await, Ok("done"));
        assert_eq!(calls.load(Ordering::Relaxed), 3);
    }
}
