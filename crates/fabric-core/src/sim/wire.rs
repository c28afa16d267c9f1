//! Cables and transmit queues in simulated time.
//!
//! A [`Wire`] is one direction of a cable: a frame takes its bytes x 8 / rate to serialize (rounded up to the
//! ns, as the models' pause times are), one after another, and arrives `delay_ns` after its last bit left. A
//! [`PortQueue`] is what a host sends on a wire: per-priority FIFOs, strict priority from 7 down, and the
//! receiver's PFC pause state holding the priorities a PFC frame paused. A switch's egress is the MMU's
//! business. The queue's scheduling lives with its owner (`sim::host`), which must pull the next frame when
//! one leaves; here are the state and the parts that need no owner.
use std::collections::VecDeque;

use crate::model::pause::PauseState;
use crate::sim::engine::{Engine, EventId};
use crate::sim::fabric::Event;
use crate::sim::frame::SimFrame;
use crate::wire::pfc::PRIORITIES;

/// How long `size` bytes take on a wire of `rate_bps`, rounded up to the ns.
///
/// Every frame pays this once per wire: in 64 bits when the product fits (any frame below 2 GB), a u128
/// division being a call to a slow library routine.
pub fn serialization_ns(size: usize, rate_bps: u64) -> u64 {
    let rate = rate_bps.max(1);
    match (size as u64).checked_mul(8_000_000_000) {
        Some(bits) => bits.div_ceil(rate),
        None => {
            let bits = (size as u128).saturating_mul(8_000_000_000);
            u64::try_from(bits.div_ceil(u128::from(rate))).unwrap_or(u64::MAX)
        }
    }
}

/// Where a wire's frames arrive: a switch's port or a host's NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Port `port` of switch `switch` (indices into the fabric's switches).
    Switch { switch: u32, port: u32 },
    /// Host `host` (an index into the fabric's hosts).
    Host(u32),
}

/// One direction of a cable: what is on it, and where its frames go.
///
/// The frames on it wait here, oldest first, and not in their arrival events: a wire delivers in the order it
/// sends (each arrival after the last, ties in the engine's order of scheduling), and an event that names only
/// its wire keeps the engine's entries at 32 bytes (48 with a frame in them), whose moves are most of the
/// engine's cost.
#[derive(Clone, Debug)]
pub struct Wire {
    pub rate_bps: u64,
    pub delay_ns: u64,
    pub to: Endpoint,
    /// When the frame on the wire has left.
    pub free_at: u64,
    pub frames: u64,
    pub bytes: u64,
    /// A cable pulled (the `down` fault): what arrives on it is lost.
    pub down: bool,
    /// Frames it lost while down.
    pub lost: u64,
    in_flight: VecDeque<SimFrame>,
}

impl Wire {
    /// An idle wire at `rate_bps` (above 0) with `delay_ns` of propagation, delivering to `to`.
    pub fn new(rate_bps: u64, delay_ns: u64, to: Endpoint) -> Wire {
        Wire {
            rate_bps: rate_bps.max(1),
            delay_ns,
            to,
            free_at: 0,
            frames: 0,
            bytes: 0,
            down: false,
            lost: 0,
            in_flight: VecDeque::new(),
        }
    }

    /// Whether a frame is still leaving at `now`.
    pub fn busy(&self, now: u64) -> bool {
        self.free_at > now
    }

    /// Puts `frame` on wire `id` once it is free and schedules its arrival; when its last bit has left.
    pub fn send(&mut self, id: u32, engine: &mut Engine<Event>, frame: SimFrame) -> u64 {
        let start = engine.now().max(self.free_at);
        self.free_at = start.saturating_add(serialization_ns(frame.len(), self.rate_bps));
        self.frames += 1;
        self.bytes = self.bytes.saturating_add(frame.len() as u64);
        self.in_flight.push_back(frame);
        engine.after(
            self.free_at.saturating_add(self.delay_ns) - engine.now(),
            Event::Deliver(id),
        );
        self.free_at
    }

