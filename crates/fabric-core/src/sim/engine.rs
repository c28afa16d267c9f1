//! The discrete-event engine: simulated time in integer nanoseconds, events
//! run in time order and, at equal times, in the order they were scheduled.
//!
//! The simulation backend drives the same sans-I/O models the emulator's agents drive, so the engine needs
//! little: schedule an event at a time, cancel it, run in time order, stop. Its order is the Python engine's
//! exactly (time, then a sequence number taken at scheduling, timers' re-arms included), so a simulation
//! ported from Python gives identical results, and the total order makes every run deterministic (Shadow's
//! event queue makes the same point: two events that compare equal would run in an arbitrary order).
//!
//! Events are small values of a type the simulator chooses (`E`, typically an enum naming the model and what
//! happened to it), not boxed closures, and they travel inside the queue's entries: scheduling allocates
//! nothing once the engine's vectors have grown, and running an event reads no memory but its entry and a
//! bitmap (a table of events beside the queue cost a cache miss per event at a million pending, 60% of the
//! time, measured with perf on `examples/hold.rs`). Cancelling is O(1): it clears the event's bit, and its
//! entry, now a tombstone, is dropped when it comes up. A [`TimerId`] is a model's moving deadline (a
//! retransmission timer pushed back by every ACK): moving it later costs nothing and keeps its one queue
//! entry, which re-arms itself when it comes up early.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;

/// A scheduled event's handle: cancels it, or tells whether it is still pending.
///
/// The sequence number makes a handle unique for the engine's lifetime, so a handle kept after its event ran
/// (or was cancelled) never reaches another event that reused the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId {
    slot: u32,
    seq: u64,
}

/// A timer's handle (see [`Engine::timer`]); valid for the engine's lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerId(u32);

/// An event asked for at a time already past: simulated time never goes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BeforeNow {
    /// The time asked for (ns).
    pub time: u64,
    /// The engine's time then (ns).
    pub now: u64,
}

impl fmt::Display for BeforeNow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "event at {} ns is before now ({} ns)",
            self.time, self.now
        )
    }
}

impl std::error::Error for BeforeNow {}

/// The `timer` of a one-shot event's entry.
const NO_TIMER: u32 = u32::MAX;

/// One entry of the queue: a time, a slot whose bit says whether the entry is live, and the event; for a
/// timer's wake-up, the timer's index. 16 bytes and the event: the queue's moves are most of its cost.
#[derive(Debug)]
struct Entry<E> {
    time: u64,
    slot: u32,
    timer: u32,
    event: E,
}

/// An entry in the `early` heap: ordered by time, then by the order it came in (which is the sequence
/// order, entries being pushed as they are scheduled).
#[derive(Debug)]
struct Early<E> {
    order: u64,
    entry: Entry<E>,
}

impl<E> Early<E> {
    fn key(&self) -> (u64, u64) {
        (self.entry.time, self.order)
    }
}

impl<E> PartialEq for Early<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<E> Eq for Early<E> {}

