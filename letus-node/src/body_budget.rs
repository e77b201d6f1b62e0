//! One budget for the request bodies a node (or a router) holds at once.
//!
//! `max_body_bytes` bounds one body; `max_connections` bounds how many requests are open. Their product (32 GiB
//! with the defaults) is no bound on memory: reads are public, so anyone could open a thousand connections that
//! each announce a body of `max_body_bytes` and send it slowly. Every route that reads a body therefore first
//! reserves its size here: the `Content-Length` it announces (a body longer than that is an error of hyper's, and
//! one above `max_body_bytes` is refused before anything is reserved), or `max_body_bytes` when it announces none
//! (chunked), or its own size when it is already in memory (in-process tests). The reservation is held until the handler returns, so it also covers the request parsed from the
//! body while it waits for a read permit or the writer. When the budget stays spent for [`BUDGET_WAIT`], the
//! request gets `503 too_many_bodies` (with `Retry-After`) with its body unread.
//!
//! Requests with the write token (block writes, shard blocks, prunes, moves) reserve from a budget of their own
//! of the same size, so that anonymous readers, however many, cannot keep the block producer out; and they check
//! their token before they reserve anything, so a client without it gets its 401 without taking any of either
//! budget (the issue-11 test of unauthenticated large bodies relies on that). Memory for bodies is therefore at
//! most twice `max_buffered_body_bytes`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::server::parse_json;

/// How long a request waits for the budget before `503 too_many_bodies`. Bodies are held for as long as their
/// requests take (milliseconds for reads), so a wait this long means the budget is taken by slow senders, whose
/// bodies have `body_timeout` to arrive.
pub const BUDGET_WAIT: Duration = Duration::from_secs(1);

/// How often a request waiting for the budget looks again.
const POLL: Duration = Duration::from_millis(5);

/// The budget is counted in KiB: a semaphore takes at most `u32::MAX` permits at once.
const UNIT: u64 = 1024;

/// The bytes of request bodies held at once, counted in [`UNIT`]s.
#[derive(Clone, Debug)]
pub struct BodyBudget {
    units: Arc<Semaphore>,
    /// The whole budget, in units (a reservation is capped to it, so that one body is never refused for good).
    total: u32,
}

/// A body's share of the budget, given back when dropped.
#[derive(Debug)]
pub struct BodyPermit(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl BodyBudget {
    /// A budget of `bytes` (at least `max_body_bytes`, or the largest body could never be admitted).
    pub fn new(bytes: usize, max_body_bytes: usize) -> BodyBudget {
        let bytes = (bytes.max(max_body_bytes) as u64).max(UNIT);
        let total = bytes.div_ceil(UNIT).min(u64::from(u32::MAX)) as u32;
        BodyBudget {
            units: Arc::new(Semaphore::new(total as usize)),
            total,
        }
    }

    /// The bytes of the budget not reserved now.
    pub fn available_bytes(&self) -> u64 {
        self.units.available_permits() as u64 * UNIT
    }

    /// Reserves the body of `req` (see the module's comment), then reads it and parses it as JSON. The permit
    /// must be kept until the request is answered.
    pub async fn read_json<T: for<'de> Deserialize<'de>>(
        &self,
        req: Request,
        max_body_bytes: usize,
    ) -> Result<(T, BodyPermit), ApiError> {
        // hyper's body knows its `Content-Length` (a body longer than that is an error of hyper's); a chunked one
        // has no upper bound here, and `max_body_bytes` is what it may take.
        let announced = http_body::Body::size_hint(req.body()).upper();
        let bytes = match announced {
            Some(n) if n > max_body_bytes as u64 => {
                return Err(ApiError::PayloadTooLarge(max_body_bytes))
            }
            Some(n) => n,
            None => max_body_bytes as u64,
        };
        let permit = self.reserve(bytes).await?;
        let body = Bytes::from_request(req, &()).await;
        let value = parse_json(body, max_body_bytes)?;
        Ok((value, permit))
    }

    /// Waits up to [`BUDGET_WAIT`] for `bytes` of the budget.
    pub async fn reserve(&self, bytes: u64) -> Result<BodyPermit, ApiError> {
        if bytes == 0 {
            return Ok(BodyPermit(None));
        }
        let units = bytes.div_ceil(UNIT).min(u64::from(self.total)) as u32;
        // Polled, not queued: tokio's semaphore is fair, so one large reservation waiting at the head of its
        // queue would hold up every small one behind it although they fit.
        let until = tokio::time::Instant::now() + BUDGET_WAIT;
        loop {
            match self.units.clone().try_acquire_many_owned(units) {
                Ok(p) => return Ok(BodyPermit(Some(p))),
                Err(tokio::sync::TryAcquireError::Closed) => {
                    return Err(ApiError::Internal("the body budget is closed".into()))
                }
                Err(tokio::sync::TryAcquireError::NoPermits) => {}
            }
            if tokio::time::Instant::now() >= until {
                return Err(ApiError::TooManyBodies(u64::from(self.total) * UNIT));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reservation_waits_for_the_budget_then_gives_up() {
        let budget = BodyBudget::new(8 * 1024, 4 * 1024);
        let a = budget.reserve(6 * 1024).await.unwrap();
        assert_eq!(budget.available_bytes(), 2 * 1024);
        // 3 KiB do not fit beside 6: refused after the wait, with the budget unchanged.
        let started = tokio::time::Instant::now();
        let refused = budget.reserve(3 * 1024).await.unwrap_err();
        assert!(
            matches!(refused, ApiError::TooManyBodies(8192)),
            "{refused:?}"
        );
        assert!(started.elapsed() >= BUDGET_WAIT);
        assert_eq!(budget.available_bytes(), 2 * 1024);
        // A reservation waiting when the budget comes back gets it.
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(3 * 1024).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(a);
        let b = waiting.await.unwrap().unwrap();
        assert_eq!(budget.available_bytes(), 5 * 1024);
        drop(b);
        // A part of a unit takes a unit; more than the whole budget takes the whole budget, not forever.
        let c = budget.reserve(1).await.unwrap();
        assert_eq!(budget.available_bytes(), 7 * 1024);
        drop(c);
        let d = budget.reserve(u64::MAX).await.unwrap();
        assert_eq!(budget.available_bytes(), 0);
        drop(d);
        assert_eq!(budget.available_bytes(), 8 * 1024);
    }

    #[tokio::test]
    async fn a_small_reservation_is_not_held_up_behind_a_large_one_waiting() {
        let budget = BodyBudget::new(8 * 1024, 8 * 1024);
        let held = budget.reserve(6 * 1024).await.unwrap();
        let large = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(8 * 1024).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        // 2 KiB fit beside the 6 held, whatever waits for the whole budget.
        let started = tokio::time::Instant::now();
        let small = budget.reserve(2 * 1024).await.unwrap();
        assert!(started.elapsed() < BUDGET_WAIT);
        drop((small, held));
        assert!(large.await.unwrap().is_ok());
    }

    #[test]
    fn the_budget_holds_at_least_one_largest_body() {
        assert_eq!(BodyBudget::new(0, 10_000).available_bytes(), 10 * 1024);
        assert_eq!(BodyBudget::new(0, 0).available_bytes(), 1024);
    }
}
