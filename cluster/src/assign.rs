//! Which member runs which unit of work (a tablet group, a table's snapshot chunk, a binlog or
//! slot stream, a Kafka partition): by capacity, and sticky — a unit stays with its member while
//! that member is alive and not over its share, so a checkpoint boundary moves as little as it can.

use std::collections::BTreeMap;

/// Assign every unit in `units` to one of `members` (id → capacity, at least 1), keeping what
/// `previous` gave where it can. Deterministic: the same inputs give the same assignment.
pub fn assign(
    units: &[String],
    members: &BTreeMap<String, u32>,
    previous: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if members.is_empty() {
        return out;
    }
    let total_capacity: u64 = members.values().map(|c| u64::from((*c).max(1))).sum();
    let n = units.len() as u64;
    // A member's share: its part of the units by capacity, rounded up.
    let share = |id: &str| (n * u64::from(members[id].max(1))).div_ceil(total_capacity);
    let mut load: BTreeMap<&str, u64> = members.keys().map(|id| (id.as_str(), 0)).collect();
    let mut unplaced = Vec::new();
    for unit in units {
        match previous.get(unit) {
            Some(owner) if load.contains_key(owner.as_str()) && load[owner.as_str()] < share(owner) => {
                *load.get_mut(owner.as_str()).expect("member") += 1;
                out.insert(unit.clone(), owner.clone());
            }
            _ => unplaced.push(unit),
        }
    }
    for unit in unplaced {
        // The member least loaded for its capacity; ties to the lowest id.
        let (id, _) = load
            .iter()
            .map(|(id, l)| (*id, (*l as f64 + 1.0) / f64::from(members[*id].max(1))))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)))
            .expect("members");
        let id = id.to_string();
        *load.get_mut(id.as_str()).expect("member") += 1;
        out.insert(unit.clone(), id);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("u{i}")).collect()
    }

    fn members(list: &[(&str, u32)]) -> BTreeMap<String, u32> {
        list.iter().map(|(id, c)| (id.to_string(), *c)).collect()
    }

    fn counts(a: &BTreeMap<String, String>) -> BTreeMap<String, usize> {
        let mut c = BTreeMap::new();
        for owner in a.values() {
            *c.entry(owner.clone()).or_default() += 1;
        }
        c
    }

    #[test]
    fn units_spread_by_capacity() {
        let a = assign(&units(12), &members(&[("a", 1), ("b", 1), ("c", 2)]), &BTreeMap::new());
        assert_eq!(counts(&a), [("a".into(), 3), ("b".into(), 3), ("c".into(), 6)].into());
    }

    #[test]
    fn a_lost_member_moves_only_its_own_units() {
        let all = units(9);
        let before = assign(&all, &members(&[("a", 1), ("b", 1), ("c", 1)]), &BTreeMap::new());
        let after = assign(&all, &members(&[("a", 1), ("c", 1)]), &before);
        for (unit, owner) in &before {
            if owner != "b" {
                assert_eq!(&after[unit], owner, "{unit} moved although its member lives");
            }
        }
        assert_eq!(counts(&after), [("a".into(), 5), ("c".into(), 4)].into());
        // b comes back: it gets units again, only as many as it takes to even out.
        let back = assign(&all, &members(&[("a", 1), ("b", 1), ("c", 1)]), &after);
        assert_eq!(counts(&back), [("a".into(), 3), ("b".into(), 3), ("c".into(), 3)].into());
        let moved = all.iter().filter(|u| back[*u] != after[*u]).count();
        assert_eq!(moved, 3);
    }

    #[test]
    fn no_members_no_assignment() {
        assert!(assign(&units(3), &BTreeMap::new(), &BTreeMap::new()).is_empty());
    }
}
