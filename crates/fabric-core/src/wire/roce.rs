//! RoCEv2 over IPv4: a [`Packet`] to an Ethernet frame and back, on the hot path.
//!
//! Frames are complete Ethernet II frames without FCS and without padding to the 60-byte minimum (the decoder
//! ignores any trailer after the IP datagram). The IPv4 header checksum is real; the UDP checksum is zero
//! ("none" in IPv4), as Linux's software RoCE (rxe, `prepare_udp_hdr`) sends it: the ICRC covers the UDP
//! payload. The ICRC is the CRC-32 that RoCE receivers check over the invariant fields (IBTA Annex A17):
//!
//! - it covers 8 bytes of ones (the pseudo-LRH), the IP header with TOS, TTL and checksum set to ones, the UDP
//!   header with its checksum set to ones, the BTH with byte 4 (FECN, BECN, reserved) set to ones, and
//!   everything after it up to the end of the pad; it is appended least significant byte first. Switches may
//!   therefore mark CE and decrement TTL without breaking it, but not change anything else.
//!
//! Bytes from the wire are hostile: every decoder returns `None` (or an error) on garbage, never panics.

use core::fmt;
use core::ops::Range;

use crate::wire::mac::{Mac, ETH_LEN};
use crate::wire::transport::{opcode, Packet, PSN_MASK};

/// The UDP destination port of RoCEv2.
pub const ROCE_PORT: u16 = 4791;
/// RoCE's traffic class (priority 3 in this fabric).
pub const DATA_DSCP: u8 = 26;
/// DCQCN's CNPs (priority 6, strict).
pub const CNP_DSCP: u8 = 48;
/// The EtherType of IPv4, as it sits in a frame.
pub const ETH_IPV4: [u8; 2] = [0x08, 0x00];
/// The IPv4 protocol number of UDP, which carries RoCEv2.
pub const IPPROTO_UDP: u8 = 17;
/// ECN codepoint ECT(0): what senders put in the TOS so that switches may mark CE.
pub const ECT0: u8 = 0b10;
/// ECN codepoint CE: a switch on the path saw congestion.
pub const ECN_CE: u8 = 0b11;
/// IPv4 "don't fragment".
pub const IP_DF: u16 = 0x4000;
/// BTH byte 4 of a CNP.
pub const BECN: u8 = 0x40;
/// Reserved zero bytes after a CNP's BTH.
pub const CNP_BODY_LEN: usize = 16;

/// An IPv4 header without options, as we send it (a received one may be longer: its IHL says).
pub const IP_LEN: usize = 20;
/// The UDP header.
pub const UDP_LEN: usize = 8;
/// The base transport header, the same in RoCEv2 and native IB.
pub const BTH_LEN: usize = 12;
/// The invariant CRC at the end of the packet.
pub const ICRC_LEN: usize = 4;
/// Where the IP header starts in a frame.
pub const IP_AT: usize = ETH_LEN;
/// The shortest RoCEv2 frame: headers, a BTH and the ICRC, nothing else.
pub const MIN_FRAME: usize = ETH_LEN + IP_LEN + UDP_LEN + BTH_LEN + ICRC_LEN;

const RETH_LEN: usize = 16;
const IMMDT_LEN: usize = 4;
const AETH_LEN: usize = 4;
/// The longest BTH and extension headers of any opcode (WRITE_ONLY_IMM: BTH, RETH, ImmDt).
pub const MAX_TRANSPORT_LEN: usize = BTH_LEN + RETH_LEN + IMMDT_LEN;
/// The pseudo-LRH the ICRC starts with.
const PSEUDO_LRH: [u8; 8] = [0xFF; 8];
/// Bytes the ICRC covers before the transport headers on IPv4: the pseudo LRH, the IPv4 header without
/// options (TOS, TTL and checksum masked) and the UDP header (checksum masked).
const MASKED_PREFIX: usize = PSEUDO_LRH.len() + 20 + UDP_LEN;
const PADS: [u8; 3] = [0; 3];
/// The longest IPv4 header (IHL 15).
const MAX_IP_LEN: usize = 60;

