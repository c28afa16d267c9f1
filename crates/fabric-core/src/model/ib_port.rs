//! A host's port on an InfiniBand subnet, sans-I/O: native IB framing and link credits both ways. No I/O:
//! frames and deadlines go to the caller.
//!
//! With `--fabric ib` every QP's packets are native IB (LRH with the LIDs the subnet manager gave, VCRC;
//! `wire::ib`), and a packet leaves the host only when the switch port has advertised credit for it
//! ([`CreditLink`]). The RNIC agent and the simulated RNIC drive it; nothing here reads a clock or touches a
//! socket. Frames from the wire are hostile: anything that is not an IB packet we speak is counted, never a
//! panic.
use std::collections::HashMap;
use std::fmt;

use crate::model::credits::{
    blocks, fabric_min_interval_ns, CreditError, CreditLink, FABRIC_REFRESH_NS,
};
use crate::model::rdma_params::IB_OVERHEAD;
use crate::wire::ib::{
    decode_data, decode_fc, encode_fc, packet_size, FcPacket, IbDecoded, LRH_AT, MIN_FRAME, SLP,
};
use crate::wire::mac::Mac;

/// What an IB port is built from (the host's IB configuration and its link).
#[derive(Clone, Debug)]
pub struct IbPortConfig {
    /// This port's MAC and the switch port's (the Ethernet encapsulation's addresses).
    pub mac: Mac,
    pub gateway_mac: Mac,
    /// This port's LID.
    pub lid: u16,
    /// Every GID (a host's IPv4 address, as text) and its LID, in the subnet manager's order.
    pub lids: Vec<(String, u16)>,
    /// The service level and VL of this host's QPs.
    pub sl: u8,
    pub vl: u8,
    /// Data VLs of the link.
    pub vls: usize,
    /// Bytes each VL of this port, and of the switch port, receives into.
    pub capacity: u64,
    pub peer_capacity: u64,
    /// The link's rate, its longest frame and the switch's `fc_floor`: they pace the grants.
    pub rate_bps: u64,
    pub frame_bytes: u64,
    pub fc_floor_ns: u64,
}

/// Why a port, a framer or an admission was refused (in Python `ValueError`s; `Short` an
/// `IndexError`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IbPortError {
    /// The credits' own refusal (a buffer of no bytes, a VL count, a packet no grant covers).
    Credits(CreditError),
    /// A link rate of 0.
    ZeroRate,
    /// A GID no port has.
    NoGid(String),
    /// A path MTU whose packets no grant could cover.
    MtuTooLarge { mtu: u64 },
    /// A frame to admit too short to hold an LRH.
    Short,
}

impl From<CreditError> for IbPortError {
    fn from(err: CreditError) -> Self {
        IbPortError::Credits(err)
    }
}

impl fmt::Display for IbPortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IbPortError::Credits(err) => err.fmt(f),
            IbPortError::ZeroRate => write!(f, "integer division or modulo by zero"),
            IbPortError::NoGid(ip) => write!(f, "no IB port has GID {ip}"),
            IbPortError::MtuTooLarge { mtu } => write!(
                f,
                "path MTU {mtu} does not fit the switch's VL buffer: a packet of {} bytes could never get \
                 credit; choose a smaller MTU or a larger --switch vl_buffer",
                mtu.saturating_add(IB_OVERHEAD as u64)
            ),
            IbPortError::Short => write!(f, "index out of range"),
        }
    }
}

impl std::error::Error for IbPortError {}

/// A data packet the port accepted: the decoded packet, its source GID ("" for a LID no host has) and
/// whether its ICRC and VCRC held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted<'a> {
    pub decoded: IbDecoded,
    pub source: &'a str,
    pub crc_ok: bool,
}

/// LRH-addressed packets, sent only against the switch's credits.
#[derive(Clone, Debug)]
pub struct IbPort {
    mac: Mac,
    gateway_mac: Mac,
    lid: u16,
    lids: HashMap<String, u16>,
    /// LID to GID, indexed by LID up to the largest (LIDs are given from 1 up): one index per packet.
    ips: Vec<Option<String>>,
    sl: u8,
    vl: u8,
    credits: CreditLink,
    waiting: bool,
    malformed: u64,
    credit_violations: u64,
    /// The flow-control packets of one wake-up, reused.
    due: Vec<FcPacket>,
}