impl<E> PartialOrd for Early<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Early<E> {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest entry must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// A full bucket about to grow moves into the largest spare buffer if that one is larger, and leaves its own to
/// the spares, instead of a new allocation: handed out last in, first out, small buffers went to buckets that
/// then grew while large ones lay idle (135 buffers of 9.9 MB in all at the end of a fattree,8 all-to-all;
/// handing out the largest first instead cost the hold model a third of its speed: cold buffers, and an
/// ordered insert at every refill).
fn grow_into_spare<T>(bucket: &mut Vec<T>, spare: &mut Vec<Vec<T>>) {
    let largest = spare
        .iter()
        .enumerate()
        .max_by_key(|(_, buffer)| buffer.capacity())
        .filter(|(_, buffer)| buffer.capacity() > bucket.capacity())
        .map(|(at, _)| at);
    if let Some(at) = largest {
        let mut larger = spare.swap_remove(at);
        larger.append(bucket);
        spare.push(std::mem::replace(bucket, larger));
    }
}

/// Bits of a time that one level of the queue's buckets sorts on (a digit): 8 levels of 256 buckets.
const DIGIT_BITS: u32 = 8;
/// Buckets per level.
const DIGITS: usize = 1 << DIGIT_BITS;
/// Levels: one per digit of a u64 time.
const LEVELS: usize = u64::BITS.div_ceil(DIGIT_BITS) as usize;
/// Words of a level's bitmap of occupied buckets.
const WORDS: usize = DIGITS.div_ceil(64);

/// The entries to come, earliest first: a radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, 1990) on the time,
/// with 8-bit digits.
///
/// Simulated time only moves forward, so a monotone queue does. An entry sits at the level of the highest
/// digit where its time differs from `last` (the earliest time when the buckets were last refilled), in the
/// bucket of its own digit there; entries at `last` itself wait in `front`. Only the lowest occupied bucket
/// is ever sorted out: its earliest time becomes `last` and its entries move to lower levels. Pushing is an
/// append, and an entry moves at most once per level (3 levels span 16 ms), each move a sequential copy, where
/// a binary heap climbs and descends through a million entries' worth of cache misses (measured on the hold
/// model, docs/performance.md). RTO timers milliseconds away stay in high buckets, untouched while frames
/// come and go (the Python engine's near and far heaps, generalized).
///
/// Equal times come out in sequence order without comparing sequence numbers: appends are in sequence order
/// and a refill moves a bucket's entries, in order, into buckets that are empty (all lower levels are), so
/// every bucket stays in sequence order and `front` is first in, first out.
///
/// An entry earlier than `last` can be pushed only after the engine looked at (or dropped the tombstone of)
/// a later head without running it: `run(until)` stopping short, or `next_time`. Those few go to `early`, an
/// ordinary heap on (time, arrival), which comes first: all its times are below `last`.
#[derive(Debug)]
struct Queue<E> {
    last: u64,
    /// Entries at `last`, in sequence order.
    front: VecDeque<Entry<E>>,
    /// Level l's bucket of digit d at `l * DIGITS + d`.
    buckets: Vec<Vec<Entry<E>>>,
    /// The buffers of buckets emptied, for the next bucket to fill (last in, first out: a buffer just used).
    /// Each bucket keeping its own held a peak's worth in every bucket of a level as time moved through them
    /// (at a fattree,8 all-to-all, about 4,300 page faults, 17 MB, were the buckets growing).
    spare: Vec<Vec<Entry<E>>>,
    /// Per level, a bit per occupied bucket.
    occupied: [[u64; WORDS]; LEVELS],
    /// A bit per level with an occupied bucket.
    levels: u64,
    early: BinaryHeap<Early<E>>,
    /// Entries that went to `early` so far: their arrival order.
    arrivals: u64,
    len: usize,
    /// Whether `front` was refilled since [`Engine::fresh_front`] last looked.
    refilled: bool,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Self {
            last: 0,
            front: VecDeque::new(),
            buckets: (0..LEVELS * DIGITS).map(|_| Vec::new()).collect(),
            spare: Vec::new(),
            occupied: [[0; WORDS]; LEVELS],
            levels: 0,
            early: BinaryHeap::new(),
            arrivals: 0,
            len: 0,
            refilled: false,
        }
    }
}

impl<E> Queue<E> {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, entry: Entry<E>) {
        self.len += 1;
        if entry.time < self.last {
            self.arrivals += 1;
            self.early.push(Early {
                order: self.arrivals,
                entry,
            });
        } else {
            self.place(entry);
        }
    }

    /// Puts an entry at or after `last` in its bucket.
    #[inline]
    fn place(&mut self, entry: Entry<E>) {
        let differing = entry.time ^ self.last;
        if differing == 0 {
            self.front.push_back(entry);
            return;
        }
        let level = (63 - differing.leading_zeros()) / DIGIT_BITS;
        let digit = (entry.time >> (level * DIGIT_BITS)) as usize % DIGITS;
        let level = level as usize;
        let bucket = &mut self.buckets[level * DIGITS + digit];
        if bucket.capacity() == 0 {
            if let Some(spare) = self.spare.pop() {
                *bucket = spare;
            }
        }
        if bucket.len() == bucket.capacity() {
            grow_into_spare(bucket, &mut self.spare);
        }
        bucket.push(entry);
        self.occupied[level][digit / 64] |= 1 << (digit % 64);
        self.levels |= 1 << level;
    }

    /// The earliest entry, if any.
    fn peek(&mut self) -> Option<&Entry<E>> {
        if !self.early.is_empty() {
            return self.early.peek().map(|early| &early.entry);
        }
        if self.front.is_empty() {
            self.refill();
        }
        self.front.front()
    }

    fn pop(&mut self) -> Option<Entry<E>> {
        let entry = match self.early.pop() {
            Some(early) => early.entry,
            None => {
                if self.front.is_empty() {
                    self.refill();
                }
                self.front.pop_front()?
            }
        };
        self.len -= 1;
        Some(entry)
    }

    /// `front` is empty: sort out the lowest occupied bucket around its earliest time.
    ///
    /// A bucket of the lowest level holds one time only (its entries differ from `last` in the low digit
    /// alone, which is the bucket's), in sequence order: it becomes `front` whole, its vector turned into the
    /// deque and the empty deque's buffer kept for a bucket to come, without moving an entry.
    fn refill(&mut self) {
        let Some(index) = self.take_lowest_bucket() else {
            return;
        };
        self.refilled = true;
        if index < DIGITS {
            let entries = std::mem::take(&mut self.buckets[index]);
            if let Some(first) = entries.first() {
                self.last = first.time;
            }
            let empty = std::mem::replace(&mut self.front, VecDeque::from(entries));
            self.spare.push(Vec::from(empty));
            return;
        }
        let mut entries = std::mem::take(&mut self.buckets[index]);
        if let Some(earliest) = entries.iter().map(|entry| entry.time).min() {
            self.last = earliest;
        }
        for entry in entries.drain(..) {
            self.place(entry);
        }
        self.spare.push(entries); // empty, its capacity kept for the next bucket
    }

    /// The index of the lowest occupied bucket, marked empty, or `None` if all are.
    fn take_lowest_bucket(&mut self) -> Option<usize> {
        if self.levels == 0 {
            return None;
        }
        let level = self.levels.trailing_zeros() as usize;
        let words = &mut self.occupied[level];
        let word = words.iter().position(|&bits| bits != 0)?;
        let digit = word * 64 + words[word].trailing_zeros() as usize;
        words[word] &= words[word] - 1;
        if words.iter().all(|&bits| bits == 0) {
            self.levels &= !(1 << level);
        }
        Some(level * DIGITS + digit)
    }
}

