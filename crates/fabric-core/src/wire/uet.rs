//! UET over UDP/IPv4: a [`UetPacket`] to an Ethernet frame and back, and a switch's trim.
//!
//! The layouts are the Ultra Ethernet Transport 1.0's as three public implementations agree on them (the
//! XDP2 project's `include/uet` headers, the Linux RFC driver's `uapi/linux/ultraeth.h`, Wireshark's
//! `packet-uet.c`); docs/uet-wire.md has the tables, and what this fabric chose where they are silent.
//!
//! - UDP destination port 4793. The UDP source port carries the entropy value (`EV_PORT_BASE + ev`): every
//!   switch's ECMP hash takes it, so each packet's EV picks its path. The UDP checksum is real (UET has no
//!   ICRC); a switch that marks CE or decrements TTL leaves it valid, a trim recomputes it.
//! - A request is a PDS RUD request (12 bytes: type 2, next header 3, flags RETX and AR, PSN, source and
//!   destination PDC) and a SES standard request header (44 bytes: opcode WRITE or SEND, SOM/EOM/HD, message
//!   id, buffer offset = the message's target address, memory key = its rkey, header data = the immediate
//!   on the first packet, payload length and message offset on the others, request length), then the payload.
//! - An ACK is a PDS ACK_CC (32 bytes: type 8, the M flag echoing a CE mark, the cumulative PSN = the last PSN
//!   of the unbroken run, the ACKed PSN as an offset from it, a 64-bit SACK bitmap whose base is given as an
//!   offset from the cumulative PSN and bit i is base + i, NSCC's state with the out-of-order count). It goes
//!   out on the EV of the request it acknowledges.
//! - A NACK is a PDS NACK (16 bytes: type 10, the code, the PSN, the responder's next expected PSN).
//! - With receiver credits (RCCC) a request is a PDS RUD_CC_REQ (type 13, 16 bytes: the RUD request's 12,
//!   a congestion control id and a 24-bit credit target: the credit the sender asks for, cumulative, in
//!   256-byte units), and the receiver grants credit in a PDS CONTROL packet of type credit (16 bytes: type 11,
//!   control type 7, the PDCs, and a 32-bit payload: the credit granted so far, cumulative, in 256-byte units).
//! - DSCP: requests at 26 (priority 3, ECT(0)); ACKs and NACKs at 48 (priority 6); a trimmed request at 50
//!   (priority 6: the switch rewrites it, and the receiver knows a trimmed header by it).
//!
//! Bytes from the wire are hostile: the decoder returns `None` on garbage, never panics.
use core::fmt;
use core::ops::Range;

use crate::wire::mac::{Mac, ETH_LEN};
use crate::wire::roce::{
    be16, ones_sum, ECN_CE, ECT0, ETH_IPV4, IPPROTO_UDP, IP_AT, IP_DF, IP_LEN, UDP_LEN,
};

/// The UDP destination port of UET.
pub const UET_PORT: u16 = 4793;
/// The UDP source port of entropy value 0; EV `ev` goes out from `EV_PORT_BASE + ev`.
pub const EV_PORT_BASE: u16 = 49152;
/// The most entropy values a connection can have (the dynamic port range).
pub const MAX_EVS: u16 = 16384;
/// DSCPs: trimmable data (priority 3), ACKs and NACKs (priority 6), a trimmed header (priority 6).
pub const DATA_DSCP: u8 = 26;
pub const CONTROL_DSCP: u8 = 48;
pub const TRIMMED_DSCP: u8 = 50;

/// PDS header types.
const RUD_REQ: u8 = 2;
const ACK_CC: u8 = 8;
const NACK: u8 = 10;
const CONTROL: u8 = 11;
const RUD_CC_REQ: u8 = 13;
/// The control type (in the next-header slot) of a CONTROL packet granting credit.
const CTL_CREDIT: u8 = 7;
/// Bytes of credit per unit of a credit target or grant.
pub const CREDIT_UNIT: u64 = 256;
/// PDS next-header value of a SES standard request header.
const SES_STANDARD: u8 = 3;
/// PDS flags.
const FLAG_M: u8 = 0x20;
const FLAG_RETX: u8 = 0x10;
const FLAG_AR: u8 = 0x08;
/// SES opcodes.
const SES_WRITE: u8 = 0x01;
const SES_SEND: u8 = 0x05;
/// SES flags.
const SES_HD: u8 = 0x04;
const SES_EOM: u8 = 0x02;
const SES_SOM: u8 = 0x01;

