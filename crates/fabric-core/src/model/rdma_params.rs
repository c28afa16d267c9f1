//! What the RNIC offers and what its packets cost on a link.
//!
//! The header lengths are the wire layer's; the RC model takes its MTUs and its largest region from here.
use crate::wire::ib::{LRH_LEN, VCRC_LEN};
use crate::wire::roce::{BTH_LEN, ICRC_LEN, IP_LEN, UDP_LEN};

/// The IB path MTUs.
pub const PATHS_MTU: [u32; 5] = [256, 512, 1024, 2048, 4096];
/// The RNIC's largest memory region, and so its largest message.
pub const MAX_MR_BYTES: u64 = 1 << 30;
/// The largest a path-MTU packet's extension headers get: RDMA WRITE with immediate.
pub const RETH_LEN: usize = 16;
pub const IMMDT_LEN: usize = 4;
/// What a path-MTU payload needs on top in a link's MTU: IPv4 + UDP + BTH + RETH + ImmDt + ICRC.
pub const ROCE_OVERHEAD: usize = IP_LEN + UDP_LEN + BTH_LEN + RETH_LEN + IMMDT_LEN + ICRC_LEN;
/// The most an IB packet carries on top of a path-MTU payload: LRH, BTH, RETH, ImmDt, ICRC, VCRC.
pub const IB_OVERHEAD: usize = LRH_LEN + BTH_LEN + RETH_LEN + IMMDT_LEN + ICRC_LEN + VCRC_LEN;

/// Bytes one RDMA WRITE of `length` puts on a link: path-MTU packets, each with its Ethernet header and
/// headers (RoCEv2, or native IB), the first with a RETH too; the ACKs are left out (a lower bound's numerator).
pub fn message_wire_bytes(length: u64, mtu: u64, native_ib: bool) -> u64 {
    let packets = length.div_ceil(mtu.max(1)).max(1);
    let per_packet = 14
        + if native_ib {
            LRH_LEN + BTH_LEN + ICRC_LEN + VCRC_LEN
        } else {
            IP_LEN + UDP_LEN + BTH_LEN + ICRC_LEN
        } as u64;
    length
        .saturating_add(packets.saturating_mul(per_packet))
        .saturating_add(RETH_LEN as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overheads() {
        assert_eq!(ROCE_OVERHEAD, 64);
        assert_eq!(IB_OVERHEAD, 46);
        // One 4 KiB packet over RoCE: 14 + 20 + 8 + 12 + 4 on top, and the RETH.
        assert_eq!(message_wire_bytes(4096, 4096, false), 4096 + 58 + 16);
        assert_eq!(message_wire_bytes(0, 4096, true), 14 + 8 + 12 + 4 + 2 + 16);
    }
}