    /// The frame whose arrival is due (its `Deliver` event), off the wire.
    pub fn arrive(&mut self) -> Option<SimFrame> {
        self.in_flight.pop_front()
    }

    /// The frame to arrive next, if any.
    pub fn next_arrival(&self) -> Option<&SimFrame> {
        self.in_flight.front()
    }
}

/// Per-priority FIFOs onto a wire, strict priority, PFC-paused priorities held back.
#[derive(Clone, Debug)]
pub struct PortQueue {
    /// The wire it sends on (an index into the fabric's wires).
    pub wire: u32,
    pub queues: [VecDeque<SimFrame>; PRIORITIES],
    pub pause: PauseState,
    /// The next look at the queues: a departure, a pause expiry, or now.
    pub wake: Option<EventId>,
    pub wake_at: u64,
}

impl PortQueue {
    /// An empty queue onto wire `wire` of `rate_bps`.
    pub fn new(wire: u32, rate_bps: u64) -> PortQueue {
        PortQueue {
            wire,
            queues: std::array::from_fn(|_| VecDeque::new()),
            pause: PauseState::new(rate_bps),
            wake: None,
            wake_at: 0,
        }
    }

    /// Frames waiting at `priority`.
    pub fn queued(&self, priority: usize) -> usize {
        self.queues.get(priority).map_or(0, VecDeque::len)
    }

    /// Whether any priority holds a frame.
    pub fn any_queued(&self) -> bool {
        self.queues.iter().any(|queue| !queue.is_empty())
    }

    /// Looks at the queues now (after the other events of this instant) unless that is already due, or at
    /// `free_at` if the wire is busy until then (the queue's kick).
    pub fn kick(&mut self, engine: &mut Engine<Event>, free_at: u64, event: Event) {
        if let Some(wake) = self.wake.filter(|&wake| engine.pending(wake)) {
            if self.wake_at <= engine.now() || self.wake_at == free_at {
                return;
            }
            engine.cancel(wake); // a later look (a pause's expiry): something changed now
        }
        self.wake_at_time(engine, engine.now().max(free_at), event);
    }

    /// Schedules the next look at `time`.
    pub fn wake_at_time(&mut self, engine: &mut Engine<Event>, time: u64, event: Event) {
        let delay = time.saturating_sub(engine.now());
        self.wake = Some(engine.after(delay, event));
        self.wake_at = time;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_rounds_up_to_the_ns() {
        assert_eq!(serialization_ns(1500, 10_000_000_000), 1200);
        assert_eq!(serialization_ns(1, 3_000_000_000), 3);
        assert_eq!(serialization_ns(4238, 400_000_000_000), 85);
        assert_eq!(serialization_ns(0, 1), 0);
    }

    proptest::proptest! {
        #[test]
        fn the_64_bit_path_rounds_as_the_128_bit_one(size in 0usize..1 << 40, rate in 0u64..=u64::MAX) {
            let bits = (size as u128) * 8_000_000_000;
            let expected = u64::try_from(bits.div_ceil(u128::from(rate.max(1)))).unwrap_or(u64::MAX);
            proptest::prop_assert_eq!(serialization_ns(size, rate), expected);
        }
    }

    #[test]
    fn a_wire_sends_back_to_back_and_delivers_after_the_delay() {
        let mut engine = Engine::new();
        let mut wire = Wire::new(8_000_000_000, 100, Endpoint::Host(0));
        assert_eq!(wire.send(0, &mut engine, vec![0; 10].into()), 10);
        assert_eq!(wire.send(0, &mut engine, vec![0; 5].into()), 15);
        assert!(wire.busy(14) && !wire.busy(15));
        let mut arrivals = Vec::new();
        engine.run(None, None, |engine, event| {
            if let Event::Deliver(0) = event {
                arrivals.push((engine.now(), wire.arrive().map_or(0, |frame| frame.len())));
            }
        });
        assert!(wire.arrive().is_none());
        assert_eq!(arrivals, vec![(110, 10), (115, 5)]);
    }
}
