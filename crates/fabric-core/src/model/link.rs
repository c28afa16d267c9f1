//! A switch port's side of a link: receive delay line, seeded loss and drop lists, the virtual wire at the
//! port rate.
//!
//! The kernel links the namespaces with veth pairs, which have no delay and lose nothing, so the switch models
//! both on its ports. A frame arriving on a port whose link has delay d is processed d later. A host-facing
//! port with delay also runs the wire itself, since nobody downstream delays: a frame leaves the port's queue
//! when a virtual wire of the port's rate is free, and reaches the kernel d after it started on that wire.
//! Injected loss takes frames on the switch's side of a link (on egress, and on ingress from hosts); which
//! frames it takes is a function of the seed and of each frame's number in its direction, drawn from CPython's
//! `random.Random(seed)` sequence, so a run repeats the Python model's losses exactly.
//!
//! The caller keeps the sockets, the timer and the send; this model says what leaves when, given `now`.
//! Frames are opaque handles `F` (the bindings keep Python's bytes objects, a Rust driver its own buffers):
//! the link only stores and hands them back.
use std::collections::VecDeque;

use crate::wire::pfc::PRIORITIES;

use crate::model::rng::CpythonRandom;

/// Whether two frame handles are the very same frame, not two equal ones (Python's `is`).
///
/// The loss draw at the head of a queue happens once per frame: a head the kernel could not take yet is asked
/// about again, and must not be drawn for twice, while the next frame with the same bytes must be.
pub trait SameFrame {
    /// True when `self` and `other` are one frame.
    fn same_frame(&self, other: &Self) -> bool;
}

/// How long `len` bytes hold a wire of `rate_bps` (at least 1 bit/s), in ns, rounded down as the Python model
/// did: the link model's, and the emulated agents' virtual wires.
pub fn wire_ns(len: usize, rate_bps: u64) -> u64 {
    let bits_ns = (len as u128).saturating_mul(8_000_000_000);
    u64::try_from(bits_ns / u128::from(rate_bps.max(1))).unwrap_or(u64::MAX)
}

/// The head of a port's egress queue, taken off it by [`EgressQueue::take_head`].
#[derive(Debug)]
pub struct Dequeued<F> {
    /// The frame's priority (below [`PRIORITIES`]): where an injected loss of it is counted.
    pub priority: usize,
    /// Its length in bytes: how long it holds the wire.
    pub len: usize,
    /// The frame itself.
    pub frame: F,
}

/// The port queues the virtual wire takes frames from (the MMU's), one frame at a time.
///
/// Fallible because a driver's queue may be foreign code (the bindings call a Python object); the error is
/// handed back to the caller of [`Link::transmit`] unchanged.
pub trait EgressQueue {
    /// The frame handle the queue holds.
    type Frame;
    /// Why taking a head failed.
    type Error;
    /// Removes the head of port `egress`'s queue and returns it; `None` when that queue is empty (or paused).
    fn take_head(&mut self, egress: usize) -> Result<Option<Dequeued<Self::Frame>>, Self::Error>;
}

/// A frame due at a time: received and waiting out the delay, or on the wire and not yet at the kernel.
pub type Due<F> = (u64, F);

/// Delay lines, loss draws and the virtual wire of one switch port.
#[derive(Debug)]
pub struct Link<F> {
    rate_bps: u64,
    delay_ns: u64,
    host_facing: bool,
    /// Egress through the virtual wire and the delay line: a host-facing port with delay.
    paced: bool,
    loss: f64,
    /// Frame numbers (from 1, per direction) always lost, sorted and without repeats.
    drop_seq: Vec<u64>,
    /// Without loss and drops no frame needs a draw (the common case).
    lossy: bool,
    /// The seeded draws; created only when `loss > 0`, the only case that draws (boxed: 2.5 KB of state).
    random: Option<Box<CpythonRandom>>,
    arrivals: VecDeque<Due<F>>,
    /// When the last frame handed over whole had arrived (its last bit): the next arrives at least its own
    /// time on the wire later.
    arrived_at: u64,
    departures: VecDeque<Due<F>>,
    wire_free_at: u64,
    /// The head frame that already passed the loss draw, kept so no later frame can be that same one.
    cleared: Option<F>,
    rx_seq: u64,
    tx_seq: u64,
    injected_drops: [u64; PRIORITIES],
}

