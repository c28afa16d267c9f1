//! Faults in simulated time: the `stall` fault of a host's NIC (`stall`/`resume`), the `down` fault of a
//! link between two switches, and the schedule that injects the variant's faults into every measured
//! iteration (`run_sim_variant`'s `started`).
//!
//! A link that goes down loses what is on it and what its ends still send into it; its two switches and
//! every other take the routes of the fabric without it at once (the emulator's `fabric-emu link` recomputes
//! and hands out every switch's routes the same way: a local ECMP group shrinking, not a routing protocol's
//! convergence), and the routes with it when it comes back.
//!
//! A stalled NIC's receive pipeline hangs: its RDMA frames wait unread (up to [`STALL_BUFFER`] bytes, the
//! agent's socket buffer; beyond it they are lost), and it pauses its switch port on the lossless priorities
//! without end, XOFF refreshed at half its pause time, as the host agent does (SIGCOMM 2016's NIC pause
//! storm). PFC frames from the switch are still obeyed. When the stall ends it sends XON and takes every held
//! frame at once. The host (`sim::host`) sends the storm's frames; this module keeps the state and the counts.
use std::collections::VecDeque;

use crate::sim::engine::EventId;
use crate::sim::fabric::Event;
use crate::sim::frame::SimFrame;
use crate::wire::mac::Mac;
use crate::wire::pfc::{encode_pfc, is_mac_control, MIN_FRAME, PRIORITIES};

/// What a stalled NIC holds unread: the RNIC agent's socket receive buffer (4 MiB, which the kernel doubles).
pub const STALL_BUFFER: usize = 8 << 20;
/// The priorities a storm pauses: the switch's default lossless ones (`switch_params.DEFAULT_LOSSLESS`),
/// whatever the fabric, as the host agent pauses them.
pub const STORM_PRIORITIES: [usize; 1] = [3];
/// The class the storm's PFC frames go in (the agent sends them in priority 7's).
pub const STORM_PRIORITY: usize = PRIORITIES - 1;

/// One host's stall: the frames it holds while stalled (`None`: not stalled), their bytes, the refresh of its
/// endless pause, and what it counted over the run.
#[derive(Debug, Default)]
pub struct Stall {
    held: Option<VecDeque<SimFrame>>,
    held_bytes: usize,
    /// The pending refresh of the storm's XOFF.
    pub refresh: Option<EventId>,
    /// PFC frames the storm sent (XOFFs, refreshes and the closing XON).
    pub storm_pfc_sent: u64,
    /// Frames lost because the held ones filled the buffer.
    pub stall_drops: u64,
}

impl Stall {
    /// Whether the NIC is stalled.
    pub fn stalled(&self) -> bool {
        self.held.is_some()
    }

    /// The stall begins; false if it already had (nothing to do).
    pub fn begin(&mut self) -> bool {
        if self.held.is_some() {
            return false;
        }
        self.held = Some(VecDeque::new());
        true
    }

    /// A frame arrived: held (or lost to a full buffer) while stalled, unless it is a MAC control frame; handed
    /// back otherwise, for the NIC to take now.
    pub fn hold(&mut self, frame: SimFrame) -> Option<SimFrame> {
        let Some(held) = self.held.as_mut() else {
            return Some(frame);
        };
        if is_mac_control(frame.bytes()) {
            return Some(frame);
        }
        if self.held_bytes.saturating_add(frame.len()) > STALL_BUFFER {
            self.stall_drops += 1;
        } else {
            self.held_bytes += frame.len();
            held.push_back(frame);
        }
        None
    }

    /// The stall ends: the frames it held, oldest first (`None` if it was not stalled).
    pub fn end(&mut self) -> Option<VecDeque<SimFrame>> {
        self.held_bytes = 0;
        self.held.take()
    }

    /// The storm's PFC frame from `mac`: `quanta` on each of [`STORM_PRIORITIES`] (0: XON), counted as sent.
    pub fn storm_frame(&mut self, mac: &Mac, quanta: u16) -> [u8; MIN_FRAME] {
        let mut per_priority = [None; PRIORITIES];
        for priority in STORM_PRIORITIES {
            per_priority[priority] = Some(quanta);
        }
        self.storm_pfc_sent += 1;
        encode_pfc(mac, &per_priority)
    }
}

/// A fault as the variant gives it: host `host` stalls `at_ns` after each measured iteration's start, and
/// resumes `duration_ns` later (never, if `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub host: u32,
    pub at_ns: u64,
    pub duration_ns: Option<u64>,
}

/// Every switch's routes, by switch index: the table `SimSwitch::new` takes.
pub type FabricRoutes = Vec<(u32, Vec<([u8; 4], Vec<u32>)>)>;
/// Per switch of an `ib` fabric, the subnet manager's tables: its LFT (DLID, port) and AR groups (DLID, ports).
pub type FabricIbTables = Vec<(u32, (Vec<(u16, usize)>, Vec<(u16, Vec<usize>)>))>;