/// Why a packet cannot be framed; the messages are what Python callers see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// Not an opcode we speak, or payload on an opcode that carries none.
    Opcode {
        /// The opcode asked for.
        opcode: u8,
        /// The payload's length.
        payload_len: usize,
    },
    /// DestQP or PSN does not fit its 24 bits.
    QpOrPsn {
        /// The destination QP asked for.
        dest_qp: u32,
        /// The PSN asked for.
        psn: u32,
    },
    /// The AETH's MSN does not fit its 24 bits.
    Aeth {
        /// The AETH syndrome asked for.
        syndrome: u8,
        /// The MSN asked for.
        msn: u32,
    },
    /// The IP datagram would exceed 65535 bytes (its total length is 16 bits).
    TooLong {
        /// The IP total length the packet would need.
        total_len: usize,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EncodeError::Opcode {
                opcode,
                payload_len,
            } => {
                write!(
                    f,
                    "cannot encode opcode {opcode:#x} with {payload_len} payload bytes"
                )
            }
            EncodeError::QpOrPsn { dest_qp, psn } => {
                write!(f, "DestQP {dest_qp:#x} or PSN {psn:#x} exceeds 24 bits")
            }
            EncodeError::Aeth { syndrome, msn } => {
                write!(
                    f,
                    "AETH syndrome {syndrome:#x} or MSN {msn:#x} out of range"
                )
            }
            EncodeError::TooLong { total_len } => {
                write!(f, "IP total length {total_len} exceeds 65535")
            }
        }
    }
}

impl std::error::Error for EncodeError {}

/// Framer parameters out of range, as the caller gave them (wide, so that a binding can report any integer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FramerError {
    /// The DSCP asked for (0 to 63 fit).
    pub dscp: i64,
    /// The TTL asked for (1 to 255 fit).
    pub ttl: i64,
    /// The UDP source port asked for (0 to 65535 fit).
    pub port: i64,
}

impl fmt::Display for FramerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let FramerError { dscp, ttl, port } = self;
        write!(
            f,
            "bad Framer parameters: dscp {dscp}, ttl {ttl}, port {port}"
        )
    }
}

impl std::error::Error for FramerError {}

/// Bytes of payload padding that bring `payload_len` to a multiple of 4 (BTH.PadCnt).
pub fn pad_len(payload_len: usize) -> usize {
    payload_len.wrapping_neg() & 3
}

/// Length of the BTH and the extension headers `op` carries, or `None` for an opcode we do not speak.
pub fn transport_len(op: u8) -> Option<usize> {
    if !opcode::is_known(op) {
        return None;
    }
    let mut len = BTH_LEN;
    if opcode::has_reth(op) {
        len += RETH_LEN;
    }
    if opcode::has_imm(op) {
        len += IMMDT_LEN;
    }
    if opcode::has_aeth(op) {
        len += AETH_LEN;
    }
    if op == opcode::CNP {
        len += CNP_BODY_LEN;
    }
    Some(len)
}

/// The BTH and extension headers of one packet, in a fixed array: no allocation per frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportHeaders {
    bytes: [u8; MAX_TRANSPORT_LEN],
    len: usize,
}

impl TransportHeaders {
    /// The headers as they go on the wire (or, before [`Self::set_byte4`], as the ICRC sees them).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Sets BTH byte 4 (FECN, BECN, reserved): the ICRC covers it as ones, the wire carries the real value.
    pub fn set_byte4(&mut self, value: u8) {
        self.bytes[4] = value;
    }

    /// What a sender puts in BTH byte 4: BECN on a CNP, else zero (switches may set FECN).
    pub fn set_byte4_for_sending(&mut self) {
        let becn = if self.bytes[0] == opcode::CNP {
            BECN
        } else {
            0
        };
        self.set_byte4(becn);
    }
}