/// Entries' slots: a slot is taken when an entry is made (an event scheduled, a timer armed) and given back
/// when the entry leaves the queue (run, or dropped as a tombstone), so a slot has one entry and its bit alone
/// says whether that entry is live. The sequence numbers are read only to check a handle.
#[derive(Debug, Default)]
struct Slots {
    /// Bit s set while slot s's entry is live (its event pending, or its timer's wake-up still wanted).
    pending: Vec<u64>,
    /// The sequence number of slot s's entry.
    seqs: Vec<u64>,
    free: Vec<u32>,
}

impl Slots {
    /// A slot for the entry of sequence number `seq`, marked live.
    fn take(&mut self, seq: u64) -> u32 {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                // Beyond u32::MAX pending events (hundreds of GB) the index would wrap: not reachable.
                let slot = self.seqs.len() as u32;
                self.seqs.push(0);
                if slot % 64 == 0 {
                    self.pending.push(0);
                }
                slot
            }
        };
        self.seqs[slot as usize] = seq;
        self.pending[slot as usize / 64] |= 1 << (slot % 64);
        slot
    }

    fn is_pending(&self, slot: u32) -> bool {
        self.pending
            .get(slot as usize / 64)
            .is_some_and(|bits| bits & (1 << (slot % 64)) != 0)
    }

    /// Whether a handle's event is pending: its slot pending and still its own.
    fn holds(&self, id: EventId) -> bool {
        self.seqs.get(id.slot as usize) == Some(&id.seq) && self.is_pending(id.slot)
    }

    /// Marks a slot's entry dead (it stays queued, a tombstone).
    fn clear(&mut self, slot: u32) {
        if let Some(bits) = self.pending.get_mut(slot as usize / 64) {
            *bits &= !(1 << (slot % 64));
        }
    }

    /// A slot's entry left the queue: whether it was live; the slot is free again.
    fn release(&mut self, slot: u32) -> bool {
        let live = self.is_pending(slot);
        self.clear(slot);
        self.free.push(slot);
        live
    }
}

/// The queue entry a timer has pending: its slot and when it comes up.
#[derive(Clone, Copy, Debug)]
struct Armed {
    slot: u32,
    time: u64,
}

/// A timer: the event it delivers, its deadline, and the one entry it keeps in the queue.
#[derive(Debug)]
struct TimerState<E> {
    event: E,
    deadline: Option<u64>,
    armed: Option<Armed>,
}

/// The limits and the count of one run (what [`Engine::run`] keeps between events). Bindings that must give
/// the engine back to a callback between events drive a run with [`Engine::start_run`],
/// [`Engine::next_event`] and [`Engine::end_run`].
#[derive(Clone, Copy, Debug)]
pub struct Run {
    until: Option<u64>,
    max_events: u64,
    ran: u64,
}

impl Run {
    /// Events run so far in this run (timers' internal wake-ups included, as the engine counts).
    pub fn ran(&self) -> u64 {
        self.ran
    }
}