/// Why a link cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkError {
    /// A rate of 0 bit/s: no frame would ever finish on the wire.
    ZeroRate,
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::ZeroRate => f.write_str("a link's rate must be at least 1 bit/s"),
        }
    }
}

impl std::error::Error for LinkError {}

impl<F> Link<F> {
    /// A link of `rate_bps` and `delay_ns`; `loss` is the probability of losing each frame, `drop` the frame
    /// numbers (from 1, per direction) always lost, `seed` the magnitude of `random.Random`'s integer seed as
    /// 32-bit words, least significant first (high zero words make no difference, as in CPython).
    pub fn new(
        rate_bps: u64,
        delay_ns: u64,
        host_facing: bool,
        loss: f64,
        drop: &[u64],
        seed: &[u32],
    ) -> Result<Self, LinkError> {
        if rate_bps == 0 {
            return Err(LinkError::ZeroRate);
        }
        let mut drop_seq = drop.to_vec();
        drop_seq.sort_unstable();
        drop_seq.dedup();
        Ok(Link {
            rate_bps,
            delay_ns,
            host_facing,
            paced: delay_ns != 0 && host_facing,
            loss,
            lossy: loss > 0.0 || !drop_seq.is_empty(),
            drop_seq,
            random: (loss > 0.0).then(|| Box::new(CpythonRandom::from_int_seed(seed))),
            arrivals: VecDeque::new(),
            arrived_at: 0,
            departures: VecDeque::new(),
            wire_free_at: 0,
            cleared: None,
            rx_seq: 0,
            tx_seq: 0,
            injected_drops: [0; PRIORITIES],
        })
    }

    /// The port's rate in bit/s.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// The link's one-way delay in ns.
    pub fn delay_ns(&self) -> u64 {
        self.delay_ns
    }

    /// Whether the port's peer is a host (loss on ingress applies only to frames from hosts).
    pub fn host_facing(&self) -> bool {
        self.host_facing
    }

    /// Whether egress goes through the virtual wire and the delay line (host-facing, with delay).
    pub fn paced(&self) -> bool {
        self.paced
    }

    /// The probability of losing each frame.
    pub fn loss(&self) -> f64 {
        self.loss
    }

    /// The frame numbers always lost, ascending.
    pub fn drop_seq(&self) -> &[u64] {
        &self.drop_seq
    }

    /// Whether any frame can be lost: callers skip the link entirely when none of a switch's can.
    pub fn lossy(&self) -> bool {
        self.lossy
    }

    /// Received frames waiting out the delay, with the time each is due, earliest first.
    pub fn arrivals(&self) -> &VecDeque<Due<F>> {
        &self.arrivals
    }

    /// Frames on the wire, with the time each reaches the kernel, earliest first.
    pub fn departures(&self) -> &VecDeque<Due<F>> {
        &self.departures
    }

    /// When the virtual wire is free for the next frame.
    pub fn wire_free_at(&self) -> u64 {
        self.wire_free_at
    }

    /// The head frame that passed its loss draw last.
    pub fn cleared(&self) -> Option<&F> {
        self.cleared.as_ref()
    }

    /// Frames from the host counted so far (the number of the last one).
    pub fn rx_seq(&self) -> u64 {
        self.rx_seq
    }

    /// Frames sent onto the link so far (the number of the last one).
    pub fn tx_seq(&self) -> u64 {
        self.tx_seq
    }

    /// Frames injected loss took, per priority.
    pub fn injected_drops(&self) -> &[u64; PRIORITIES] {
        &self.injected_drops
    }

    /// Whether injected loss takes the `seq`-th frame in one direction (a draw only when `loss > 0`).
    fn lost(&mut self, seq: u64) -> bool {
        if self.drop_seq.binary_search(&seq).is_ok() {
            return true;
        }
        match self.random.as_deref_mut() {
            Some(random) => random.random() < self.loss,
            None => false,
        }
    }

