//! Native InfiniBand packets carried over the emulator's Ethernet veths, on the hot path.
//!
//! Encapsulation (`--fabric ib`): an Ethernet II frame with EtherType 0x88B6 (IEEE 802 local experimental
//! EtherType 2; 0x88B5 carries the hosts' pause gate frames), then one delimiter byte, as IB's physical layer
//! marks where a packet starts, then the IB packet exactly as it would be on an IB link:
//!
//! ```text
//! dst MAC, src MAC, 0x88B6, 0xFB (SDP, like K27.7): a data packet
//!     LRH(8) BTH(12) [RETH(16)] [ImmDt(4)] [AETH(4)] payload pad ICRC(4) VCRC(2)
//! dst MAC, src MAC, 0x88B6, 0x5C (SLP, like K28.2): a link packet
//!     Op:4 FCTBS:12 | VL:4 FCCL:12 | LPCRC(2)            (flow control, 6 bytes)
//! ```
//!
//! Frames under 60 bytes are zero-padded at the end (the Ethernet minimum); decoders go by LRH.PktLen or the
//! link packet's fixed 6 bytes and ignore it. The LRH carries VL, LVer 0, SL, LNH 2 ("IBA local": no GRH),
//! DLID, PktLen (LRH through ICRC in 4-byte words) and SLID.
//!
//! CRCs (IBTA 7.8), each appended least significant byte first:
//!
//! - ICRC: the Ethernet CRC-32 over LRH..pad with LRH.VL and BTH byte 4 (FECN, BECN) set to ones, so a switch
//!   may move a packet to another VL or mark congestion without breaking it; SL is covered.
//! - VCRC: CRC-16 (polynomial 0x100B, reflected, init and final xor 0xFFFF) over LRH..ICRC, nothing masked;
//!   recomputed at every hop ([`set_vl`]).
//! - LPCRC: the same CRC-16 over a link packet's first 4 bytes.
//!
//! Bytes from the wire are hostile: every decoder returns `None` (or an error) on garbage, never panics.

use core::fmt;
use core::ops::Range;

use crate::wire::mac::{Mac, ETH_LEN};
use crate::wire::roce::{pack_transport, pad_len, unpack_transport, EncodeError};
pub use crate::wire::roce::{BTH_LEN, ICRC_LEN};
use crate::wire::transport::Packet;

/// The EtherType of our IB encapsulation.
pub const ETHERTYPE_IB: u16 = 0x88B6;
/// [`ETHERTYPE_IB`] as it sits in a frame.
pub const ETH_IB: [u8; 2] = ETHERTYPE_IB.to_be_bytes();
/// Start of data packet (IB's K27.7).
pub const SDP: u8 = 0xFB;
/// Start of link packet (IB's K28.2).
pub const SLP: u8 = 0x5C;
/// LRH.LNH "IBA local": the BTH follows the LRH.
pub const LNH_LOCAL: u8 = 2;
/// BTH byte 4: a switch on the path saw congestion.
pub const FECN: u8 = 0x80;
/// Flow-control op once the sending end has heard from its peer on the VL.
pub const OP_NORMAL: u8 = 0;
/// Flow-control op until then.
pub const OP_INIT: u8 = 1;
/// Service levels: LRH.SL is 4 bits, and an SL-to-VL map has an entry for each.
pub const SLS: usize = 16;
/// The largest unicast LID: 0xC000 and up are multicast LIDs, 0 is reserved.
pub const MAX_UNICAST_LID: u16 = 0xBFFF;

/// Carries subnet management only; data VLs are 0 to 14.
pub const MANAGEMENT_VL: u8 = 15;

/// After the Ethernet header and the delimiter.
pub const LRH_AT: usize = ETH_LEN + 1;
/// The local route header.
pub const LRH_LEN: usize = 8;
/// The variant CRC, the packet's last bytes.
pub const VCRC_LEN: usize = 2;
/// A flow-control packet: Op|FCTBS, VL|FCCL, LPCRC.
pub const FC_LEN: usize = 6;
/// Where a data packet's BTH starts in a frame.
pub const BTH_AT: usize = LRH_AT + LRH_LEN;
/// The Ethernet minimum (without FCS) that short frames are padded to.
pub const MIN_FRAME: usize = 60;
/// The shortest packet in LRH.PktLen words: LRH, BTH and ICRC.
pub const MIN_WORDS: usize = (LRH_LEN + BTH_LEN + ICRC_LEN) / 4;
/// PktLen is 11 bits.
pub const MAX_WORDS: usize = 0x7FF;