/// The PDS header of a request, and of one asking for credit (RUD_CC_REQ).
pub const PDS_REQUEST_LEN: usize = 12;
pub const PDS_CC_REQUEST_LEN: usize = 16;
/// The semantic header of a request.
pub const SES_LEN: usize = 44;
/// A PDS ACK_CC and a NACK.
pub const ACK_LEN: usize = 32;
pub const NACK_LEN: usize = 16;
pub const CONTROL_LEN: usize = 16;
/// Bytes before a request's payload in a frame (Ethernet, IPv4, UDP, PDS and SES): what a trim keeps.
pub const REQUEST_HEADERS: usize = ETH_LEN + IP_LEN + UDP_LEN + PDS_REQUEST_LEN + SES_LEN;
/// The same for a request asking for credit.
pub const CC_REQUEST_HEADERS: usize = REQUEST_HEADERS + PDS_CC_REQUEST_LEN - PDS_REQUEST_LEN;
const UDP_AT: usize = IP_AT + IP_LEN;
const PDS_AT: usize = UDP_AT + UDP_LEN;

/// What a packet is to the packet delivery sublayer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PdsKind {
    /// A request of reliable unordered delivery (RUD): it carries a semantic header and data.
    #[default]
    Request,
    /// An acknowledgement: cumulative, selective, and the one packet that caused it.
    Ack,
    /// A negative acknowledgement of one packet.
    Nack,
    /// Credit from a receiver (RCCC).
    Credit,
}

/// NACK codes (UET's).
pub mod nack {
    /// The packet arrived trimmed to its headers: send it again.
    pub const TRIMMED: u8 = 0x01;
    /// The target refused the message's key, bounds or permission (the code space's "no resource").
    pub const ACCESS: u8 = 0x0A;
    /// The message does not add up (an offset past its end, a length that changed): "unexpected event".
    pub const INVALID: u8 = 0x19;
}

/// One UET packet, decoded or to encode. Flat, as `transport::Packet` is: the fields of a kind other than
/// the packet's are left at their defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UetPacket {
    pub kind: PdsKind,
    /// The sender's and the receiver's packet delivery context (the connection's two ends).
    pub spdcid: u16,
    pub dpdcid: u16,
    /// A request: its PSN; an ACK: the PSN that caused it; a NACK: the PSN it refuses.
    pub psn: u32,
    /// A request: the sender asks for an ACK at once.
    pub ack_request: bool,
    /// A request sent before.
    pub retransmit: bool,
    /// An ACK or NACK: every PSN before it arrived.
    pub cack_psn: u32,
    /// An ACK: the PSN of the SACK bitmap's bit 0, and the bitmap (bit i set when PSN `sack_base + i` arrived).
    pub sack_base: u32,
    pub sack_bitmap: u64,
    /// An ACK: the packet at `psn` arrived CE-marked.
    pub ecn_echo: bool,
    /// An ACK: PSNs in after a gap (NSCC's state).
    pub out_of_order: u16,
    /// A NACK: why ([`nack`]).
    pub nack_code: u8,
    /// A request: its message's number on the connection, first and last packet.
    pub message_id: u16,
    pub som: bool,
    pub eom: bool,
    /// A request: the message's target (address and key), where this payload lies in it, its length, and
    /// the immediate it delivers to a receive when it completes (on its first packet).
    pub remote_addr: u64,
    pub rkey: u32,
    pub offset: u64,
    pub length: u64,
    pub imm: Option<u32>,
    /// A request: a SEND (to the next receive posted) rather than a WRITE.
    pub send: bool,
    /// A request with receiver credits: the credit its sender asks for, cumulative, in [`CREDIT_UNIT`]s (24
    /// bits on the wire); a credit packet: the credit granted, cumulative, in [`CREDIT_UNIT`]s.
    pub credit_target: Option<u32>,
    pub credit: u32,
    /// The entropy value, carried in the UDP source port: the switches' ECMP hash takes it.
    pub ev: u16,
    /// From the IP header: CE-marked on the way, and trimmed by a switch (its payload cut off).
    pub ecn_ce: bool,
    pub trimmed: bool,
    pub payload: Vec<u8>,
}

