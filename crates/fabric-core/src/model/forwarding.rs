//! The switch's L3 forwarding decisions, as pure functions on frame bytes.
//!
//! Frames come from the wire and are hostile until checked: the switch calls [`ipv4_ok`] before the other
//! functions here see an IPv4 frame; each of them still checks the bytes it reads and answers `None` for a
//! frame too short for them, so no input panics. A switch forwards IPv4 by destination host address to one of
//! the equal-cost ports the plan computed, chosen by a CRC-32 (zlib's) of the 5-tuple seeded with the switch's own
//! number (so a flow keeps its path and neighbouring switches do not polarise). It answers ARP for fabric
//! addresses with its own port MAC (proxy ARP), as the hosts' gateway.
use crate::wire::mac::{Mac, ETH_LEN};

/// The EtherType of IPv4, as it sits in a frame.
pub const ETH_IPV4: [u8; 2] = [0x08, 0x00];
/// The EtherType of ARP.
pub const ETH_ARP: [u8; 2] = [0x08, 0x06];
/// The hosts' pause-gate and kick frames (the local experimental EtherType).
pub const ETH_CONTROL: [u8; 2] = [0x88, 0xb5];
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
/// An Ethernet header and an IPv4 header without options.
pub const IPV4_MIN: usize = ETH_LEN + 20;
/// An ARP reply's length: the Ethernet minimum without FCS.
pub const ARP_REPLY_LEN: usize = 60;
/// Where the IPv4 header checksum sits in a frame.
const CHECKSUM: usize = ETH_LEN + 10;
/// The fabric's addresses, 10.0.0.0/8: the first octet of every one.
const FABRIC_FIRST_OCTET: u8 = 10;

/// Whether an IPv4 frame has a header the functions below may index.
///
/// Version 4, a header of at least 20 bytes, and a total length that covers the header and fits in the frame
/// (what follows is Ethernet padding). The header checksum is not verified, unlike RFC 1812 asks of a router:
/// a frame with a bad one harms nothing on its way (the TTL update keeps it wrong) before the receiving host's
/// kernel drops it.
pub fn ipv4_ok(frame: &[u8]) -> bool {
    ipv4_ok_len(frame, frame.len())
}

/// [`ipv4_ok`] for a frame of `len` bytes on the wire of which `frame` holds the first (at least the headers):
/// the simulator's frames leave their payload in the sender's memory (`sim::frame`).
pub fn ipv4_ok_len(frame: &[u8], len: usize) -> bool {
    if frame.len() < IPV4_MIN || len < frame.len() {
        return false;
    }
    let version_ihl = frame[ETH_LEN];
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let header = usize::from(version_ihl & 0x0F) * 4;
    version_ihl >> 4 == 4 && 20 <= header && header <= total && total <= len - ETH_LEN
}

/// Which of `choices` equal-cost ports this IPv4 frame's flow takes (after [`ipv4_ok`]); `None` if the frame
/// is too short to hold a protocol field or `choices` is 0.
///
/// The key is source and destination address, protocol and, for TCP and UDP, the two ports, cut short where
/// the frame ends. Its CRC-32 is mixed with the switch's `seed` by MurmurHash3's 64-bit finalizer: the CRC
/// alone, continued from the seed, is affine in both, so every switch's choice among two was the previous
/// switch's flipped by a constant, and in a fat tree an aggregation switch sent all of an edge switch's flows
/// to one core (found by the uet-htsim comparison, docs/performance.md).
pub fn ecmp_index(frame: &[u8], seed: u32, choices: usize) -> Option<usize> {
    let proto = *frame.get(23)?;
    if choices == 0 {
        return None;
    }
    // The key gathered first (13 bytes at most): one CRC update, not three, for a frame at every hop.
    let mut key = [0u8; 13];
    let addresses = clipped(frame, 26, 8);
    let mut len = addresses.len();
    key[..len].copy_from_slice(addresses);
    key[len] = proto;
    len += 1;
    if proto == IPPROTO_TCP || proto == IPPROTO_UDP {
        let l4 = ETH_LEN + usize::from(frame[ETH_LEN] & 0x0F) * 4;
        let ports = clipped(frame, l4, 4);
        key[len..len + ports.len()].copy_from_slice(ports);
        len += ports.len();
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&key[..len]);
    let mixed = fmix64(u64::from(crc.finalize()) | u64::from(seed) << 32);
    Some((mixed % choices as u64) as usize)
}

/// MurmurHash3's 64-bit finalizer: every bit of the input moves every bit of the output, not linearly.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// Up to `len` bytes of `frame` from `start`, fewer where it ends.
fn clipped(frame: &[u8], start: usize, len: usize) -> &[u8] {
    let end = start.saturating_add(len).min(frame.len());
    frame.get(start..end).unwrap_or(&[])
}

