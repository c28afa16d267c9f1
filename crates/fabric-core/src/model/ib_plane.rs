//! The InfiniBand plane of a switch: forwarding by DLID under link credits. One state machine
//! per switch, no I/O.
//!
//! The switch looks up a packet's DLID in its linear forwarding table (from the subnet manager), maps its SL
//! to the egress VL, and queues it per (egress port, VL). Nothing is dropped for lack of space: a packet leaves
//! only when the downstream receiver has advertised credit for all of it ([`CreditLink`], one per port, both
//! directions), and the ingress buffer it occupied is freed, and credited back upstream, only when it has
//! left. Flow-control packets leave in the same sequence as the data, so they never overtake the packets whose
//! blocks they count.
//!
//! With adaptive routing the subnet manager also gives, per DLID, a group of ports on shortest paths: each
//! packet leaves by the group's port with the fewest bytes queued on its VL (the LFT's port on a tie), as
//! NVIDIA's switches choose per packet by egress queue depth. Packets of one flow may then pass each other;
//! the receiving RNIC holds them until the gap fills ([`crate::model::rc::RcConfig::reorder`]).
//!
//! No I/O: [`IbPlane::head`] says which frame a port sends next, and the caller reports what became of it
//! ([`IbPlane::sent`] or [`IbPlane::refused`]); a frame the kernel has no room for yet stays the head. Frames
//! from the wire are hostile: what the plane cannot parse or will not forward is a counted drop.
use std::collections::VecDeque;
use std::fmt;

use crate::model::credits::{
    blocks, fabric_min_interval_ns, CreditError, CreditLink, FABRIC_REFRESH_NS,
};
use crate::wire::ib::{data_end, decode_fc, encode_fc, set_vl, FcPacket, LRH_AT, MIN_FRAME, SLP};
use crate::wire::mac::Mac;

/// Why the plane drops a frame, one counter each per ingress port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IbDrop {
    /// Not a local-routed data packet or a flow-control packet with a good LPCRC; a VL we lack.
    Malformed = 0,
    /// The sender ignored our credit.
    CreditViolation = 1,
    /// A DLID our forwarding table does not have.
    NoRoute = 2,
    /// Longer than the egress link's MTU, or than its peer's buffer could ever credit.
    TooLong = 3,
}

/// The drop causes' names, in counter order (`IB_DROPS` in Python).
pub const IB_DROPS: [&str; 4] = ["malformed", "credit_violation", "no_route", "too_long"];

/// One port of the switch as the plane sees it.
#[derive(Clone, Debug)]
pub struct PortSetup {
    /// Our MAC and the peer's.
    pub mac: Mac,
    pub peer_mac: Mac,
    /// The longest Ethernet frame the port's link carries.
    pub max_frame: u64,
    /// The link's rate.
    pub rate_bps: u64,
    /// Bytes each VL of the peer receives into.
    pub peer_capacity: u64,
}

/// A switch's IB configuration (the agents' `SwitchIbConfig`).
#[derive(Clone, Debug)]
pub struct IbPlaneConfig {
    /// DLID to egress port index.
    pub lft: Vec<(u16, usize)>,
    /// SL to VL; an SL past its end maps to VL 0.
    pub sl2vl: Vec<u8>,
    /// Data VLs of every link.
    pub vls: usize,
    /// Bytes each VL of each port receives into.
    pub vl_buffer: u64,
    /// The least time a grown grant waits for more.
    pub fc_floor: u64,
    /// Adaptive routing: DLID to the port indices a packet may leave by (empty: the LFT alone).
    pub ar: Vec<(u16, Vec<usize>)>,
}

/// Why a plane could not be built or driven (in Python a `ValueError`, `ZeroDivisionError` or
/// `IndexError`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IbPlaneError {
    Credits(CreditError),
    /// A port whose link rate is 0.
    ZeroRate {
        port: usize,
    },
    /// A forwarding table entry to a port the switch does not have.
    NoSuchPort {
        dlid: u16,
        port: usize,
    },
    /// `sent` or `refused` with nothing given by `head`.
    NothingToSend {
        port: usize,
    },
}

