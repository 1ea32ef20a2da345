//! The budget ledger: caps on tokens and micro-USD that concurrent callers reserve from before
//! they spend and settle afterwards. Job trees keep their caps here (`job:<root job id>`), and
//! so does anything else that must not let concurrent spenders pass a cap together.
//!
//! A reservation is one conditional `UPDATE` of the budget's row (spent + reserved + charge must
//! fit every limit), so two processes or nodes can never both get the last of a budget: SQLite
//! has one writer at a time, and PostgreSQL re-checks the `WHERE` of an `UPDATE` that waited for
//! the row's lock against the row as the other writer left it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use sqlx::Any;
use uuid::Uuid;

use crate::clock::duration_ms;
use crate::error::{StoreError, StoreResult};
use crate::model::JobId;
use crate::rows::{col, parse_id};
use crate::store::{Marks, Store};

/// The largest amount the ledger keeps; larger ones count as this much (about 2.3 × 10^18: no
/// sum of a few such amounts overflows the 64-bit columns).
const MAX_AMOUNT: u64 = 0x1FFF_FFFF_FFFF_FFFF;

/// How long a settled, released or expired reservation is kept past its expiry, so that a late
/// settle or release of it stays a no-op (an unknown reservation is one too).
const KEEP_CLOSED: Duration = Duration::from_secs(24 * 60 * 60);

/// A budget's caps. `None` leaves that amount uncapped (it is still counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BudgetLimits {
    /// The most tokens (prompt and completion together) the budget may spend.
    pub max_tokens: Option<u64>,
    /// The most micro-USD (1 USD = 1,000,000) the budget may spend.
    pub max_micro_usd: Option<u64>,
}

/// An amount reserved or spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Charge {
    /// Tokens, prompt and completion together.
    pub tokens: u64,
    /// Micro-USD (1 USD = 1,000,000).
    pub micro_usd: u64,
}

/// Which cap a refused reservation would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetCap {
    /// [`BudgetLimits::max_tokens`].
    Tokens,
    /// [`BudgetLimits::max_micro_usd`].
    Usd,
}

impl fmt::Display for BudgetCap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BudgetCap::Tokens => "tokens",
            BudgetCap::Usd => "usd",
        })
    }
}

/// Why a reservation was refused: the cap it would have passed and the budget's amounts then
/// (in tokens or micro-USD, as the cap counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BudgetRefusal {
    /// The cap that does not fit.
    pub cap: BudgetCap,
    /// That cap's limit.
    pub limit: u64,
    /// What the budget has spent of it.
    pub spent: u64,
    /// What open reservations hold of it.
    pub reserved: u64,
}

impl fmt::Display for BudgetRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cap {
            BudgetCap::Tokens => write!(
                f,
                "the token cap of {} has {} left ({} spent, {} reserved by calls in progress)",
                self.limit,
                self.left(),
                self.spent,
                self.reserved
            ),
            BudgetCap::Usd => write!(
                f,
                "the cost cap of ${} has ${} left (${} spent, ${} reserved by calls in progress)",
                usd(self.limit),
                usd(self.left()),
                usd(self.spent),
                usd(self.reserved)
            ),
        }
    }
}

impl BudgetRefusal {
    /// What the cap still has room for: its limit less what is spent and reserved.
    pub fn left(&self) -> u64 {
        self.limit
            .saturating_sub(self.spent)
            .saturating_sub(self.reserved)
    }
}

impl std::error::Error for BudgetRefusal {}

/// Micro-USD as dollars with six decimals, trailing zeros dropped (`1.5`, `0.000123`).
fn usd(micro: u64) -> String {
    let text = format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A reservation made by [`Store::budget_reserve`], to settle or release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReservationId(Uuid);

impl fmt::Display for ReservationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for ReservationId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(ReservationId)
    }
}

/// A budget's amounts now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BudgetState {
    /// What settled reservations spent.
    pub spent: Charge,
    /// What open reservations hold.
    pub reserved: Charge,
}

pub(crate) fn amount(value: u64) -> i64 {
    // MAX_AMOUNT fits an i64.
    i64::try_from(value.min(MAX_AMOUNT)).unwrap_or(i64::MAX)
}

pub(crate) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// How a closed reservation left the ledger.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Close {
    /// The call was made and cost `actual`.
    Settle(Charge),
    /// The call was not made.
    Release,
    /// Its holder never came back before it expired.
    Expire,
}