/// BTH and extension headers of `packet` with a payload of `payload_len` bytes, BTH byte 4 all ones as the
/// ICRC sees it.
///
/// Shared by RoCEv2 and native IB framing; the caller sets byte 4 (FECN, BECN) after computing the ICRC. The
/// payload's length comes apart from `packet` so that a caller holding the payload elsewhere (a binding's
/// buffer) frames it without a copy; `packet.payload` is not read.
pub fn pack_transport(
    packet: &Packet,
    payload_len: usize,
) -> Result<TransportHeaders, EncodeError> {
    let op = packet.opcode;
    let len = match transport_len(op) {
        Some(len) if payload_len == 0 || opcode::has_payload(op) => len,
        _ => {
            return Err(EncodeError::Opcode {
                opcode: op,
                payload_len,
            })
        }
    };
    if (packet.dest_qp | packet.psn) & !PSN_MASK != 0 {
        return Err(EncodeError::QpOrPsn {
            dest_qp: packet.dest_qp,
            psn: packet.psn,
        });
    }
    if opcode::has_aeth(op) && packet.msn & !PSN_MASK != 0 {
        return Err(EncodeError::Aeth {
            syndrome: packet.syndrome,
            msn: packet.msn,
        });
    }
    let mut out = TransportHeaders {
        bytes: [0; MAX_TRANSPORT_LEN],
        len,
    };
    let mut writer = Writer::new(&mut out.bytes);
    let pad = pad_len(payload_len) as u8;
    writer.put(&[op, u8::from(packet.solicited) << 7 | pad << 4]);
    writer.put(&packet.pkey.to_be_bytes());
    writer.put(&(0xFF00_0000 | packet.dest_qp).to_be_bytes());
    writer.put(&(u32::from(packet.ack_req) << 31 | packet.psn).to_be_bytes());
    if opcode::has_reth(op) {
        writer.put(&packet.va.to_be_bytes());
        writer.put(&packet.rkey.to_be_bytes());
        writer.put(&packet.dma_len.to_be_bytes());
    }
    if opcode::has_imm(op) {
        writer.put(&packet.imm.to_be_bytes());
    }
    if opcode::has_aeth(op) {
        writer.put(&(u32::from(packet.syndrome) << 24 | packet.msn).to_be_bytes());
    }
    // A CNP's 16 reserved bytes are the zeros the array started with.
    Ok(out)
}

/// Sequential big-endian writes into a header array whose length the caller computed from the opcode.
struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl<'a> Writer<'a> {
    fn new(out: &'a mut [u8]) -> Self {
        Writer { out, at: 0 }
    }

    fn put(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        self.out[self.at..end].copy_from_slice(bytes);
        self.at = end;
    }
}

/// The packet whose BTH starts at `bth_at` and whose payload and pad end at `end`, with the payload's place in
/// `frame`; `None` if the opcode is not ours or the headers do not fit.
///
/// The packet's own `payload` is left empty: the caller takes `frame[range]` as it needs it (a view in Python,
/// a copy or a borrow in Rust), so that decoding allocates nothing.
pub fn unpack_transport(frame: &[u8], bth_at: usize, end: usize) -> Option<(Packet, Range<usize>)> {
    let op = *frame.get(bth_at)?;
    let header_len = transport_len(op)?;
    let at = bth_at.checked_add(header_len)?;
    let flags = *frame.get(bth_at + 1)?;
    let payload_end = end.checked_sub(usize::from(flags >> 4 & 3))?;
    if payload_end < at || end > frame.len() {
        return None;
    }
    let mut reader = Reader {
        frame,
        at: bth_at + 2,
    };
    let mut packet = Packet {
        opcode: op,
        solicited: flags >> 7 == 1,
        pkey: u16::from_be_bytes(reader.take()?),
        dest_qp: u32::from_be_bytes(reader.take()?) & PSN_MASK,
        ..Packet::default()
    };
    let psn = u32::from_be_bytes(reader.take()?);
    packet.psn = psn & PSN_MASK;
    packet.ack_req = psn >> 31 == 1;
    if opcode::has_reth(op) {
        packet.va = u64::from_be_bytes(reader.take()?);
        packet.rkey = u32::from_be_bytes(reader.take()?);
        packet.dma_len = u32::from_be_bytes(reader.take()?);
    }
    if opcode::has_imm(op) {
        packet.imm = u32::from_be_bytes(reader.take()?);
    }
    if opcode::has_aeth(op) {
        let aeth = u32::from_be_bytes(reader.take()?);
        packet.syndrome = (aeth >> 24) as u8;
        packet.msn = aeth & PSN_MASK;
    }
    Some((packet, at..payload_end))
}

/// Sequential fixed-size reads from a frame; `None` past its end.
struct Reader<'a> {
    frame: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let end = self.at.checked_add(N)?;
        let bytes = self.frame.get(self.at..end)?.try_into().ok()?;
        self.at = end;
        Some(bytes)
    }
}

