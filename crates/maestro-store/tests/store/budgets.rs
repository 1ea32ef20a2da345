//! The budget ledger: reservations that concurrent callers on two store handles (two nodes)
//! can never pass a cap with together, settle, release and the sweep of expired reservations,
//! on SQLite and on a real PostgreSQL cluster.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::Db;
use maestro_store::{
    BudgetCap, BudgetLimits, BudgetRefusal, BudgetState, Charge, ManualClock, Store,
};
use pretty_assertions::assert_eq;
use time::OffsetDateTime;

const TTL: Duration = Duration::from_secs(60);

fn charge(tokens: u64, micro_usd: u64) -> Charge {
    Charge { tokens, micro_usd }
}

on_both_backends!(
    concurrent_reservations_from_two_nodes_never_pass_a_cap,
    settle_counts_what_was_spent_and_release_gives_back,
    the_sweep_gives_back_reservations_whose_holder_died,
);

/// Spends `count` reservations of `each` on `budget` at once, alternating between the stores,
/// and returns how many were granted and the refusals.
async fn race(
    stores: &[Store],
    budget: &str,
    limits: BudgetLimits,
    each: Charge,
    count: usize,
) -> (usize, Vec<BudgetRefusal>) {
    let start = Arc::new(tokio::sync::Barrier::new(count));
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let store = stores[i % stores.len()].clone();
            let budget = budget.to_string();
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                store
                    .budget_reserve(&budget, limits, each, TTL)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut granted = 0;
    let mut refused = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => granted += 1,
            Err(refusal) => refused.push(refusal),
        }
    }
    (granted, refused)
}

async fn concurrent_reservations_from_two_nodes_never_pass_a_cap(db: Db) {
    // Two handles with their own pools on one database stand for two nodes.
    let stores = [db.open().await, db.open().await];

    // A token cap that fits exactly 10 of 100 calls.
    let tokens = BudgetLimits {
        max_tokens: Some(1_000),
        max_micro_usd: None,
    };
    let (granted, refused) = race(&stores, "job:tokens", tokens, charge(100, 7), 100).await;
    assert_eq!(granted, 10);
    assert_eq!(refused.len(), 90);
    assert!(
        refused
            .iter()
            .all(|r| r.cap == BudgetCap::Tokens && r.limit == 1_000)
    );
    let state = stores[1].budget_state("job:tokens").await.unwrap().unwrap();
    assert_eq!(
        state,
        BudgetState {
            spent: charge(0, 0),
            reserved: charge(1_000, 70),
        }
    );

    // A cost cap (micro-USD) that fits 10, with a token cap far away: the cost cap refuses.
    let usd = BudgetLimits {
        max_tokens: Some(1_000_000),
        max_micro_usd: Some(50_000),
    };
    let (granted, refused) = race(&stores, "key:k1:2026-11", usd, charge(3, 5_000), 100).await;
    assert_eq!(granted, 10);
    assert!(
        refused
            .iter()
            .all(|r| r.cap == BudgetCap::Usd && r.limit == 50_000)
    );
    let text = refused[0].to_string();
    assert!(text.contains("cost cap of $0.05"), "{text}");

    for store in stores {
        store.close().await;
    }
}

