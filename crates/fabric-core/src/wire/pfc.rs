//! 802.1Qbb priority flow control frames (MAC Control, EtherType 0x8808).
//!
//! A PFC frame names, per priority, whether its quanta field is valid (the class-enable vector) and for how
//! long to pause: quanta x 512 bit times at the receiving port's rate; 0 quanta (XON) resumes at once. What a
//! receiver does with them is `model::pause`.
use super::mac::{Mac, ETH_LEN};

/// The MAC Control multicast address PFC frames go to.
pub const PFC_DST: Mac = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x01];
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// The PFC opcode of MAC Control.
pub const OPCODE_PFC: u16 = 0x0101;
pub const PRIORITIES: usize = 8;
pub const MAX_QUANTA: u16 = 0xFFFF;
/// The shortest frame, without FCS, as software writes it to the wire.
pub const MIN_FRAME: usize = 60;
/// Where a PFC frame's fields end: the vector and eight quanta after the opcode.
const PFC_END: usize = ETH_LEN + 2 + 2 + 2 * PRIORITIES;

/// Quanta per priority; `None` where the class-enable vector leaves the priority out.
pub type PfcQuanta = [Option<u16>; PRIORITIES];

/// A PFC frame from `src_mac` enabling each priority that has quanta.
pub fn encode_pfc(src_mac: &Mac, quanta: &PfcQuanta) -> [u8; MIN_FRAME] {
    let mut frame = [0u8; MIN_FRAME];
    frame[..6].copy_from_slice(&PFC_DST);
    frame[6..12].copy_from_slice(src_mac);
    frame[12..14].copy_from_slice(&ETHERTYPE_MAC_CONTROL.to_be_bytes());
    frame[14..16].copy_from_slice(&OPCODE_PFC.to_be_bytes());
    let mut vector = 0u16;
    for (priority, value) in quanta.iter().enumerate() {
        if let Some(value) = value {
            vector |= 1 << priority;
            let at = 18 + 2 * priority;
            frame[at..at + 2].copy_from_slice(&value.to_be_bytes());
        }
    }
    frame[16..18].copy_from_slice(&vector.to_be_bytes());
    frame
}

/// The quanta of the enabled classes of a PFC frame; `None` if `frame` is no PFC frame.
pub fn decode_pfc(frame: &[u8]) -> Option<PfcQuanta> {
    let fields = frame.get(..PFC_END)?;
    if fields[12..14] != ETHERTYPE_MAC_CONTROL.to_be_bytes()
        || fields[14..16] != OPCODE_PFC.to_be_bytes()
    {
        return None;
    }
    let vector = u16::from_be_bytes([fields[16], fields[17]]);
    let mut quanta = [None; PRIORITIES];
    for (priority, slot) in quanta.iter_mut().enumerate() {
        if vector >> priority & 1 == 1 {
            let at = 18 + 2 * priority;
            *slot = Some(u16::from_be_bytes([fields[at], fields[at + 1]]));
        }
    }
    Some(quanta)
}

/// Whether a frame is MAC Control (PFC or another opcode): the switch never forwards these.
pub fn is_mac_control(frame: &[u8]) -> bool {
    frame.get(12..14) == Some(&ETHERTYPE_MAC_CONTROL.to_be_bytes()[..])
}

/// How long `quanta` pause a port of `rate_bps`: quanta x 512 bit times, rounded up to the ns.
/// A zero rate is no port: it pauses for ever (`u64::MAX`) rather than dividing by zero.
pub fn pause_ns(quanta: u64, rate_bps: u64) -> u64 {
    if rate_bps == 0 {
        return u64::MAX;
    }
    let bits_ns = u128::from(quanta) * 512 * 1_000_000_000;
    u64::try_from(bits_ns.div_ceil(u128::from(rate_bps))).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn xoff_on_priority_three() {
        let mut quanta = [None; PRIORITIES];
        quanta[3] = Some(0xFFFF);
        let frame = encode_pfc(&[2, 0, 0, 0, 0, 1], &quanta);
        assert_eq!(frame.len(), MIN_FRAME);
        assert_eq!(&frame[..6], &PFC_DST);
        assert_eq!(&frame[12..18], &[0x88, 0x08, 0x01, 0x01, 0x00, 0x08]);
        assert_eq!(&frame[24..26], &[0xFF, 0xFF]);
        assert_eq!(decode_pfc(&frame), Some(quanta));
    }

    #[test]
    fn pause_time_is_512_bit_times_per_quantum_rounded_up() {
        assert_eq!(pause_ns(1, 1_000_000_000), 512);
        assert_eq!(pause_ns(1, 3_000_000_000), 171);
        assert_eq!(pause_ns(0xFFFF, 100_000_000_000), 335_540);
        assert_eq!(pause_ns(1, 0), u64::MAX);
    }

    proptest! {
        #[test]
        fn round_trip(src in any::<[u8; 6]>(), quanta in any::<[Option<u16>; 8]>()) {
            prop_assert_eq!(decode_pfc(&encode_pfc(&src, &quanta)), Some(quanta));
        }

        #[test]
        fn any_bytes_decode_or_are_none(frame in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode_pfc(&frame);
            let _ = is_mac_control(&frame);
        }
    }
}
