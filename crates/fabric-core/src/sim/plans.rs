//! Every rank's plan of a collective (port of `emulator/collectives/algorithms.py`'s `plan`), computed when
//! asked instead of stored.
//!
//! Python's `plan()` makes a list of steps per rank. A ring all-reduce on 3,456 ranks is 24 million steps, a
//! few GB as objects and tens of seconds to make, for steps that all follow one closed form. Here a
//! collective is its few parameters ([`Plans`]), each rank has a [`Role`] (a ring position, an incast
//! sender or receiver, ...), and a rank's step is computed in O(1) from them ([`Plans::step`]), with the
//! formulas `algorithms.py` loops over. Python's plan stays: the emulator's rank processes execute it.
//! `tests/unit/test_twin_plans.py` checks that both give the same plans, and the same errors, through the
//! bindings' `plan`.
use std::collections::BTreeMap;

/// The messages on one direction of a rank's link: (length, how many), lengths ascending.
pub type LinkMessages = Vec<(u64, u64)>;

/// The collectives, in the order `algorithms.COLLECTIVES` lists them (its error messages list them so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    Incast,
    Alltoall,
    Allreduce,
    Allgather,
    Victim,
    Shift,
    Multijob,
    Permutation,
}

impl Collective {
    /// Each collective and its name.
    pub const ALL: [(&'static str, Collective); 8] = [
        ("incast", Collective::Incast),
        ("alltoall", Collective::Alltoall),
        ("allreduce", Collective::Allreduce),
        ("allgather", Collective::Allgather),
        ("victim", Collective::Victim),
        ("shift", Collective::Shift),
        ("multijob", Collective::Multijob),
        ("permutation", Collective::Permutation),
    ];

    /// The collective called `name`, or Python's error for an unknown one.
    pub fn parse(name: &str) -> Result<Collective, String> {
        Collective::ALL
            .iter()
            .find(|(known, _)| *known == name)
            .map(|&(_, collective)| collective)
            .ok_or_else(|| {
                let names: Vec<&str> = Collective::ALL.iter().map(|(known, _)| *known).collect();
                format!(
                    "unknown collective {}; choose {}",
                    py_repr(name),
                    names.join(", ")
                )
            })
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Collective::ALL
            .iter()
            .find(|(_, collective)| *collective == self)
            .map_or("?", |(name, _)| name)
    }
}

/// `repr(text)` as Python writes a str: quoted with ' (with " when the text holds a ' and no "), the
/// backslash, the quote and control characters escaped. Non-ASCII characters are kept as they are, which is
/// Python's repr for every printable one (the unprintable ones beyond Latin-1 it would escape).
fn py_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa1).contains(&(c as u32)) || c == '\u{ad}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Shift: rank r writes to rank r + SHIFT (`algorithms.SHIFT`).
pub const SHIFT: u32 = 2;
/// An all-reduce's chunks are whole float32s (`algorithms.ELEMENT`).
pub const ELEMENT: u64 = 4;
/// A ring step's chunk goes in at most this many slices (`algorithms.PIPELINE`): slice j of step k is posted
/// once slice j of step k-1 is in, so a step's reaction overlaps the rest of the step before it on the wire.
pub const PIPELINE: u32 = 2;
/// No slice below one default RDMA MTU (`algorithms.MIN_SLICE`).
pub const MIN_SLICE: u64 = 4096;
/// The immediate's lower half numbers a rank's slices of an iteration (`algorithms.IMMEDIATE_SLICES`).
pub const IMMEDIATE_SLICES: u32 = 1 << 16;

/// `algorithms.ring_slices`: how many slices a ring of `steps` steps of `chunk` bytes sends each chunk in.
pub fn ring_slices(chunk: u64, steps: u32) -> u32 {
    let by_size = u32::try_from(chunk / MIN_SLICE).unwrap_or(u32::MAX);
    PIPELINE
        .min(by_size)
        .min(IMMEDIATE_SLICES / steps.max(1))
        .max(1)
}

/// `algorithms.slice_span`: slice `j` of a `length`-byte send or reduce cut in `slices`, as (offset in it,
/// length); whole float32s but the last.
pub fn slice_span(length: u64, slices: u32, j: u32) -> (u64, u64) {
    let mut piece = length.div_ceil(u64::from(slices.max(1)));
    piece = piece.div_ceil(ELEMENT).saturating_mul(ELEMENT);
    let offset = u64::from(j).saturating_mul(piece).min(length);
    (offset, piece.min(length - offset))
}