/// Simulated time and the events to come.
#[derive(Debug)]
pub struct Engine<E> {
    now: u64,
    events: u64,
    seq: u64,
    stopped: bool,
    queue: Queue<E>,
    slots: Slots,
    timers: Vec<TimerState<E>>,
}

impl<E> Default for Engine<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> Engine<E> {
    /// An engine at time 0 with nothing scheduled.
    pub fn new() -> Self {
        Self {
            now: 0,
            events: 0,
            seq: 0,
            stopped: false,
            queue: Queue::default(),
            slots: Slots::default(),
            timers: Vec::new(),
        }
    }

    /// Simulated time (ns): the time of the event running, or of the last one that ran, or a run's `until`.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Queue entries that came up live in finished runs: the events delivered plus the timers' own wake-ups
    /// (a re-arm, or a cleared timer finding nothing to do), which the Python engine counts as events too.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Entries in the queue, tombstones of cancelled events not yet popped included: what the engine holds.
    pub fn entries(&self) -> usize {
        self.queue.len()
    }

    /// Schedules `event` at `time` (ns, not before now); the handle cancels it.
    pub fn at(&mut self, time: u64, event: E) -> Result<EventId, BeforeNow> {
        if time < self.now {
            return Err(BeforeNow {
                time,
                now: self.now,
            });
        }
        Ok(self.schedule(time, event))
    }

    /// Schedules `event` `delay` ns from now (saturating: a delay past the end of time is never).
    pub fn after(&mut self, delay: u64, event: E) -> EventId {
        self.schedule(self.now.saturating_add(delay), event)
    }

    /// Keeps a scheduled event from running; whether it was pending (false if it ran or was cancelled). The
    /// event itself is dropped when its entry comes up.
    pub fn cancel(&mut self, id: EventId) -> bool {
        let pending = self.slots.holds(id);
        if pending {
            self.slots.clear(id.slot);
        }
        pending
    }

    /// Whether a scheduled event is still to run (neither ran nor was cancelled).
    pub fn pending(&self, id: EventId) -> bool {
        self.slots.holds(id)
    }

    /// A model's one wake-up that delivers `event` at the deadline [`Engine::set_timer`] gives it; unset.
    pub fn timer(&mut self, event: E) -> TimerId {
        let id = TimerId(self.timers.len() as u32);
        self.timers.push(TimerState {
            event,
            deadline: None,
            armed: None,
        });
        id
    }

    /// Moves a timer's deadline (`None`: unset). A later deadline keeps the pending entry, which re-arms when
    /// it comes up; an earlier one makes a new entry (the old one a tombstone); a past one fires now.
    pub fn set_timer(&mut self, id: TimerId, deadline: Option<u64>)
    where
        E: Clone,
    {
        let now = self.now;
        let Some(timer) = self.timers.get_mut(id.0 as usize) else {
            return;
        };
        timer.deadline = deadline;
        let Some(deadline) = deadline else {
            return; // a pending entry comes up and finds nothing to do
        };
        if let Some(armed) = timer.armed {
            if armed.time <= deadline {
                return; // comes up early and re-arms then (or on time)
            }
            self.slots.clear(armed.slot);
        }
        let event = timer.event.clone();
        self.arm(id.0, deadline.max(now), event);
    }

    /// A timer's deadline, if set.
    pub fn timer_deadline(&self, id: TimerId) -> Option<u64> {
        self.timers.get(id.0 as usize)?.deadline
    }

    /// When the next pending entry comes up, or `None` when none is (tombstones at the head are dropped).
    pub fn next_time(&mut self) -> Option<u64> {
        loop {
            let head = self.queue.peek()?;
            if self.slots.is_pending(head.slot) {
                return Some(head.time);
            }
            if let Some(entry) = self.queue.pop() {
                self.slots.release(entry.slot);
            }
        }
    }

    /// Ends the current run after the event now running; the rest stay pending.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Begins a run: until the queue is empty, the next entry is after `until` (then now = `until`),
    /// `max_events` entries came up live, or an event handler called [`Engine::stop`].
    pub fn start_run(&mut self, until: Option<u64>, max_events: Option<u64>) -> Run {
        self.stopped = false;
        Run {
            until,
            max_events: max_events.unwrap_or(u64::MAX),
            ran: 0,
        }
    }