impl IbPort {
    /// The port of `config`: credits of its capacities in blocks, the fabric's refresh, grants paced by the
    /// link's frames.
    pub fn new(config: IbPortConfig) -> Result<Self, IbPortError> {
        let capacity = vec![blocks(config.capacity)?; config.vls];
        let peer = vec![blocks(config.peer_capacity)?; config.vls];
        let interval =
            fabric_min_interval_ns(config.rate_bps, config.frame_bytes, config.fc_floor_ns)
                .ok_or(IbPortError::ZeroRate)?;
        let credits = CreditLink::new(&capacity, Some(&peer), FABRIC_REFRESH_NS, interval)?;
        let largest = config
            .lids
            .iter()
            .map(|(_, lid)| usize::from(*lid) + 1)
            .max()
            .unwrap_or(0);
        let mut ips = vec![None; largest];
        for (ip, lid) in &config.lids {
            if let Some(entry) = ips.get_mut(usize::from(*lid)) {
                *entry = Some(ip.clone()); // the last GID of a LID wins
            }
        }
        Ok(IbPort {
            mac: config.mac,
            gateway_mac: config.gateway_mac,
            lid: config.lid,
            lids: config.lids.into_iter().collect(),
            ips,
            sl: config.sl,
            vl: config.vl,
            credits,
            waiting: false,
            malformed: 0,
            credit_violations: 0,
            due: Vec::new(),
        })
    }

    pub fn mac(&self) -> &Mac {
        &self.mac
    }

    pub fn gateway_mac(&self) -> &Mac {
        &self.gateway_mac
    }

    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// GID to LID.
    pub fn lids(&self) -> &HashMap<String, u16> {
        &self.lids
    }

    /// LID to GID.
    pub fn ips(&self) -> impl Iterator<Item = (u16, &str)> {
        self.ips
            .iter()
            .enumerate()
            .filter_map(|(lid, ip)| Some((lid as u16, ip.as_deref()?)))
    }

    pub fn sl(&self) -> u8 {
        self.sl
    }

    pub fn vl(&self) -> u8 {
        self.vl
    }

    /// The link's credits both ways.
    pub fn credits(&self) -> &CreditLink {
        &self.credits
    }

    /// The link's credits, for a caller that drives them directly (`port.credits` in Python).
    pub fn credits_mut(&mut self) -> &mut CreditLink {
        &mut self.credits
    }

    /// Whether a frame waits for credit.
    pub fn waiting(&self) -> bool {
        self.waiting
    }

    /// Frames that are no IB packet we speak, or on a VL this link lacks.
    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    /// Data packets beyond the credit we granted.
    pub fn credit_violations(&self) -> u64 {
        self.credit_violations
    }

    /// The DLID of a QP's peer at `remote_ip`, checked to fit: the GID is known and a packet of the path MTU
    /// can get credit.
    pub fn framer(&self, remote_ip: &str, mtu: u64) -> Result<u16, IbPortError> {
        let dlid = *self
            .lids
            .get(remote_ip)
            .ok_or_else(|| IbPortError::NoGid(remote_ip.to_owned()))?;
        if !self
            .credits
            .sendable(usize::from(self.vl), mtu.saturating_add(IB_OVERHEAD as u64))
        {
            return Err(IbPortError::MtuTooLarge { mtu });
        }
        Ok(dlid)
    }

