//! A server's client seats (issue 31, issue 47 §4): its socket connections (`NAME.sock`,
//! `attach`) and the endpoint clients joined to it count against `[supervisor] max_clients`,
//! and, when the server admits more than one user, no one holder may take more than its share
//! (`max_clients_per_uid`), so one user holding silent connections cannot keep every other
//! user out (row S4: 260 silent connections of one uid failed a canary 20 times of 20).
//!
//! Owns the count of seats taken, in all and by holder. Shared by the server's accept loop
//! and every endpoint it is a source of; a [`Seat`] gives itself back when dropped. What a
//! refusal says to the peer and logs is the caller's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Who holds a seat, for the per-holder share: a Unix peer (or a loopback TCP peer) by the
/// uid the kernel gives for its socket, any other peer by its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Holder {
    /// A uid.
    Uid(u32),
    /// A remote address (a pod behind another address).
    Addr(std::net::IpAddr),
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Uid(u) => write!(f, "uid {u}"),
            Holder::Addr(a) => write!(f, "address {a}"),
        }
    }
}

/// Whether uid `uid` is held to a share of a server's seats when the supervisor runs as
/// `me` (issue 47 §4): any user but the supervisor's own and root, who are trusted as
/// operators are.
pub fn shares(uid: u32, me: u32) -> bool {
    uid != me && uid != 0
}

/// The limits a seat is taken under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Seats in all (`max_clients`).
    pub max: usize,
    /// Seats one holder may take (`max_clients_per_uid`), or `None` when the share does not
    /// apply (the server admits only the supervisor's user and root, or the holder is one of
    /// them).
    pub share: Option<usize>,
}

impl Rule {
    /// The rule for a holder under `max_clients` = `max` and `max_clients_per_uid` =
    /// `per_uid` (`None`: half of `max`, rounded up; above `max`: `max`), the share applied
    /// only when `shared` (the holder is not the supervisor's own uid or root).
    pub fn of(max: usize, per_uid: Option<usize>, shared: bool) -> Rule {
        let max = max.max(1);
        Rule {
            max,
            share: shared.then(|| per_uid.unwrap_or_else(|| max.div_ceil(2)).clamp(1, max)),
        }
    }

    /// No limit at all (a client handed over by an upgrade keeps its seat).
    pub const UNLIMITED: Rule = Rule {
        max: usize::MAX,
        share: None,
    };
}

/// Why a seat was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every one of the `max` seats is taken.
    Full {
        /// `max_clients`.
        max: usize,
    },
    /// The holder already holds its share.
    Share {
        /// Who asked.
        holder: Holder,
        /// Its share (`max_clients_per_uid`).
        share: usize,
    },
}

impl Refused {
    /// The reason, as metrics and the hang-up line name it: `max_clients` or `uid_share`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Full { .. } => "max_clients",
            Refused::Share { .. } => "uid_share",
        }
    }

    /// What the refused peer is told about server (or endpoint source) `server`.
    pub fn message(&self, server: &str) -> String {
        match self {
            Refused::Full { max } => format!(
                "`{server}` has no free client seat: all {max} (max_clients) are taken; try again later"
            ),
            Refused::Share { holder, share } => format!(
                "`{server}` refuses another connection of {holder}: it holds its share of {share} client seats (max_clients_per_uid); close one and try again"
            ),
        }
    }
}

#[derive(Debug, Default)]
struct Count {
    taken: usize,
    by_holder: BTreeMap<Holder, usize>,
}

/// The seats of one server.
#[derive(Debug, Default)]
pub struct Seats {
    count: Mutex<Count>,
}

/// One seat taken from [`Seats`], given back when dropped.
#[derive(Debug)]
pub struct Seat {
    seats: Arc<Seats>,
    holder: Holder,
}