/// One WRITE with immediate: `length` bytes at `offset` of my data region into `dst`'s region (its staging
/// region when `staging`) at `dst_offset`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendPlan {
    pub dst: u32,
    pub offset: u64,
    pub length: u64,
    pub staging: bool,
    pub dst_offset: u64,
}

/// A step's sends: listed (at most two), or an all-to-all's one to every other rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sends {
    Listed {
        sends: [SendPlan; 2],
        count: u8,
    },
    /// `chunk` bytes from rank `rank` to each other of `ranks` ranks, ascending.
    ToAll {
        rank: u32,
        ranks: u32,
        chunk: u64,
    },
}

impl Sends {
    const NONE: Sends = Sends::Listed {
        sends: [SendPlan {
            dst: 0,
            offset: 0,
            length: 0,
            staging: false,
            dst_offset: 0,
        }; 2],
        count: 0,
    };

    fn one(send: SendPlan) -> Sends {
        Sends::Listed {
            sends: [send, SendPlan::default()],
            count: 1,
        }
    }

    /// How many.
    pub fn len(&self) -> usize {
        match *self {
            Sends::Listed { count, .. } => usize::from(count),
            Sends::ToAll { ranks, .. } => ranks.saturating_sub(1) as usize,
        }
    }

    /// Whether the step sends nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th, in the order Python's plan lists them.
    pub fn get(&self, i: usize) -> Option<SendPlan> {
        match *self {
            Sends::Listed { sends, count } => {
                sends.get(i).filter(|_| i < usize::from(count)).copied()
            }
            Sends::ToAll { rank, ranks, chunk } => {
                let i = u32::try_from(i).ok()?;
                let dst = if i < rank { i } else { i.checked_add(1)? };
                (dst < ranks).then(|| SendPlan {
                    dst,
                    offset: u64::from(dst) * chunk,
                    length: chunk,
                    staging: false,
                    dst_offset: (u64::from(ranks) + u64::from(rank)) * chunk,
                })
            }
        }
    }

    /// All of them, in order.
    pub fn iter(&self) -> impl Iterator<Item = SendPlan> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

/// The ranks a step expects a WRITE with immediate from, in the order Python's plan lists them: `count`
/// ranks `first`, `first + stride`, ..., or every rank of `ranks` but `rank` (all-to-all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receives {
    Progression { first: u32, stride: u32, count: u32 },
    AllBut { rank: u32, ranks: u32 },
}

impl Receives {
    const NONE: Receives = Receives::Progression {
        first: 0,
        stride: 1,
        count: 0,
    };

    fn one(src: u32) -> Receives {
        Receives::Progression {
            first: src,
            stride: 1,
            count: 1,
        }
    }

    /// How many.
    pub fn len(&self) -> u32 {
        match *self {
            Receives::Progression { count, .. } => count,
            Receives::AllBut { ranks, .. } => ranks.saturating_sub(1),
        }
    }

    /// Whether the step expects nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th.
    pub fn get(&self, i: u32) -> Option<u32> {
        if i >= self.len() {
            return None;
        }
        match *self {
            Receives::Progression { first, stride, .. } => {
                first.checked_add(i.checked_mul(stride)?)
            }
            Receives::AllBut { rank, .. } => Some(if i < rank { i } else { i + 1 }),
        }
    }

    /// Where `src` is in the list, if it is.
    pub fn index_of(&self, src: u32) -> Option<u32> {
        let index = match *self {
            Receives::Progression { first, stride, .. } => {
                let offset = src.checked_sub(first)?;
                if offset % stride.max(1) != 0 {
                    return None;
                }
                offset / stride.max(1)
            }
            Receives::AllBut { rank, .. } => match src.cmp(&rank) {
                std::cmp::Ordering::Less => src,
                std::cmp::Ordering::Equal => return None,
                std::cmp::Ordering::Greater => src - 1,
            },
        };
        (index < self.len()).then_some(index)
    }

    /// All of them, in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

/// One step of a rank: its sends, the ranks it expects a WRITE with immediate from, and the reduction
/// `(staging offset, data offset, length)` it does once they all arrived (data += staging, float32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub sends: Sends,
    pub receives: Receives,
    pub reduce: Option<(u64, u64, u64)>,
}