const PADS: [u8; 3] = [0; 3];

/// CRC-16 tables for slicing by 16 (the polynomial 0x100B reflected is 0xD008): `[0]` is the byte-wise table,
/// `[k]` advances a byte's contribution by `k` more bytes. Built at compile time; 8 KiB, within L1.
static CRC16_TABLES: [[u16; 256]; 16] = crc16_tables();

const fn crc16_tables() -> [[u16; 256]; 16] {
    let mut tables = [[0u16; 256]; 16];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u16;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xD008
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][byte] = crc;
        byte += 1;
    }
    let mut k = 1;
    while k < 16 {
        let mut byte = 0;
        while byte < 256 {
            let previous = tables[k - 1][byte];
            tables[k][byte] = (previous >> 8) ^ tables[0][(previous & 0xFF) as usize];
            byte += 1;
        }
        k += 1;
    }
    tables
}

/// IB's VCRC and LPCRC: CRC-16 0x100B reflected, init and final xor 0xFFFF, continuing from `crc`.
///
/// crcmod's function of the same definition: `crc16(data, crc)` with 0 to start, and chaining works
/// (`crc16(crc16(0, a), b) == crc16(0, a ++ b)`). Sixteen bytes a step through sixteen tables: the VCRC is
/// recomputed over every packet at every hop, and byte by byte a 4 KiB packet took six times as long (27 us
/// against 4.5 us, on this 2-core machine under load; slicing by 8 took 6 us).
pub fn crc16(crc: u16, data: &[u8]) -> u16 {
    let tables = &CRC16_TABLES;
    let mut reg = !crc;
    let mut blocks = data.chunks_exact(16);
    for block in &mut blocks {
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(block); // chunks_exact: always 16 bytes
        let word = u128::from_le_bytes(bytes) ^ u128::from(reg);
        reg = (0..16).fold(0, |acc, i| {
            acc ^ tables[15 - i][usize::from((word >> (8 * i)) as u8)]
        });
    }
    for &byte in blocks.remainder() {
        reg = (reg >> 8) ^ tables[0][usize::from((reg as u8) ^ byte)];
    }
    !reg
}

/// The addressing fields of an LRH: destination and source LID, service level, virtual lane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lrh {
    /// Destination LID: what switches forward on.
    pub dlid: u16,
    /// Source LID: the sender.
    pub slid: u16,
    /// 4 bits.
    pub sl: u8,
    /// 4 bits.
    pub vl: u8,
}

/// LRH fields that do not fit their bits, as the caller gave them (wide, so that a binding can report any
/// integer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LrhError {
    /// The DLID asked for (16 bits fit).
    pub dlid: i64,
    /// The SLID asked for (16 bits fit).
    pub slid: i64,
    /// The SL asked for (4 bits fit).
    pub sl: i64,
    /// The VL asked for (4 bits fit).
    pub vl: i64,
}

impl fmt::Display for LrhError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let LrhError { dlid, slid, sl, vl } = self;
        write!(
            f,
            "bad LRH field: DLID {dlid}, SLID {slid}, SL {sl}, VL {vl}"
        )
    }
}

/// Why a data packet cannot be framed; the messages are what Python callers see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IbEncodeError {
    /// An LRH field does not fit its bits.
    Lrh(LrhError),
    /// The transport headers cannot be made (as in RoCEv2).
    Transport(EncodeError),
    /// LRH through ICRC would take more than [`MAX_WORDS`] words.
    TooLong {
        /// LRH through ICRC, rounded down to words, as the error reports it.
        bytes: usize,
    },
}

impl fmt::Display for IbEncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IbEncodeError::Lrh(error) => error.fmt(f),
            IbEncodeError::Transport(error) => error.fmt(f),
            IbEncodeError::TooLong { bytes } => {
                write!(f, "packet of {bytes} bytes exceeds LRH.PktLen")
            }
        }
    }
}

impl std::error::Error for IbEncodeError {}

impl From<EncodeError> for IbEncodeError {
    fn from(error: EncodeError) -> Self {
        IbEncodeError::Transport(error)
    }
}

/// Ethernet header and delimiter byte.
fn head(src_mac: &Mac, dst_mac: &Mac, delimiter: u8) -> [u8; LRH_AT] {
    let mut head = [0; LRH_AT];
    head[..6].copy_from_slice(dst_mac);
    head[6..12].copy_from_slice(src_mac);
    head[12..14].copy_from_slice(&ETH_IB);
    head[14] = delimiter;
    head
}