impl From<CreditError> for IbPlaneError {
    fn from(err: CreditError) -> Self {
        IbPlaneError::Credits(err)
    }
}

impl fmt::Display for IbPlaneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IbPlaneError::Credits(err) => err.fmt(f),
            IbPlaneError::ZeroRate { .. } => write!(f, "integer division or modulo by zero"),
            IbPlaneError::NoSuchPort { dlid, port } => {
                write!(
                    f,
                    "the forwarding table sends DLID {dlid} to port {port}, which the switch lacks"
                )
            }
            IbPlaneError::NothingToSend { port } => write!(f, "port {port} has no frame to send"),
        }
    }
}

impl std::error::Error for IbPlaneError {}

/// A forwarded packet waiting for its egress port and credit.
#[derive(Clone, Debug)]
pub struct Queued {
    /// Its frame as it will leave (MACs of the egress link, VL rewritten, padded).
    pub frame: Vec<u8>,
    /// Where it came in, on which VL, and its IB bytes (what the ingress buffer holds for it).
    pub ingress: usize,
    pub vl_in: usize,
    pub size: u64,
    /// A number no other frame of the plane has: the head's identity for a caller that caches it.
    pub id: u64,
}

/// A flow-control frame waiting to leave, and its identity.
#[derive(Clone, Debug)]
pub struct Control {
    pub frame: [u8; MIN_FRAME],
    pub id: u64,
}

/// One port's state.
#[derive(Clone, Debug)]
struct Port {
    setup: PortSetup,
    link: CreditLink,
    queues: Vec<VecDeque<Queued>>,
    next_vl: usize,
    control: VecDeque<Control>,
    drops: [u64; 4],
    forwarded: u64,
    forwarded_bytes: u64,
    tx_errors: u64,
    /// Bytes waiting in each VL's queue: what adaptive routing compares.
    queued: Vec<u64>,
}

/// Credit state and VL queues of every port of one switch.
#[derive(Clone, Debug)]
pub struct IbPlane {
    ports: Vec<Port>,
    /// DLID to egress port, indexed by DLID up to the largest the table has (the subnet manager gives LIDs
    /// from 1 up, so this is as long as the subnet is large): one index per frame, no hashing.
    lft: Vec<Option<u16>>,
    /// Per DLID, the ports of its adaptive routing group (empty for none), indexed as `lft`.
    ar: Vec<Vec<u16>>,
    sl2vl: Vec<u8>,
    vls: usize,
    next_id: u64,
    /// The flow-control packets of one wake-up, reused.
    due: Vec<FcPacket>,
}

impl IbPlane {
    /// The plane of a switch with `ports`, with every port's credits and queues empty.
    pub fn new(ports: Vec<PortSetup>, config: IbPlaneConfig) -> Result<Self, IbPlaneError> {
        let capacity = blocks(config.vl_buffer)?;
        let mut built = Vec::with_capacity(ports.len());
        for (index, setup) in ports.into_iter().enumerate() {
            let peer = blocks(setup.peer_capacity)?;
            let interval = fabric_min_interval_ns(setup.rate_bps, setup.max_frame, config.fc_floor)
                .ok_or(IbPlaneError::ZeroRate { port: index })?;
            let link = CreditLink::new(
                &vec![capacity; config.vls],
                Some(&vec![peer; config.vls]),
                FABRIC_REFRESH_NS,
                interval,
            )?;
            built.push(Port {
                setup,
                link,
                queues: vec![VecDeque::new(); config.vls],
                next_vl: 0,
                control: VecDeque::new(),
                drops: [0; 4],
                forwarded: 0,
                forwarded_bytes: 0,
                tx_errors: 0,
                queued: vec![0; config.vls],
            });
        }
        let (lft, ar) = tables(&config.lft, &config.ar, built.len())?;
        Ok(IbPlane {
            ports: built,
            lft,
            ar,
            sl2vl: config.sl2vl,
            vls: config.vls,
            next_id: 0,
            due: Vec::new(),
        })
    }