/// Why a packet cannot be framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UetEncodeError {
    /// A message offset or length past what its 32-bit field holds, or a payload longer than 14 bits.
    TooLong,
    /// An entropy value past [`MAX_EVS`].
    Ev(u16),
}

impl fmt::Display for UetEncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UetEncodeError::TooLong => {
                f.write_str("a UET message offset, length or payload too long")
            }
            UetEncodeError::Ev(ev) => write!(f, "entropy value {ev} past {MAX_EVS}"),
        }
    }
}

/// Encodes the packets of one connection (one source to one destination) as frames.
#[derive(Clone, Debug)]
pub struct UetFramer {
    src_mac: Mac,
    dst_mac: Mac,
    src_ip: [u8; 4],
    dst_ip: [u8; 4],
    ident: u16,
    headers: Vec<u8>,
}

impl UetFramer {
    /// A framer from `src_mac`/`src_ip` to `dst_mac`/`dst_ip` (TTL 64).
    pub fn new(src_mac: Mac, dst_mac: Mac, src_ip: [u8; 4], dst_ip: [u8; 4]) -> UetFramer {
        UetFramer {
            src_mac,
            dst_mac,
            src_ip,
            dst_ip,
            ident: 0,
            headers: Vec::with_capacity(ACK_LEN.max(PDS_REQUEST_LEN + SES_LEN)),
        }
    }