/// Appends the Ethernet frame of `packet` from LID `lrh.slid` to `lrh.dlid` on `lrh.vl`, with ICRC and VCRC,
/// padded to [`MIN_FRAME`]. BTH byte 4 goes out zero (BECN on a CNP); switches may set FECN.
///
/// A packet that cannot be framed leaves `out` as it was.
pub fn encode_data(
    src_mac: &Mac,
    dst_mac: &Mac,
    lrh: &Lrh,
    packet: &Packet,
    out: &mut Vec<u8>,
) -> Result<(), IbEncodeError> {
    encode_data_with_payload(src_mac, dst_mac, lrh, packet, &packet.payload, out)
}

/// [`encode_data`] with the payload held apart from the packet's headers (`packet.payload` is not read), so
/// that a binding frames its buffer without a copy.
pub fn encode_data_with_payload(
    src_mac: &Mac,
    dst_mac: &Mac,
    lrh: &Lrh,
    packet: &Packet,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), IbEncodeError> {
    if lrh.sl >> 4 != 0 || lrh.vl >> 4 != 0 {
        return Err(IbEncodeError::Lrh(LrhError {
            dlid: lrh.dlid.into(),
            slid: lrh.slid.into(),
            sl: lrh.sl.into(),
            vl: lrh.vl.into(),
        }));
    }
    let mut headers = pack_transport(packet, payload.len())?; // byte 4 all ones, as the ICRC sees it
    let pad = &PADS[..pad_len(payload.len())];
    let bytes = LRH_LEN + headers.as_bytes().len() + payload.len() + pad.len() + ICRC_LEN;
    let words = bytes >> 2;
    if words > MAX_WORDS {
        return Err(IbEncodeError::TooLong { bytes: words * 4 });
    }
    let [dlid_hi, dlid_lo] = lrh.dlid.to_be_bytes();
    let [words_hi, words_lo] = (words as u16).to_be_bytes();
    let [slid_hi, slid_lo] = lrh.slid.to_be_bytes();
    let mut lrh_bytes = [
        0xF0,
        lrh.sl << 4 | LNH_LOCAL,
        dlid_hi,
        dlid_lo,
        words_hi,
        words_lo,
        slid_hi,
        slid_lo,
    ];

    let mut icrc = crc32fast::Hasher::new();
    icrc.update(&lrh_bytes); // VL masked
    icrc.update(headers.as_bytes());
    icrc.update(payload);
    icrc.update(pad);
    let icrc = icrc.finalize().to_le_bytes();
    lrh_bytes[0] = lrh.vl << 4;
    headers.set_byte4_for_sending();

    let start = out.len();
    out.reserve(MIN_FRAME.max(LRH_AT + bytes + VCRC_LEN));
    out.extend_from_slice(&head(src_mac, dst_mac, SDP));
    out.extend_from_slice(&lrh_bytes);
    out.extend_from_slice(headers.as_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(pad);
    out.extend_from_slice(&icrc);
    let vcrc = crc16(0, &out[start + LRH_AT..]);
    out.extend_from_slice(&vcrc.to_le_bytes());
    if out.len() - start < MIN_FRAME {
        out.resize(start + MIN_FRAME, 0);
    }
    Ok(())
}

/// Where the VCRC of a local-routed SDP frame ends (from LRH.PktLen), or `None` if it is not one.
///
/// The packet is `frame[LRH_AT..data_end(frame)]`; what follows is Ethernet padding.
pub fn data_end(frame: &[u8]) -> Option<usize> {
    if frame.len() < BTH_AT + BTH_LEN + ICRC_LEN + VCRC_LEN
        || frame.get(12..14)? != ETH_IB
        || *frame.get(ETH_LEN)? != SDP
        || frame.get(LRH_AT + 1)? & 3 != LNH_LOCAL
    {
        return None;
    }
    let size = packet_size(frame)?;
    let end = LRH_AT + size;
    (size >= MIN_WORDS * 4 + VCRC_LEN && end <= frame.len()).then_some(end)
}

/// Bytes of the IB packet in an SDP frame, what link credits count: LRH through ICRC (LRH.PktLen, in 4-byte
/// words) and the VCRC. Reads PktLen as it stands ([`data_end`] checks it against the frame); `None` if the
/// frame is too short to hold it.
pub fn packet_size(frame: &[u8]) -> Option<usize> {
    let high = usize::from(*frame.get(LRH_AT + 4)? & 0x07);
    let low = usize::from(*frame.get(LRH_AT + 5)?);
    Some((high << 8 | low) * 4 + VCRC_LEN)
}

/// The ICRC over LRH..pad with LRH.VL and BTH byte 4 masked to ones.
fn icrc_at(frame: &[u8], icrc_at: usize) -> Option<u32> {
    let mut icrc = crc32fast::Hasher::new();
    icrc.update(&[0xF0 | *frame.get(LRH_AT)? & 0x0F]);
    icrc.update(frame.get(LRH_AT + 1..BTH_AT + 4)?);
    icrc.update(&[0xFF]);
    icrc.update(frame.get(BTH_AT + 5..icrc_at)?);
    Some(icrc.finalize())
}

/// The ICRC an SDP frame's packet should carry, or `None` for anything that is not a local-routed IB data
/// frame.
pub fn icrc_native(frame: &[u8]) -> Option<u32> {
    let end = data_end(frame)?;
    icrc_at(frame, end - VCRC_LEN - ICRC_LEN)
}

/// The VCRC an SDP frame's packet should carry, or `None` for anything that is not a local-routed IB data
/// frame.
pub fn vcrc(frame: &[u8]) -> Option<u16> {
    let end = data_end(frame)?;
    Some(crc16(0, frame.get(LRH_AT..end - VCRC_LEN)?))
}

/// A little-endian integer of `N` bytes at `at`, as the CRCs are appended.
fn le<const N: usize>(frame: &[u8], at: usize) -> Option<[u8; N]> {
    frame.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// A received [`Packet`], its LRH fields and whether its CRCs held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IbDecoded {
    /// The headers; `packet.ecn_ce` carries the BTH's FECN, IB's congestion mark. Its `payload` is empty: the
    /// payload is `frame[payload]`.
    pub packet: Packet,
    /// Where the payload (without its pad) sits in the frame.
    pub payload: Range<usize>,
    /// The LRH's addressing: LIDs, SL, VL.
    pub lrh: Lrh,
    /// Who put it on this link.
    pub src_mac: Mac,
    /// Whether the end-to-end CRC held (a switch that changed a covered field breaks it).
    pub icrc_ok: bool,
    /// Whether the link CRC held.
    pub vcrc_ok: bool,
}

/// The packet of an SDP frame, or `None` if it is not one we speak.
///
/// A packet whose CRCs fail is still returned, flagged, so that the caller can count it.
pub fn decode_data(frame: &[u8]) -> Option<IbDecoded> {
    let end = data_end(frame)?;
    let icrc_at_ = end - VCRC_LEN - ICRC_LEN;
    let (mut packet, payload) = unpack_transport(frame, BTH_AT, icrc_at_)?;
    packet.ecn_ce = frame.get(BTH_AT + 4)? & FECN != 0;
    let lrh: [u8; LRH_LEN] = le(frame, LRH_AT)?;
    let icrc_ok = icrc_at(frame, icrc_at_)? == u32::from_le_bytes(le(frame, icrc_at_)?);
    let vcrc_ok = crc16(0, frame.get(LRH_AT..end - VCRC_LEN)?)
        == u16::from_le_bytes(le(frame, end - VCRC_LEN)?);
    Some(IbDecoded {
        packet,
        payload,
        lrh: Lrh {
            dlid: u16::from_be_bytes([lrh[2], lrh[3]]),
            slid: u16::from_be_bytes([lrh[6], lrh[7]]),
            sl: lrh[1] >> 4,
            vl: lrh[0] >> 4,
        },
        src_mac: le(frame, 6)?,
        icrc_ok,
        vcrc_ok,
    })
}

/// [`set_vl`] refused: not a local-routed IB data frame, or a VL that is not 4 bits (as the caller gave it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetVlError {
    /// The VL asked for.
    pub vl: i64,
}