    /// Whether injected loss takes frame `seq` of a direction, counted under `priority` if so (a priority
    /// beyond [`PRIORITIES`] is no counter: the frame is lost uncounted rather than the model panicking; the
    /// bindings refuse such a priority first, with Python's `IndexError`).
    fn draw(&mut self, seq: u64, priority: usize) -> bool {
        if self.lossy && self.lost(seq) {
            if let Some(count) = self.injected_drops.get_mut(priority) {
                *count += 1;
            }
            return true;
        }
        false
    }

    // --- ingress ---------------------------------------------------------------------

    /// A frame came off the wire at `now`; it is processed once the link's delay has passed.
    pub fn arrive(&mut self, now: u64, frame: F) {
        self.arrivals
            .push_back((now.saturating_add(self.delay_ns), frame));
    }

    /// A frame of `len` bytes was handed over at `now` by a link that has no wire (a veth delivers a frame
    /// when its sender's qdisc lets it go, the moment its first bit would leave): it is processed when its
    /// last bit would have arrived, its time on the wire at the port's rate and the link's delay later, and
    /// not before a wire would have carried it after the frame ahead of it. A sender's qdisc may let two
    /// frames go at once (a burst, a late wake-up); a wire delivers them one frame time apart, and so does
    /// this.
    pub fn arrive_whole(&mut self, now: u64, len: usize, frame: F) {
        let wire_ns = self.wire_ns(len);
        let due = now
            .saturating_add(self.delay_ns)
            .saturating_add(wire_ns)
            .max(self.arrived_at.saturating_add(wire_ns));
        self.arrived_at = due;
        self.arrivals.push_back((due, frame));
    }

    /// The next frame whose delay has passed by `now`, with the time it arrives; `None` if none has.
    pub fn arrived(&mut self, now: u64) -> Option<Due<F>> {
        match self.arrivals.front() {
            Some(&(due, _)) if due <= now => self.arrivals.pop_front(),
            _ => None,
        }
    }

    /// Whether injected loss takes the next IPv4 frame from the host (counted under `priority` if so).
    pub fn lost_from_host(&mut self, priority: usize) -> bool {
        self.rx_seq = self.rx_seq.saturating_add(1);
        self.draw(self.rx_seq, priority)
    }

    // --- egress ----------------------------------------------------------------------

    /// The frame due at the kernel by `now` at the head of the departures, if any.
    fn due_departure(&self, now: u64) -> Option<&F> {
        match self.departures.front() {
            Some((due, frame)) if *due <= now => Some(frame),
            _ => None,
        }
    }

    /// How long `len` bytes hold the wire at the port's rate, in ns (rounded down, as the Python model).
    fn wire_ns(&self, len: usize) -> u64 {
        wire_ns(len, self.rate_bps)
    }

    /// Moves frames from port `index`'s queue onto the virtual wire while it is free at `now`.
    ///
    /// Each frame holds the wire for its length at the port's rate (a lost one too), and is due at the kernel
    /// the link's delay after it started. Returns the frame that reaches the kernel by `now`, or `None`; it
    /// stays first until [`Link::left`].
    pub fn transmit<Q>(
        &mut self,
        now: u64,
        queue: &mut Q,
        index: usize,
    ) -> Result<Option<&F>, Q::Error>
    where
        Q: EgressQueue<Frame = F>,
    {
        while self.wire_free_at <= now {
            let Some(head) = queue.take_head(index)? else {
                break;
            };
            let start = now.max(self.wire_free_at);
            self.wire_free_at = start.saturating_add(self.wire_ns(head.len));
            self.tx_seq = self.tx_seq.saturating_add(1);
            if self.draw(self.tx_seq, head.priority) {
                continue;
            }
            self.departures
                .push_back((start.saturating_add(self.delay_ns), head.frame));
        }
        Ok(self.due_departure(now))
    }

    /// The frame [`Link::transmit`] (or this) gave is gone (sent, or refused for good); the next one due by
    /// `now`, or `None`. With nothing on the wire there is nothing to remove (the bindings raise Python's
    /// `IndexError` before calling).
    pub fn left(&mut self, now: u64) -> Option<&F> {
        self.departures.pop_front();
        self.due_departure(now)
    }