    /// Whether `lft` and `ar` name only ports the switch has ([`Self::set_tables`] would take them).
    pub fn check_tables(
        &self,
        lft: &[(u16, usize)],
        ar: &[(u16, Vec<usize>)],
    ) -> Result<(), IbPlaneError> {
        tables(lft, ar, self.ports.len()).map(drop)
    }

    /// The subnet manager swept again (a link went down or came back): forward by `lft` and `ar` from now on.
    /// Refused whole if an entry names a port the switch lacks.
    pub fn set_tables(
        &mut self,
        lft: &[(u16, usize)],
        ar: &[(u16, Vec<usize>)],
    ) -> Result<(), IbPlaneError> {
        (self.lft, self.ar) = tables(lft, ar, self.ports.len())?;
        Ok(())
    }

    /// `port`'s link went down: what its VL queues hold is lost (counted as frames refused), its ingress
    /// buffers freed; the packets lost.
    pub fn flush(&mut self, port: usize) -> u64 {
        let Some(p) = self.ports.get_mut(port) else {
            return 0;
        };
        let lost: Vec<Queued> = p.queues.iter_mut().flat_map(|q| q.drain(..)).collect();
        p.queued.fill(0);
        p.tx_errors += lost.len() as u64;
        for item in &lost {
            if let Some(ingress) = self.ports.get_mut(item.ingress) {
                let _ = ingress.link.freed(item.vl_in, item.size); // admitted, so held: never refused
            }
        }
        lost.len() as u64
    }

    /// Ports of the switch.
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    /// Data VLs of every link.
    pub fn vls(&self) -> usize {
        self.vls
    }

    /// A port's link credits.
    pub fn link(&self, port: usize) -> Option<&CreditLink> {
        self.ports.get(port).map(|p| &p.link)
    }

    /// A port's link credits, for a caller that drives them directly (`links[i]` in Python).
    pub fn link_mut(&mut self, port: usize) -> Option<&mut CreditLink> {
        self.ports.get_mut(port).map(|p| &mut p.link)
    }

    /// A port's drops by cause ([`IB_DROPS`] order).
    pub fn drops(&self, port: usize) -> Option<[u64; 4]> {
        self.ports.get(port).map(|p| p.drops)
    }

    /// Packets a port sent.
    pub fn forwarded(&self, port: usize) -> Option<u64> {
        self.ports.get(port).map(|p| p.forwarded)
    }

    /// Bytes of the packets a port sent.
    pub fn forwarded_bytes(&self, port: usize) -> Option<u64> {
        self.ports.get(port).map(|p| p.forwarded_bytes)
    }

    /// Frames of a port the kernel refused to send.
    pub fn tx_errors(&self, port: usize) -> Option<u64> {
        self.ports.get(port).map(|p| p.tx_errors)
    }

    /// The VL whose queue a port looks at first.
    pub fn next_vl(&self, port: usize) -> Option<usize> {
        self.ports.get(port).map(|p| p.next_vl)
    }

    /// A port's queue on one VL.
    pub fn queue(&self, port: usize, vl: usize) -> Option<&VecDeque<Queued>> {
        self.ports.get(port)?.queues.get(vl)
    }

    /// A port's flow-control frames waiting.
    pub fn control(&self, port: usize) -> Option<&VecDeque<Control>> {
        self.ports.get(port).map(|p| &p.control)
    }

    /// Our MAC and the peer's on a port.
    pub fn macs(&self, port: usize) -> Option<(&Mac, &Mac)> {
        self.ports
            .get(port)
            .map(|p| (&p.setup.mac, &p.setup.peer_mac))
    }

