//! Which connection makes room for a newcomer once the hub holds as many as it keeps: the one
//! silent longest of the user who holds the most, counting the newcomer. One user's hundreds of
//! agents then crowd out only that user's own: before, the oldest idle of all went, so a user
//! who filled the slots with chatty agents pushed every other user's quieter ones out.

use std::collections::HashMap;
use std::time::Instant;

use super::super::state::ConnId;

/// One open connection as the choice sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    pub(super) id: ConnId,
    /// The uid of the directory it was found in, who serves it.
    pub(super) owner: u32,
    pub(super) last_line_at: Instant,
}

/// The connection to drop so that one of `newcomer`'s agents can connect; `None` when none is
/// open.
pub(super) fn to_drop(held: &[Held], newcomer: u32) -> Option<ConnId> {
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for conn in held {
        *counts.entry(conn.owner).or_default() += 1;
    }
    *counts.entry(newcomer).or_default() += 1;
    // The most connections; of equals, the newcomer's user, then the lowest uid (no chance).
    // A newcomer's user who holds none yet (every user at one) leaves the oldest of all.
    let crowded = counts
        .iter()
        .max_by_key(|&(&owner, &count)| (count, owner == newcomer, std::cmp::Reverse(owner)))
        .map(|(&owner, _)| owner)?;
    held.iter()
        .filter(|c| c.owner == crowded)
        .min_by_key(|c| c.last_line_at)
        .or_else(|| held.iter().min_by_key(|c| c.last_line_at))
        .map(|c| c.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A connection silent for `idle_s` seconds at 1,000 s after `start`.
    fn held(id: ConnId, owner: u32, idle_s: u64, start: Instant) -> Held {
        Held {
            id,
            owner,
            last_line_at: start + Duration::from_secs(1000 - idle_s),
        }
    }

    #[test]
    fn a_user_who_holds_every_slot_loses_one_of_their_own() {
        let start = Instant::now();
        // uid 65534 holds three chatty connections; uid 1500 holds one, idle longest.
        let conns = [
            held(1, 1500, 50, start),
            held(2, 65534, 1, start),
            held(3, 65534, 3, start),
            held(4, 65534, 2, start),
        ];
        assert_eq!(to_drop(&conns, 65534), Some(3), "the flooder's own oldest");
        assert_eq!(
            to_drop(&conns, 1500),
            Some(3),
            "still the flooder's, at 3 against 2"
        );
        assert_eq!(to_drop(&conns, 0), Some(3));
    }

    #[test]
    fn with_one_user_the_one_idle_longest_goes() {
        let start = Instant::now();
        let conns = [
            held(1, 1500, 5, start),
            held(2, 1500, 9, start),
            held(3, 1500, 1, start),
        ];
        assert_eq!(to_drop(&conns, 1500), Some(2));
        assert_eq!(to_drop(&[], 1500), None);
    }

    #[test]
    fn of_equal_users_the_newcomers_own_make_room() {
        let start = Instant::now();
        let conns = [
            held(1, 1500, 90, start),
            held(2, 1600, 1, start),
            held(3, 1600, 2, start),
        ];
        // 1500 would hold 2, as 1600 does: the newcomer's user gives way.
        assert_eq!(to_drop(&conns, 1500), Some(1));
        assert_eq!(to_drop(&conns, 1600), Some(3));
    }
}