/// What a rank does in its collective, the parameters its steps follow from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Position `position` of a ring of `length` ranks, every `stride`-th rank from rank 0 (multijob's ring
    /// is the even ranks); a reduce-scatter before the all-gather when `reduce`.
    Ring {
        position: u32,
        length: u32,
        stride: u32,
        reduce: bool,
    },
    /// One step of sends, nothing received (an incast's sender).
    Writer(Sends),
    /// One step receiving from the ranks of a progression (an incast's receiver).
    Gatherer(Receives),
    /// Shift's and permutation's one step: a write to the rank `offset` further on, an arrival from the one
    /// `offset` back.
    Shifter { offset: u32 },
    /// All-to-all's one step.
    Exchanger,
    /// No steps.
    Idle,
}

/// Every rank's plan of one collective: its parameters, the steps computed from them when asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plans {
    collective: Collective,
    ranks: u32,
    /// The collective's size (what incast-like writes move).
    size: u64,
    /// What each step moves per rank at most (`algorithms.chunk_bytes`: a ring's largest chunk, an all-to-all's
    /// per peer; multijob: its all-reduce's).
    chunk: u64,
    /// The incast's senders (incast, victim, multijob); 0 for the others.
    senders: u32,
}

/// `algorithms.chunk_bytes`: the bytes each step moves per rank (a ring's largest chunk), or Python's error for
/// a size the collective cannot cut.
fn chunk_bytes(collective: Collective, size: u64, ranks: u32) -> Result<u64, String> {
    let (collective, ranks) = match collective {
        Collective::Incast | Collective::Victim | Collective::Shift | Collective::Permutation => {
            return Ok(size)
        }
        Collective::Multijob => (Collective::Allreduce, ranks.div_ceil(2)), // the even ranks' all-reduce
        other => (other, ranks),
    };
    if collective == Collective::Alltoall {
        if size < u64::from(ranks) {
            return Err(format!(
                "alltoall of {size} bytes over {ranks} ranks leaves no data per rank; use a size of at least \
                 {ranks} bytes"
            ));
        }
        return Ok(size / u64::from(ranks));
    }
    let element = if collective == Collective::Allreduce {
        ELEMENT
    } else {
        1
    };
    if size < 1 {
        let unit = if element == 1 { "byte" } else { "bytes" };
        return Err(format!(
            "{} of {size} bytes moves nothing; use a size of at least {element} {unit}",
            collective.name()
        ));
    }
    if size % element != 0 {
        return Err(format!(
            "{} of {size} bytes is not a whole number of float32s (as nccl-tests counts them); use a multiple \
             of {element} bytes",
            collective.name()
        ));
    }
    Ok(ring_chunk(size, ranks, element, 0).1)
}

/// `algorithms.ring_chunks`: chunk `i` of a ring's `size` bytes cut in `ranks` chunks as NCCL cuts them, as
/// (offset, length): the `size / element` elements as evenly as possible, the first `count % ranks` chunks one
/// element longer (empty chunks when there are fewer elements than ranks).
pub fn ring_chunk(size: u64, ranks: u32, element: u64, i: u64) -> (u64, u64) {
    let ranks = u64::from(ranks.max(1));
    let count = size / element.max(1);
    let (base, extra) = (count / ranks, count % ranks);
    (
        (i * base + i.min(extra)) * element,
        (base + u64::from(i < extra)) * element,
    )
}

/// `senders` within `low..=high`, or `error` (Python's message for the collective).
fn senders_within(
    senders: i64,
    low: i64,
    high: i64,
    error: impl FnOnce() -> String,
) -> Result<u32, String> {
    if (low..=high).contains(&senders) {
        u32::try_from(senders).map_err(|_| error())
    } else {
        Err(error())
    }
}