    /// The longest frame a port's link carries.
    pub fn max_frame(&self, port: usize) -> Option<u64> {
        self.ports.get(port).map(|p| p.setup.max_frame)
    }

    /// Drops of one cause over every port.
    pub fn total(&self, cause: IbDrop) -> u64 {
        self.ports.iter().map(|p| p.drops[cause as usize]).sum()
    }

    fn drop_frame(&mut self, port: usize, cause: IbDrop) -> Option<usize> {
        if let Some(p) = self.ports.get_mut(port) {
            p.drops[cause as usize] += 1;
        }
        None
    }

    /// An IB frame arrived on `port` at `now`: the port that may now send (the ingress port after a
    /// flow-control packet, the egress port after a forwarded one), or none. What it cannot parse or will
    /// not forward is dropped and counted; a port the switch lacks is ignored.
    pub fn receive(&mut self, now: u64, port: usize, frame: &[u8]) -> Option<usize> {
        if port >= self.ports.len() {
            return None;
        }
        if frame.len() <= LRH_AT {
            return self.drop_frame(port, IbDrop::Malformed);
        }
        if frame.get(LRH_AT - 1) == Some(&SLP) {
            return match decode_fc(frame) {
                Some(fc) if fc.lpcrc_ok && usize::from(fc.packet.vl()) < self.vls => {
                    let link = &mut self.ports.get_mut(port)?.link;
                    link.on_fc(now, &fc.packet).ok()?; // the VL is in range: never refused
                    Some(port)
                }
                _ => self.drop_frame(port, IbDrop::Malformed),
            };
        }
        let vl_in = usize::from(frame.get(LRH_AT)? >> 4);
        let end = match data_end(frame) {
            Some(end) if vl_in < self.vls => end,
            _ => return self.drop_frame(port, IbDrop::Malformed),
        };
        let size = (end - LRH_AT) as u64; // LRH..ICRC (PktLen words) and the VCRC
        if self
            .ports
            .get_mut(port)?
            .link
            .received(vl_in, size)
            .is_err()
        {
            return self.drop_frame(port, IbDrop::CreditViolation);
        }
        let dlid = u16::from_be_bytes([*frame.get(LRH_AT + 2)?, *frame.get(LRH_AT + 3)?]);
        let sl = usize::from(frame.get(LRH_AT + 1)? >> 4);
        let vl_out = self.sl2vl.get(sl).copied().unwrap_or(0);
        let out = self
            .lft
            .get(usize::from(dlid))
            .copied()
            .flatten()
            .map(usize::from)
            .map(|static_port| self.adaptive(dlid, static_port, vl_out, end));
        let refused = match out {
            None => Some(IbDrop::NoRoute),
            Some(out) if !self.fits(out, vl_out, end) => Some(IbDrop::TooLong),
            Some(_) => None,
        };
        let (Some(out), None) = (out, refused) else {
            // admitted, so held: freeing it cannot fail
            let _ = self.ports.get_mut(port)?.link.freed(vl_in, size);
            return self.drop_frame(port, refused.unwrap_or(IbDrop::NoRoute));
        };
        let queued = self.forwarded_frame(out, frame, end, vl_in, vl_out)?;
        let id = self.next_id;
        self.next_id += 1;
        let item = Queued {
            frame: queued,
            ingress: port,
            vl_in,
            size,
            id,
        };
        let egress = self.ports.get_mut(out)?;
        egress.queues.get_mut(usize::from(vl_out))?.push_back(item);
        if let Some(queued) = egress.queued.get_mut(usize::from(vl_out)) {
            *queued += size;
        }
        Some(out)
    }