impl Close {
    fn state(self) -> &'static str {
        match self {
            Close::Settle(_) => "settled",
            Close::Release => "released",
            Close::Expire => "expired",
        }
    }
}

impl Store {
    /// One atomic operation: creates the budget `budget` if missing, then adds `charge` to its
    /// reservations only if spent + reserved + charge fits every limit in `limits` (which the
    /// budget keeps as its latest). The inner `Err` says which cap did not fit; nothing was
    /// reserved then. A reservation not settled or released within `ttl` goes back to the
    /// budget at the next [`Store::budget_sweep`].
    pub async fn budget_reserve(
        &self,
        budget: &str,
        limits: BudgetLimits,
        charge: Charge,
        ttl: Duration,
    ) -> StoreResult<Result<ReservationId, BudgetRefusal>> {
        let now = self.now_ms();
        let max_tokens = limits.max_tokens.map(amount);
        let max_micro_usd = limits.max_micro_usd.map(amount);
        let (tokens, micro_usd) = (amount(charge.tokens), amount(charge.micro_usd));
        let mut tx = self.begin_write().await?;

        let mut marks = Marks::new(self.backend);
        let sql = format!(
            "INSERT INTO budgets (id, max_tokens, max_micro_usd, created_at, updated_at) \
             VALUES ({}) ON CONFLICT (id) DO NOTHING",
            marks.list(5)
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(budget)
            .bind(max_tokens)
            .bind(max_micro_usd)
            .bind(now)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("create a budget"))?;

        // The one statement that decides: it adds the charge only where it fits.
        let mut marks = Marks::new(self.backend);
        let mut sql = format!(
            "UPDATE budgets SET reserved_tokens = reserved_tokens + {}, \
             reserved_micro_usd = reserved_micro_usd + {}, max_tokens = {}, \
             max_micro_usd = {}, updated_at = {} WHERE id = {}",
            marks.mark(),
            marks.mark(),
            marks.mark(),
            marks.mark(),
            marks.mark(),
            marks.mark(),
        );
        if max_tokens.is_some() {
            sql.push_str(&format!(
                " AND spent_tokens + reserved_tokens + {} <= {}",
                marks.mark(),
                marks.mark()
            ));
        }
        if max_micro_usd.is_some() {
            sql.push_str(&format!(
                " AND spent_micro_usd + reserved_micro_usd + {} <= {}",
                marks.mark(),
                marks.mark()
            ));
        }
        sql.push_str(" RETURNING id");
        let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(tokens)
            .bind(micro_usd)
            .bind(max_tokens)
            .bind(max_micro_usd)
            .bind(now)
            .bind(budget);
        if let Some(max) = max_tokens {
            query = query.bind(tokens).bind(max);
        }
        if let Some(max) = max_micro_usd {
            query = query.bind(micro_usd).bind(max);
        }
        let reserved = query
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::query("reserve from a budget"))?;

        if reserved.is_none() {
            let state = read_state(&mut tx, self, budget).await?;
            tx.rollback()
                .await
                .map_err(StoreError::query("end a refused budget reservation"))?;
            return Ok(Err(refusal(limits, charge, state.unwrap_or_default())));
        }