    /// The run's next event to handle, with now set to its time; `None` when the run is over. Timers' internal
    /// wake-ups are handled here (and counted); a timer that fires delivers a clone of its event.
    pub fn next_event(&mut self, run: &mut Run) -> Option<E>
    where
        E: Clone,
    {
        while run.ran < run.max_events && !self.stopped {
            let head = self.queue.peek()?;
            if run.until.is_some_and(|until| head.time > until) {
                return None;
            }
            let entry = self.queue.pop()?;
            if !self.slots.release(entry.slot) {
                continue; // cancelled, or a timer's entry it replaced by an earlier one
            }
            self.now = entry.time;
            run.ran += 1;
            if entry.timer == NO_TIMER {
                return Some(entry.event);
            }
            if let Some(event) = self.wake_timer(entry.timer, entry.event) {
                return Some(event);
            }
        }
        None
    }

    /// The events of the entries next in line, all at the time of the one just handed out, once after each
    /// refill of that line (else empty): a simulator can touch the memory they will need, so that the cache
    /// misses of several events overlap instead of coming one after the other.
    pub fn fresh_front(&mut self) -> impl Iterator<Item = &E> {
        let fresh = std::mem::take(&mut self.queue.refilled);
        self.queue
            .front
            .iter()
            .take(if fresh { usize::MAX } else { 0 })
            .map(|entry| &entry.event)
    }

    /// Ends a run: now moves to `until` if the run ended for want of earlier events; returns how many ran.
    pub fn end_run(&mut self, run: Run) -> u64 {
        if let Some(until) = run.until {
            if until > self.now && run.ran < run.max_events && !self.stopped {
                self.now = until;
            }
        }
        self.events += run.ran;
        run.ran
    }

    /// Runs events in time order, each through `handle`, until none is left, the next is after `until` (then
    /// now = `until`), `max_events` have run or `handle` called [`Engine::stop`]; how many ran.
    pub fn run<F>(&mut self, until: Option<u64>, max_events: Option<u64>, mut handle: F) -> u64
    where
        E: Clone,
        F: FnMut(&mut Self, E),
    {
        let mut run = self.start_run(until, max_events);
        while let Some(event) = self.next_event(&mut run) {
            handle(self, event);
        }
        self.end_run(run)
    }