    /// The port a packet for `dlid` on `vl` ending at `end` leaves by: of its adaptive routing group, the
    /// port with the fewest bytes queued on `vl` that can carry it, the LFT's `static_port` on a tie; the LFT's
    /// port when the DLID has no group.
    fn adaptive(&self, dlid: u16, static_port: usize, vl: u8, end: usize) -> usize {
        let Some(group) = self.ar.get(usize::from(dlid)).filter(|g| !g.is_empty()) else {
            return static_port;
        };
        let depth = |port: usize| {
            self.ports
                .get(port)
                .and_then(|p| p.queued.get(usize::from(vl)).copied())
        };
        let mut best = (depth(static_port).unwrap_or(u64::MAX), static_port);
        for port in group.iter().map(|&p| usize::from(p)) {
            if let Some(bytes) = depth(port) {
                if bytes < best.0 && self.fits(port, vl, end) {
                    best = (bytes, port);
                }
            }
        }
        best.1
    }

    /// The frame as it leaves `out`: the egress link's MACs, the rest of the packet, the VL rewritten (and the
    /// VCRC with it) if it changes, padded to the Ethernet minimum.
    fn forwarded_frame(
        &self,
        out: usize,
        frame: &[u8],
        end: usize,
        vl_in: usize,
        vl_out: u8,
    ) -> Option<Vec<u8>> {
        let setup = &self.ports.get(out)?.setup;
        let mut forwarded = Vec::with_capacity(end.max(MIN_FRAME));
        forwarded.extend_from_slice(&setup.peer_mac);
        forwarded.extend_from_slice(&setup.mac);
        forwarded.extend_from_slice(frame.get(12..end)?);
        if usize::from(vl_out) != vl_in {
            set_vl(&mut forwarded, vl_out).ok()?; // a data frame (data_end held) and a VL below vls
        }
        if forwarded.len() < MIN_FRAME {
            forwarded.resize(MIN_FRAME, 0);
        }
        Some(forwarded)
    }

    /// Whether a packet ending at `end` can ever leave `out` on `vl`: the link's MTU and the peer's window.
    fn fits(&self, out: usize, vl: u8, end: usize) -> bool {
        self.ports.get(out).is_some_and(|p| {
            end.max(MIN_FRAME) as u64 <= p.setup.max_frame
                && p.link.sendable(usize::from(vl), (end - LRH_AT) as u64)
        })
    }

    /// The frame `port` sends next and its identity, or none: flow-control packets first, then data as credits
    /// allow. The data queues take turns by VL, from the one after the VL that last sent. The head stays the
    /// head until [`Self::sent`] or [`Self::refused`] says what became of it.
    pub fn head(&mut self, port: usize) -> Option<(u64, &[u8])> {
        let vls = self.vls;
        let p = self.ports.get_mut(port)?;
        if !p.control.is_empty() {
            return p.control.front().map(|c| (c.id, &c.frame[..]));
        }
        let mut vl = p.next_vl;
        for _ in 0..vls {
            if let Some(size) = p.queues.get(vl).and_then(|q| q.front()).map(|q| q.size) {
                if p.link.can_send(vl, size).unwrap_or(false) {
                    p.next_vl = vl;
                    return p.queues.get(vl)?.front().map(|q| (q.id, &q.frame[..]));
                }
            }
            vl = (vl + 1) % vls;
        }
        None
    }

    /// The kernel took the frame [`Self::head`] gave for `port`.
    pub fn sent(&mut self, port: usize) -> Result<(), IbPlaneError> {
        self.done(port, true).map(drop)
    }

    /// [`Self::sent`], giving back the frame it took: the caller puts a data frame on the wire as it is, without
    /// a copy (a flow-control packet, 64 bytes, is copied out of its array).
    pub fn take_sent(&mut self, port: usize) -> Result<Vec<u8>, IbPlaneError> {
        self.done(port, true)
    }

    /// The kernel refused the frame [`Self::head`] gave for `port` for good: it is lost, and uses no credit.
    pub fn refused(&mut self, port: usize) -> Result<(), IbPlaneError> {
        if let Some(p) = self.ports.get_mut(port) {
            p.tx_errors += 1;
        }
        self.done(port, false).map(drop)
    }