    /// Appends the Ethernet frame of `packet` with `payload` (a request's; `packet.payload` is not read) to
    /// `out`. A packet that cannot be framed leaves `out` as it was.
    pub fn encode(
        &mut self,
        packet: &UetPacket,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), UetEncodeError> {
        if packet.ev >= MAX_EVS {
            return Err(UetEncodeError::Ev(packet.ev));
        }
        let mut headers = std::mem::take(&mut self.headers);
        headers.clear();
        let packed = pack(packet, payload.len(), &mut headers);
        let payload = if packet.kind == PdsKind::Request {
            payload
        } else {
            &[]
        };
        if let Err(error) = packed {
            self.headers = headers;
            return Err(error);
        }
        let udp_len = UDP_LEN + headers.len() + payload.len();
        let Ok(total) = u16::try_from(IP_LEN + udp_len) else {
            self.headers = headers;
            return Err(UetEncodeError::TooLong);
        };
        let tos = match packet.kind {
            PdsKind::Request => DATA_DSCP << 2 | ECT0,
            PdsKind::Ack | PdsKind::Nack | PdsKind::Credit => CONTROL_DSCP << 2,
        };
        self.ident = self.ident.wrapping_add(1);
        let start = out.len();
        out.reserve(ETH_LEN + usize::from(total));
        out.extend_from_slice(&self.dst_mac);
        out.extend_from_slice(&self.src_mac);
        out.extend_from_slice(&ETH_IPV4);
        out.extend_from_slice(&[0x45, tos]);
        out.extend_from_slice(&total.to_be_bytes());
        out.extend_from_slice(&self.ident.to_be_bytes());
        out.extend_from_slice(&IP_DF.to_be_bytes());
        out.extend_from_slice(&[64, IPPROTO_UDP, 0, 0]);
        out.extend_from_slice(&self.src_ip);
        out.extend_from_slice(&self.dst_ip);
        out.extend_from_slice(&(EV_PORT_BASE + packet.ev).to_be_bytes());
        out.extend_from_slice(&UET_PORT.to_be_bytes());
        out.extend_from_slice(&(udp_len as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&headers);
        out.extend_from_slice(payload);
        let frame = &mut out[start..];
        set_ip_checksum(frame);
        set_udp_checksum(frame);
        self.headers = headers;
        Ok(())
    }
}

/// The PDS (and for a request the SES) header of `packet` with a payload of `payload_len` bytes.
fn pack(packet: &UetPacket, payload_len: usize, out: &mut Vec<u8>) -> Result<(), UetEncodeError> {
    let prologue = |kind: u8, next: u8, flags: u8| {
        (u16::from(kind) << 11 | u16::from(next) << 7 | u16::from(flags)).to_be_bytes()
    };
    match packet.kind {
        PdsKind::Request => {
            let flags = if packet.retransmit { FLAG_RETX } else { 0 }
                | if packet.ack_request { FLAG_AR } else { 0 };
            let kind = if packet.credit_target.is_some() {
                RUD_CC_REQ
            } else {
                RUD_REQ
            };
            out.extend_from_slice(&prologue(kind, SES_STANDARD, flags));
            out.extend_from_slice(&0i16.to_be_bytes()); // clear PSN offset: this fabric keeps no per-PSN state to clear
            out.extend_from_slice(&packet.psn.to_be_bytes());
            out.extend_from_slice(&packet.spdcid.to_be_bytes());
            out.extend_from_slice(&packet.dpdcid.to_be_bytes());
            if let Some(target) = packet.credit_target {
                out.push(0); // congestion control id
                out.extend_from_slice(&(target & 0xFF_FFFF).to_be_bytes()[1..]);
            }
            let som = packet.offset == 0;
            let hd = som && packet.imm.is_some();
            let opcode = if packet.send { SES_SEND } else { SES_WRITE };
            let flags = if hd { SES_HD } else { 0 }
                | if packet.eom { SES_EOM } else { 0 }
                | if som { SES_SOM } else { 0 };
            out.extend_from_slice(&[opcode, flags]);
            out.extend_from_slice(&packet.message_id.to_be_bytes());
            out.extend_from_slice(&[0; 8]); // resource index generation, job id, PID on FEP, resource index
            out.extend_from_slice(&packet.remote_addr.to_be_bytes());
            out.extend_from_slice(&0u32.to_be_bytes()); // initiator
            out.extend_from_slice(&u64::from(packet.rkey).to_be_bytes());
            if som {
                out.extend_from_slice(&u64::from(packet.imm.unwrap_or(0)).to_be_bytes());
            } else {
                let len = u32::try_from(payload_len)
                    .ok()
                    .filter(|&l| l < 1 << 14)
                    .ok_or(UetEncodeError::TooLong)?;
                let offset = u32::try_from(packet.offset).map_err(|_| UetEncodeError::TooLong)?;
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&offset.to_be_bytes());
            }
            let length = u32::try_from(packet.length).map_err(|_| UetEncodeError::TooLong)?;
            out.extend_from_slice(&length.to_be_bytes());
        }
        PdsKind::Ack => {
            let flags = if packet.ecn_echo { FLAG_M } else { 0 };
            out.extend_from_slice(&prologue(ACK_CC, 0, flags));
            let cack = packet.cack_psn.wrapping_sub(1); // the wire's is the last PSN of the unbroken run
            let offset = i16::try_from(packet.psn.wrapping_sub(cack) as i32).unwrap_or(0);
            out.extend_from_slice(&offset.to_be_bytes());
            out.extend_from_slice(&cack.to_be_bytes());
            out.extend_from_slice(&packet.spdcid.to_be_bytes());
            out.extend_from_slice(&packet.dpdcid.to_be_bytes());
            out.extend_from_slice(&[0, 0]); // CC type NSCC, no flags; MPR
                                            // the SACK bitmap's base as an offset from the cumulative PSN; one too far for 16 bits is sent empty
            let (base, bitmap) = match i16::try_from(packet.sack_base.wrapping_sub(cack) as i32) {
                Ok(base) => (base, packet.sack_bitmap),
                Err(_) => (1, 0),
            };
            out.extend_from_slice(&base.to_be_bytes());
            out.extend_from_slice(&bitmap.to_be_bytes());
            out.extend_from_slice(&[0; 6]); // service time, window penalty, received bytes
            out.extend_from_slice(&packet.out_of_order.to_be_bytes());
        }
        PdsKind::Nack => {
            let flags = if packet.ecn_echo { FLAG_M } else { 0 };
            out.extend_from_slice(&prologue(NACK, 0, flags));
            out.extend_from_slice(&[packet.nack_code, 0]);
            out.extend_from_slice(&packet.psn.to_be_bytes());
            out.extend_from_slice(&packet.spdcid.to_be_bytes());
            out.extend_from_slice(&packet.dpdcid.to_be_bytes());
            out.extend_from_slice(&packet.cack_psn.to_be_bytes());
        }
        PdsKind::Credit => {
            out.extend_from_slice(&prologue(CONTROL, CTL_CREDIT, 0));
            out.extend_from_slice(&0u16.to_be_bytes()); // probe opaque
            out.extend_from_slice(&0u32.to_be_bytes()); // PSN: a grant acknowledges nothing
            out.extend_from_slice(&packet.spdcid.to_be_bytes());
            out.extend_from_slice(&packet.dpdcid.to_be_bytes());
            out.extend_from_slice(&packet.credit.to_be_bytes());
        }
    }
    Ok(())
}