    /// Puts `event` in an entry at `time` (not before now) with a pending slot.
    fn schedule(&mut self, time: u64, event: E) -> EventId {
        let seq = self.next_seq();
        let slot = self.slots.take(seq);
        self.queue.push(Entry {
            time,
            slot,
            timer: NO_TIMER,
            event,
        });
        EventId { slot, seq }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// A timer's live entry came up (now is its time), carrying the timer's event: re-arm for a deadline
    /// moved later, nothing if cleared, else fire.
    fn wake_timer(&mut self, id: u32, event: E) -> Option<E> {
        let now = self.now;
        let timer = self.timers.get_mut(id as usize)?;
        timer.armed = None;
        match timer.deadline {
            None => None,
            Some(deadline) if deadline > now => {
                self.arm(id, deadline, event);
                None
            }
            Some(_) => {
                timer.deadline = None;
                Some(event)
            }
        }
    }

    /// Gives a timer a new entry at `time`, carrying its event.
    fn arm(&mut self, id: u32, time: u64, event: E) {
        let seq = self.next_seq();
        let slot = self.slots.take(seq);
        if let Some(timer) = self.timers.get_mut(id as usize) {
            timer.armed = Some(Armed { slot, time });
        }
        self.queue.push(Entry {
            time,
            slot,
            timer: id,
            event,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs everything, recording (time, event).
    fn drain<E: Clone>(engine: &mut Engine<E>) -> Vec<(u64, E)> {
        let mut seen = Vec::new();
        engine.run(None, None, |engine, event| seen.push((engine.now(), event)));
        seen
    }

    #[test]
    fn fresh_front_shows_the_events_next_in_line_once_per_refill() {
        let mut engine = Engine::new();
        for (time, event) in [(5, "a"), (5, "b"), (5, "c"), (9, "d")] {
            engine.at(time, event).unwrap();
        }
        let mut run = engine.start_run(None, None);
        assert_eq!(engine.next_event(&mut run), Some("a"));
        assert_eq!(
            engine.fresh_front().copied().collect::<Vec<_>>(),
            ["b", "c"]
        );
        assert_eq!(engine.fresh_front().count(), 0); // shown once
        assert_eq!(engine.next_event(&mut run), Some("b"));
        assert_eq!(engine.fresh_front().count(), 0);
        assert_eq!(engine.next_event(&mut run), Some("c"));
        assert_eq!(engine.next_event(&mut run), Some("d"));
        assert_eq!(engine.fresh_front().count(), 0); // refilled with "d" alone, handed out
        assert_eq!(engine.next_event(&mut run), None);
        engine.end_run(run);
    }

    #[test]
    fn events_run_in_time_order_and_ties_in_scheduling_order() {
        let mut engine = Engine::new();
        engine.at(30, "c").unwrap();
        engine.at(10, "a1").unwrap();
        engine.after(10, "a2");
        engine.at(20, "b").unwrap();
        let mut seen = Vec::new();
        let ran = engine.run(None, None, |engine, event| {
            seen.push(event);
            if event == "b" {
                engine.after(0, "b-then");
            }
        });
        assert_eq!(ran, 5);
        assert_eq!(seen, ["a1", "a2", "b", "b-then", "c"]);
        assert_eq!(
            (engine.now(), engine.events(), engine.next_time()),
            (30, 5, None)
        );
    }

    #[test]
    fn cancel_until_and_max_events() {
        let mut engine = Engine::new();
        let gone = engine.at(5, "gone").unwrap();
        engine.at(7, "kept").unwrap();
        engine.at(50, "late").unwrap();
        assert!(engine.cancel(gone));
        assert!(!engine.pending(gone));
        assert_eq!(engine.next_time(), Some(7));
        let mut seen = Vec::new();
        assert_eq!(engine.run(Some(40), None, |_, event| seen.push(event)), 1);
        assert_eq!((seen.as_slice(), engine.now()), (["kept"].as_slice(), 40));
        engine.at(41, "x").unwrap();
        assert_eq!(engine.run(None, Some(1), |_, event| seen.push(event)), 1);
        assert_eq!(engine.now(), 41);
        let past = engine.at(3, "past").unwrap_err();
        assert_eq!(past.to_string(), "event at 3 ns is before now (41 ns)");
        assert_eq!(drain(&mut engine), [(50, "late")]);
    }

    #[test]
    fn cancelling_an_event_that_ran_does_nothing_even_once_its_slot_is_reused() {
        let mut engine = Engine::new();
        let ran = engine.after(0, 1);
        drain(&mut engine);
        let next = engine.after(1, 2);
        assert!(!engine.cancel(ran));
        assert!(engine.pending(next) && !engine.pending(ran));
        assert_eq!(drain(&mut engine), [(1, 2)]);
    }

    #[test]
    fn an_event_before_a_head_looked_at_but_not_run_comes_first() {
        let mut engine = Engine::new();
        engine.at(1_000_000, "far").unwrap();
        assert_eq!(engine.run(Some(10), None, |_, _| {}), 0);
        engine.at(20, "early-b").unwrap();
        engine.at(15, "early-a").unwrap();
        engine.at(20, "early-c").unwrap();
        let order: Vec<_> = drain(&mut engine);
        assert_eq!(
            order,
            [
                (15, "early-a"),
                (20, "early-b"),
                (20, "early-c"),
                (1_000_000, "far")
            ]
        );
    }

    #[test]
    fn a_timer_moves_with_its_deadline_and_fires_once() {
        let mut engine = Engine::new();
        let timer = engine.timer("t");
        engine.set_timer(timer, Some(100));
        engine.set_timer(timer, Some(100));
        engine.set_timer(timer, Some(50));
        let mut fired = Vec::new();
        engine.run(Some(60), None, |engine, _| fired.push(engine.now()));
        engine.set_timer(timer, None);
        engine.run(None, None, |engine, _| fired.push(engine.now()));
        assert_eq!(fired, [50]);
        engine.set_timer(timer, Some(20)); // already past: now
        engine.run(None, None, |engine, _| fired.push(engine.now()));
        assert_eq!(fired, [50, 60]);
        assert_eq!(engine.timer_deadline(timer), None);
    }

    #[test]
    fn a_timer_pushed_back_again_and_again_keeps_one_entry_and_fires_at_its_last_deadline() {
        let mut engine = Engine::new();
        let timer = engine.timer(());
        for step in 0..1000 {
            engine.set_timer(timer, Some(1_000 + step));
            engine.set_timer(timer, None);
            engine.set_timer(timer, Some(1_000 + step));
        }
        assert_eq!(engine.entries(), 1);
        assert_eq!(drain(&mut engine), [(1_999, ())]);
        engine.set_timer(timer, Some(3_000));
        engine.set_timer(timer, Some(2_500)); // earlier: a new entry, the old one a tombstone
        assert_eq!(drain(&mut engine), [(2_500, ())]);
    }

    #[test]
    fn stop_ends_the_run_after_the_event_that_called_it() {
        let mut engine = Engine::new();
        engine.at(10, 10).unwrap();
        engine.at(20, 20).unwrap();
        let mut seen = Vec::new();
        let ran = engine.run(Some(100), None, |engine, event| {
            seen.push(event);
            engine.stop();
        });
        assert_eq!((ran, engine.now(), engine.next_time()), (1, 10, Some(20)));
        assert_eq!(drain(&mut engine), [(20, 20)]);
        assert_eq!(seen, [10]);
    }

    #[test]
    fn times_far_apart_and_at_the_end_of_time_keep_their_order() {
        let mut engine = Engine::new();
        for (k, time) in [u64::MAX, 1 << 63, 3, 1 << 40, 3, u64::MAX, 0]
            .iter()
            .enumerate()
        {
            engine.at(*time, k).unwrap();
        }
        engine.after(u64::MAX, 7); // saturates at the end of time
        let times: Vec<_> = drain(&mut engine);
        assert_eq!(
            times,
            [
                (0, 6),
                (3, 2),
                (3, 4),
                (1 << 40, 3),
                (1 << 63, 1),
                (u64::MAX, 0),
                (u64::MAX, 5),
                (u64::MAX, 7)
            ]
        );
    }

    /// The Python engine's semantics, written the naive way: a list scanned for the earliest (time, seq).
    #[derive(Default)]
    struct Reference {
        now: u64,
        events: u64,
        seq: u64,
        stopped: bool,
        /// (time, seq, what): what is an event tag, or a timer (`usize::MAX - index`).
        entries: Vec<(u64, u64, usize)>,
        /// Handles' events: Some(tag) while pending.
        handles: Vec<(u64, Option<usize>)>,
        timers: Vec<RefTimer>,
    }

    /// A timer of the reference: its tag, deadline, and pending entry's (seq, time).
    struct RefTimer {
        tag: usize,
        deadline: Option<u64>,
        armed: Option<(u64, u64)>,
    }

    impl Reference {
        fn at(&mut self, time: u64, tag: usize) -> usize {
            self.seq += 1;
            self.entries.push((time, self.seq, self.handles.len()));
            self.handles.push((self.seq, Some(tag)));
            self.handles.len() - 1
        }

        fn set_timer(&mut self, index: usize, deadline: Option<u64>) {
            let timer = &mut self.timers[index];
            timer.deadline = deadline;
            let Some(deadline) = deadline else { return };
            if timer.armed.is_some_and(|(_, time)| time <= deadline) {
                return;
            }
            self.arm(index, deadline.max(self.now));
        }

        fn arm(&mut self, index: usize, time: u64) {
            self.seq += 1;
            self.timers[index].armed = Some((self.seq, time));
            self.entries.push((time, self.seq, usize::MAX - index));
        }

        fn live(&self, (_, seq, what): (u64, u64, usize)) -> bool {
            match self.handles.get(what) {
                Some(handle) => handle.1.is_some(),
                None => self.timers[usize::MAX - what]
                    .armed
                    .is_some_and(|(s, _)| s == seq),
            }
        }

        fn earliest(&self) -> Option<usize> {
            (0..self.entries.len()).min_by_key(|&i| (self.entries[i].0, self.entries[i].1))
        }

        fn next_time(&self) -> Option<u64> {
            let live = self.entries.iter().filter(|entry| self.live(**entry));
            live.map(|entry| (entry.0, entry.1))
                .min()
                .map(|(time, _)| time)
        }

        /// Pops the next live entry due by `until`: its tag if it delivers one, `Some(None)` for a timer's
        /// internal wake-up, `None` when nothing is due.
        fn pop(&mut self, until: Option<u64>) -> Option<Option<usize>> {
            loop {
                let index = self.earliest()?;
                let entry = self.entries[index];
                if until.is_some_and(|until| entry.0 > until) {
                    return None;
                }
                self.entries.swap_remove(index);
                if !self.live(entry) {
                    continue;
                }
                self.now = entry.0;
                if let Some(handle) = self.handles.get_mut(entry.2) {
                    return Some(handle.1.take());
                }
                let timer_index = usize::MAX - entry.2;
                let timer = &mut self.timers[timer_index];
                timer.armed = None;
                return Some(match timer.deadline {
                    None => None,
                    Some(deadline) if deadline > self.now => {
                        self.arm(timer_index, deadline);
                        None
                    }
                    Some(_) => {
                        timer.deadline = None;
                        Some(timer.tag)
                    }
                });
            }
        }
    }

    /// One operation of a random schedule (times are offsets from now).
    #[derive(Clone, Debug)]
    enum Op {
        At(u64, usize),
        Cancel(usize),
        SetTimer(usize, Option<i64>),
        Run(Option<u64>, Option<u64>),
        NextTime,
    }

    fn op() -> impl Strategy<Value = Op> {
        let delay = prop_oneof![0..4u64, 0..1_000u64, 0..(1u64 << 40)];
        prop_oneof![
            4 => (delay, 0..1_000usize).prop_map(|(delay, tag)| Op::At(delay, tag)),
            1 => (0..64usize).prop_map(Op::Cancel),
            2 => (0..4usize, proptest::option::of(-50..5_000i64)).prop_map(|(t, d)| Op::SetTimer(t, d)),
            1 => (proptest::option::of(0..3_000u64), proptest::option::of(0..20u64))
                .prop_map(|(until, max)| Op::Run(until, max)),
            1 => Just(Op::NextTime),
        ]
    }

    /// What an event does when it runs: schedule a follower (delay, tag), move a timer (index, deadline),
    /// stop the run.
    struct Reaction {
        follow: Option<(u64, usize)>,
        timer: Option<(usize, u64)>,
        stop: bool,
    }

    /// An event's reaction, by its tag (a follower schedules none).
    fn react(tag: usize, now: u64) -> Reaction {
        Reaction {
            follow: (tag % 3 == 0 && tag < 10_000).then(|| ((tag % 7) as u64 * 10, tag + 10_000)),
            timer: (tag % 4 == 1).then(|| ((tag / 4) % 4, now + (tag % 11) as u64 * 25)),
            stop: tag % 13 == 5,
        }
    }

    proptest! {
        /// The engine runs any schedule exactly as the naive reference of the Python engine's semantics: the
        /// same events at the same times, the same counts, the same now.
        #[test]
        fn matches_the_reference_on_any_schedule(ops in proptest::collection::vec(op(), 1..80)) {
            let mut engine = Engine::new();
            let mut reference = Reference::default();
            let timers: Vec<TimerId> = (0..4).map(|t| engine.timer(2_000 + t)).collect();
            reference.timers = (0..4)
                .map(|t| RefTimer { tag: 2_000 + t, deadline: None, armed: None })
                .collect();
            let mut ids = Vec::new();
            for op in ops {
                match op {
                    Op::At(delay, tag) => {
                        ids.push((engine.after(delay, tag), reference.at(reference.now.saturating_add(delay), tag)));
                    }
                    Op::Cancel(k) => {
                        if let Some(&(id, handle)) = ids.get(k % ids.len().max(1)) {
                            let expected = reference.handles[handle].1.take().is_some();
                            prop_assert_eq!(engine.cancel(id), expected);
                            prop_assert!(!engine.pending(id));
                        }
                    }
                    Op::SetTimer(t, offset) => {
                        let deadline = offset.map(|d| reference.now.saturating_add_signed(d));
                        engine.set_timer(timers[t], deadline);
                        reference.set_timer(t, deadline);
                    }
                    Op::NextTime => prop_assert_eq!(engine.next_time(), reference.next_time()),
                    Op::Run(until, max) => {
                        let until = until.map(|u| reference.now + u);
                        let mut seen = Vec::new();
                        let ran = engine.run(until, max, |engine, tag| {
                            seen.push((engine.now(), tag));
                            let Reaction { follow, timer, stop } = react(tag, engine.now());
                            if let Some((delay, next)) = follow {
                                engine.after(delay, next);
                            }
                            if let Some((t, deadline)) = timer {
                                engine.set_timer(timers[t], Some(deadline));
                            }
                            if stop {
                                engine.stop();
                            }
                        });
                        let mut expected = Vec::new();
                        let limit = max.unwrap_or(u64::MAX);
                        let mut count = 0;
                        reference.stopped = false;
                        while count < limit && !reference.stopped {
                            let Some(popped) = reference.pop(until) else { break };
                            count += 1;
                            let Some(tag) = popped else { continue };
                            expected.push((reference.now, tag));
                            let Reaction { follow, timer, stop } = react(tag, reference.now);
                            if let Some((delay, next)) = follow {
                                reference.at(reference.now + delay, next);
                            }
                            if let Some((t, deadline)) = timer {
                                reference.set_timer(t, Some(deadline));
                            }
                            reference.stopped |= stop;
                        }
                        if let Some(until) = until {
                            if until > reference.now && count < limit && !reference.stopped {
                                reference.now = until;
                            }
                        }
                        reference.events += count;
                        prop_assert_eq!(seen, expected);
                        prop_assert_eq!(ran, count);
                    }
                }
                prop_assert_eq!((engine.now(), engine.events()), (reference.now, reference.events));
            }
        }
    }
}