    /// Take the head off `port`'s queues, in this order: the credits are charged (if sent), the
    /// ingress buffer freed, and only then the turn passes to the next VL. Gives back the frame taken.
    fn done(&mut self, port: usize, sent: bool) -> Result<Vec<u8>, IbPlaneError> {
        let nothing = IbPlaneError::NothingToSend { port };
        let p = self.ports.get_mut(port).ok_or(nothing.clone())?;
        if let Some(control) = p.control.pop_front() {
            return Ok(control.frame.to_vec()); // a lost update is repeated by the next refresh
        }
        let vl = p.next_vl;
        let item = p
            .queues
            .get_mut(vl)
            .and_then(VecDeque::pop_front)
            .ok_or(nothing.clone())?;
        if let Some(queued) = p.queued.get_mut(vl) {
            *queued = queued.saturating_sub(item.size);
        }
        if sent {
            p.link.sent(vl, item.size)?;
            p.forwarded += 1;
            p.forwarded_bytes += item.frame.len() as u64;
        }
        let ingress = self.ports.get_mut(item.ingress).ok_or(nothing.clone())?;
        ingress.link.freed(item.vl_in, item.size)?;
        let vls = self.vls;
        self.ports.get_mut(port).ok_or(nothing)?.next_vl = (vl + 1) % vls;
        Ok(item.frame)
    }

    /// Queue the flow-control packets due at `now`; append to `ports` the ports that have some to send.
    pub fn take_fc(&mut self, now: u64, ports: &mut Vec<usize>) {
        for (index, p) in self.ports.iter_mut().enumerate() {
            self.due.clear();
            p.link.fc_due(now, &mut self.due);
            if self.due.is_empty() {
                continue;
            }
            for fc in &self.due {
                let frame = encode_fc(&p.setup.mac, &p.setup.peer_mac, fc);
                p.control.push_back(Control {
                    frame,
                    id: self.next_id,
                });
                self.next_id += 1;
            }
            ports.push(index);
        }
    }

    /// The earliest flow-control deadline of every link; none for a switch of no port.
    pub fn next_deadline(&mut self) -> Option<u64> {
        self.ports.iter_mut().map(|p| p.link.next_deadline()).min()
    }
}