impl Plans {
    /// `algorithms.plan(collective, ranks, size, senders)`: the same checks in the same order, with its
    /// messages. One more than Python: a collective whose regions would not fit in 64 bits is refused.
    pub fn new(
        collective: &str,
        ranks: u32,
        size: u64,
        senders: Option<i64>,
    ) -> Result<Plans, String> {
        let kind = Collective::parse(collective)?;
        if ranks < 2 {
            return Err(format!(
                "{collective} needs at least 2 hosts, the topology has {ranks}"
            ));
        }
        let chunk = chunk_bytes(kind, size, ranks)?;
        let n = i64::from(ranks);
        let senders = match kind {
            Collective::Incast => {
                let s = senders.unwrap_or(n - 1);
                senders_within(s, 1, n - 1, || {
                    format!(
                        "incast with {s} senders: choose 1 to {} on {ranks} hosts",
                        n - 1
                    )
                })?
            }
            Collective::Victim => {
                let s = senders.unwrap_or(n - 2);
                let error = || {
                    format!(
                        "victim with {s} senders: choose 1 to {} on {ranks} hosts (at least 3: a receiver, a \
                         sender and the victim flow's idle receiver)",
                        n - 2
                    )
                };
                if ranks < 3 {
                    return Err(error());
                }
                senders_within(s, 1, n - 2, error)?
            }
            Collective::Shift => {
                if ranks <= SHIFT {
                    return Err(format!(
                        "shift needs at least {} hosts (each writes to the one {SHIFT} further on), the \
                         topology has {ranks}",
                        SHIFT + 1
                    ));
                }
                0
            }
            Collective::Multijob => {
                let (job, neighbours) = (ranks.div_ceil(2), ranks / 2);
                if job < 2 || neighbours < 1 {
                    return Err(format!(
                        "multijob needs at least 3 hosts (an all-reduce of two and an incast receiver), the \
                         topology has {ranks}"
                    ));
                }
                let most = i64::from(neighbours) - 1;
                let s = senders.unwrap_or(most);
                senders_within(s, 0, most, || {
                    format!("multijob with {s} incast senders: choose 0 to {most} on {ranks} hosts")
                })?
            }
            Collective::Alltoall
            | Collective::Allreduce
            | Collective::Allgather
            | Collective::Permutation => 0,
        };
        // Every region and offset is below 2 x ranks x size (an incast's receiver holds ranks x size).
        if u64::from(ranks)
            .checked_mul(size)
            .and_then(|bytes| bytes.checked_mul(2))
            .is_none()
        {
            return Err(format!(
                "{collective} of {size} bytes over {ranks} ranks: a rank's regions would not fit in 64 bits"
            ));
        }
        Ok(Plans {
            collective: kind,
            ranks,
            size,
            chunk,
            senders,
        })
    }

    /// The collective.
    pub fn collective(&self) -> Collective {
        self.collective
    }

    /// How many ranks.
    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    /// The role of rank `rank` (Idle beyond the ranks).
    fn role(&self, rank: u32) -> Role {
        let (n, size, senders) = (self.ranks, self.size, self.senders);
        if rank >= n {
            return Role::Idle;
        }
        let incast_write = |at: u32| SendPlan {
            dst: 0,
            offset: 0,
            length: size,
            staging: false,
            dst_offset: u64::from(at) * size,
        };
        match self.collective {
            Collective::Allreduce | Collective::Allgather => Role::Ring {
                position: rank,
                length: n,
                stride: 1,
                reduce: self.collective == Collective::Allreduce,
            },
            Collective::Alltoall => Role::Exchanger,
            Collective::Shift => Role::Shifter { offset: SHIFT },
            Collective::Permutation => Role::Shifter { offset: n / 2 },
            Collective::Incast | Collective::Victim => {
                let victim = self.collective == Collective::Victim && rank == n - 1;
                if victim {
                    Role::Gatherer(Receives::one(1))
                } else if rank == 0 {
                    Role::Gatherer(Receives::Progression {
                        first: 1,
                        stride: 1,
                        count: senders,
                    })
                } else if rank > senders {
                    Role::Idle
                } else if self.collective == Collective::Victim && rank == 1 {
                    // the victim flow: rank 1 also writes into the idle last rank
                    let to_victim = SendPlan {
                        dst: n - 1,
                        ..incast_write(0)
                    };
                    Role::Writer(Sends::Listed {
                        sends: [incast_write(0), to_victim],
                        count: 2,
                    })
                } else {
                    Role::Writer(Sends::one(incast_write(rank - 1)))
                }
            }
            Collective::Multijob => {
                if rank % 2 == 0 {
                    return Role::Ring {
                        position: rank / 2,
                        length: n.div_ceil(2),
                        stride: 2,
                        reduce: true,
                    };
                }
                let receiver = 2 * (n / 2) - 1; // the last odd rank
                let at = rank / 2; // its place among the odd ranks
                if rank == receiver {
                    match senders {
                        0 => Role::Idle,
                        count => Role::Gatherer(Receives::Progression {
                            first: 1,
                            stride: 2,
                            count,
                        }),
                    }
                } else if at < senders {
                    Role::Writer(Sends::one(SendPlan {
                        dst: receiver,
                        ..incast_write(at)
                    }))
                } else {
                    Role::Idle
                }
            }
        }
    }