/// The 16-bit big-endian words of `data` summed, modulo 0xFFFF (ones'-complement arithmetic).
pub(crate) fn ones_sum(data: &[u8]) -> u32 {
    let sum: u64 = data
        .chunks(2)
        .map(|word| u64::from(word[0]) << 8 | u64::from(word.get(1).copied().unwrap_or(0)))
        .sum();
    (sum % 0xFFFF) as u32
}

/// Encodes packets of one flow (one source to one destination) as frames.
///
/// Everything in the Ethernet, IPv4 and UDP headers but the lengths, the IP identification (incremented per
/// frame) and the IP checksum is fixed per framer, so it is packed, and its share of that checksum summed,
/// once. The TOS carries `dscp` and ECT(0), so switches may mark CE. CNPs go at their own DSCP (48 in this
/// fabric, priority 6): a second framer.
#[derive(Clone, Debug)]
pub struct Framer {
    /// Destination and source MAC, EtherType, IP version/IHL and TOS.
    eth_ip: [u8; 16],
    /// IP flags and fragment offset, TTL, protocol.
    ip_mid: [u8; 4],
    /// Source and destination IP, source and destination UDP port.
    addrs_ports: [u8; 12],
    /// What the ICRC sees after the total length and identification: flags, TTL and checksum as ones.
    masked_mid: [u8; 18],
    /// Ones'-complement sum of the IP header's constant words.
    ip_sum: u32,
    ident: u16,
}

impl Framer {
    /// A framer from `src_mac`/`src_ip`/`src_port` to `dst_mac`/`dst_ip` at `dscp` with `ttl`.
    pub fn new(
        src_mac: Mac,
        dst_mac: Mac,
        src_ip: [u8; 4],
        dst_ip: [u8; 4],
        src_port: u16,
        dscp: u8,
        ttl: u8,
    ) -> Result<Self, FramerError> {
        if dscp >= 64 || ttl == 0 {
            return Err(FramerError {
                dscp: dscp.into(),
                ttl: ttl.into(),
                port: src_port.into(),
            });
        }
        let tos = dscp << 2 | ECT0;
        let mut eth_ip = [0; 16];
        eth_ip[..6].copy_from_slice(&dst_mac);
        eth_ip[6..12].copy_from_slice(&src_mac);
        eth_ip[12..14].copy_from_slice(&ETH_IPV4);
        eth_ip[14..].copy_from_slice(&[0x45, tos]);
        let df = IP_DF.to_be_bytes();
        let ip_mid = [df[0], df[1], ttl, IPPROTO_UDP];
        let mut addrs_ports = [0; 12];
        addrs_ports[..4].copy_from_slice(&src_ip);
        addrs_ports[4..8].copy_from_slice(&dst_ip);
        addrs_ports[8..10].copy_from_slice(&src_port.to_be_bytes());
        addrs_ports[10..].copy_from_slice(&ROCE_PORT.to_be_bytes());
        let mut masked_mid = [0; 18];
        masked_mid[..6].copy_from_slice(&[df[0], df[1], 0xFF, IPPROTO_UDP, 0xFF, 0xFF]);
        masked_mid[6..].copy_from_slice(&addrs_ports);
        let ip_sum =
            (ones_sum(&eth_ip[14..]) + ones_sum(&ip_mid) + ones_sum(&addrs_ports[..8])) % 0xFFFF;
        Ok(Framer {
            eth_ip,
            ip_mid,
            addrs_ports,
            masked_mid,
            ip_sum,
            ident: 0,
        })
    }

    /// Appends the Ethernet frame of `packet` to `out`, with its IP checksum and ICRC (UDP checksum zero).
    ///
    /// A packet that cannot be framed leaves `out` as it was. The IP identification advances once the
    /// transport headers are good, before the length is checked: a datagram too long
    /// for IPv4 still uses up an identification.
    pub fn encode(&mut self, packet: &Packet, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.encode_with_payload(packet, &packet.payload, out)
    }

