//! A simulated switch's routing table: IPv4 destination -> the egress ports that lead there (ECMP among
//! several), looked up once per frame.
//!
//! The plan's addresses are dense (hosts get 10.0.0.1, 10.0.0.2, ...), so the table is a vector indexed by
//! the destination's offset from the lowest one: one load, where a binary search over a few hundred keys
//! took a cache miss a probe once the frames in flight had pushed the table out of the cache. A table
//! whose addresses are spread wider than [`DENSE_SLACK`] times their number is searched instead. The port
//! lists are shared: a switch has a handful of distinct ones (a port down, or all the uplinks), so they
//! stay in the cache too.

use std::collections::HashMap;

/// How much wider than its number of addresses a table's span may be and still be indexed directly.
const DENSE_SLACK: usize = 4;
/// Spans up to this many addresses are indexed directly whatever their number.
const DENSE_FLOOR: usize = 1024;
/// A slot without a route.
const NO_ROUTE: u32 = u32::MAX;

/// How destinations find their port list.
#[derive(Clone, Debug)]
enum Index {
    /// `slots[ip - base]`: the list's index, or [`NO_ROUTE`].
    Dense { base: u32, slots: Vec<u32> },
    /// Sorted destinations and, beside each, its list's index.
    Sorted { keys: Vec<u32>, slots: Vec<u32> },
}

/// The routes of one switch.
#[derive(Clone, Debug)]
pub struct Routes {
    index: Index,
    /// The distinct egress port lists.
    lists: Vec<Vec<u32>>,
}

impl Routes {
    /// The table of `routes` (destination, egress ports); a destination given twice keeps its first list.
    pub fn new(routes: Vec<([u8; 4], Vec<u32>)>) -> Routes {
        let mut lists: Vec<Vec<u32>> = Vec::new();
        // Each distinct list's index: a fattree,24 switch has 3,456 routes over 288 lists, and comparing each
        // route's list with every list known so far took seconds over the fabric's 720 switches.
        let mut known: HashMap<Vec<u32>, u32> = HashMap::new();
        let mut entries: Vec<(u32, u32)> = Vec::with_capacity(routes.len());
        for (ip, ports) in routes {
            let list = *known.entry(ports).or_insert_with_key(|ports| {
                lists.push(ports.clone());
                (lists.len() - 1) as u32
            });
            entries.push((u32::from_be_bytes(ip), list));
        }
        entries.sort_by_key(|&(ip, _)| ip); // stable: the first of equal destinations stays first
        entries.dedup_by_key(|&mut (ip, _)| ip);
        let index = match (entries.first(), entries.last()) {
            (Some(&(low, _)), Some(&(high, _)))
                if ((high - low) as usize) < (DENSE_SLACK * entries.len()).max(DENSE_FLOOR) =>
            {
                let mut slots = vec![NO_ROUTE; (high - low) as usize + 1];
                for &(ip, list) in &entries {
                    slots[(ip - low) as usize] = list;
                }
                Index::Dense { base: low, slots }
            }
            _ => Index::Sorted {
                keys: entries.iter().map(|&(ip, _)| ip).collect(),
                slots: entries.iter().map(|&(_, list)| list).collect(),
            },
        };
        Routes { index, lists }
    }

    /// The egress ports towards `ip`, if it has a route.
    #[inline]
    pub fn get(&self, ip: [u8; 4]) -> Option<&[u32]> {
        let key = u32::from_be_bytes(ip);
        let slot = match &self.index {
            Index::Dense { base, slots } => *slots.get(key.checked_sub(*base)? as usize)?,
            Index::Sorted { keys, slots } => *slots.get(keys.binary_search(&key).ok()?)?,
        };
        self.lists.get(slot as usize).map(Vec::as_slice)
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
            assert_eq!(table.get(ip), expected(&dense, ip));
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
            assert_eq!(table.get(ip), expected(&sparse, ip));
        }
        assert_eq!(Routes::new(Vec::new()).get([10, 0, 0, 1]), None);
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
                prop_assert_eq!(table.get(*ip), expected(&routes, *ip));
            }
            for probe in probes {
                let ip = (0x0A00_0000 ^ probe).to_be_bytes();
                prop_assert_eq!(table.get(ip), expected(&routes, ip));
            }
        }
    }
}