    /// Rank `rank`'s regions: (data bytes, staging bytes).
    pub fn regions(&self, rank: u32) -> (u64, u64) {
        let (n, size, chunk) = (u64::from(self.ranks), self.size, self.chunk);
        match self.role(rank) {
            // the whole vector, and a reduce-scatter's N-1 steps staged a largest chunk apart
            Role::Ring { length, reduce, .. } => (
                size,
                if reduce {
                    u64::from(length - 1) * chunk
                } else {
                    0
                },
            ),
            Role::Exchanger => (2 * n * chunk, 0),
            Role::Gatherer(from) if rank == 0 || self.collective == Collective::Multijob => {
                (u64::from(from.len()) * size, 0) // it holds every sender's write
            }
            // multijob's receiver without senders is idle with max(senders, 1) x size, as every other idle rank
            Role::Gatherer(_) | Role::Writer(_) | Role::Shifter { .. } | Role::Idle => (size, 0),
        }
    }

    /// Rank `rank`'s data region.
    pub fn data_bytes(&self, rank: u32) -> u64 {
        self.regions(rank).0
    }

    /// How many steps rank `rank` has.
    pub fn steps(&self, rank: u32) -> u32 {
        match self.role(rank) {
            Role::Ring { length, reduce, .. } => (length - 1) * if reduce { 2 } else { 1 },
            Role::Writer(_) | Role::Gatherer(_) | Role::Shifter { .. } | Role::Exchanger => 1,
            Role::Idle => 0,
        }
    }

    /// How many slices rank `rank` sends each of its sends in (`RankPlan.slices`): a ring's chunk is
    /// pipelined, every other collective's single step goes whole.
    pub fn slices(&self, rank: u32) -> u32 {
        match self.role(rank) {
            Role::Ring { .. } => ring_slices(self.chunk, self.steps(rank)),
            _ => 1,
        }
    }

    /// Step `k` of rank `rank`, if it has one.
    pub fn step(&self, rank: u32, k: u32) -> Option<Step> {
        if k >= self.steps(rank) {
            return None;
        }
        let (n, chunk) = (self.ranks, self.chunk);
        let step = match self.role(rank) {
            Role::Ring {
                position,
                length,
                stride,
                reduce,
            } => {
                let len = u64::from(length);
                let next = ((position + 1) % length) * stride;
                let prev = ((position + length - 1) % length) * stride;
                let element = if reduce { ELEMENT } else { 1 };
                // chunk `c` (mod the ring) at its offset: uneven chunks (`ring_chunk`)
                let span = |c: u64| ring_chunk(self.size, length, element, c % len);
                let send = |(offset, length): (u64, u64), staging: bool, dst_offset: u64| {
                    Sends::one(SendPlan {
                        dst: next,
                        offset,
                        length,
                        staging,
                        dst_offset,
                    })
                };
                let (p, k) = (u64::from(position), u64::from(k));
                if reduce && k < len - 1 {
                    // reduce-scatter: send my partial sum of chunk (p-k), add what prev sent of chunk (p-1-k)
                    let (offset, length) = span(p + 2 * len - 1 - k);
                    Step {
                        sends: send(span(p + len - k), true, k * chunk),
                        receives: Receives::one(prev),
                        reduce: Some((k * chunk, offset, length)),
                    }
                } else {
                    // all-gather: pass on the chunk complete here, (p+1-j) after a reduce-scatter, else (p-j)
                    let (j, first) = if reduce {
                        (k - (len - 1), p + 1)
                    } else {
                        (k, p)
                    };
                    let chunk = span(first + len - j);
                    Step {
                        sends: send(chunk, false, chunk.0),
                        receives: Receives::one(prev),
                        reduce: None,
                    }
                }
            }
            Role::Writer(sends) => Step {
                sends,
                receives: Receives::NONE,
                reduce: None,
            },
            Role::Gatherer(receives) => Step {
                sends: Sends::NONE,
                receives,
                reduce: None,
            },
            Role::Shifter { offset } => Step {
                sends: Sends::one(SendPlan {
                    dst: (rank + offset) % n,
                    offset: 0,
                    length: self.size,
                    staging: false,
                    dst_offset: 0,
                }),
                receives: Receives::one((rank + n - offset) % n),
                reduce: None,
            },
            Role::Exchanger => Step {
                sends: Sends::ToAll {
                    rank,
                    ranks: n,
                    chunk,
                },
                receives: Receives::AllBut { rank, ranks: n },
                reduce: None,
            },
            Role::Idle => return None,
        };
        Some(step)
    }