    /// [`Self::encode`] with the payload held apart from the packet's headers (`packet.payload` is not read).
    pub fn encode_with_payload(
        &mut self,
        packet: &Packet,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let mut headers = pack_transport(packet, payload.len())?;
        let pad = &PADS[..pad_len(payload.len())];
        let udp_len = UDP_LEN + headers.as_bytes().len() + payload.len() + pad.len() + ICRC_LEN;
        let total_len = IP_LEN + udp_len;
        self.ident = self.ident.wrapping_add(1);
        let total = u16::try_from(total_len).map_err(|_| EncodeError::TooLong { total_len })?;
        let udp = (udp_len as u16).to_be_bytes();
        let total_bytes = total.to_be_bytes();
        let ident = self.ident.to_be_bytes();

        // The ICRC's masked headers gathered first: one CRC update over them, not nine small ones.
        let mut covered = [0xFF; MASKED_PREFIX + MAX_TRANSPORT_LEN];
        covered[8] = 0x45; // PSEUDO_LRH, then IPv4 with its TOS masked
        covered[10..12].copy_from_slice(&total_bytes);
        covered[12..14].copy_from_slice(&ident);
        covered[14..32].copy_from_slice(&self.masked_mid);
        covered[32..34].copy_from_slice(&udp); // then the UDP checksum, masked
        let transport = headers.as_bytes();
        covered[MASKED_PREFIX..MASKED_PREFIX + transport.len()].copy_from_slice(transport);
        let mut icrc = crc32fast::Hasher::new();
        icrc.update(&covered[..MASKED_PREFIX + transport.len()]);
        icrc.update(payload);
        icrc.update(pad);
        headers.set_byte4_for_sending();

        out.reserve(ETH_LEN + total_len);
        out.extend_from_slice(&self.eth_ip);
        out.extend_from_slice(&total_bytes);
        out.extend_from_slice(&ident);
        out.extend_from_slice(&self.ip_mid);
        out.extend_from_slice(&self.ip_check(total, self.ident).to_be_bytes());
        out.extend_from_slice(&self.addrs_ports);
        out.extend_from_slice(&udp);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(headers.as_bytes());
        out.extend_from_slice(payload);
        out.extend_from_slice(pad);
        out.extend_from_slice(&icrc.finalize().to_le_bytes());
        Ok(())
    }

    /// The IP header checksum with this total length and identification:
    /// `-(sum) % 0xFFFF`, so a sum of 0 gives 0, never 0xFFFF.
    fn ip_check(&self, total_len: u16, ident: u16) -> u16 {
        let sum = (self.ip_sum + u32::from(total_len) + u32::from(ident)) % 0xFFFF;
        ((0xFFFF - sum) % 0xFFFF) as u16
    }
}

/// Where a located RoCEv2/IPv4 frame's parts are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Located {
    /// Offset of the BTH.
    bth_at: usize,
    /// End of the IP datagram (the ICRC's last byte + 1).
    end: usize,
}