    /// A frame from the switch: a data packet this port accepts, or `None` for a link packet (consumed) or
    /// garbage (counted as malformed) or a packet past our credit (counted as a violation).
    pub fn accept(&mut self, now: u64, frame: &[u8]) -> Option<Accepted<'_>> {
        if frame.len() > LRH_AT && frame.get(LRH_AT - 1) == Some(&SLP) {
            match decode_fc(frame) {
                Some(fc)
                    if fc.lpcrc_ok && usize::from(fc.packet.vl()) < self.credits.vl_count() =>
                {
                    // the VL is in range: on_fc cannot refuse it
                    let _ = self.credits.on_fc(now, &fc.packet);
                }
                _ => self.malformed += 1,
            }
            return None;
        }
        let decoded = match decode_data(frame) {
            Some(d) if usize::from(d.lrh.vl) < self.credits.vl_count() => d,
            _ => {
                self.malformed += 1;
                return None;
            }
        };
        let vl = usize::from(decoded.lrh.vl);
        let size = packet_size(frame)? as u64; // decode_data checked PktLen against the frame
        if self.credits.received(vl, size).is_err() {
            self.credit_violations += 1;
            return None;
        }
        let _ = self.credits.freed(vl, size); // the RNIC takes every packet at once: just received, so held
        let source = self
            .ips
            .get(usize::from(decoded.lrh.slid))
            .and_then(|ip| ip.as_deref())
            .unwrap_or("");
        let crc_ok = decoded.icrc_ok && decoded.vcrc_ok;
        Some(Accepted {
            decoded,
            source,
            crc_ok,
        })
    }

    /// Whether the switch has credit for this packet (one of ours, as a framer made it); counts it as sent if
    /// so, and remembers that a frame waits if not.
    pub fn admit(&mut self, frame: &[u8]) -> Result<bool, IbPortError> {
        let vl = usize::from(frame.get(LRH_AT).ok_or(IbPortError::Short)? >> 4);
        let size = packet_size(frame).ok_or(IbPortError::Short)? as u64;
        if !self.credits.can_send(vl, size)? {
            self.waiting = true;
            return Ok(false);
        }
        self.credits.sent(vl, size)?;
        self.waiting = false;
        Ok(true)
    }

    /// Append to `out` the flow-control frames due now (reused by the caller: no allocation per wake-up).
    pub fn control_frames(&mut self, now: u64, out: &mut Vec<[u8; MIN_FRAME]>) {
        self.due.clear();
        self.credits.fc_due(now, &mut self.due);
        out.extend(
            self.due
                .iter()
                .map(|fc| encode_fc(&self.mac, &self.gateway_mac, fc)),
        );
    }

    /// When [`Self::control_frames`] next has something.
    pub fn next_deadline(&mut self) -> u64 {
        self.credits.next_deadline()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ib::{encode_data, Lrh, OP_NORMAL};
    use crate::wire::transport::Packet;
    use proptest::prelude::*;

    const HOST: Mac = [2, 0, 0, 0, 0, 1];
    const SWITCH: Mac = [2, 0, 0, 0, 0, 0xAA];

    fn port() -> IbPort {
        IbPort::new(IbPortConfig {
            mac: HOST,
            gateway_mac: SWITCH,
            lid: 1,
            lids: vec![("10.0.0.1".into(), 1), ("10.0.0.2".into(), 2)],
            sl: 0,
            vl: 0,
            vls: 2,
            capacity: 16 * 4200,
            peer_capacity: 16 * 4200,
            rate_bps: 1_000_000_000,
            frame_bytes: 4214,
            fc_floor_ns: 0,
        })
        .unwrap()
    }

    fn data(slid: u16, vl: u8) -> Vec<u8> {
        let packet = Packet {
            payload: vec![7; 200],
            ..Packet::new(4, 0x11, 1)
        };
        let mut frame = Vec::new();
        encode_data(
            &SWITCH,
            &HOST,
            &Lrh {
                dlid: 1,
                slid,
                sl: vl,
                vl,
            },
            &packet,
            &mut frame,
        )
        .unwrap();
        frame
    }

    #[test]
    fn a_data_packet_is_accepted_and_its_buffer_freed() {
        let mut p = port();
        let got = p.accept(0, &data(2, 0)).unwrap();
        assert_eq!(
            (got.source, got.crc_ok, got.decoded.lrh.slid),
            ("10.0.0.2", true, 2)
        );
        assert_eq!(p.credits().occupancy(0), Ok(0));
        assert!(p
            .accept(0, &data(9, 0))
            .is_some_and(|a| a.source.is_empty()));
        assert!(p.accept(0, &data(2, 3)).is_none());
        assert_eq!(p.malformed(), 1);
    }

    #[test]
    fn admission_follows_the_credits() {
        let mut p = port();
        let frame = data(1, 0);
        let mut n = 0;
        while p.admit(&frame).unwrap() {
            n += 1;
        }
        assert!(p.waiting() && n > 0);
        let fc = FcPacket::new(OP_NORMAL.into(), 0, 0, 2048).unwrap();
        let mut link = encode_fc(&SWITCH, &HOST, &fc).to_vec();
        assert!(p.accept(0, &link).is_none());
        assert!(p.admit(&frame).unwrap());
        link[LRH_AT + 4] ^= 1; // a bad LPCRC
        assert!(p.accept(0, &link).is_none());
        assert_eq!(p.malformed(), 1);
        assert_eq!(p.admit(&[0; 3]), Err(IbPortError::Short));
    }

    #[test]
    fn framer_checks_gid_and_mtu() {
        let p = port();
        assert_eq!(p.framer("10.0.0.2", 4096), Ok(2));
        assert_eq!(
            p.framer("10.0.0.9", 4096),
            Err(IbPortError::NoGid("10.0.0.9".into()))
        );
        assert!(matches!(
            p.framer("10.0.0.2", 1 << 20),
            Err(IbPortError::MtuTooLarge { .. })
        ));
    }

    proptest! {
        /// Any bytes from the wire: no panic, and a frame is accepted, consumed or counted.
        #[test]
        fn no_panic_on_any_frame(frame in proptest::collection::vec(any::<u8>(), 0..300), now in any::<u64>(),
                                 flips in proptest::collection::vec((0usize..300, any::<u8>()), 0..4)) {
            let mut p = port();
            let _ = p.accept(now, &frame);
            let mut valid = data(2, 0);
            for (at, value) in flips {
                if let Some(byte) = valid.get_mut(at) {
                    *byte = value;
                }
            }
            let _ = p.accept(now, &valid);
            let _ = p.admit(&frame);
            let mut out = Vec::new();
            p.control_frames(now, &mut out);
        }
    }
}