/// The forwarding table and the adaptive routing groups indexed by DLID, from the subnet manager's entries,
/// for a switch of `ports` ports.
#[allow(clippy::type_complexity)] // the two tables, as the plane keeps them
fn tables(
    lft: &[(u16, usize)],
    ar: &[(u16, Vec<usize>)],
    ports: usize,
) -> Result<(Vec<Option<u16>>, Vec<Vec<u16>>), IbPlaneError> {
    let index = |dlid: u16, port: usize| match u16::try_from(port) {
        Ok(index) if port < ports => Ok(index),
        _ => Err(IbPlaneError::NoSuchPort { dlid, port }),
    };
    let len = |largest: Option<u16>| largest.map_or(0, |dlid| usize::from(dlid) + 1);
    let mut table = vec![None; len(lft.iter().map(|&(dlid, _)| dlid).max())];
    for &(dlid, port) in lft {
        if let Some(entry) = table.get_mut(usize::from(dlid)) {
            *entry = Some(index(dlid, port)?);
        }
    }
    let mut groups = vec![Vec::new(); len(ar.iter().map(|&(dlid, _)| dlid).max())];
    for (dlid, group) in ar {
        let ports = group
            .iter()
            .map(|&port| index(*dlid, port))
            .collect::<Result<Vec<u16>, _>>()?;
        if let Some(entry) = groups.get_mut(usize::from(*dlid)) {
            *entry = ports;
        }
    }
    Ok((table, groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ib::{encode_data, Lrh};
    use crate::wire::transport::Packet;
    use proptest::prelude::*;

    const S1: [Mac; 3] = [[2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 1, 2], [2, 0, 0, 0, 1, 3]];
    const PEERS: [Mac; 3] = [[2, 0, 0, 0, 2, 1], [2, 0, 0, 0, 2, 2], [2, 0, 0, 0, 2, 3]];

    fn plane() -> IbPlane {
        adaptive_plane(Vec::new()).unwrap()
    }

    /// [`plane`] with the adaptive routing groups `ar`.
    fn adaptive_plane(ar: Vec<(u16, Vec<usize>)>) -> Result<IbPlane, IbPlaneError> {
        let ports = (0..3)
            .map(|i| PortSetup {
                mac: S1[i],
                peer_mac: PEERS[i],
                max_frame: 1514,
                rate_bps: 1_000_000_000,
                peer_capacity: 16 * 1514,
            })
            .collect();
        let config = IbPlaneConfig {
            lft: vec![(1, 0), (2, 1), (3, 2)],
            sl2vl: (0..16).map(|sl| sl % 4).collect(),
            vls: 4,
            vl_buffer: 16 * 1514,
            fc_floor: 500_000,
            ar,
        };
        IbPlane::new(ports, config)
    }

    fn from_h1(sl: u8, psn: u32) -> Vec<u8> {
        let packet = Packet {
            payload: vec![0; 200],
            ..Packet::new(4, 0x11, psn)
        };
        let mut frame = Vec::new();
        encode_data(
            &PEERS[0],
            &S1[0],
            &Lrh {
                dlid: 2,
                slid: 1,
                sl,
                vl: sl,
            },
            &packet,
            &mut frame,
        )
        .unwrap();
        frame
    }

    #[test]
    fn a_forwarded_packet_stays_the_head_until_sent() {
        let mut ib = plane();
        assert_eq!(ib.receive(0, 0, &from_h1(0, 1)), Some(1));
        let (id, head) = ib.head(1).unwrap();
        assert!(head.starts_with(&PEERS[1]));
        assert_eq!(ib.head(1).map(|(i, _)| i), Some(id));
        assert!(ib.link(0).unwrap().occupancy(0).unwrap() > 0);
        ib.sent(1).unwrap();
        assert_eq!((ib.forwarded(1), ib.head(1).is_none()), (Some(1), true));
        assert_eq!(ib.link(0).unwrap().occupancy(0), Ok(0));
        assert!(ib.sent(1).is_err());
    }

    #[test]
    fn the_vls_take_turns_and_fc_goes_first() {
        let mut ib = plane();
        for (psn, sl) in [0u8, 0, 0, 1, 1, 1].into_iter().enumerate() {
            ib.receive(0, 0, &from_h1(sl, psn as u32));
        }
        let mut ports = Vec::new();
        ib.take_fc(0, &mut ports);
        assert_eq!(ports, [0, 1, 2]);
        let mut order = Vec::new();
        while let Some((_, frame)) = ib.head(1) {
            order.push(frame.get(LRH_AT).map(|b| b >> 4));
            ib.sent(1).unwrap();
        }
        let data: Vec<_> = order.iter().skip(4).copied().collect();
        assert_eq!(data, [0, 1, 0, 1, 0, 1].map(Some));
    }

    #[test]
    fn adaptive_routing_takes_the_group_port_with_the_shortest_queue() {
        let mut ib = adaptive_plane(vec![(2, vec![1, 2])]).unwrap();
        let ports: Vec<_> = (0..4)
            .map(|psn| ib.receive(0, 0, &from_h1(0, psn)))
            .collect();
        assert_eq!(ports, [1, 2, 1, 2].map(Some)); // ties go to the LFT's port 1
        assert_eq!(
            (ib.queue(1, 0).unwrap().len(), ib.queue(2, 0).unwrap().len()),
            (2, 2)
        );
        // port 2's queue drains: the next two packets go there, though the LFT says port 1
        while ib.head(2).is_some() {
            ib.sent(2).unwrap();
        }
        let next: Vec<_> = (4..6)
            .map(|psn| ib.receive(0, 0, &from_h1(0, psn)))
            .collect();
        assert_eq!(next, [2, 2].map(Some));
        // a packet on another VL sees that VL's queues only: all empty, so the LFT's port
        assert_eq!(ib.receive(0, 0, &from_h1(1, 6)), Some(1));
    }

    #[test]
    fn new_tables_and_a_flushed_port_after_a_link_went_down() {
        let mut ib = adaptive_plane(vec![(2, vec![1, 2])]).unwrap();
        for psn in 0..4 {
            ib.receive(0, 0, &from_h1(0, psn));
        }
        let held = ib.link(0).unwrap().occupancy(0).unwrap();
        assert!(held > 0);
        assert_eq!(ib.flush(2), 2); // port 2's link is down: its two packets are lost
        assert_eq!(
            (ib.tx_errors(2), ib.queue(2, 0).unwrap().len()),
            (Some(2), 0)
        );
        assert_eq!(ib.link(0).unwrap().occupancy(0).unwrap(), held / 2); // their buffer freed
        ib.set_tables(&[(1, 0), (2, 1), (3, 2)], &[]).unwrap(); // no group: DLID 2 by port 1 only
        assert_eq!(ib.receive(0, 0, &from_h1(0, 9)), Some(1));
        assert_eq!(ib.receive(0, 0, &from_h1(0, 10)), Some(1));
        let refused = Err(IbPlaneError::NoSuchPort { dlid: 2, port: 5 });
        assert_eq!(ib.check_tables(&[(2, 5)], &[]), refused);
        assert_eq!(ib.set_tables(&[(2, 5)], &[]), refused);
        assert_eq!(ib.check_tables(&[(2, 1)], &[(2, vec![1, 2])]), Ok(()));
        assert_eq!(
            ib.receive(0, 0, &from_h1(0, 11)),
            Some(1),
            "a refused table changes nothing"
        );
    }

    #[test]
    fn an_adaptive_group_of_a_missing_port_is_refused() {
        let err = adaptive_plane(vec![(2, vec![1, 3])]).unwrap_err();
        assert_eq!(err, IbPlaneError::NoSuchPort { dlid: 2, port: 3 });
    }

    #[test]
    fn drops_are_counted() {
        let mut ib = plane();
        assert_eq!(ib.receive(0, 0, &[0; 10]), None);
        let mut no_route = from_h1(0, 1);
        no_route[LRH_AT + 3] = 77; // DLID 77 (the VCRC is not checked by the switch)
        assert_eq!(ib.receive(0, 0, &no_route), None);
        assert_eq!(ib.drops(0), Some([1, 0, 1, 0]));
        assert_eq!(ib.total(IbDrop::NoRoute), 1);
        assert_eq!(ib.link(0).unwrap().occupancy(0), Ok(0));
    }

    proptest! {
        /// Any bytes on any port: no panic; whatever was admitted and dropped gave its buffer back.
        #[test]
        fn no_panic_on_any_frame(frames in proptest::collection::vec((0usize..4, proptest::collection::vec(any::<u8>(), 0..200)), 0..20),
                                 flips in proptest::collection::vec((0usize..100, any::<u8>()), 0..4)) {
            let mut ib = plane();
            for (port, frame) in &frames {
                let _ = ib.receive(0, *port, frame);
            }
            let mut valid = from_h1(1, 1);
            for (at, value) in flips {
                if let Some(byte) = valid.get_mut(at) {
                    *byte = value;
                }
            }
            let _ = ib.receive(0, 0, &valid);
            for port in 0..4 {
                while ib.head(port).is_some() {
                    prop_assert!(ib.sent(port).is_ok());
                }
            }
            let mut ports = Vec::new();
            ib.take_fc(1, &mut ports);
            prop_assert_eq!(ib.link(0).unwrap().occupancy(1), Ok(0));
        }
    }
}
