//! The child process of the store's kill -9 test (test support, not shipped): claims one job from the
//! store at `URL`, then appends events two at a time, one transaction per pair, renewing its
//! lease between pairs and printing `committed N` after each commit, until it is killed.
//!
//! Usage: `maestro-store-crash-worker URL WORKER LEASE_MS`

use std::error::Error;
use std::io::Write;
use std::time::Duration;

use maestro_store::{Classes, JobQueue, NewEvent, Store};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, worker, lease_ms] = args.as_slice() else {
        return Err("usage: maestro-store-crash-worker URL WORKER LEASE_MS".into());
    };
    let lease_for = Duration::from_millis(lease_ms.parse()?);
    let store = Store::open(&url.parse()?).await?;
    let claimed = loop {
        if let Some(claimed) = store.claim(worker, &Classes::Any, lease_for).await? {
            break claimed;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut lease = claimed.lease;
    let mut out = std::io::stdout().lock();
    writeln!(out, "claimed {} fence {}", lease.job_id, lease.fence)?;
    out.flush()?;
    for pair in 1i64.. {
        let events: Vec<NewEvent> = [2 * pair - 1, 2 * pair]
            .into_iter()
            .map(|seq| {
                NewEvent::new(
                    seq,
                    "tool_result",
                    &serde_json::json!({ "seq": seq, "by": worker }),
                )
            })
            .collect::<Result<_, _>>()?;
        store.append_events(&lease, &events).await?;
        writeln!(out, "committed {}", 2 * pair)?;
        out.flush()?;
        lease = store.heartbeat(&lease, lease_for).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
