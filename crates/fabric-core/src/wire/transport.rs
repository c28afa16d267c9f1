//! One RoCE/IB transport packet as the RC model sees it, without the wire.
//!
//! The RC model consumes and produces [`Packet`]s; `wire::roce` turns them into RoCEv2 frames and back, and
//! `wire::ib` into native IB packets. Keeping addressing (MACs, IPs, UDP ports, LIDs) out of here lets the
//! same model run over either.

/// BTH opcodes of the RC transport (IBTA 9.2.1) and the RoCE CNP.
pub mod opcode {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0A;
    pub const WRITE_ONLY_IMM: u8 = 0x0B;
    pub const READ_REQUEST: u8 = 0x0C;
    pub const READ_RESPONSE_FIRST: u8 = 0x0D;
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0E;
    pub const READ_RESPONSE_LAST: u8 = 0x0F;
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACK: u8 = 0x11;
    pub const CNP: u8 = 0x81;

    /// Every opcode the model knows, with its name (for the bindings' `Opcode` and for messages).
    pub const ALL: [(&str, u8); 19] = [
        ("SEND_FIRST", SEND_FIRST),
        ("SEND_MIDDLE", SEND_MIDDLE),
        ("SEND_LAST", SEND_LAST),
        ("SEND_LAST_IMM", SEND_LAST_IMM),
        ("SEND_ONLY", SEND_ONLY),
        ("SEND_ONLY_IMM", SEND_ONLY_IMM),
        ("WRITE_FIRST", WRITE_FIRST),
        ("WRITE_MIDDLE", WRITE_MIDDLE),
        ("WRITE_LAST", WRITE_LAST),
        ("WRITE_LAST_IMM", WRITE_LAST_IMM),
        ("WRITE_ONLY", WRITE_ONLY),
        ("WRITE_ONLY_IMM", WRITE_ONLY_IMM),
        ("READ_REQUEST", READ_REQUEST),
        ("READ_RESPONSE_FIRST", READ_RESPONSE_FIRST),
        ("READ_RESPONSE_MIDDLE", READ_RESPONSE_MIDDLE),
        ("READ_RESPONSE_LAST", READ_RESPONSE_LAST),
        ("READ_RESPONSE_ONLY", READ_RESPONSE_ONLY),
        ("ACK", ACK),
        ("CNP", CNP),
    ];

    /// Whether `op` is one of [`ALL`].
    pub fn is_known(op: u8) -> bool {
        matches!(op, SEND_FIRST..=ACK | CNP)
    }

    /// Opcodes with a RETH (virtual address, rkey, DMA length).
    pub fn has_reth(op: u8) -> bool {
        matches!(op, WRITE_FIRST | WRITE_ONLY | WRITE_ONLY_IMM | READ_REQUEST)
    }

    /// Opcodes with an ImmDt.
    pub fn has_imm(op: u8) -> bool {
        matches!(
            op,
            SEND_LAST_IMM | SEND_ONLY_IMM | WRITE_LAST_IMM | WRITE_ONLY_IMM
        )
    }

    /// Opcodes with an AETH (syndrome, MSN).
    pub fn has_aeth(op: u8) -> bool {
        matches!(
            op,
            ACK | READ_RESPONSE_FIRST | READ_RESPONSE_LAST | READ_RESPONSE_ONLY
        )
    }

    /// Opcodes that carry payload: every known one but the READ request, the ACK and the CNP.
    pub fn has_payload(op: u8) -> bool {
        is_known(op) && !matches!(op, READ_REQUEST | ACK | CNP)
    }
}

pub const PSN_MASK: u32 = 0xFF_FFFF;
pub const DEFAULT_PKEY: u16 = 0xFFFF;

// AETH syndromes (IBTA 9.7.5.1.5): bits 6:5 are the kind, the low five the value.
/// ACK, credit count "unlimited".
pub const SYNDROME_ACK: u8 = 0x1F;
/// RNR NAK, or'ed with the RNR timer code (5 bits).
pub const SYNDROME_RNR_NAK: u8 = 0x20;
pub const NAK_PSN_SEQUENCE_ERROR: u8 = 0x60;
pub const NAK_INVALID_REQUEST: u8 = 0x61;
pub const NAK_REMOTE_ACCESS_ERROR: u8 = 0x62;
pub const NAK_REMOTE_OPERATIONAL_ERROR: u8 = 0x63;

/// `psn + n` in the 24-bit PSN space.
pub fn psn_add(psn: u32, n: i64) -> u32 {
    // Two's complement wrap, then the 24 bits: the same as Python's `(psn + n) & PSN_MASK` for any n.
    (i64::from(psn).wrapping_add(n) as u32) & PSN_MASK
}

/// Signed distance `a - b` in the 24-bit PSN space (window of 2**23).
pub fn psn_diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & PSN_MASK;
    if d >= 1 << 23 {
        d as i32 - (1 << 24)
    } else {
        d as i32
    }
}

/// The transport headers (BTH and extensions) and payload of one packet.
///
/// `va`/`rkey`/`dma_len` are the RETH (present when [`opcode::has_reth`]), `imm` the ImmDt,
/// `syndrome`/`msn` the AETH. `payload` excludes the pad bytes; the wire layer adds and strips them.
/// `ecn_ce` is set by the decoder when the IP header arrived marked CE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    pub opcode: u8,
    pub dest_qp: u32,
    pub psn: u32,
    pub ack_req: bool,
    pub solicited: bool,
    pub pkey: u16,
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
    pub imm: u32,
    pub syndrome: u8,
    pub msn: u32,
    pub payload: Vec<u8>,
    pub ecn_ce: bool,
}

impl Packet {
    /// A packet with the defaults the Python dataclass has: no flags, the default P_Key, no extensions.
    pub fn new(opcode: u8, dest_qp: u32, psn: u32) -> Self {
        Packet {
            opcode,
            dest_qp,
            psn,
            pkey: DEFAULT_PKEY,
            ..Packet::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn psn_arithmetic_wraps_at_24_bits() {
        assert_eq!(psn_add(PSN_MASK, 1), 0);
        assert_eq!(psn_add(0, -1), PSN_MASK);
        assert_eq!(psn_diff(0, PSN_MASK), 1);
        assert_eq!(psn_diff(PSN_MASK, 0), -1);
        assert_eq!(psn_diff(1 << 23, 0), -(1 << 23));
        assert_eq!(psn_diff((1 << 23) - 1, 0), (1 << 23) - 1);
    }

    #[test]
    fn opcode_sets() {
        assert!(opcode::has_reth(opcode::READ_REQUEST) && !opcode::has_reth(opcode::WRITE_LAST));
        assert!(opcode::has_imm(opcode::WRITE_ONLY_IMM) && !opcode::has_imm(opcode::SEND_ONLY));
        assert!(
            opcode::has_aeth(opcode::READ_RESPONSE_ONLY)
                && !opcode::has_aeth(opcode::READ_RESPONSE_MIDDLE)
        );
        assert!(
            !opcode::has_payload(opcode::ACK) && opcode::has_payload(opcode::READ_RESPONSE_MIDDLE)
        );
        assert!(
            !opcode::has_payload(0x42) && !opcode::is_known(0x12) && opcode::is_known(opcode::CNP)
        );
        assert!(opcode::ALL.iter().all(|&(_, op)| opcode::is_known(op)));
    }

    proptest! {
        #[test]
        fn diff_inverts_add(psn in 0..=PSN_MASK, n in -(1i64 << 23)..(1i64 << 23)) {
            prop_assert_eq!(i64::from(psn_diff(psn_add(psn, n), psn)), n);
        }
    }
}