impl fmt::Display for SetVlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a native IB data frame, or a bad VL {}", self.vl)
    }
}

impl std::error::Error for SetVlError {}

/// A switch's egress rewrite, in place: the frame's packet moved to `vl`, its VCRC recomputed.
///
/// The ICRC stays valid: it masks the VL. Anything after the packet (Ethernet padding) is kept.
pub fn set_vl(frame: &mut [u8], vl: u8) -> Result<(), SetVlError> {
    let refused = SetVlError { vl: vl.into() };
    let end = data_end(frame).filter(|_| vl < 16).ok_or(refused)?;
    let first = frame.get_mut(LRH_AT).ok_or(refused)?;
    *first = vl << 4 | *first & 0x0F;
    let vcrc = crc16(0, frame.get(LRH_AT..end - VCRC_LEN).ok_or(refused)?);
    frame
        .get_mut(end - VCRC_LEN..end)
        .ok_or(refused)?
        .copy_from_slice(&vcrc.to_le_bytes());
    Ok(())
}

/// Flow-control packet fields that do not fit their bits, as the caller gave them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FcError {
    /// Neither [`OP_NORMAL`] nor [`OP_INIT`].
    Op(i64),
    /// FCTBS or FCCL past 12 bits.
    Counts {
        /// The FCTBS asked for.
        fctbs: i64,
        /// The FCCL asked for.
        fccl: i64,
    },
    /// A VL past 4 bits.
    Vl(i64),
}