/// A big-endian u16 at `at`; `None` past the frame's end.
pub(crate) fn be16(frame: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(
        frame.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The BTH offset and datagram end of a RoCEv2/IPv4 frame, else `None`.
///
/// The end comes from the IP total length, not the frame length: a frame may carry an Ethernet trailer
/// (padding to 60 bytes) after the datagram. Fragments are refused: their UDP payload is not all here.
fn locate(frame: &[u8]) -> Option<Located> {
    if frame.len() < MIN_FRAME || frame.get(12..14)? != ETH_IPV4 {
        return None;
    }
    let version_ihl = *frame.get(IP_AT)?;
    let total_len = usize::from(be16(frame, IP_AT + 2)?);
    let frag = be16(frame, IP_AT + 6)?;
    let proto = *frame.get(IP_AT + 9)?;
    let ihl = usize::from(version_ihl & 0x0F) * 4;
    if version_ihl >> 4 != 4 || ihl < IP_LEN || proto != IPPROTO_UDP || frag & 0x3FFF != 0 {
        return None;
    }
    let udp_at = IP_AT + ihl;
    let end = IP_AT + total_len;
    if end > frame.len() || end < udp_at + UDP_LEN + BTH_LEN + ICRC_LEN {
        return None;
    }
    let dport = be16(frame, udp_at + 2)?;
    let udp_len = usize::from(be16(frame, udp_at + 4)?);
    if dport != ROCE_PORT || udp_len + ihl != total_len {
        return None;
    }
    Some(Located {
        bth_at: udp_at + UDP_LEN,
        end,
    })
}

/// The ICRC over a located frame's invariant fields (see the module's doc).
fn icrc_of(frame: &[u8], located: Located) -> Option<u32> {
    let Located { bth_at, end } = located;
    let covered = frame.get(IP_AT..bth_at + BTH_LEN)?;
    let ihl = covered.len().checked_sub(UDP_LEN + BTH_LEN)?;
    // The pseudo LRH and the masked headers in one buffer: one CRC update over them.
    let lrh = PSEUDO_LRH.len();
    let mut masked = [0xFF; PSEUDO_LRH.len() + MAX_IP_LEN + UDP_LEN + BTH_LEN];
    let masked = masked.get_mut(..lrh + covered.len())?;
    masked.get_mut(lrh..)?.copy_from_slice(covered);
    for at in [1, 8, 10, 11, ihl + 6, ihl + 7, ihl + UDP_LEN + 4] {
        *masked.get_mut(lrh + at)? = 0xFF;
    }
    let mut icrc = crc32fast::Hasher::new();
    icrc.update(masked);
    icrc.update(frame.get(bth_at + BTH_LEN..end.checked_sub(ICRC_LEN)?)?);
    Some(icrc.finalize())
}

/// A little-endian u32 at `at`, as the CRCs are appended.
fn le32(frame: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        frame.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The ICRC a RoCEv2/IPv4 Ethernet frame should carry, or `None` for anything that is not one.
pub fn icrc(frame: &[u8]) -> Option<u32> {
    icrc_of(frame, locate(frame)?)
}

/// A received [`Packet`] and the addressing the RNIC needs to answer it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The headers; its `payload` is empty, the payload is `frame[payload]`.
    pub packet: Packet,
    /// Where the payload (without its pad) sits in the frame.
    pub payload: Range<usize>,
    /// Who sent it: where an answer goes.
    pub src_mac: Mac,
    /// The sender's IPv4 address.
    pub src_ip: [u8; 4],
    /// Our IPv4 address, as the sender named it.
    pub dst_ip: [u8; 4],
    /// The sender's UDP port (its flow's entropy).
    pub src_port: u16,
    /// False when the ICRC does not match: the packet is still returned so that the caller can count it.
    pub icrc_ok: bool,
}

/// The packet in a RoCEv2/IPv4 frame, or `None` if it is not one we speak.
///
/// `None` for anything but IPv4/UDP to port 4791 carrying a complete packet of an opcode we know.
/// `packet.ecn_ce` says whether the IP header arrived marked CE.
pub fn decode(frame: &[u8]) -> Option<Decoded> {
    let located = locate(frame)?;
    let (mut packet, payload) = unpack_transport(frame, located.bth_at, located.end - ICRC_LEN)?;
    packet.ecn_ce = frame.get(IP_AT + 1)? & ECN_CE == ECN_CE;
    let icrc_ok = icrc_of(frame, located)? == le32(frame, located.end - ICRC_LEN)?;
    Some(Decoded {
        packet,
        payload,
        src_mac: frame.get(6..12)?.try_into().ok()?,
        src_ip: frame.get(IP_AT + 12..IP_AT + 16)?.try_into().ok()?,
        dst_ip: frame.get(IP_AT + 16..IP_AT + 20)?.try_into().ok()?,
        src_port: be16(frame, located.bth_at - UDP_LEN)?,
        icrc_ok,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::transport::opcode::ALL;
    use proptest::prelude::*;

    const SRC_MAC: Mac = [2, 0, 0, 0, 1, 1];
    const DST_MAC: Mac = [2, 0, 0, 0, 2, 1];

    fn framer() -> Framer {
        Framer::new(
            SRC_MAC,
            DST_MAC,
            [10, 0, 1, 1],
            [10, 0, 2, 1],
            49152,
            26,
            64,
        )
        .unwrap()
    }

    fn sample(op: u8, payload: &[u8]) -> Packet {
        Packet {
            opcode: op,
            dest_qp: 0x12A5C3,
            psn: 0xFEDCBA,
            ack_req: true,
            solicited: opcode::has_imm(op),
            pkey: 0x8001,
            va: 0x1122334455667788,
            rkey: 0xDEADBEEF,
            dma_len: 0x12345,
            imm: 0xCAFEBABE,
            syndrome: 0x1F,
            msn: 0xABCDEF,
            payload: payload.to_vec(),
            ecn_ce: false,
        }
    }

    /// What the decoder gives back for `packet`: only the headers its opcode carries, the payload apart.
    fn expected(packet: &Packet) -> Packet {
        let op = packet.opcode;
        let reth = opcode::has_reth(op);
        Packet {
            va: if reth { packet.va } else { 0 },
            rkey: if reth { packet.rkey } else { 0 },
            dma_len: if reth { packet.dma_len } else { 0 },
            imm: if opcode::has_imm(op) { packet.imm } else { 0 },
            syndrome: if opcode::has_aeth(op) {
                packet.syndrome
            } else {
                0
            },
            msn: if opcode::has_aeth(op) { packet.msn } else { 0 },
            payload: Vec::new(),
            ..packet.clone()
        }
    }

    fn encode(framer: &mut Framer, packet: &Packet) -> Vec<u8> {
        let mut out = Vec::new();
        framer.encode(packet, &mut out).unwrap();
        out
    }

    #[test]
    fn every_opcode_and_pad_round_trips() {
        for &(_, op) in ALL.iter() {
            let lengths = if opcode::has_payload(op) { 0..8 } else { 0..1 };
            for n in lengths {
                let payload: Vec<u8> = (1..=n as u8).collect();
                let packet = sample(op, &payload);
                let frame = encode(&mut framer(), &packet);
                let decoded = decode(&frame).unwrap();
                assert_eq!(decoded.packet, expected(&packet));
                assert_eq!(&frame[decoded.payload.clone()], payload.as_slice());
                assert!(decoded.icrc_ok);
                assert_eq!(
                    (decoded.src_mac, decoded.src_ip, decoded.src_port),
                    (SRC_MAC, [10, 0, 1, 1], 49152)
                );
                assert_eq!(
                    icrc(&frame),
                    Some(u32::from_le_bytes(
                        frame[frame.len() - 4..].try_into().unwrap()
                    ))
                );
                assert_eq!(ones_sum(&frame[14..34]), 0, "IP checksum");
            }
        }
    }

    #[test]
    fn known_frame_bytes() {
        // The frame the Python framer (deleted since) made for this packet (the first of its framer: identification 1).
        let packet = Packet {
            solicited: true,
            ..sample(opcode::WRITE_ONLY, b"abc")
        };
        let python =
            "0200000002010200000001010800456a004000014000401123410a0001010a000201c00012b7002c0000\
                      0a9080010012a5c380fedcba1122334455667788deadbeef00012345616263001950d7ba";
        assert_eq!(
            hex(&encode(&mut framer(), &packet)),
            python.replace(' ', "")
        );
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn identification_increments_and_a_cnp_carries_becn() {
        let mut f = framer();
        let ack = sample(opcode::ACK, b"");
        let ids: Vec<u16> = (0..3)
            .map(|_| u16::from_be_bytes(encode(&mut f, &ack)[18..20].try_into().unwrap()))
            .collect();
        assert_eq!(ids, [1, 2, 3]);
        let frame = encode(&mut f, &Packet::new(opcode::CNP, 0x42, 0));
        assert_eq!(frame[46], BECN);
        assert_eq!(frame.len(), 54 + 16 + 4);
        assert!(frame[54..70].iter().all(|&b| b == 0));
        assert!(decode(&frame).unwrap().icrc_ok);
    }

    #[test]
    fn what_cannot_be_framed_is_refused() {
        let cases = [
            (
                Packet {
                    payload: b"x".to_vec(),
                    ..Packet::new(opcode::ACK, 1, 1)
                },
                "cannot encode opcode 0x11 with 1 payload bytes",
            ),
            (
                Packet::new(0x12, 1, 1),
                "cannot encode opcode 0x12 with 0 payload bytes",
            ),
            (
                Packet::new(opcode::SEND_ONLY, 1 << 24, 1),
                "DestQP 0x1000000 or PSN 0x1 exceeds 24 bits",
            ),
            (
                Packet {
                    msn: 1 << 24,
                    ..Packet::new(opcode::ACK, 1, 1)
                },
                "AETH syndrome 0x0 or MSN 0x1000000 out of range",
            ),
        ];
        let mut f = framer();
        for (packet, message) in cases {
            let mut out = vec![7];
            assert_eq!(
                f.encode(&packet, &mut out).unwrap_err().to_string(),
                message
            );
            assert_eq!(out, [7]);
        }
        let big = Packet {
            payload: vec![0; 65536],
            ..Packet::new(opcode::SEND_ONLY, 1, 1)
        };
        assert!(matches!(
            f.encode(&big, &mut Vec::new()),
            Err(EncodeError::TooLong { .. })
        ));
        assert_eq!(
            u16::from_be_bytes(
                encode(&mut f, &sample(opcode::ACK, b""))[18..20]
                    .try_into()
                    .unwrap()
            ),
            2
        );
        assert!(Framer::new(SRC_MAC, DST_MAC, [0; 4], [0; 4], 1, 64, 1).is_err());
        assert!(Framer::new(SRC_MAC, DST_MAC, [0; 4], [0; 4], 1, 0, 0).is_err());
    }

    #[test]
    fn ce_and_ttl_keep_the_icrc_but_the_payload_does_not() {
        let frame = encode(&mut framer(), &sample(opcode::SEND_ONLY, b"payload!"));
        let mut marked = frame.clone();
        marked[15] |= ECN_CE;
        marked[22] -= 1;
        marked[46] = 0xC0;
        let decoded = decode(&marked).unwrap();
        assert!(decoded.icrc_ok && decoded.packet.ecn_ce);
        let mut flipped = frame.clone();
        flipped[60] ^= 1;
        assert!(!decode(&flipped).unwrap().icrc_ok);
    }

    #[test]
    fn truncations_and_trailers() {
        let frame = encode(
            &mut framer(),
            &sample(opcode::WRITE_ONLY_IMM, b"some payload"),
        );
        for n in 0..frame.len() {
            assert_eq!(decode(&frame[..n]), None, "{n}");
        }
        let mut padded = encode(&mut framer(), &sample(opcode::SEND_ONLY, b""));
        padded.resize(60, 0);
        assert!(decode(&padded).unwrap().icrc_ok);
    }

    fn any_packet() -> impl Strategy<Value = Packet> {
        (
            (
                prop::sample::select(ALL.iter().map(|&(_, op)| op).collect::<Vec<_>>()),
                0..=PSN_MASK,
                0..=PSN_MASK,
            ),
            (
                any::<bool>(),
                any::<bool>(),
                any::<u16>(),
                any::<u64>(),
                any::<u32>(),
                any::<u32>(),
            ),
            (
                any::<u32>(),
                any::<u8>(),
                0..=PSN_MASK,
                prop::collection::vec(any::<u8>(), 0..64),
            ),
        )
            .prop_map(
                |(
                    (op, dest_qp, psn),
                    (ack_req, solicited, pkey, va, rkey, dma_len),
                    (imm, syndrome, msn, payload),
                )| {
                    Packet {
                        opcode: op,
                        dest_qp,
                        psn,
                        ack_req,
                        solicited,
                        pkey,
                        va,
                        rkey,
                        dma_len,
                        imm,
                        syndrome,
                        msn,
                        payload: if opcode::has_payload(op) {
                            payload
                        } else {
                            Vec::new()
                        },
                        ecn_ce: false,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn decode_never_panics(frame in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&frame);
            let _ = icrc(&frame);
            let _ = unpack_transport(&frame, 14, frame.len());
        }

        #[test]
        fn decode_never_panics_on_damaged_frames(
            packet in any_packet(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut frame = encode(&mut framer(), &packet);
            for (at, value) in edits {
                let at = at.index(frame.len());
                frame[at] = value;
            }
            frame.truncate(cut.index(frame.len() + 1));
            if let Some(decoded) = decode(&frame) {
                prop_assert!(decoded.payload.end <= frame.len());
            }
        }

        #[test]
        fn decode_inverts_encode(packet in any_packet()) {
            let frame = encode(&mut framer(), &packet);
            let decoded = decode(&frame).unwrap();
            prop_assert!(decoded.icrc_ok);
            let mut back = decoded.packet.clone();
            back.payload = frame[decoded.payload].to_vec();
            prop_assert_eq!(back, Packet { payload: packet.payload.clone(), ..expected(&packet) });
        }
    }
}