/// Why a frame cannot be routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// Shorter than the MACs, TTL and checksum the rewrite touches.
    TooShort,
    /// The TTL has run out (0 or 1): the router drops it.
    TtlExpired,
}

/// Rewrite `frame` in place as it leaves a router: new MACs, TTL - 1, checksum fixed.
///
/// The header checksum is updated incrementally (RFC 1624), as the kernel's `ip_decrease_ttl` does (folding
/// with `check >= 0xFFFF`, so a sum of one's-complement zero is written 0x0000). The frame is left untouched
/// when it cannot be routed.
pub fn route_in_place(frame: &mut [u8], src_mac: &Mac, dst_mac: &Mac) -> Result<(), RouteError> {
    let ttl = *frame.get(22).ok_or(RouteError::TooShort)?;
    if ttl <= 1 {
        return Err(RouteError::TtlExpired);
    }
    if frame.len() < CHECKSUM + 2 {
        return Err(RouteError::TooShort);
    }
    let check = u32::from(u16::from_be_bytes([frame[CHECKSUM], frame[CHECKSUM + 1]])) + 0x0100;
    let check = ((check + u32::from(check >= 0xFFFF)) & 0xFFFF) as u16;
    frame[..6].copy_from_slice(dst_mac);
    frame[6..12].copy_from_slice(src_mac);
    frame[22] = ttl - 1;
    frame[CHECKSUM..CHECKSUM + 2].copy_from_slice(&check.to_be_bytes());
    Ok(())
}

/// The traffic class of an IPv4 frame: DSCP >> 3, as on the hosts' tc; `None` if too short.
pub fn priority(frame: &[u8]) -> Option<usize> {
    frame.get(15).map(|&tos| usize::from(tos >> 5))
}

/// A proxy-ARP reply to a request for a fabric address (10.0.0.0/8), from `port_mac`; else `None`.
pub fn arp_reply(frame: &[u8], port_mac: &Mac) -> Option<[u8; ARP_REPLY_LEN]> {
    let request = frame.get(..42)?;
    if request[20..22] != [0x00, 0x01] || request[38] != FABRIC_FIRST_OCTET {
        return None;
    }
    let (sender_mac, sender_ip, target_ip) = (&request[22..28], &request[28..32], &request[38..42]);
    let mut reply = [0u8; ARP_REPLY_LEN];
    reply[..6].copy_from_slice(sender_mac);
    reply[6..12].copy_from_slice(port_mac);
    reply[12..14].copy_from_slice(&ETH_ARP);
    reply[14..22].copy_from_slice(&[0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02]);
    reply[22..28].copy_from_slice(port_mac);
    reply[28..32].copy_from_slice(target_ip);
    reply[32..38].copy_from_slice(sender_mac);
    reply[38..42].copy_from_slice(sender_ip);
    Some(reply)
}

/// Whether an IPv4 frame is ECN-capable (ECT(0) or ECT(1)); `None` if too short to say.
pub fn is_ect(frame: &[u8]) -> Option<bool> {
    frame.get(15).map(|&tos| matches!(tos & 3, 1 | 2))
}