/// A `down` fault as the variant gives it: the link's two wires go down `at_ns` after each measured
/// iteration's start and come back `duration_ns` later (never, if `None`); the switches' routes without it
/// and with it, and on an `ib` fabric the subnet manager's tables without it and with it (its sweep taken as
/// instant, as the Ethernet routes' change is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkFault {
    pub wires: [u32; 2],
    pub at_ns: u64,
    pub duration_ns: Option<u64>,
    pub routes_down: FabricRoutes,
    pub routes_up: FabricRoutes,
    pub ib_down: FabricIbTables,
    pub ib_up: FabricIbTables,
}

/// The variant's faults and how many were injected.
#[derive(Clone, Debug, Default)]
pub struct FaultSchedule {
    pub faults: Vec<Fault>,
    pub links: Vec<LinkFault>,
    /// Faults injected so far (one per fault per measured iteration).
    pub injected: u64,
}

impl FaultSchedule {
    /// Iteration `iteration` starts at `start`: the stalls and resumes of its faults, in the order the Python
    /// runner schedules them, into `out` (none in the warm-up iterations, below `warmup`).
    pub fn iteration(
        &mut self,
        iteration: u32,
        warmup: u32,
        start: u64,
        out: &mut Vec<(u64, Event)>,
    ) {
        if iteration < warmup {
            return;
        }
        for fault in &self.faults {
            let at = start.saturating_add(fault.at_ns);
            out.push((at, Event::Stall(fault.host)));
            self.injected += 1;
            if let Some(duration) = fault.duration_ns {
                out.push((at.saturating_add(duration), Event::Resume(fault.host)));
            }
        }
        for (index, fault) in (0..).zip(&self.links) {
            let at = start.saturating_add(fault.at_ns);
            out.push((at, Event::LinkDown(index)));
            self.injected += 1;
            if let Some(duration) = fault.duration_ns {
                out.push((at.saturating_add(duration), Event::LinkUp(index)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::pfc::decode_pfc;

    fn stall_hold(stall: &mut Stall, bytes: Vec<u8>) -> Option<Vec<u8>> {
        stall
            .hold(SimFrame::from(bytes))
            .map(|frame| frame.bytes().to_vec())
    }

    #[test]
    fn a_stall_holds_rdma_frames_up_to_its_buffer_and_lets_pfc_through() {
        let mut stall = Stall::default();
        // What the NIC is handed back to take now, as bytes.
        let mut hold = |bytes: Vec<u8>| stall_hold(&mut stall, bytes);
        assert_eq!(hold(vec![1; 100]), Some(vec![1; 100])); // not stalled: taken now
        assert!(stall.begin() && !stall.begin());
        let pfc = stall.storm_frame(&[2, 0, 0, 0, 1, 0], 0xFFFF).to_vec();
        assert_eq!(decode_pfc(&pfc).unwrap()[3], Some(0xFFFF));
        let mut hold = |bytes: Vec<u8>| stall_hold(&mut stall, bytes);
        assert_eq!(hold(pfc.clone()), Some(pfc));
        assert_eq!(hold(vec![0; STALL_BUFFER - 10]), None);
        assert_eq!(hold(vec![7; 11]), None); // over the buffer: lost
        assert_eq!(hold(vec![8; 10]), None); // exactly fills it
        assert_eq!((stall.stall_drops, stall.storm_pfc_sent), (1, 1));
        let held = stall.end().unwrap();
        assert_eq!(held.len(), 2);
        assert_eq!(held[1].bytes(), &[8; 10]);
        assert!(stall.end().is_none() && !stall.stalled());
    }

    #[test]
    fn faults_go_into_measured_iterations_only_timed_from_their_start() {
        let mut schedule = FaultSchedule {
            faults: vec![
                Fault {
                    host: 2,
                    at_ns: 100,
                    duration_ns: Some(50),
                },
                Fault {
                    host: 0,
                    at_ns: 10,
                    duration_ns: None,
                },
            ],
            links: vec![LinkFault {
                wires: [3, 4],
                at_ns: 20,
                duration_ns: Some(5),
                routes_down: vec![],
                routes_up: vec![],
                ib_down: vec![],
                ib_up: vec![],
            }],
            injected: 0,
        };
        let mut out = Vec::new();
        schedule.iteration(0, 1, 1000, &mut out);
        assert!(out.is_empty());
        schedule.iteration(1, 1, 5000, &mut out);
        assert_eq!(
            out,
            vec![
                (5100, Event::Stall(2)),
                (5150, Event::Resume(2)),
                (5010, Event::Stall(0)),
                (5020, Event::LinkDown(0)),
                (5025, Event::LinkUp(0)),
            ]
        );
        assert_eq!(schedule.injected, 3);
    }
}