async fn settle_counts_what_was_spent_and_release_gives_back(db: Db) {
    let store = db.open().await;
    let limits = BudgetLimits {
        max_tokens: Some(1_000),
        max_micro_usd: Some(10_000),
    };
    assert_eq!(store.budget_state("job:a").await.unwrap(), None);
    let first = store
        .budget_reserve("job:a", limits, charge(600, 6_000), TTL)
        .await
        .unwrap()
        .unwrap();
    // 600 + 600 > 1000: refused while the first is open.
    let refusal = store
        .budget_reserve("job:a", limits, charge(600, 10), TTL)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        refusal,
        BudgetRefusal {
            cap: BudgetCap::Tokens,
            limit: 1_000,
            spent: 0,
            reserved: 600,
        }
    );

    // The call cost less than reserved: only what it spent stays.
    store
        .budget_settle(first, charge(250, 2_500))
        .await
        .unwrap();
    let settled = BudgetState {
        spent: charge(250, 2_500),
        reserved: charge(0, 0),
    };
    assert_eq!(store.budget_state("job:a").await.unwrap(), Some(settled));
    // Settling again, or releasing a settled reservation, changes nothing.
    store
        .budget_settle(first, charge(250, 2_500))
        .await
        .unwrap();
    store.budget_release(first).await.unwrap();
    assert_eq!(store.budget_state("job:a").await.unwrap(), Some(settled));

    // Now 250 + 600 fits; a released reservation gives its room back and spends nothing.
    let second = store
        .budget_reserve("job:a", limits, charge(600, 6_000), TTL)
        .await
        .unwrap()
        .unwrap();
    store.budget_release(second).await.unwrap();
    store.budget_release(second).await.unwrap();
    store
        .budget_settle(second, charge(600, 6_000))
        .await
        .unwrap();
    assert_eq!(store.budget_state("job:a").await.unwrap(), Some(settled));

    // A call that spent more than it reserved is counted in full, and the budget then refuses
    // even a small charge on the cap it passed.
    let third = store
        .budget_reserve("job:a", limits, charge(700, 100), TTL)
        .await
        .unwrap()
        .unwrap();
    store.budget_settle(third, charge(900, 100)).await.unwrap();
    let over = store
        .budget_reserve("job:a", limits, charge(1, 1), TTL)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        (over.cap, over.spent, over.reserved),
        (BudgetCap::Tokens, 1_150, 0)
    );
    // Another budget is not touched.
    assert_eq!(store.budget_state("job:b").await.unwrap(), None);
    store.close().await;
}

async fn the_sweep_gives_back_reservations_whose_holder_died(db: Db) {
    let clock = Arc::new(ManualClock::new(OffsetDateTime::now_utc()));
    let store = db.open().await.with_clock(clock.clone());
    let limits = BudgetLimits {
        max_tokens: Some(100),
        max_micro_usd: None,
    };
    let short = store
        .budget_reserve("job:s", limits, charge(60, 0), Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    let long = store
        .budget_reserve("job:s", limits, charge(30, 0), Duration::from_secs(600))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.budget_sweep().await.unwrap(), 0);

    clock.advance(Duration::from_secs(11));
    assert_eq!(store.budget_sweep().await.unwrap(), 1);
    assert_eq!(store.budget_sweep().await.unwrap(), 0);
    let state = store.budget_state("job:s").await.unwrap().unwrap();
    assert_eq!(state.reserved, charge(30, 0));
    // The room is back: 30 open + 70 fits 100.
    let again = store
        .budget_reserve("job:s", limits, charge(70, 0), TTL)
        .await
        .unwrap();
    assert!(again.is_ok(), "{again:?}");

    // The holder came back after all: what it spent counts, and its reservation is not taken
    // off a second time.
    store.budget_settle(short, charge(5, 0)).await.unwrap();
    store.budget_settle(short, charge(5, 0)).await.unwrap();
    let state = store.budget_state("job:s").await.unwrap().unwrap();
    assert_eq!(
        state,
        BudgetState {
            spent: charge(5, 0),
            reserved: charge(100, 0),
        }
    );
    store.budget_settle(long, charge(30, 0)).await.unwrap();

    // A day later the closed reservations are forgotten; settling one then is still a no-op.
    clock.advance(Duration::from_secs(2 * 24 * 60 * 60));
    assert_eq!(store.budget_sweep().await.unwrap(), 1);
    store.budget_settle(long, charge(30, 0)).await.unwrap();
    let state = store.budget_state("job:s").await.unwrap().unwrap();
    assert_eq!(
        state,
        BudgetState {
            spent: charge(35, 0),
            reserved: charge(0, 0),
        }
    );
    store.close().await;
}