impl fmt::Display for FcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FcError::Op(op) => write!(f, "flow-control op {op} is neither normal (0) nor init (1)"),
            FcError::Counts { fctbs, fccl } => {
                write!(f, "FCTBS {fctbs} or FCCL {fccl} is not a 12-bit value")
            }
            FcError::Vl(vl) => write!(f, "VL {vl} is not a 4-bit value"),
        }
    }
}

impl std::error::Error for FcError {}

/// One flow-control packet for one VL, its fields as on the wire.
///
/// `op` is [`OP_INIT`] until the sending end has heard from its peer on the VL, then [`OP_NORMAL`]; `fctbs` is
/// the sender's blocks sent and `fccl` its grant to the peer, both mod 4096 (what they mean to the ends of a
/// link is `model::credits`). A packet whose fields do not fit their bits cannot be made: the fields are
/// private and [`FcPacket::new`] checks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FcPacket {
    op: u8,
    fctbs: u16,
    vl: u8,
    fccl: u16,
}

impl FcPacket {
    /// A flow-control packet from integers of any range, checked in this order: op, then the
    /// counts, then the VL.
    pub fn new(op: i64, fctbs: i64, vl: i64, fccl: i64) -> Result<Self, FcError> {
        if op != i64::from(OP_NORMAL) && op != i64::from(OP_INIT) {
            return Err(FcError::Op(op));
        }
        if fctbs >> 12 != 0 || fccl >> 12 != 0 {
            return Err(FcError::Counts { fctbs, fccl });
        }
        if vl >> 4 != 0 {
            return Err(FcError::Vl(vl));
        }
        // In range: the casts below keep every bit.
        Ok(FcPacket {
            op: op as u8,
            fctbs: fctbs as u16,
            vl: vl as u8,
            fccl: fccl as u16,
        })
    }

    /// [`OP_NORMAL`] or [`OP_INIT`].
    pub fn op(&self) -> u8 {
        self.op
    }

    /// Blocks sent, mod 4096.
    pub fn fctbs(&self) -> u16 {
        self.fctbs
    }

    /// The VL whose credits this packet reports.
    pub fn vl(&self) -> u8 {
        self.vl
    }

    /// Credit limit granted, mod 4096.
    pub fn fccl(&self) -> u16 {
        self.fccl
    }

    /// The 4 bytes the LPCRC covers: Op|FCTBS, VL|FCCL.
    fn fields(&self) -> [u8; 4] {
        let [a, b] = (u16::from(self.op) << 12 | self.fctbs).to_be_bytes();
        let [c, d] = (u16::from(self.vl) << 12 | self.fccl).to_be_bytes();
        [a, b, c, d]
    }
}

/// A received [`FcPacket`], whether its LPCRC held and who sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FcDecoded {
    /// The packet's fields.
    pub packet: FcPacket,
    /// Whether its link packet CRC held.
    pub lpcrc_ok: bool,
    /// Who sent it: the link's other end.
    pub src_mac: Mac,
}

/// The Ethernet frame of a flow-control packet: Op (0 normal, 1 init), FCTBS, VL, FCCL, LPCRC, padded to
/// [`MIN_FRAME`]. A fixed array: no allocation.
pub fn encode_fc(src_mac: &Mac, dst_mac: &Mac, fc: &FcPacket) -> [u8; MIN_FRAME] {
    let mut frame = [0; MIN_FRAME];
    frame[..LRH_AT].copy_from_slice(&head(src_mac, dst_mac, SLP));
    let fields = fc.fields();
    frame[LRH_AT..LRH_AT + 4].copy_from_slice(&fields);
    frame[LRH_AT + 4..LRH_AT + FC_LEN].copy_from_slice(&crc16(0, &fields).to_le_bytes());
    frame
}

