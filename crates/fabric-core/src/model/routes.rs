//! A switch's routing table: IPv4 destination -> the egress ports that lead there (ECMP among
//! several), looked up once per frame.
//!
//! The plan's addresses are dense (hosts get 10.0.0.1, 10.0.0.2, ...), so the table is a vector indexed by
//! the destination's offset from the lowest one: one load, where a binary search over a few hundred keys
//! took a cache miss a probe once the frames in flight had pushed the table out of the cache. A table
//! whose addresses are spread wider than [`DENSE_SLACK`] times their number is searched instead. A slot holds
//! a lone port itself, and otherwise where its list lies in one vector of the distinct lists (a switch has a
//! handful: a port down, or all the uplinks): a lookup is one or two dependent loads, where a vector of
//! lists took three, each a miss once the payloads in flight had swept the table out of the cache.

use std::collections::HashMap;

/// How much wider than its number of addresses a table's span may be and still be indexed directly.
const DENSE_SLACK: usize = 4;
/// Spans up to this many addresses are indexed directly whatever their number.
const DENSE_FLOOR: usize = 1024;

/// Where a destination's egress ports are: `len` ports of [`Routes::lists`] from `at`, except that a lone
/// port is `at` itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    at: u32,
    len: u32,
}

/// A slot without a route.
const NO_ROUTE: Slot = Slot {
    at: 0,
    len: u32::MAX,
};

/// The egress ports towards a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Egress<'a> {
    One(u32),
    /// Several (ECMP picks one), or none at all (the route exists but every port is gone).
    Among(&'a [u32]),
}

impl Egress<'_> {
    /// The ports, as a list.
    pub fn as_slice(&self) -> &[u32] {
        match self {
            Egress::One(port) => std::slice::from_ref(port),
            Egress::Among(ports) => ports,
        }
    }
}

/// How destinations find their slot.
#[derive(Clone, Debug)]
enum Index {
    /// `slots[ip - base]`, or [`NO_ROUTE`].
    Dense { base: u32, slots: Vec<Slot> },
    /// Sorted destinations and, beside each, its slot.
    Sorted { keys: Vec<u32>, slots: Vec<Slot> },
}

/// The routes of one switch.
#[derive(Clone, Debug)]
pub struct Routes {
    index: Index,
    /// The distinct egress port lists of more than one port, one after the other.
    lists: Vec<u32>,
}

impl Routes {
    /// The table of `routes` (destination, egress ports); a destination given twice keeps its first list.
    pub fn new(routes: Vec<([u8; 4], Vec<u32>)>) -> Routes {
        let mut lists: Vec<u32> = Vec::new();
        // Each distinct list's slot: a fattree,24 switch has 3,456 routes over 288 lists, and comparing each
        // route's list with every list known so far took seconds over the fabric's 720 switches.
        let mut known: HashMap<Vec<u32>, Slot> = HashMap::new();
        let mut entries: Vec<(u32, Slot)> = Vec::with_capacity(routes.len());
        for (ip, ports) in routes {
            let slot = *known
                .entry(ports)
                .or_insert_with_key(|ports| match ports[..] {
                    [port] => Slot { at: port, len: 1 },
                    _ => {
                        let at = lists.len() as u32;
                        lists.extend_from_slice(ports);
                        Slot {
                            at,
                            len: ports.len() as u32,
                        }
                    }
                });
            entries.push((u32::from_be_bytes(ip), slot));
        }
        entries.sort_by_key(|&(ip, _)| ip); // stable: the first of equal destinations stays first
        entries.dedup_by_key(|&mut (ip, _)| ip);
        let index = match (entries.first(), entries.last()) {
            (Some(&(low, _)), Some(&(high, _)))
                if ((high - low) as usize) < (DENSE_SLACK * entries.len()).max(DENSE_FLOOR) =>
            {
                let mut slots = vec![NO_ROUTE; (high - low) as usize + 1];
                for &(ip, slot) in &entries {
                    slots[(ip - low) as usize] = slot;
                }
                Index::Dense { base: low, slots }
            }
            _ => Index::Sorted {
                keys: entries.iter().map(|&(ip, _)| ip).collect(),
                slots: entries.iter().map(|&(_, slot)| slot).collect(),
            },
        };
        Routes { index, lists }
    }