/// A UET frame taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedUet {
    /// The headers; its `payload` is empty, the payload is `frame[payload]`.
    pub packet: UetPacket,
    pub payload: Range<usize>,
    pub src_mac: Mac,
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    /// False when the UDP checksum does not match: returned so that the caller can count it.
    pub checksum_ok: bool,
}

/// The UET packet in `frame`, or `None` if it is not one we speak (IPv4 options, a fragment, another type).
pub fn decode(frame: &[u8]) -> Option<DecodedUet> {
    if frame.get(12..14)? != ETH_IPV4
        || *frame.get(IP_AT)? != 0x45
        || *frame.get(IP_AT + 9)? != IPPROTO_UDP
    {
        return None;
    }
    let total = usize::from(be16(frame, IP_AT + 2)?);
    let end = IP_AT.checked_add(total)?;
    if be16(frame, IP_AT + 6)? & 0x3FFF != 0
        || end > frame.len()
        || total < IP_LEN + UDP_LEN + PDS_REQUEST_LEN
    {
        return None;
    }
    if be16(frame, UDP_AT + 2)? != UET_PORT
        || usize::from(be16(frame, UDP_AT + 4)?) != total - IP_LEN
    {
        return None;
    }
    let tos = *frame.get(IP_AT + 1)?;
    let sport = be16(frame, UDP_AT)?;
    let word = be16(frame, PDS_AT)?;
    let (kind, next, flags) = (
        (word >> 11) as u8,
        (word >> 7 & 0x0F) as u8,
        (word & 0x7F) as u8,
    );
    let pds = frame.get(PDS_AT..end)?;
    let mut packet = UetPacket {
        spdcid: be16(pds, 8)?,
        dpdcid: be16(pds, 10)?,
        ecn_ce: tos & ECN_CE == ECN_CE,
        trimmed: tos >> 2 == TRIMMED_DSCP,
        ev: sport
            .checked_sub(EV_PORT_BASE)
            .filter(|&ev| ev < MAX_EVS)
            .unwrap_or(0),
        ..UetPacket::default()
    };
    let mut payload_at = end;
    match (kind, next) {
        (RUD_REQ | RUD_CC_REQ, SES_STANDARD) => {
            let pds_len = if kind == RUD_CC_REQ {
                let target = pds.get(12..16)?;
                packet.credit_target =
                    Some(u32::from_be_bytes([0, target[1], target[2], target[3]]));
                PDS_CC_REQUEST_LEN
            } else {
                PDS_REQUEST_LEN
            };
            let ses = pds.get(pds_len..pds_len + SES_LEN)?;
            packet.kind = PdsKind::Request;
            packet.retransmit = flags & FLAG_RETX != 0;
            packet.ack_request = flags & FLAG_AR != 0;
            packet.psn = be32(pds, 4)?;
            packet.send = match ses[0] & 0x3F {
                SES_WRITE => false,
                SES_SEND => true,
                _ => return None,
            };
            let ses_flags = ses[1];
            packet.som = ses_flags & SES_SOM != 0;
            packet.eom = ses_flags & SES_EOM != 0;
            packet.message_id = be16(ses, 2)?;
            packet.remote_addr = be64(ses, 12)?;
            packet.rkey = u32::try_from(be64(ses, 24)?).ok()?;
            if packet.som {
                let imm = be64(ses, 32)?;
                packet.imm = (ses_flags & SES_HD != 0).then_some(imm as u32);
            } else {
                packet.offset = u64::from(be32(ses, 36)?);
            }
            packet.length = u64::from(be32(ses, 40)?);
            payload_at = PDS_AT + pds_len + SES_LEN;
        }
        (ACK_CC, _) => {
            let ack = pds.get(..ACK_LEN)?;
            packet.kind = PdsKind::Ack;
            packet.ecn_echo = flags & FLAG_M != 0;
            let cack = be32(ack, 4)?;
            let offset = be16(ack, 2)? as i16;
            packet.psn = cack.wrapping_add_signed(i32::from(offset));
            packet.cack_psn = cack.wrapping_add(1);
            // the bitmap's base, relative to the wire's cumulative PSN
            let base = be16(ack, 14)? as i16;
            packet.sack_base = cack.wrapping_add_signed(i32::from(base));
            packet.sack_bitmap = be64(ack, 16)?;
            packet.out_of_order = be16(ack, 30)?;
        }
        (NACK, _) => {
            let nack = pds.get(..NACK_LEN)?;
            packet.kind = PdsKind::Nack;
            packet.ecn_echo = flags & FLAG_M != 0;
            packet.nack_code = nack[2];
            packet.psn = be32(nack, 4)?;
            packet.cack_psn = be32(nack, 12)?;
        }
        (CONTROL, CTL_CREDIT) => {
            let control = pds.get(..CONTROL_LEN)?;
            packet.kind = PdsKind::Credit;
            packet.credit = be32(control, 12)?;
        }
        _ => return None,
    }
    Some(DecodedUet {
        packet,
        payload: payload_at..end,
        src_mac: frame.get(6..12)?.try_into().ok()?,
        src_ip: frame.get(IP_AT + 12..IP_AT + 16)?.try_into().ok()?,
        dst_ip: frame.get(IP_AT + 16..IP_AT + 20)?.try_into().ok()?,
        checksum_ok: udp_checksum(frame.get(..end)?) == be16(frame, UDP_AT + 6)?,
    })
}