    /// When this link next has something to do; `backlog`: the port's queue holds frames.
    pub fn next_deadline(&self, backlog: bool) -> Option<u64> {
        let mut deadline = self.arrivals.front().map(|&(due, _)| due);
        if self.paced {
            if let Some(&(due, _)) = self.departures.front() {
                deadline = Some(deadline.map_or(due, |d| d.min(due)));
            }
            if backlog {
                deadline = Some(deadline.map_or(self.wire_free_at, |d| d.min(self.wire_free_at)));
            }
        }
        deadline
    }
}

impl<F: SameFrame> Link<F> {
    /// Whether injected loss takes `frame`, the head of the port's queue (counted under `priority` if so).
    ///
    /// A head the kernel could not take yet is asked about again; the draw happens once per frame. The
    /// cleared frame stays held until the next one clears, so no later frame can be that same one.
    pub fn lost_at_head(&mut self, frame: F, priority: usize) -> bool {
        if self
            .cleared
            .as_ref()
            .is_some_and(|cleared| cleared.same_frame(&frame))
        {
            return false;
        }
        self.tx_seq = self.tx_seq.saturating_add(1);
        if self.draw(self.tx_seq, priority) {
            return true;
        }
        self.cleared = Some(frame);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::rc::Rc;

    const RATE: u64 = 100_000_000; // 1250 bytes take 100 us
    const DELAY: u64 = 1_000_000;

    /// A frame as the tests hold it: shared bytes, one frame per allocation.
    #[derive(Clone, Debug)]
    struct Frame(Rc<[u8]>);

    impl SameFrame for Frame {
        fn same_frame(&self, other: &Self) -> bool {
            Rc::ptr_eq(&self.0, &other.0)
        }
    }

    impl PartialEq for Frame {
        fn eq(&self, other: &Self) -> bool {
            self.0 == other.0
        }
    }

    fn frame(n: u16, size: usize) -> Frame {
        Frame(n.to_be_bytes().repeat(size / 2).into())
    }

    /// One port's egress queue: (priority, frame) in order.
    struct Queue(VecDeque<(usize, Frame)>);

    impl EgressQueue for Queue {
        type Frame = Frame;
        type Error = std::convert::Infallible;
        fn take_head(&mut self, egress: usize) -> Result<Option<Dequeued<Frame>>, Self::Error> {
            assert_eq!(egress, 1);
            Ok(self.0.pop_front().map(|(priority, frame)| Dequeued {
                priority,
                len: frame.0.len(),
                frame,
            }))
        }
    }

    fn link(delay_ns: u64, host_facing: bool, loss: f64, drop: &[u64], seed: u64) -> Link<Frame> {
        Link::new(
            RATE,
            delay_ns,
            host_facing,
            loss,
            drop,
            &[seed as u32, (seed >> 32) as u32],
        )
        .unwrap()
    }

    #[test]
    fn a_received_frame_is_processed_the_delay_later_in_order() {
        let mut line = link(DELAY, false, 0.0, &[], 1);
        line.arrive(10, frame(1, 1250));
        line.arrive(20, frame(2, 1250));
        assert_eq!(line.next_deadline(false), Some(10 + DELAY));
        assert!(line.arrived(10 + DELAY - 1).is_none());
        assert_eq!(
            line.arrived(10 + DELAY + 5),
            Some((10 + DELAY, frame(1, 1250)))
        );
        assert!(line.arrived(10 + DELAY + 5).is_none());
        assert_eq!(line.arrived(20 + DELAY), Some((20 + DELAY, frame(2, 1250))));
        assert_eq!(line.next_deadline(false), None);
    }

    #[test]
    fn frames_handed_over_at_once_arrive_whole_one_wire_time_apart() {
        let mut line = link(DELAY, false, 0.0, &[], 1);
        line.arrive_whole(10, 1250, frame(1, 1250));
        line.arrive_whole(10, 500, frame(2, 500)); // the sender's qdisc let both go together
        line.arrive_whole(400_000, 500, frame(3, 500)); // long after: its own time on the wire only
        let last_bit = 10 + DELAY + 100_000;
        assert_eq!(line.arrived(u64::MAX), Some((last_bit, frame(1, 1250))));
        assert_eq!(
            line.arrived(u64::MAX),
            Some((last_bit + 40_000, frame(2, 500)))
        );
        assert_eq!(
            line.arrived(u64::MAX),
            Some((400_000 + DELAY + 40_000, frame(3, 500)))
        );
    }

    #[test]
    fn the_virtual_wire_holds_each_frame_for_its_length_then_the_delay() {
        let mut line = link(DELAY, true, 0.0, &[], 1);
        let mut queue = Queue([(0, frame(1, 1250)), (3, frame(2, 500))].into());
        assert_eq!(line.transmit(0, &mut queue, 1), Ok(None));
        assert_eq!((queue.0.len(), line.wire_free_at()), (1, 100_000));
        assert_eq!(line.next_deadline(true), Some(100_000));
        assert_eq!(line.transmit(100_000, &mut queue, 1), Ok(None));
        assert_eq!(line.wire_free_at(), 140_000);
        assert_eq!(line.next_deadline(false), Some(DELAY));
        let mut empty = Queue(VecDeque::new());
        assert_eq!(
            line.transmit(DELAY, &mut empty, 1),
            Ok(Some(&frame(1, 1250)))
        );
        assert_eq!(line.left(DELAY), None);
        assert_eq!(
            line.transmit(DELAY + 100_000, &mut empty, 1),
            Ok(Some(&frame(2, 500)))
        );
        assert_eq!(line.left(DELAY + 100_000), None);
        assert_eq!(line.left(DELAY + 100_000), None); // nothing left: nothing happens
    }

    #[test]
    fn a_lost_frame_still_holds_the_wire_and_is_counted_by_priority() {
        let mut line = link(DELAY, true, 0.0, &[1], 1);
        let mut queue = Queue([(5, frame(1, 1250)), (0, frame(2, 1250))].into());
        line.transmit(0, &mut queue, 1).unwrap();
        assert_eq!(line.wire_free_at(), 100_000);
        assert!(line.departures().is_empty());
        assert_eq!(line.injected_drops()[5], 1);
    }

    #[test]
    fn the_loss_draw_happens_once_per_head_frame() {
        let mut line = link(0, true, 0.0, &[2], 3);
        let head = frame(1, 64);
        assert!(!line.lost_at_head(head.clone(), 0));
        assert!(!line.lost_at_head(head.clone(), 0));
        assert_eq!(line.tx_seq(), 1);
        assert!(line.lost_at_head(frame(1, 64), 0)); // equal bytes, another frame: number 2
        assert_eq!(line.tx_seq(), 2);
    }

    #[test]
    fn seeded_loss_follows_cpythons_draws() {
        let mut line = link(0, true, 0.1, &[], 7007);
        let mut draws = CpythonRandom::from_u64(7007);
        for _ in 0..2000 {
            assert_eq!(line.lost_from_host(0), draws.random() < 0.1);
        }
    }

    #[test]
    fn a_zero_rate_is_refused() {
        assert_eq!(
            Link::<Frame>::new(0, 0, true, 0.0, &[], &[1]).unwrap_err(),
            LinkError::ZeroRate
        );
    }

    proptest! {
        /// No input makes the model panic: any times, sizes, priorities, seeds and loss.
        #[test]
        fn no_panic_on_any_input(
            rate in 1u64..=u64::MAX, delay in any::<u64>(), host_facing in any::<bool>(),
            loss in any::<f64>(), drop in proptest::collection::vec(any::<u64>(), 0..4),
            seed in proptest::collection::vec(any::<u32>(), 0..4),
            steps in proptest::collection::vec((any::<u64>(), 0usize..12, 0usize..3000, any::<bool>()), 0..40),
        ) {
            let mut line = Link::new(rate, delay, host_facing, loss, &drop, &seed).unwrap();
            let mut queue = Queue(VecDeque::new());
            for (now, priority, size, backlog) in steps {
                let f = Frame(vec![0u8; size].into());
                queue.0.push_back((priority, f.clone()));
                line.arrive(now, f.clone());
                let _ = line.arrived(now);
                let _ = line.lost_from_host(priority);
                let _ = line.lost_at_head(f, priority);
                let _ = line.transmit(now, &mut queue, 1);
                let _ = line.left(now);
                let _ = line.next_deadline(backlog);
            }
        }

    }
}