    /// The egress ports towards `ip`, if it has a route.
    #[inline]
    pub fn get(&self, ip: [u8; 4]) -> Option<Egress<'_>> {
        let key = u32::from_be_bytes(ip);
        let slot = match &self.index {
            Index::Dense { base, slots } => *slots.get(key.checked_sub(*base)? as usize)?,
            Index::Sorted { keys, slots } => *slots.get(keys.binary_search(&key).ok()?)?,
        };
        match slot.len {
            1 => Some(Egress::One(slot.at)),
            u32::MAX => None,
            len => {
                let at = slot.at as usize;
                self.lists.get(at..at + len as usize).map(Egress::Among)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the table must answer: the first list given for the destination.
    fn expected(routes: &[([u8; 4], Vec<u32>)], ip: [u8; 4]) -> Option<&[u32]> {
        routes
            .iter()
            .find(|(key, _)| *key == ip)
            .map(|(_, ports)| ports.as_slice())
    }

    #[test]
    fn dense_and_sparse_tables_answer_alike() {
        let dense = vec![
            ([10, 0, 0, 2], vec![1]),
            ([10, 0, 0, 1], vec![0]),
            ([10, 0, 0, 4], vec![4, 5]),
            ([10, 0, 0, 1], vec![9]),
        ];
        let table = Routes::new(dense.clone());
        assert!(matches!(table.index, Index::Dense { .. }));
        for last in 0..=6 {
            let ip = [10, 0, 0, last];
            assert_eq!(
                table.get(ip).as_ref().map(Egress::as_slice),
                expected(&dense, ip)
            );
        }
        let sparse = vec![([10, 0, 0, 1], vec![0]), ([192, 168, 0, 1], vec![1])];
        let table = Routes::new(sparse.clone());
        assert!(matches!(table.index, Index::Sorted { .. }));
        for ip in [
            [10, 0, 0, 1],
            [192, 168, 0, 1],
            [10, 0, 0, 2],
            [0; 4],
            [255; 4],
        ] {
            assert_eq!(
                table.get(ip).as_ref().map(Egress::as_slice),
                expected(&sparse, ip)
            );
        }
        assert_eq!(Routes::new(Vec::new()).get([10, 0, 0, 1]), None);
        let table = Routes::new(vec![([10, 0, 0, 1], vec![3]), ([10, 0, 0, 2], vec![])]);
        assert_eq!(table.get([10, 0, 0, 1]), Some(Egress::One(3)));
        assert_eq!(table.get([10, 0, 0, 2]), Some(Egress::Among(&[])));
    }

    proptest! {
        #[test]
        fn every_lookup_gives_the_first_list_given(
            routes in proptest::collection::vec(
                (prop_oneof![0u32..64, any::<u32>()], proptest::collection::vec(0u32..8, 0..4)),
                0..40,
            ),
            probes in proptest::collection::vec(prop_oneof![0u32..70, any::<u32>()], 0..40),
        ) {
            let routes: Vec<([u8; 4], Vec<u32>)> =
                routes.into_iter().map(|(ip, ports)| ((0x0A00_0000 ^ ip).to_be_bytes(), ports)).collect();
            let table = Routes::new(routes.clone());
            for (ip, _) in &routes {
                let got = table.get(*ip);
                prop_assert_eq!(got.as_ref().map(Egress::as_slice), expected(&routes, *ip));
            }
            for probe in probes {
                let ip = (0x0A00_0000 ^ probe).to_be_bytes();
                let got = table.get(ip);
                prop_assert_eq!(got.as_ref().map(Egress::as_slice), expected(&routes, ip));
            }
        }
    }
}