    /// The messages of one iteration on each rank's link, of the measured ranks' sends only (the link-time
    /// bound's traffic: a neighbour job's is no part of it): per rank, (length, how many) of what it sends and
    /// of what it receives, lengths ascending. A ring all-reduce at 1,024 ranks is two million sends: counted
    /// here without a step object each.
    pub fn message_counts(&self) -> (Vec<LinkMessages>, Vec<LinkMessages>) {
        let n = self.ranks as usize;
        let mut sent: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); n];
        let mut received: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); n];
        for rank in (0..self.ranks).filter(|&rank| self.measured(rank)) {
            let slices = self.slices(rank);
            for step in (0..self.steps(rank)).filter_map(|k| self.step(rank, k)) {
                for send in step.sends.iter() {
                    for j in 0..slices {
                        let (_, length) = slice_span(send.length, slices, j);
                        if let Some(counts) = sent.get_mut(rank as usize) {
                            *counts.entry(length).or_default() += 1;
                        }
                        if let Some(counts) = received.get_mut(send.dst as usize) {
                            *counts.entry(length).or_default() += 1;
                        }
                    }
                }
            }
        }
        let flat = |maps: Vec<BTreeMap<u64, u64>>| {
            maps.into_iter()
                .map(|counts| counts.into_iter().collect())
                .collect()
        };
        (flat(sent), flat(received))
    }

    /// Whether rank `rank`'s arrivals make the iteration's CCT (multijob: its all-reduce's ranks only).
    pub fn measured(&self, rank: u32) -> bool {
        self.collective != Collective::Multijob || rank % 2 == 0
    }

    /// The ranks whose inputs rank `rank` sums, ascending (none if it reduces nothing).
    pub fn reduce_group(&self, rank: u32) -> impl Iterator<Item = u32> {
        let (count, stride) = match self.role(rank) {
            Role::Ring {
                length,
                stride,
                reduce: true,
                ..
            } => (length, stride),
            _ => (0, 1),
        };
        (0..count).map(move |i| i * stride)
    }

    /// Whether rank `rank` reduces (its group is not empty).
    pub fn reduces(&self, rank: u32) -> bool {
        matches!(self.role(rank), Role::Ring { reduce: true, .. })
    }

    /// The slot of the arrival from `src` for slice number `number` (step x slices + slice, the immediate's
    /// lower half) among rank `rank`'s arrivals of an iteration (from 0 to the number of its arrivals), if the
    /// plan expects one: its steps' slices' receives, one after the other.
    pub fn slot(&self, rank: u32, number: u32, src: u32) -> Option<u32> {
        let slices = self.slices(rank);
        let index = self.step(rank, number / slices)?.receives.index_of(src)?;
        match self.role(rank) {
            Role::Ring { .. } => Some(number), // one arrival a slice
            _ => Some(index),                  // one step of one slice
        }
    }

    /// The slots of the arrivals for slice number `number`: (first, count).
    pub fn slots(&self, rank: u32, number: u32) -> (u32, u32) {
        let slices = self.slices(rank);
        match (self.role(rank), self.step(rank, number / slices)) {
            (_, None) => (0, 0),
            (Role::Ring { .. }, Some(_)) => (number, 1),
            (_, Some(step)) => (0, step.receives.len()),
        }
    }
}

/// What rank `rank` of `plans` exchanges with one peer per iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerPlan {
    pub peer: u32,
    /// WRITEs with immediate the peer sends it: the receives to post on its QP.
    pub receives: u32,
    /// Bytes it WRITEs to the peer.
    pub bytes: u64,
}

/// Every rank rank `rank` talks to, ascending (the order its QPs are made in), with what it exchanges.
pub fn peers(plans: &Plans, rank: u32) -> Vec<PeerPlan> {
    let slices = plans.slices(rank); // a ring's peers cut their chunks alike
    let mut peers: Vec<PeerPlan> = Vec::new();
    for step in (0..plans.steps(rank)).filter_map(|k| plans.step(rank, k)) {
        for send in step.sends.iter() {
            peers.push(PeerPlan {
                peer: send.dst,
                receives: 0,
                bytes: send.length,
            });
        }
        for src in step.receives.iter() {
            peers.push(PeerPlan {
                peer: src,
                receives: slices,
                bytes: 0,
            });
        }
    }
    merge_peers(peers)
}