/// Set an ECT IPv4 frame's ECN bits to CE in place and fix the checksum; `false` (untouched) if too short.
///
/// RFC 1624: HC' = ~(~HC + ~m + m') for the changed 16-bit word m.
pub fn mark_ce_in_place(frame: &mut [u8]) -> bool {
    if frame.len() < CHECKSUM + 2 {
        return false;
    }
    let old = u32::from(u16::from_be_bytes([frame[14], frame[15]]));
    let new = old | 3;
    let check = u32::from(u16::from_be_bytes([frame[CHECKSUM], frame[CHECKSUM + 1]]));
    let mut total = (!check & 0xFFFF) + (!old & 0xFFFF) + new;
    total = (total & 0xFFFF) + (total >> 16);
    total = (total & 0xFFFF) + (total >> 16);
    frame[15] = (new & 0xFF) as u8;
    frame[CHECKSUM..CHECKSUM + 2].copy_from_slice(&((!total & 0xFFFF) as u16).to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An Ethernet/IPv4/UDP frame: 10.0.0.1 -> 10.0.0.2, ports 1234 -> 4791, TTL 64, a valid checksum.
    fn udp_frame() -> Vec<u8> {
        let mut frame = vec![0u8; 14];
        frame[12..14].copy_from_slice(&ETH_IPV4);
        frame.extend_from_slice(&[
            0x45, 0x02, 0, 36, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        frame.extend_from_slice(&[0x04, 0xD2, 0x12, 0xB7, 0, 16, 0, 0]);
        frame.extend_from_slice(&[b'x'; 8]);
        let sum = checksum(&frame[14..34]);
        frame[24..26].copy_from_slice(&sum.to_be_bytes());
        frame
    }

    /// RFC 1071 from scratch over a header whose checksum field is taken as zero.
    fn checksum(header: &[u8]) -> u16 {
        let mut total: u32 = header
            .chunks(2)
            .enumerate()
            .filter(|(i, _)| *i != 5)
            .map(|(_, w)| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while total >> 16 != 0 {
            total = (total & 0xFFFF) + (total >> 16);
        }
        !(total as u16)
    }

    #[test]
    fn crc32_continues_from_the_seed_as_zlibs() {
        // zlib.crc32(b"123456789") == 0xCBF43926 and zlib.crc32(b"a", 0xFFFFFFFF) == 3310005809.
        let mut crc = crc32fast::Hasher::new_with_initial(0);
        crc.update(b"123456789");
        assert_eq!(crc.finalize(), 0xCBF4_3926);
        let mut crc = crc32fast::Hasher::new_with_initial(0xFFFF_FFFF);
        crc.update(b"a");
        assert_eq!(crc.finalize(), 3_310_005_809);
    }

    #[test]
    fn routed_decrements_ttl_and_keeps_the_checksum_right() {
        let mut frame = udp_frame();
        assert!(ipv4_ok(&frame));
        route_in_place(&mut frame, &[2; 6], &[3; 6]).unwrap();
        assert_eq!(
            (&frame[..6], &frame[6..12], frame[22]),
            (&[3u8; 6][..], &[2u8; 6][..], 63)
        );
        assert_eq!(
            u16::from_be_bytes([frame[24], frame[25]]),
            checksum(&frame[14..34])
        );
        frame[22] = 1;
        assert_eq!(
            route_in_place(&mut frame, &[2; 6], &[3; 6]),
            Err(RouteError::TtlExpired)
        );
    }

    #[test]
    fn mark_ce_sets_both_bits_and_fixes_the_checksum() {
        let mut frame = udp_frame();
        assert_eq!(is_ect(&frame), Some(true));
        assert!(mark_ce_in_place(&mut frame));
        assert_eq!(frame[15] & 3, 3);
        assert_eq!(
            u16::from_be_bytes([frame[24], frame[25]]),
            checksum(&frame[14..34])
        );
    }

    #[test]
    fn arp_reply_only_for_fabric_requests() {
        let mut request = [0u8; 42];
        request[12..14].copy_from_slice(&ETH_ARP);
        request[20..22].copy_from_slice(&[0, 1]);
        request[22..28].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        request[28..32].copy_from_slice(&[10, 0, 0, 1]);
        request[38..42].copy_from_slice(&[10, 0, 0, 5]);
        let reply = arp_reply(&request, &[2, 1, 0, 0, 0, 9]).unwrap();
        assert_eq!(&reply[..6], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&reply[28..32], &[10, 0, 0, 5]);
        assert_eq!(&reply[42..], &[0u8; 18]);
        request[38] = 11;
        assert!(arp_reply(&request, &[2; 6]).is_none());
        assert!(arp_reply(&request[..41], &[2; 6]).is_none());
    }

    proptest! {
        #[test]
        fn no_panic_on_any_frame(mut frame in proptest::collection::vec(any::<u8>(), 0..80),
                                 seed in any::<u32>(), choices in 0usize..9) {
            let ok = ipv4_ok(&frame);
            if let Some(index) = ecmp_index(&frame, seed, choices) {
                prop_assert!(index < choices);
            }
            let _ = (priority(&frame), is_ect(&frame), arp_reply(&frame, &[1; 6]));
            let before = frame.clone();
            match route_in_place(&mut frame, &[1; 6], &[2; 6]) {
                Ok(()) => prop_assert_eq!(frame[22] + 1, before[22]),
                Err(_) => prop_assert_eq!(&frame, &before),
            }
            mark_ce_in_place(&mut frame);
            prop_assert_eq!(frame.len(), before.len());
            if ok {
                prop_assert!(ecmp_index(&frame, seed, 1) == Some(0));
            }
        }

        /// On a valid header the incremental updates agree with a checksum computed from scratch.
        #[test]
        fn incremental_checksums_match_from_scratch(ttl in 2u8.., tos in any::<u8>(), id in any::<u16>()) {
            let mut frame = udp_frame();
            frame[15] = tos;
            frame[18..20].copy_from_slice(&id.to_be_bytes());
            frame[22] = ttl;
            let sum = checksum(&frame[14..34]);
            frame[24..26].copy_from_slice(&sum.to_be_bytes());
            route_in_place(&mut frame, &[1; 6], &[2; 6]).unwrap();
            prop_assert_eq!(u16::from_be_bytes([frame[24], frame[25]]), checksum(&frame[14..34]));
            mark_ce_in_place(&mut frame);
            let expect = checksum(&frame[14..34]);
            let got = u16::from_be_bytes([frame[24], frame[25]]);
            // one's complement has two zeros: 0xFFFF and 0x0000 are the same sum
            prop_assert!(got == expect || (got, expect) == (0xFFFF, 0) || (got, expect) == (0, 0xFFFF));
        }
    }
}
