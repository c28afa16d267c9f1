//! The discrete-event engine (port of `emulator/sim/engine.py`): simulated time in integer nanoseconds, events
//! run in time order and, at equal times, in the order they were scheduled.
//!
//! The simulation backend drives the same sans-I/O models the emulator's agents drive, so the engine needs
//! little: schedule an event at a time, cancel it, run in time order, stop. Its order is the Python engine's
//! exactly (time, then a sequence number taken at scheduling, timers' re-arms included), so a simulation
//! ported from Python gives identical results, and the total order makes every run deterministic (Shadow's
//! event queue makes the same point: two events that compare equal would run in an arbitrary order).
//!
//! Events are small values of a type the simulator chooses (`E`, typically an enum naming the model and what
//! happened to it), not boxed closures: scheduling allocates nothing once the engine's vectors have grown.
//! Cancelling is O(1): the event leaves its slot at once and its queue entry, now a tombstone, is skipped when
//! it comes up. A [`TimerId`] is a model's moving deadline (a retransmission timer pushed back by every ACK):
//! moving it later costs nothing and keeps its one queue entry, which re-arms itself when it comes up early.

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

/// What a queue entry wakes: a one-shot event in a slot, or a timer.
#[derive(Clone, Copy, Debug)]
enum Target {
    Event(u32),
    Timer(u32),
}

/// One entry of the queue: ordered by time, then by the sequence number taken when it was made.
#[derive(Clone, Copy, Debug)]
struct Entry {
    time: u64,
    seq: u64,
    target: Target,
}