/// One entry per peer, ascending, of `peers` (one per send or receive): their receives and bytes summed.
pub fn merge_peers(mut peers: Vec<PeerPlan>) -> Vec<PeerPlan> {
    peers.sort_unstable_by_key(|p| p.peer);
    let mut merged: Vec<PeerPlan> = Vec::with_capacity(peers.len());
    for p in peers {
        match merged.last_mut() {
            Some(last) if last.peer == p.peer => {
                last.receives += p.receives;
                last.bytes = last.bytes.saturating_add(p.bytes);
            }
            _ => merged.push(p),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NAMES: [&str; 8] = [
        "incast",
        "alltoall",
        "allreduce",
        "allgather",
        "victim",
        "shift",
        "multijob",
        "permutation",
    ];

    fn every_step(plans: &Plans) -> Vec<(u32, u32, Step)> {
        (0..plans.ranks())
            .flat_map(|r| (0..plans.steps(r)).map(move |k| (r, k)))
            .map(|(r, k)| (r, k, plans.step(r, k).unwrap()))
            .collect()
    }

    #[test]
    fn ring_allreduce_matches_the_python_loop() {
        // algorithms._ring(3, chunk=4, reduce=True), rank 1, written out.
        let plans = Plans::new("allreduce", 3, 12, None).unwrap();
        assert_eq!(plans.regions(1), (12, 8));
        let steps: Vec<Step> = (0..4).map(|k| plans.step(1, k).unwrap()).collect();
        let send = |offset, staging, dst_offset| SendPlan {
            dst: 2,
            offset,
            length: 4,
            staging,
            dst_offset,
        };
        assert_eq!(steps[0].sends.get(0), Some(send(4, true, 0)));
        assert_eq!(steps[0].reduce, Some((0, 0, 4)));
        assert_eq!(steps[1].sends.get(0), Some(send(0, true, 4)));
        assert_eq!(steps[1].reduce, Some((4, 8, 4)));
        assert_eq!(steps[2].sends.get(0), Some(send(8, false, 8)));
        assert_eq!(steps[3].sends.get(0), Some(send(4, false, 4)));
        assert!(steps.iter().all(|s| s.receives.iter().eq([0])));
        assert_eq!(plans.step(1, 4), None);
        assert!(plans.reduce_group(1).eq([0, 1, 2]));
    }

    #[test]
    fn errors_are_pythons() {
        assert_eq!(
            Plans::new("gather", 4, 8, None).unwrap_err(),
            "unknown collective 'gather'; choose incast, alltoall, allreduce, allgather, victim, shift, multijob, \
             permutation"
        );
        assert!(Plans::new("it's", 4, 8, None)
            .unwrap_err()
            .starts_with("unknown collective \"it's\";"));
        assert_eq!(
            Plans::new("allreduce", 4, 15, None).unwrap_err(),
            "allreduce of 15 bytes is not a whole number of float32s (as nccl-tests counts them); use a \
             multiple of 4 bytes"
        );
        assert_eq!(
            Plans::new("allreduce", 4, 0, None).unwrap_err(),
            "allreduce of 0 bytes moves nothing; use a size of at least 4 bytes"
        );
        assert_eq!(
            Plans::new("allgather", 4, 0, None).unwrap_err(),
            "allgather of 0 bytes moves nothing; use a size of at least 1 byte"
        );
        assert_eq!(
            Plans::new("alltoall", 4, 3, None).unwrap_err(),
            "alltoall of 3 bytes over 4 ranks leaves no data per rank; use a size of at least 4 bytes"
        );
        assert_eq!(
            Plans::new("multijob", 2, 2, None).unwrap_err(),
            "allreduce of 2 bytes is not a whole number of float32s (as nccl-tests counts them); use a multiple \
             of 4 bytes"
        );
        assert_eq!(
            Plans::new("victim", 2, 8, None).unwrap_err(),
            "victim with 0 senders: choose 1 to 0 on 2 hosts (at least 3: a receiver, a sender and the victim \
             flow's idle receiver)"
        );
        assert_eq!(
            Plans::new("incast", 1, 8, None).unwrap_err(),
            "incast needs at least 2 hosts, the topology has 1"
        );
        assert!(Plans::new("incast", 3, u64::MAX / 4, Some(1)).is_err());
    }

    #[test]
    fn uneven_chunks_are_nccls_and_empty_chunks_still_step() {
        // 12 B on 8 ranks: 3 float32s, chunks 0 to 2 one each, chunks 3 to 7 empty at offset 12.
        let spans: Vec<(u64, u64)> = (0..8).map(|i| ring_chunk(12, 8, ELEMENT, i)).collect();
        assert_eq!(&spans[..4], &[(0, 4), (4, 4), (8, 4), (12, 0)]);
        assert!(spans[4..].iter().all(|&span| span == (12, 0)));
        // 10 B all-gather over 4 ranks: 3, 3, 2, 2 bytes.
        let spans: Vec<(u64, u64)> = (0..4).map(|i| ring_chunk(10, 4, 1, i)).collect();
        assert_eq!(spans, vec![(0, 3), (3, 3), (6, 2), (8, 2)]);
        let plans = Plans::new("allreduce", 8, 8, None).unwrap();
        assert_eq!(plans.regions(5), (8, 7 * 4)); // the whole vector; 7 staging slots of the largest chunk
        assert_eq!(plans.steps(5), 14);
        assert_eq!(plans.slices(5), 1);
        // rank 5's first reduce-scatter step sends its (empty) chunk 5 and adds chunk 4 (empty) from rank 4
        let step = plans.step(5, 0).unwrap();
        assert_eq!(
            step.sends.get(0).map(|s| (s.offset, s.length)),
            Some((8, 0))
        );
        assert_eq!(step.reduce, Some((0, 8, 0)));
        // rank 1's step 0 sends chunk 1 (4 bytes at 4) and adds chunk 0 (4 bytes at 0)
        let step = plans.step(1, 0).unwrap();
        assert_eq!(
            step.sends.get(0).map(|s| (s.offset, s.length)),
            Some((4, 4))
        );
        assert_eq!(step.reduce, Some((0, 0, 4)));
        let (sent, _) = plans.message_counts();
        assert_eq!(sent[1], vec![(0, 10), (4, 4)]); // chunks 0 and 1 pass through twice each, the rest empty
    }

    #[test]
    fn multijob_receiver_without_senders_idles_with_one_message_of_memory() {
        let plans = Plans::new("multijob", 6, 64, Some(0)).unwrap();
        assert_eq!(plans.steps(5), 0);
        assert_eq!(plans.regions(5), (64, 0));
        assert!(!plans.measured(5) && plans.measured(4));
        assert!(plans.reduce_group(2).eq([0, 2, 4]));
        assert_eq!(plans.reduce_group(3).count(), 0);
    }

    proptest! {
        /// Every send has its arrival: the receiver's step of the same index expects the sender (slots are
        /// then unique), and each rank's arrivals are its steps' receives.
        #[test]
        fn sends_and_receives_pair_up(
            name in proptest::sample::select(NAMES.to_vec()),
            ranks in 2u32..40,
            size in prop_oneof![0u64..5000, 0u64..400_000],
            senders in proptest::option::of(-1i64..40),
        ) {
            let Ok(plans) = Plans::new(name, ranks, size, senders) else { return Ok(()); };
            let steps = every_step(&plans);
            let mut sent = Vec::new();
            for &(r, k, step) in &steps {
                let slices = plans.slices(r);
                for send in step.sends.iter() {
                    prop_assert_eq!(plans.slices(send.dst), slices, "{}: {} -> {}", name, r, send.dst);
                    for j in 0..slices {
                        let number = k * slices + j;
                        prop_assert!(plans.slot(send.dst, number, r).is_some(), "{name}: {r} -> {} #{number}", send.dst);
                        sent.push((send.dst, number, r));
                    }
                    let covered: u64 = (0..slices).map(|j| slice_span(send.length, slices, j).1).sum();
                    prop_assert_eq!(covered, send.length);
                }
            }
            let mut expected = Vec::new();
            for &(r, k, step) in &steps {
                let slices = plans.slices(r);
                for j in 0..slices {
                    let number = k * slices + j;
                    let (first, count) = plans.slots(r, number);
                    prop_assert_eq!(count, step.receives.len());
                    for (i, src) in step.receives.iter().enumerate() {
                        prop_assert_eq!(plans.slot(r, number, src), Some(first + i as u32));
                        expected.push((r, number, src));
                    }
                }
            }
            sent.sort_unstable();
            expected.sort_unstable();
            prop_assert_eq!(sent, expected);
            for r in 0..ranks {
                let from_peers: u32 = peers(&plans, r).iter().map(|p| p.receives).sum();
                let in_steps: u32 = (0..plans.steps(r))
                    .filter_map(|k| plans.step(r, k))
                    .map(|step| step.receives.len() * plans.slices(r))
                    .sum();
                prop_assert_eq!(from_peers, in_steps);
                let (data, staging) = plans.regions(r);
                for step in (0..plans.steps(r)).filter_map(|k| plans.step(r, k)) {
                    for send in step.sends.iter() {
                        prop_assert!(send.offset + send.length <= data);
                        let (peer_data, peer_staging) = plans.regions(send.dst);
                        let region = if send.staging { peer_staging } else { peer_data };
                        prop_assert!(send.dst_offset + send.length <= region);
                    }
                    if let Some((staged, offset, length)) = step.reduce {
                        prop_assert!(staged + length <= staging && offset + length <= data);
                    }
                }
            }
        }
    }
}