/// The link packet of an SLP frame, or `None` (also for a reserved Op).
pub fn decode_fc(frame: &[u8]) -> Option<FcDecoded> {
    if frame.len() < LRH_AT + FC_LEN || frame.get(12..14)? != ETH_IB || *frame.get(ETH_LEN)? != SLP
    {
        return None;
    }
    let fields: [u8; 4] = le(frame, LRH_AT)?;
    let first = u16::from_be_bytes([fields[0], fields[1]]);
    let second = u16::from_be_bytes([fields[2], fields[3]]);
    let op = (first >> 12) as u8;
    if op != OP_NORMAL && op != OP_INIT {
        return None;
    }
    let packet = FcPacket {
        op,
        fctbs: first & 0xFFF,
        vl: (second >> 12) as u8,
        fccl: second & 0xFFF,
    };
    let lpcrc_ok = crc16(0, &fields) == u16::from_le_bytes(le(frame, LRH_AT + 4)?);
    Some(FcDecoded {
        packet,
        lpcrc_ok,
        src_mac: le(frame, 6)?,
    })
}

/// Whether an Ethernet frame carries our IB encapsulation (EtherType 0x88B6 and a delimiter).
pub fn is_ib(frame: &[u8]) -> bool {
    frame.len() > ETH_LEN && frame.get(12..14) == Some(&ETH_IB[..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::transport::opcode::{self, ALL};
    use proptest::prelude::*;

    const A: Mac = [2, 0, 0, 0, 1, 0];
    const B: Mac = [2, 1, 0, 0, 1, 1];
    const LRH: Lrh = Lrh {
        dlid: 9,
        slid: 0xC004,
        sl: 3,
        vl: 2,
    };

    /// The CRC-16 bit by bit, as its definition reads.
    fn plain_crc16(data: &[u8]) -> u16 {
        let mut crc = 0xFFFFu16;
        for &byte in data {
            crc ^= u16::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xD008
                } else {
                    crc >> 1
                };
            }
        }
        crc ^ 0xFFFF
    }

    fn sample(op: u8, payload: &[u8]) -> Packet {
        Packet {
            opcode: op,
            dest_qp: 0x123456,
            psn: 0xABCDEF,
            ack_req: true,
            solicited: op == opcode::SEND_ONLY,
            pkey: 0x8001,
            va: 0x1122334455667788,
            rkey: 0x99AABBCC,
            dma_len: payload.len() as u32 + 4096,
            imm: 0xDEADBEEF,
            syndrome: 0x1F,
            msn: 77,
            payload: payload.to_vec(),
            ecn_ce: false,
        }
    }

    fn data_frame(op: u8, payload: &[u8], lrh: &Lrh) -> Vec<u8> {
        let mut out = Vec::new();
        encode_data(&A, &B, lrh, &sample(op, payload), &mut out).unwrap();
        out
    }

    #[test]
    fn crc16_matches_its_definition_and_chains() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 1) as u8).collect();
        for n in [0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 300] {
            assert_eq!(crc16(0, &data[..n]), plain_crc16(&data[..n]), "{n}");
        }
        assert_eq!(crc16(crc16(0, &data[..13]), &data[13..]), crc16(0, &data));
        // crcmod's mkCrcFun(0x1100B, initCrc=0, rev=True, xorOut=0xFFFF)(b"123456789")
        assert_eq!(crc16(0, b"123456789"), 0x0A3D);
    }

    #[test]
    fn lrh_and_bth_bytes_are_where_the_layout_says() {
        let frame = data_frame(
            opcode::SEND_ONLY,
            b"abcde",
            &Lrh {
                vl: 5,
                sl: 12,
                ..LRH
            },
        );
        assert_eq!(
            &frame[..15],
            &[2, 1, 0, 0, 1, 1, 2, 0, 0, 0, 1, 0, 0x88, 0xB6, 0xFB]
        );
        assert_eq!(
            &frame[LRH_AT..LRH_AT + 8],
            &[0x50, 0xC2, 0, 9, 0, 8, 0xC0, 0x04]
        );
        assert_eq!(
            &frame[BTH_AT..BTH_AT + 12],
            &[4, 0xB0, 0x80, 1, 0, 0x12, 0x34, 0x56, 0x80, 0xAB, 0xCD, 0xEF]
        );
        assert_eq!(&frame[LRH_AT + 20..LRH_AT + 28], b"abcde\0\0\0");
        assert!(frame[LRH_AT + 34..].iter().all(|&b| b == 0) && frame.len() == 60);
    }

    #[test]
    fn every_opcode_round_trips_with_both_crcs() {
        for &(_, op) in ALL.iter() {
            for n in [0, 1, 2, 3, 4, 5, 6, 7, 1024] {
                let payload: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
                let payload = if opcode::has_payload(op) {
                    payload
                } else {
                    Vec::new()
                };
                let frame = data_frame(op, &payload, &LRH);
                let d = decode_data(&frame).unwrap();
                assert_eq!(
                    (d.lrh, d.src_mac, d.icrc_ok, d.vcrc_ok),
                    (LRH, A, true, true)
                );
                assert_eq!(&frame[d.payload.clone()], payload.as_slice());
                assert_eq!(d.packet.psn, 0xABCDEF);
                let end = data_end(&frame).unwrap();
                assert_eq!(
                    vcrc(&frame),
                    Some(u16::from_le_bytes([frame[end - 2], frame[end - 1]]))
                );
                assert_eq!(
                    icrc_native(&frame),
                    Some(u32::from_le_bytes(
                        frame[end - 6..end - 2].try_into().unwrap()
                    ))
                );
                assert_eq!(packet_size(&frame), Some(end - LRH_AT));
            }
        }
    }

    #[test]
    fn vl_rewrite_keeps_the_icrc_but_sl_is_covered() {
        let frame = data_frame(opcode::SEND_ONLY, &[b'x'; 100], &Lrh { vl: 0, ..LRH });
        for vl in 0..16 {
            let mut moved = frame.clone();
            set_vl(&mut moved, vl).unwrap();
            let d = decode_data(&moved).unwrap();
            assert_eq!(
                (d.lrh.vl, d.lrh.sl, d.icrc_ok, d.vcrc_ok),
                (vl, 3, true, true)
            );
        }
        let mut resl = frame.clone();
        resl[LRH_AT + 1] ^= 0x10;
        assert!(!decode_data(&resl).unwrap().vcrc_ok);
        set_vl(&mut resl, 0).unwrap();
        let d = decode_data(&resl).unwrap();
        assert_eq!((d.lrh.sl, d.icrc_ok, d.vcrc_ok), (2, false, true));
        assert_eq!(set_vl(&mut frame.clone(), 16), Err(SetVlError { vl: 16 }));
        assert!(set_vl(&mut [0; 60], 1).is_err());
    }

    #[test]
    fn fecn_is_masked_and_a_cnp_carries_becn() {
        let mut frame = data_frame(opcode::WRITE_MIDDLE, &[b'y'; 64], &LRH);
        frame[BTH_AT + 4] |= FECN;
        set_vl(&mut frame, 2).unwrap();
        let d = decode_data(&frame).unwrap();
        assert!(d.packet.ecn_ce && d.icrc_ok && d.vcrc_ok);
        let mut cnp = Vec::new();
        encode_data(&A, &B, &LRH, &Packet::new(opcode::CNP, 0x77, 0), &mut cnp).unwrap();
        assert_eq!(cnp[BTH_AT + 4], 0x40);
        assert!(decode_data(&cnp).unwrap().icrc_ok);
    }

    #[test]
    fn what_cannot_be_framed_is_refused() {
        let mut out = vec![1];
        let bad_sl = encode_data(
            &A,
            &B,
            &Lrh { sl: 16, ..LRH },
            &sample(opcode::ACK, b""),
            &mut out,
        );
        assert_eq!(
            bad_sl.unwrap_err().to_string(),
            "bad LRH field: DLID 9, SLID 49156, SL 16, VL 2"
        );
        encode_data(
            &A,
            &B,
            &LRH,
            &sample(opcode::SEND_ONLY, &vec![0; 8188 - 24]),
            &mut Vec::new(),
        )
        .unwrap();
        let long = encode_data(
            &A,
            &B,
            &LRH,
            &sample(opcode::SEND_ONLY, &vec![0; 8188 - 23]),
            &mut out,
        );
        assert_eq!(
            long.unwrap_err().to_string(),
            "packet of 8192 bytes exceeds LRH.PktLen"
        );
        assert_eq!(out, [1]);
    }

    #[test]
    fn link_packets_round_trip_and_carry_the_lpcrc() {
        for (op, fctbs, vl, fccl) in [(0, 0, 0, 0), (1, 4095, 15, 4095), (0, 100, 3, 2048)] {
            let fc = FcPacket::new(op, fctbs, vl, fccl).unwrap();
            let frame = encode_fc(&A, &B, &fc);
            assert_eq!(&frame[12..15], &[0x88, 0xB6, SLP]);
            assert_eq!(
                crc16(0, &frame[LRH_AT..LRH_AT + 4]),
                u16::from_le_bytes([frame[19], frame[20]])
            );
            assert_eq!(
                decode_fc(&frame),
                Some(FcDecoded {
                    packet: fc,
                    lpcrc_ok: true,
                    src_mac: A
                })
            );
            assert!(is_ib(&frame) && decode_data(&frame).is_none());
        }
        let errors = [(2, 0, 0, 0), (0, 4096, 0, 0), (0, 0, 0, -1), (0, 0, 16, 0)]
            .map(|(a, b, c, d)| FcPacket::new(a, b, c, d));
        assert_eq!(
            errors.map(|e| e.unwrap_err().to_string()),
            [
                "flow-control op 2 is neither normal (0) nor init (1)",
                "FCTBS 4096 or FCCL 0 is not a 12-bit value",
                "FCTBS 0 or FCCL -1 is not a 12-bit value",
                "VL 16 is not a 4-bit value",
            ]
        );
    }

    #[test]
    fn truncations_are_none() {
        let frame = data_frame(opcode::WRITE_ONLY_IMM, &[b'y'; 300], &LRH);
        let end = data_end(&frame).unwrap();
        for cut in 0..end {
            assert_eq!(decode_data(&frame[..cut]), None);
        }
        let fc = encode_fc(&A, &B, &FcPacket::new(1, 5, 2, 9).unwrap());
        for cut in 0..LRH_AT + FC_LEN {
            assert_eq!(decode_fc(&fc[..cut]), None);
        }
        assert!(!is_ib(&[0xFF; 100]) && icrc_native(&[0xFF; 100]).is_none() && vcrc(&fc).is_none());
    }

    proptest! {
        #[test]
        fn decoders_never_panic(frame in prop::collection::vec(any::<u8>(), 0..120), delimiter in prop::sample::select(vec![SDP, SLP, 0])) {
            let mut ib = vec![0; 12];
            ib.extend_from_slice(&ETH_IB);
            ib.push(delimiter);
            ib.extend_from_slice(&frame);
            for candidate in [&frame, &ib] {
                let _ = (decode_data(candidate), decode_fc(candidate), icrc_native(candidate), vcrc(candidate));
                let _ = (data_end(candidate), packet_size(candidate), is_ib(candidate));
                let _ = set_vl(&mut candidate.clone(), 3);
            }
        }

        #[test]
        fn decode_inverts_encode(
            op in prop::sample::select(ALL.iter().map(|&(_, op)| op).collect::<Vec<_>>()),
            dlid in any::<u16>(), slid in any::<u16>(), sl in 0u8..16, vl in 0u8..16,
            payload in prop::collection::vec(any::<u8>(), 0..100),
            flip in any::<prop::sample::Index>(),
        ) {
            let lrh = Lrh { dlid, slid, sl, vl };
            let payload = if opcode::has_payload(op) { payload } else { Vec::new() };
            let frame = data_frame(op, &payload, &lrh);
            let d = decode_data(&frame).unwrap();
            prop_assert_eq!((d.lrh, d.icrc_ok, d.vcrc_ok), (lrh, true, true));
            prop_assert_eq!(&frame[d.payload.clone()], payload.as_slice());
            let mut damaged = frame.clone();
            let at = flip.index(frame.len());
            damaged[at] ^= 1;
            if let Some(d) = decode_data(&damaged) {
                prop_assert!(d.payload.end <= damaged.len());
            }
        }

        #[test]
        fn fc_round_trips(op in 0i64..2, fctbs in 0i64..4096, vl in 0i64..16, fccl in 0i64..4096) {
            let fc = FcPacket::new(op, fctbs, vl, fccl).unwrap();
            prop_assert_eq!(decode_fc(&encode_fc(&A, &B, &fc)).map(|d| d.packet), Some(fc));
        }
    }
}