impl Entry {
    fn key(&self) -> (u64, u64) {
        (self.time, self.seq)
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest entry must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// The entries to come, earliest first: a radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, 1990) on the time.
///
/// Simulated time only moves forward, so a monotone queue does: an entry sits in the bucket of the highest
/// bit where its time differs from `last` (the time of the earliest entry when the buckets were last
/// refilled), and only the lowest bucket is ever sorted out, by moving its entries to lower buckets. Pushing
/// is an append; an entry moves at most once per bit of its distance, each move a sequential copy. Measured
/// on the hold model (`examples/hold.rs`, docs/performance.md) it runs several times as many events a second
/// as a binary heap once the queue outgrows the cache, and RTO timers milliseconds away stay in high buckets,
/// untouched while frames come and go (the Python engine's near and far heaps, generalized).
///
/// Equal times come out in sequence order without comparing sequence numbers: appends are in sequence order
/// and a refill moves a bucket's entries, in order, into buckets that are empty, so every bucket stays in
/// sequence order and the front bucket (time == `last`) is first in, first out.
///
/// An entry earlier than `last` can be pushed only after the engine looked at (or skipped the tombstone of)
/// a later head without running it: `run(until)` stopping short, or `next_time`. Those few go to `early`, an
/// ordinary heap on (time, sequence), which comes first: all its times are below `last`.
#[derive(Debug)]
struct Queue {
    last: u64,
    /// Bucket 0: entries at `last`, in sequence order.
    front: VecDeque<Entry>,
    /// Bucket b + 1 at index b: entries whose time's highest bit differing from `last` is bit b.
    buckets: [Vec<Entry>; 64],
    /// Bit b set when `buckets[b]` holds entries.
    occupied: u64,
    early: BinaryHeap<Entry>,
    len: usize,
}

impl Default for Queue {
    fn default() -> Self {
        Self {
            last: 0,
            front: VecDeque::new(),
            buckets: std::array::from_fn(|_| Vec::new()),
            occupied: 0,
            early: BinaryHeap::new(),
            len: 0,
        }
    }
}

impl Queue {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, entry: Entry) {
        self.len += 1;
        if entry.time < self.last {
            self.early.push(entry);
        } else {
            self.place(entry);
        }
    }

    /// Puts an entry at or after `last` in its bucket.
    fn place(&mut self, entry: Entry) {
        let differing = entry.time ^ self.last;
        if differing == 0 {
            self.front.push_back(entry);
        } else {
            let bucket = 63 - differing.leading_zeros() as usize;
            self.buckets[bucket].push(entry);
            self.occupied |= 1 << bucket;
        }
    }

    fn peek(&mut self) -> Option<Entry> {
        if let Some(entry) = self.early.peek() {
            return Some(*entry);
        }
        if self.front.is_empty() {
            self.refill();
        }
        self.front.front().copied()
    }

    fn pop(&mut self) -> Option<Entry> {
        let entry = match self.early.pop() {
            Some(entry) => entry,
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

    /// The front bucket is empty: sort out the lowest occupied bucket around its earliest time.
    fn refill(&mut self) {
        if self.occupied == 0 {
            return;
        }
        let lowest = self.occupied.trailing_zeros() as usize;
        self.occupied &= !(1 << lowest);
        let mut entries = std::mem::take(&mut self.buckets[lowest]);
        if let Some(earliest) = entries.iter().map(|entry| entry.time).min() {
            self.last = earliest;
        }
        for entry in entries.drain(..) {
            self.place(entry);
        }
        self.buckets[lowest] = entries; // empty, its capacity kept for the next time
    }
}

/// A one-shot event's slot: the sequence number of its entry, and the event until it runs or is cancelled.
#[derive(Debug)]
struct Slot<E> {
    seq: u64,
    event: Option<E>,
}

/// The queue entry a timer has pending: its sequence number and when it comes up.
#[derive(Clone, Copy, Debug)]
struct Armed {
    seq: u64,
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
    queue: Queue,
    slots: Vec<Slot<E>>,
    free: Vec<u32>,
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
            slots: Vec::new(),
            free: Vec::new(),
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

    /// Puts `event` in a slot and its entry in the queue (`time` is not before now).
    fn schedule(&mut self, time: u64, event: E) -> EventId {
        let seq = self.next_seq();
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Slot {
                    seq,
                    event: Some(event),
                };
                slot
            }
            None => {
                // Beyond u32::MAX pending events (hundreds of GB) the slot index would wrap: not reachable.
                let slot = self.slots.len() as u32;
                self.slots.push(Slot {
                    seq,
                    event: Some(event),
                });
                slot
            }
        };
        self.queue.push(Entry {
            time,
            seq,
            target: Target::Event(slot),
        });
        EventId { slot, seq }
    }

    /// Keeps a scheduled event from running, and hands it back; `None` if it ran or was cancelled already.
    pub fn cancel(&mut self, id: EventId) -> Option<E> {
        let slot = self.slots.get_mut(id.slot as usize)?;
        if slot.seq != id.seq {
            return None;
        }
        let event = slot.event.take()?;
        self.free.push(id.slot);
        Some(event)
    }

    /// Whether a scheduled event is still to run (neither ran nor was cancelled).
    pub fn pending(&self, id: EventId) -> bool {
        self.slots
            .get(id.slot as usize)
            .is_some_and(|slot| slot.seq == id.seq && slot.event.is_some())
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
    pub fn set_timer(&mut self, id: TimerId, deadline: Option<u64>) {
        let now = self.now;
        let Some(timer) = self.timers.get_mut(id.0 as usize) else {
            return;
        };
        timer.deadline = deadline;
        let Some(deadline) = deadline else {
            return; // a pending entry comes up and finds nothing to do
        };
        if timer.armed.is_some_and(|armed| armed.time <= deadline) {
            return; // comes up early and re-arms then (or on time)
        }
        self.arm(id, deadline.max(now));
    }

    /// A timer's deadline, if set.
    pub fn timer_deadline(&self, id: TimerId) -> Option<u64> {
        self.timers.get(id.0 as usize)?.deadline
    }

    /// When the next pending entry comes up, or `None` when none is (tombstones at the head are dropped).
    pub fn next_time(&mut self) -> Option<u64> {
        while let Some(entry) = self.queue.peek() {
            if self.is_live(&entry) {
                return Some(entry.time);
            }
            self.queue.pop();
        }
        None
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
            if !self.is_live(&entry) {
                continue;
            }
            self.now = entry.time;
            run.ran += 1;
            let event = match entry.target {
                Target::Event(slot) => self.take_event(slot),
                Target::Timer(timer) => self.wake_timer(timer),
            };
            if event.is_some() {
                return event;
            }
        }
        None
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

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Whether an entry still stands for something: its event not cancelled, its timer not re-armed earlier.
    fn is_live(&self, entry: &Entry) -> bool {
        match entry.target {
            Target::Event(slot) => self
                .slots
                .get(slot as usize)
                .is_some_and(|slot| slot.seq == entry.seq && slot.event.is_some()),
            Target::Timer(timer) => self
                .timers
                .get(timer as usize)
                .and_then(|timer| timer.armed)
                .is_some_and(|armed| armed.seq == entry.seq),
        }
    }

    /// Takes a live entry's event out of its slot, which is free again.
    fn take_event(&mut self, slot: u32) -> Option<E> {
        let event = self.slots.get_mut(slot as usize)?.event.take();
        self.free.push(slot);
        event
    }

    /// A timer's entry came up: re-arm for a deadline moved later, nothing if cleared, else fire.
    fn wake_timer(&mut self, id: u32) -> Option<E>
    where
        E: Clone,
    {
        let now = self.now;
        let timer = self.timers.get_mut(id as usize)?;
        timer.armed = None;
        match timer.deadline {
            None => None,
            Some(deadline) if deadline > now => {
                self.arm(TimerId(id), deadline);
                None
            }
            Some(_) => {
                timer.deadline = None;
                Some(timer.event.clone())
            }
        }
    }

    /// Gives a timer a new entry at `time`; its previous one, if any, becomes a tombstone.
    fn arm(&mut self, id: TimerId, time: u64) {
        let seq = self.next_seq();
        if let Some(timer) = self.timers.get_mut(id.0 as usize) {
            timer.armed = Some(Armed { seq, time });
            self.queue.push(Entry {
                time,
                seq,
                target: Target::Timer(id.0),
            });
        }
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
        assert_eq!(engine.cancel(gone), Some("gone"));
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
        assert_eq!(engine.cancel(ran), None);
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
                            let expected = reference.handles[handle].1.take();
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