        let id = Uuid::now_v7();
        let expires = now.saturating_add(duration_ms(ttl));
        let mut marks = Marks::new(self.backend);
        let sql = format!(
            "INSERT INTO budget_reservations \
             (id, budget_id, state, tokens, micro_usd, created_at, expires_at) \
             VALUES ({}, {}, 'open', {})",
            marks.mark(),
            marks.mark(),
            marks.list(4)
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(id.to_string())
            .bind(budget)
            .bind(tokens)
            .bind(micro_usd)
            .bind(now)
            .bind(expires)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("record a budget reservation"))?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a budget reservation"))?;
        Ok(Ok(ReservationId(id)))
    }

    /// Releases the reservation and adds `actual` to the budget's spent amounts (the call was
    /// made). Idempotent: settling twice, or settling a released reservation, is a no-op. A
    /// reservation that expired meanwhile is already back in the budget; its `actual` is still
    /// counted as spent, since the call was made.
    pub async fn budget_settle(
        &self,
        reservation: ReservationId,
        actual: Charge,
    ) -> StoreResult<()> {
        self.close_reservation(reservation, Close::Settle(actual), None)
            .await
            .map(|_| ())
    }

    /// Releases the reservation without spending (the call was not made). Idempotent, like
    /// [`Store::budget_settle`].
    pub async fn budget_release(&self, reservation: ReservationId) -> StoreResult<()> {
        self.close_reservation(reservation, Close::Release, None)
            .await
            .map(|_| ())
    }

    /// The root of `job`'s tree (the job itself when it has no parent) and the caps the root
    /// was submitted with: a job tree spends from the budget `job:<root id>` under them.
    /// `None` when `job` (or one of its ancestors) does not exist.
    pub async fn job_tree_budget(&self, job: JobId) -> StoreResult<Option<(JobId, BudgetLimits)>> {
        let mut at = job;
        // A tree is never deeper than this; a longer chain is a cycle (a hand edit).
        for _ in 0..1_000 {
            let mut marks = Marks::new(self.backend);
            let sql = format!(
                "SELECT parent_id, budget_max_tokens, budget_max_micro_usd FROM jobs WHERE id = {}",
                marks.mark()
            );
            let Some(row) = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
                .bind(at.to_string())
                .fetch_optional(&self.pool)
                .await
                .map_err(StoreError::query("read a job's budget"))?
            else {
                return Ok(None);
            };
            match col::<Option<String>>(&row, "parent_id")? {
                Some(parent) => at = parse_id(&parent)?,
                None => {
                    let limits = BudgetLimits {
                        max_tokens: col::<Option<i64>>(&row, "budget_max_tokens")?.map(unsigned),
                        max_micro_usd: col::<Option<i64>>(&row, "budget_max_micro_usd")?
                            .map(unsigned),
                    };
                    return Ok(Some((at, limits)));
                }
            }
        }
        Err(StoreError::Corrupt {
            what: format!("the parents of job {job} form a cycle"),
        })
    }

    /// The budget's spent and reserved amounts; `None` for a budget never reserved from.
    pub async fn budget_state(&self, budget: &str) -> StoreResult<Option<BudgetState>> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(StoreError::query("read a budget"))?;
        read_state(&mut conn, self, budget).await
    }

    /// Releases the open reservations whose ttl has passed (their holder died between reserve
    /// and settle) and forgets closed ones a day past their expiry. Returns how many
    /// reservations it released. Each is released in a transaction of its own, so that sweeps
    /// on several nodes and the holders' own settles never wait on each other in a circle.
    pub async fn budget_sweep(&self) -> StoreResult<u64> {
        let now = self.now_ms();
        let mut marks = Marks::new(self.backend);
        let sql = format!(
            "SELECT id FROM budget_reservations WHERE state = 'open' AND expires_at < {}",
            marks.mark()
        );
        let expired: Vec<String> = sqlx::query_scalar::<Any, String>(sqlx::AssertSqlSafe(sql))
            .bind(now)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("find expired budget reservations"))?;
        let mut released = 0;
        for id in expired {
            let Ok(uuid) = Uuid::parse_str(&id) else {
                return Err(StoreError::Corrupt {
                    what: format!("budget reservation id `{id}` is not a UUID"),
                });
            };
            if self
                .close_reservation(ReservationId(uuid), Close::Expire, Some(now))
                .await?
            {
                released += 1;
            }
        }
        let mut marks = Marks::new(self.backend);
        let sql = format!(
            "DELETE FROM budget_reservations WHERE state <> 'open' AND expires_at < {}",
            marks.mark()
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(now.saturating_sub(duration_ms(KEEP_CLOSED)))
            .execute(&self.pool)
            .await
            .map_err(StoreError::query("forget old budget reservations"))?;
        Ok(released)
    }

    /// Closes one reservation as `how`; with `expired_before`, only an open one that expired
    /// before that time. True when this call changed it.
    async fn close_reservation(
        &self,
        reservation: ReservationId,
        how: Close,
        expired_before: Option<i64>,
    ) -> StoreResult<bool> {
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        let mut marks = Marks::new(self.backend);
        let sql = format!(
            "SELECT budget_id, state, tokens, micro_usd, expires_at FROM budget_reservations \
             WHERE id = {}{}",
            marks.mark(),
            self.backend.row_lock()
        );
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(reservation.to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::query("read a budget reservation"))?;
        let Some(row) = row else {
            // Unknown, or closed long ago and forgotten: nothing to do.
            return Ok(false);
        };
        let budget: String = col(&row, "budget_id")?;
        let state: String = col(&row, "state")?;
        let held_tokens: i64 = col(&row, "tokens")?;
        let held_micro_usd: i64 = col(&row, "micro_usd")?;
        let expires_at: i64 = col(&row, "expires_at")?;
        let open = state == "open";
        if let Some(before) = expired_before
            && !(open && expires_at < before)
        {
            return Ok(false);
        }
        // What comes off the reservations, and what goes on the spent amounts.
        let (unreserve, spend) = match (state.as_str(), how) {
            ("open", Close::Settle(actual)) => ((held_tokens, held_micro_usd), Some(actual)),
            ("open", Close::Release | Close::Expire) => ((held_tokens, held_micro_usd), None),
            // The call was made after all, past the reservation's expiry.
            ("expired", Close::Settle(actual)) => ((0, 0), Some(actual)),
            ("expired", Close::Release) => ((0, 0), None),
            _ => return Ok(false),
        };
        let (spend_tokens, spend_micro_usd) = spend
            .map(|actual| (amount(actual.tokens), amount(actual.micro_usd)))
            .unwrap_or((0, 0));
        let mut marks = Marks::new(self.backend);
        let sql = format!(
            "UPDATE budgets SET reserved_tokens = reserved_tokens - {}, \
             reserved_micro_usd = reserved_micro_usd - {}, spent_tokens = spent_tokens + {}, \
             spent_micro_usd = spent_micro_usd + {}, updated_at = {} WHERE id = {}",
            marks.mark(),
            marks.mark(),
            marks.mark(),
            marks.mark(),
            marks.mark(),
            marks.mark(),
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(unreserve.0)
            .bind(unreserve.1)
            .bind(spend_tokens)
            .bind(spend_micro_usd)
            .bind(now)
            .bind(&budget)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("settle a budget reservation"))?;
        let mut marks = Marks::new(self.backend);
        let sql = format!(
            "UPDATE budget_reservations SET state = {} WHERE id = {}",
            marks.mark(),
            marks.mark()
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(how.state())
            .bind(reservation.to_string())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("close a budget reservation"))?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a budget settlement"))?;
        Ok(true)
    }
}