/// A switch out of room for `frame`: if it is a trimmable UET request (data DSCP, no IP options, longer than
/// its headers), cuts it to its headers ([`REQUEST_HEADERS`], or [`CC_REQUEST_HEADERS`] for a request asking
/// for credit), moves it to [`TRIMMED_DSCP`] (its ECN bits kept) and fixes its lengths and checksums; true if
/// it did.
pub fn trim_in_place(frame: &mut Vec<u8>) -> bool {
    let Some(headers) = trimmable(frame, frame.len()) else {
        return false;
    };
    frame.truncate(headers);
    rewrite_trimmed(frame);
    true
}

/// [`trim_in_place`] for a frame of `len` bytes whose first bytes are `head` (a frame whose payload lies
/// elsewhere): its trimmed copy, if it is trimmable.
pub fn trimmed_copy(head: &[u8], len: usize) -> Option<Vec<u8>> {
    let headers = trimmable(head, len)?;
    let mut frame = head.get(..headers)?.to_vec();
    rewrite_trimmed(&mut frame);
    Some(frame)
}

/// If a frame of `len` bytes starting with `head` is a trimmable UET request, the length of its headers.
fn trimmable(head: &[u8], len: usize) -> Option<usize> {
    let headers = match be16(head, PDS_AT).map(|word| (word >> 11) as u8) {
        Some(RUD_REQ) => REQUEST_HEADERS,
        Some(RUD_CC_REQ) => CC_REQUEST_HEADERS,
        _ => return None,
    };
    (len > headers
        && head.len() >= headers
        && head.get(IP_AT) == Some(&0x45)
        && head.get(IP_AT + 1).is_some_and(|tos| tos >> 2 == DATA_DSCP)
        && head.get(IP_AT + 9) == Some(&IPPROTO_UDP)
        && be16(head, UDP_AT + 2) == Some(UET_PORT))
    .then_some(headers)
}

/// A request cut to its headers (the frame's length): the trimmed DSCP (ECN kept), its lengths and checksums.
fn rewrite_trimmed(frame: &mut [u8]) {
    frame[IP_AT + 1] = TRIMMED_DSCP << 2 | (frame[IP_AT + 1] & 0x03);
    let total = (frame.len() - ETH_LEN) as u16;
    frame[IP_AT + 2..IP_AT + 4].copy_from_slice(&total.to_be_bytes());
    frame[UDP_AT + 4..UDP_AT + 6].copy_from_slice(&(total - IP_LEN as u16).to_be_bytes());
    set_ip_checksum(frame);
    set_udp_checksum(frame);
}

/// The IPv4 header checksum of a frame without options, set.
fn set_ip_checksum(frame: &mut [u8]) {
    frame[IP_AT + 10..IP_AT + 12].fill(0);
    let sum = ones_sum(&frame[IP_AT..IP_AT + IP_LEN]);
    frame[IP_AT + 10..IP_AT + 12]
        .copy_from_slice(&(((0xFFFF - sum) % 0xFFFF) as u16).to_be_bytes());
}

