//! Which connections a listener keeps (issue 26 §4): an anonymous peer must never be able to
//! take the places that a well-behaved client, or a probe, needs.
//!
//! - [`Pool`]: the connections that have not shown who they are yet (no request head read,
//!   or no valid credential yet). It is small and never full for a newcomer: when it is full,
//!   the oldest member is ended to make room ([`Pool::admit`] returns its token for the
//!   caller to cancel). A flood of idle or half-sent heads therefore only ever shortens its
//!   own connections' lives, and a client that sends its head at once (every HTTP client,
//!   the kubelet's probes) is served, unless the flood opens a whole pool of connections in
//!   the time that client takes to send one head.
//! - [`Admission`]: one TCP connection of the HTTP endpoint. It starts in the [`Pool`]; the
//!   first request that passes the access check ([`Admission::authenticate`]) moves it to
//!   one of the endpoint's `MAX_CONNECTIONS` seats, which nobody can take from it.
//!
//! Per-address caps would not separate anything: local users all come from 127/8, and the
//! pods behind one Service, or the clients behind one proxy, share an address.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// A bounded set of connections in which a newcomer always has a place (see the module
/// documentation).
#[derive(Debug)]
pub struct Pool {
    cap: usize,
    inner: Mutex<Members>,
}

#[derive(Debug, Default)]
struct Members {
    next: u64,
    /// Admission order → the token that ends that connection.
    by_age: BTreeMap<u64, CancellationToken>,
}

/// A connection's place in a [`Pool`]; it leaves the pool when this is dropped.
#[derive(Debug)]
pub struct Place {
    pool: Arc<Pool>,
    n: u64,
    ended: CancellationToken,
}

impl Pool {
    /// A pool of at most `cap` connections (at least one).
    pub fn new(cap: usize) -> Arc<Pool> {
        Arc::new(Pool {
            cap: cap.max(1),
            inner: Mutex::new(Members::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Members> {
        // Every change is one insert or remove: a poisoned lock holds a consistent map.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new connection, and, when the pool was full, the token of the oldest
    /// member, which the caller cancels to end that connection (it has already left the
    /// pool).
    pub fn admit(self: &Arc<Self>) -> (Place, Option<CancellationToken>) {
        let mut m = self.lock();
        let evicted = if m.by_age.len() >= self.cap {
            m.by_age.pop_first().map(|(_, t)| t)
        } else {
            None
        };
        let n = m.next;
        m.next = m.next.wrapping_add(1);
        let ended = CancellationToken::new();
        m.by_age.insert(n, ended.clone());
        drop(m);
        (
            Place {
                pool: self.clone(),
                n,
                ended,
            },
            evicted,
        )
    }

    /// Connections in the pool now.
    pub fn len(&self) -> usize {
        self.lock().by_age.len()
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Place {
    /// Fires when a newcomer ended this connection to make room.
    pub fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.pool.lock().by_age.remove(&self.n);
    }
}

/// One TCP connection of the HTTP endpoint: anonymous (a [`Place`] in the pool) until a
/// request of it passes the access check, then authenticated (a seat among
/// `MAX_CONNECTIONS`).
#[derive(Debug)]
pub struct Admission {
    stage: Mutex<Stage>,
    seats: Arc<Semaphore>,
    /// Fires when the connection must end now: a newcomer took its place while it was
    /// anonymous.
    ended: CancellationToken,
    /// Fires once the connection is authenticated.
    authenticated: CancellationToken,
}

#[derive(Debug)]
enum Stage {
    /// Held for its `Drop`: the place is given back when the connection leaves this stage.
    Anonymous { _place: Place },
    /// Held for its `Drop`: the seat is given back when the connection ends.
    Authenticated { _seat: OwnedSemaphorePermit },
}

/// Every authenticated seat is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeatsTaken;

impl Admission {
    /// A new anonymous connection in `place`; `seats` are the authenticated ones.
    pub fn anonymous(place: Place, seats: Arc<Semaphore>) -> Admission {
        Admission {
            ended: place.ended(),
            stage: Mutex::new(Stage::Anonymous { _place: place }),
            seats,
            authenticated: CancellationToken::new(),
        }
    }

    /// A request of this connection passed the access check: the connection leaves the
    /// anonymous pool for a seat (once; later calls only say it has one). `Err` when every
    /// seat is taken: the connection stays anonymous, and the request is refused.
    pub fn authenticate(&self) -> Result<(), SeatsTaken> {
        let mut stage = self.stage.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*stage, Stage::Authenticated { .. }) {
            return Ok(());
        }
        let permit = self
            .seats
            .clone()
            .try_acquire_owned()
            .map_err(|_| SeatsTaken)?;
        // The place is dropped here: the pool has room again.
        *stage = Stage::Authenticated { _seat: permit };
        self.authenticated.cancel();
        Ok(())
    }

    /// Fires when a newcomer took this anonymous connection's place.
    pub fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }

    /// Fires once the connection is authenticated.
    pub fn authenticated(&self) -> CancellationToken {
        self.authenticated.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::{Admission, Pool, SeatsTaken};
    use std::sync::Arc;
    use tokio::sync::Semaphore;

    #[test]
    fn a_full_pool_ends_its_oldest_member_for_a_newcomer() {
        let pool = Pool::new(2);
        let (a, none) = pool.admit();
        assert!(none.is_none());
        let (_b, none) = pool.admit();
        assert!(none.is_none());
        let (_c, evicted) = pool.admit();
        let evicted = evicted.expect("the pool was full");
        evicted.cancel();
        assert!(a.ended().is_cancelled(), "the oldest is the one ended");
        assert_eq!(pool.len(), 2);
        drop(a);
        assert_eq!(pool.len(), 2, "an ended member has already left");
    }

    #[test]
    fn a_dropped_place_frees_room() {
        let pool = Pool::new(1);
        let (a, _) = pool.admit();
        drop(a);
        assert!(pool.is_empty());
        let (_b, evicted) = pool.admit();
        assert!(evicted.is_none());
    }

    #[test]
    fn authenticating_moves_a_connection_from_the_pool_to_a_seat() {
        let pool = Pool::new(4);
        let seats = Arc::new(Semaphore::new(1));
        let (p, _) = pool.admit();
        let first = Admission::anonymous(p, seats.clone());
        assert_eq!(pool.len(), 1);
        assert_eq!(first.authenticate(), Ok(()));
        assert!(first.authenticated().is_cancelled());
        assert!(pool.is_empty(), "its place is free again");
        assert_eq!(first.authenticate(), Ok(()), "once is enough");
        let (p, _) = pool.admit();
        let second = Admission::anonymous(p, seats.clone());
        assert_eq!(second.authenticate(), Err(SeatsTaken));
        assert_eq!(pool.len(), 1, "still anonymous");
        drop(first);
        assert_eq!(second.authenticate(), Ok(()));
    }
}