/// The budget's amounts, read on `conn` (inside the caller's transaction when it has one).
async fn read_state(
    conn: &mut sqlx::AnyConnection,
    store: &Store,
    budget: &str,
) -> StoreResult<Option<BudgetState>> {
    let mut marks = Marks::new(store.backend);
    let sql = format!(
        "SELECT spent_tokens, spent_micro_usd, reserved_tokens, reserved_micro_usd \
         FROM budgets WHERE id = {}",
        marks.mark()
    );
    let Some(row) = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
        .bind(budget)
        .fetch_optional(&mut *conn)
        .await
        .map_err(StoreError::query("read a budget"))?
    else {
        return Ok(None);
    };
    Ok(Some(BudgetState {
        spent: Charge {
            tokens: unsigned(col(&row, "spent_tokens")?),
            micro_usd: unsigned(col(&row, "spent_micro_usd")?),
        },
        reserved: Charge {
            tokens: unsigned(col(&row, "reserved_tokens")?),
            micro_usd: unsigned(col(&row, "reserved_micro_usd")?),
        },
    }))
}

/// Which cap a refused charge did not fit, by the budget's amounts read after the refusal. When
/// both fit by then (a settle came in between), the first cap set is named.
fn refusal(limits: BudgetLimits, charge: Charge, state: BudgetState) -> BudgetRefusal {
    let tokens = limits.max_tokens.map(|limit| BudgetRefusal {
        cap: BudgetCap::Tokens,
        limit,
        spent: state.spent.tokens,
        reserved: state.reserved.tokens,
    });
    let usd = limits.max_micro_usd.map(|limit| BudgetRefusal {
        cap: BudgetCap::Usd,
        limit,
        spent: state.spent.micro_usd,
        reserved: state.reserved.micro_usd,
    });
    let passes = |r: &BudgetRefusal, add: u64| {
        r.spent.saturating_add(r.reserved).saturating_add(add) > r.limit
    };
    match (tokens, usd) {
        (Some(t), _) if passes(&t, charge.tokens) => t,
        (_, Some(u)) if passes(&u, charge.micro_usd) => u,
        (Some(t), _) => t,
        (None, Some(u)) => u,
        // No cap at all: the update cannot refuse; name the token cap as unlimited.
        (None, None) => BudgetRefusal {
            cap: BudgetCap::Tokens,
            limit: u64::MAX,
            spent: state.spent.tokens,
            reserved: state.reserved.tokens,
        },
    }
}