/// The UDP checksum of a frame (IPv4 without options) over its pseudo-header, header and data; 0 is sent
/// as 0xFFFF (RFC 768).
fn udp_checksum(frame: &[u8]) -> u16 {
    let Some(datagram) = frame.get(UDP_AT..) else {
        return 0;
    };
    let mut sum = u64::from(ones_sum(&frame[IP_AT + 12..IP_AT + 20]))
        + u64::from(IPPROTO_UDP)
        + datagram.len() as u64;
    // the datagram with its checksum field taken as zero
    sum +=
        u64::from(ones_sum(&datagram[..6])) + u64::from(ones_sum(datagram.get(8..).unwrap_or(&[])));
    let folded = (sum % 0xFFFF) as u16;
    match !folded {
        0 => 0xFFFF,
        check => check,
    }
}

fn set_udp_checksum(frame: &mut [u8]) {
    let check = udp_checksum(frame);
    frame[UDP_AT + 6..UDP_AT + 8].copy_from_slice(&check.to_be_bytes());
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn be64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(
        bytes.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: Mac = [2, 0, 0, 0, 0, 1];
    const B: Mac = [2, 0, 0, 0, 0, 2];

    fn framer() -> UetFramer {
        UetFramer::new(A, B, [10, 0, 0, 1], [10, 0, 0, 2])
    }

    fn request(offset: u64) -> UetPacket {
        UetPacket {
            kind: PdsKind::Request,
            spdcid: 3,
            dpdcid: 4,
            psn: 0xFFFF_FFF0,
            ack_request: true,
            retransmit: true,
            message_id: 9,
            som: offset == 0,
            eom: true,
            remote_addr: 0x1234_5678_9ABC,
            rkey: 77,
            offset,
            length: offset + 100,
            imm: (offset == 0).then_some(0xCAFE),
            ev: 17,
            ..UetPacket::default()
        }
    }

    fn roundtrip(packet: &UetPacket, payload: &[u8]) -> (DecodedUet, Vec<u8>) {
        let mut frame = Vec::new();
        framer().encode(packet, payload, &mut frame).unwrap();
        (decode(&frame).expect("decodes"), frame)
    }

    #[test]
    fn a_request_goes_to_port_4793_from_its_ev_and_comes_back_whole() {
        for offset in [0, 4096] {
            let packet = request(offset);
            let payload = [5u8; 100];
            let (decoded, frame) = roundtrip(&packet, &payload);
            assert_eq!(be16(&frame, UDP_AT), Some(EV_PORT_BASE + 17));
            assert_eq!(be16(&frame, UDP_AT + 2), Some(4793));
            assert_eq!(frame.len(), REQUEST_HEADERS + 100);
            assert!(decoded.checksum_ok);
            assert_eq!(&frame[decoded.payload.clone()], &payload[..]);
            assert_eq!(
                decoded.packet,
                UetPacket {
                    payload: Vec::new(),
                    ..packet
                }
            );
        }
    }

    #[test]
    fn acks_and_nacks_come_back_whole() {
        let ack = UetPacket {
            kind: PdsKind::Ack,
            spdcid: 4,
            dpdcid: 3,
            psn: 0x1_0005,
            cack_psn: 0x1_0000,
            sack_base: 0x1_0003,
            sack_bitmap: 0b1011_0110,
            ecn_echo: true,
            out_of_order: 3,
            ev: 2,
            ..UetPacket::default()
        };
        let (decoded, frame) = roundtrip(&ack, &[]);
        assert_eq!(frame.len(), ETH_LEN + IP_LEN + UDP_LEN + ACK_LEN);
        assert_eq!(frame[IP_AT + 1] >> 2, CONTROL_DSCP);
        assert_eq!(decoded.packet, ack);
        let nack = UetPacket {
            kind: PdsKind::Nack,
            psn: 7,
            cack_psn: 5,
            nack_code: nack::TRIMMED,
            ..UetPacket::default()
        };
        assert_eq!(roundtrip(&nack, &[]).0.packet, nack);
    }

    #[test]
    fn a_trim_keeps_the_headers_at_the_trimmed_dscp_with_valid_checksums() {
        let mut packet = request(8192);
        packet.ecn_ce = false;
        let mut frame = Vec::new();
        framer().encode(&packet, &[1; 4000], &mut frame).unwrap();
        frame[IP_AT + 1] |= ECN_CE; // marked on the way (the IP checksum no longer matters to us)
        assert!(trim_in_place(&mut frame));
        assert_eq!(frame.len(), REQUEST_HEADERS);
        let decoded = decode(&frame).unwrap();
        assert!(decoded.packet.trimmed && decoded.packet.ecn_ce && decoded.checksum_ok);
        assert_eq!(
            ones_sum(&frame[IP_AT..IP_AT + IP_LEN]),
            0,
            "the IP checksum holds"
        );
        assert_eq!(
            (decoded.packet.psn, decoded.packet.offset),
            (packet.psn, 8192)
        );
        assert!(
            !trim_in_place(&mut frame),
            "a trimmed header is not trimmed again"
        );
        let mut ack = Vec::new();
        framer()
            .encode(
                &UetPacket {
                    kind: PdsKind::Ack,
                    ..UetPacket::default()
                },
                &[],
                &mut ack,
            )
            .unwrap();
        assert!(!trim_in_place(&mut ack), "nor is an ACK");
    }

    #[test]
    fn credit_requests_and_grants_come_back_whole_and_trim_to_their_longer_headers() {
        let packet = UetPacket {
            credit_target: Some(0xAB_CDEF),
            ..request(4096)
        };
        let (decoded, frame) = roundtrip(&packet, &[3; 100]);
        assert_eq!(frame.len(), CC_REQUEST_HEADERS + 100);
        assert_eq!(be16(&frame, PDS_AT).map(|w| w >> 11), Some(13)); // RUD_CC_REQ
        assert_eq!(
            decoded.packet,
            UetPacket {
                payload: Vec::new(),
                ..packet.clone()
            }
        );
        let mut long = Vec::new();
        framer().encode(&packet, &[3; 4000], &mut long).unwrap();
        assert!(trim_in_place(&mut long));
        assert_eq!(long.len(), CC_REQUEST_HEADERS);
        let trimmed = decode(&long).unwrap();
        assert!(trimmed.packet.trimmed && trimmed.checksum_ok);
        assert_eq!(trimmed.packet.credit_target, Some(0xAB_CDEF)); // the receiver still reads the ask
        let grant = UetPacket {
            kind: PdsKind::Credit,
            spdcid: 4,
            dpdcid: 3,
            credit: 0xFFFF_FFF0,
            ev: 5,
            ..UetPacket::default()
        };
        let (decoded, frame) = roundtrip(&grant, &[]);
        assert_eq!(frame.len(), ETH_LEN + IP_LEN + UDP_LEN + CONTROL_LEN);
        assert_eq!(frame[IP_AT + 1] >> 2, CONTROL_DSCP);
        assert_eq!(decoded.packet, grant);
    }

    #[test]
    fn a_corrupted_byte_fails_the_udp_checksum() {
        let (_, mut frame) = roundtrip(&request(0), &[9; 64]);
        let last = frame.len() - 1;
        frame[last] ^= 1;
        assert!(!decode(&frame).unwrap().checksum_ok);
    }

    #[test]
    fn fields_past_the_wire_are_refused() {
        let mut out = Vec::new();
        let long = UetPacket {
            length: 1 << 33,
            ..request(0)
        };
        assert_eq!(
            framer().encode(&long, &[], &mut out),
            Err(UetEncodeError::TooLong)
        );
        let ev = UetPacket {
            ev: MAX_EVS,
            ..request(0)
        };
        assert_eq!(
            framer().encode(&ev, &[], &mut out),
            Err(UetEncodeError::Ev(MAX_EVS))
        );
        assert!(out.is_empty());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(frame in proptest::collection::vec(any::<u8>(), 0..200), keep in 0usize..120) {
            let _ = decode(&frame);
            // and a real frame cut anywhere or with any byte changed
            let (_, mut real) = roundtrip(&request(0), &[3; 60]);
            let at = keep % real.len();
            real[at] ^= frame.first().copied().unwrap_or(1);
            let _ = decode(&real);
            real.truncate(keep);
            let _ = decode(&real);
            let mut trimmed = real.clone();
            let _ = trim_in_place(&mut trimmed);
        }
    }
}