impl Seats {
    fn count(&self) -> MutexGuard<'_, Count> {
        // Every change is one increment or decrement of both counts: a poisoned lock holds
        // consistent numbers.
        self.count.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A seat for `holder` under `rule`: refused when `holder` holds `rule.share` already
    /// (said first), or when `rule.max` are taken.
    pub fn take(self: &Arc<Self>, rule: Rule, holder: Holder) -> Result<Seat, Refused> {
        let mut c = self.count();
        let held = c.by_holder.get(&holder).copied().unwrap_or(0);
        // The holder's own share first: that is what it can do something about.
        if let Some(share) = rule.share {
            if held >= share {
                return Err(Refused::Share { holder, share });
            }
        }
        if c.taken >= rule.max {
            return Err(Refused::Full { max: rule.max });
        }
        c.taken = c.taken.saturating_add(1);
        c.by_holder.insert(holder, held.saturating_add(1));
        Ok(Seat {
            seats: self.clone(),
            holder,
        })
    }

    /// Seats taken now.
    pub fn taken(&self) -> usize {
        self.count().taken
    }

    /// Seats taken now, by holder (holders with none are not listed).
    pub fn holders(&self) -> Vec<(Holder, usize)> {
        self.count()
            .by_holder
            .iter()
            .map(|(h, n)| (*h, *n))
            .collect()
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut c = self.seats.count();
        c.taken = c.taken.saturating_sub(1);
        if let Some(n) = c.by_holder.get_mut(&self.holder) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.by_holder.remove(&self.holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Holder, Refused, Rule, Seats};
    use proptest::prelude::*;
    use std::sync::Arc;

    #[test]
    fn one_holder_takes_its_share_and_others_still_get_seats() {
        let seats = Arc::new(Seats::default());
        let rule = Rule {
            max: 4,
            share: Some(2),
        };
        let a = Holder::Uid(1000);
        let b = Holder::Uid(1001);
        let mine: Vec<_> = (0..2).map(|_| seats.take(rule, a).unwrap()).collect();
        assert_eq!(
            seats.take(rule, a).unwrap_err(),
            Refused::Share {
                holder: a,
                share: 2
            }
        );
        let theirs: Vec<_> = (0..2).map(|_| seats.take(rule, b).unwrap()).collect();
        assert_eq!(seats.take(rule, b).unwrap_err().reason(), "uid_share");
        let c = Holder::Uid(1002);
        assert_eq!(seats.take(rule, c).unwrap_err(), Refused::Full { max: 4 });
        assert_eq!(seats.holders(), vec![(a, 2), (b, 2)]);
        drop(mine);
        assert_eq!(seats.taken(), 2);
        assert_eq!(seats.holders(), vec![(b, 2)]);
        drop(theirs);
        assert_eq!(seats.taken(), 0);
        assert!(seats.holders().is_empty());
        // Without a share, one holder may take them all.
        let all: Vec<_> = (0..4)
            .map(|_| {
                seats
                    .take(
                        Rule {
                            max: 4,
                            share: None,
                        },
                        a,
                    )
                    .unwrap()
            })
            .collect();
        assert_eq!(all.len(), 4);
    }

    proptest! {
        /// Any sequence of takes and drops: the counts match the seats held, never exceed the
        /// rule, and go back to zero.
        #[test]
        fn counts_match_the_seats_held(ops in proptest::collection::vec((0u32..4, any::<bool>()), 0..200),
                                       max in 1usize..8, share in proptest::option::of(1usize..4)) {
            let seats = Arc::new(Seats::default());
            let rule = Rule { max, share };
            let mut held = Vec::new();
            for (uid, take) in ops {
                if take {
                    if let Ok(s) = seats.take(rule, Holder::Uid(uid)) {
                        held.push((uid, s));
                    }
                } else if let Some(i) = held.iter().position(|(u, _)| *u == uid) {
                    held.remove(i);
                }
                prop_assert_eq!(seats.taken(), held.len());
                prop_assert!(held.len() <= max);
                for (h, n) in seats.holders() {
                    let Holder::Uid(u) = h else { unreachable!() };
                    prop_assert_eq!(n, held.iter().filter(|(x, _)| *x == u).count());
                    if let Some(s) = share { prop_assert!(n <= s); }
                }
            }
            held.clear();
            prop_assert_eq!(seats.taken(), 0);
        }
    }
}
