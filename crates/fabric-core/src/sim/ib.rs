//! The `ib` fabric in simulated time: what the plan's IB subnet gives the switches and hosts, and the host's
//! framing of either fabric (`build_rust_fabric` with `fabric="ib"`).
//!
//! A switch gets its IB plane (`model::ib_plane`: DLID forwarding, VL queues, credits both ways), which goes
//! before the MMU (`sim::switch`); a host gets its IB port (`model::ib_port`: native IB framing, credits, the
//! flow-control packets on its own timer, a frame held while it waits for credit; `sim::host`). The subnet
//! manager's LIDs and tables and the credit sizes come from Python (`emulator.fabric.ib_subnet.assign`,
//! `agent_config.switch_ib` and `host_ib`); the MACs and rates are the plan's, which the Ethernet part of the
//! spec already holds, so they are not given twice.
use crate::model::credits::{CreditLink, VlCounters};
use crate::model::ib_plane::{IbPlane, IbPlaneConfig, PortSetup};
use crate::model::ib_port::{IbPort, IbPortConfig};
use crate::sim::engine::{Engine, TimerId};
use crate::sim::fabric::Event;
use crate::sim::host::SimHost;
use crate::sim::switch::SimSwitch;
use crate::sim::wire::Wire;
use crate::wire::ib::{encode_data, Lrh, MIN_FRAME};
use crate::wire::mac::Mac;
use crate::wire::roce::Framer;
use crate::wire::transport::Packet;

/// A switch's part of the subnet: its plane's configuration, and per port (in port order) the longest frame
/// its link carries and the bytes each VL of the peer receives into.
#[derive(Clone, Debug)]
pub struct IbSwitchSpec {
    pub config: IbPlaneConfig,
    pub ports: Vec<(u64, u64)>,
}

/// A host's part of the subnet: its LID, every GID's LID, its SL and VL, the link's VLs, the credit sizes of
/// both ends, the link's longest frame, the switch's `fc_floor`, and the requests its RC responders hold past a
/// gap and for how long (`RcConfig::reorder`, `reorder_wait_ns`: adaptive routing's reordering).
#[derive(Clone, Debug)]
pub struct IbHostSpec {
    pub lid: u16,
    pub lids: Vec<(String, u16)>,
    pub sl: u8,
    pub vl: u8,
    pub vls: usize,
    pub capacity: u64,
    pub peer_capacity: u64,
    pub frame_bytes: u64,
    pub fc_floor_ns: u64,
    pub reorder: u32,
    pub reorder_wait_ns: u64,
}

/// The subnet of an `ib` fabric: one entry per switch and per host, in the fabric's order.
#[derive(Clone, Debug, Default)]
pub struct IbSpec {
    pub switches: Vec<IbSwitchSpec>,
    pub hosts: Vec<IbHostSpec>,
}

/// A host's IB port in the simulator: the model, the frame it holds until the switch has credit for it, its
/// flow-control timer, and the flow-control frames of one wake-up (reused).
#[derive(Debug)]
pub struct HostIb {
    pub port: IbPort,
    pub held: Option<Vec<u8>>,
    pub timer: TimerId,
    pub control: Vec<[u8; MIN_FRAME]>,
    /// What its QPs' `RcConfig::reorder` and `reorder_wait_ns` are.
    pub reorder: (u32, u64),
}

/// How a host's QP frames its packets: RoCEv2 on Ethernet, native IB (the LIDs fixed at connect) on IB.
#[derive(Clone, Debug)]
pub enum QpFramer {
    Roce(Framer),
    Ib {
        mac: Mac,
        gateway_mac: Mac,
        lrh: Lrh,
    },
}

impl QpFramer {
    /// Appends `packet`'s frame to `out`; whether it could be framed (a packet that cannot leaves `out` as it
    /// was and is lost, as the Ethernet host loses it).
    pub fn encode(&mut self, packet: &Packet, out: &mut Vec<u8>) -> bool {
        match self {
            QpFramer::Roce(framer) => framer.encode(packet, out).is_ok(),
            QpFramer::Ib {
                mac,
                gateway_mac,
                lrh,
            } => encode_data(mac, gateway_mac, lrh, packet, out).is_ok(),
        }
    }
}

/// A host's GID as the subnet names it (its IPv4 address in dotted decimal, as the plan writes it).
pub fn gid_text(ip: [u8; 4]) -> String {
    let [a, b, c, d] = ip;
    format!("{a}.{b}.{c}.{d}")
}

/// The IPv4 address a GID names, or none for a text that is not one (the IB port's "" for a LID no host has).
pub fn gid_octets(text: &str) -> Option<[u8; 4]> {
    let mut octets = [0; 4];
    let mut parts = text.split('.');
    for octet in &mut octets {
        *octet = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some(octets)
}

/// Gives every switch its IB plane and every host its IB port, as the emulator's subnet manager gives the agents theirs: the hosts' ports
/// first, each arming its flow-control timer (its first packets, init, are due at once), before the switches
/// start. An `Err` names what the subnet lacks or the models refused.
pub fn attach(
    spec: IbSpec,
    engine: &mut Engine<Event>,
    wires: &[Wire],
    switches: &mut [SimSwitch],
    hosts: &mut [SimHost],
) -> Result<(), String> {
    if spec.switches.len() != switches.len() || spec.hosts.len() != hosts.len() {
        return Err(format!(
            "the IB subnet has {} switches and {} hosts, the fabric {} and {}",
            spec.switches.len(),
            spec.hosts.len(),
            switches.len(),
            hosts.len()
        ));
    }
    for (index, (sw, ib)) in switches.iter_mut().zip(spec.switches).enumerate() {
        if ib.ports.len() != sw.ports.len() {
            return Err(format!(
                "switch {index}: {} IB ports for {} ports",
                ib.ports.len(),
                sw.ports.len()
            ));
        }
        let ports = sw
            .ports
            .iter()
            .zip(ib.ports)
            .map(|(port, (max_frame, peer_capacity))| PortSetup {
                mac: port.mac,
                peer_mac: port.peer_mac,
                max_frame,
                rate_bps: wires
                    .get(port.wire as usize)
                    .map_or(0, |wire| wire.rate_bps),
                peer_capacity,
            })
            .collect();
        let plane =
            IbPlane::new(ports, ib.config).map_err(|error| format!("switch {index}: {error}"))?;
        sw.ib = Some(plane);
    }
    for (index, (host, ib)) in hosts.iter_mut().zip(spec.hosts).enumerate() {
        let config = IbPortConfig {
            mac: host.mac,
            gateway_mac: host.gateway_mac,
            lid: ib.lid,
            lids: ib.lids,
            sl: ib.sl,
            vl: ib.vl,
            vls: ib.vls,
            capacity: ib.capacity,
            peer_capacity: ib.peer_capacity,
            rate_bps: host.queue.pause.rate_bps,
            frame_bytes: ib.frame_bytes,
            fc_floor_ns: ib.fc_floor_ns,
        };
        let port = IbPort::new(config).map_err(|error| format!("host {index}: {error}"))?;
        host.attach_ib(index as u32, engine, port, (ib.reorder, ib.reorder_wait_ns));
    }
    Ok(())
}

/// Whether a switch port has IB frames waiting: flow-control packets, or data on any VL (credit or not).
pub fn port_waiting(plane: &IbPlane, port: usize) -> bool {
    plane.control(port).is_some_and(|c| !c.is_empty())
        || (0..plane.vls()).any(|vl| plane.queue(port, vl).is_some_and(|q| !q.is_empty()))
}

/// Times a VL of this link had a packet and no credit for it, all VLs summed.
pub fn stalls(link: &CreditLink) -> u64 {
    (0..link.vl_count())
        .filter_map(|vl| link.counters(vl).map(|c: &VlCounters| c.stalls))
        .sum()
}

/// The IB counters of a fabric as the runner reports them: packets the switches' planes forwarded, and
/// credit stalls at switches and RNICs.
pub fn totals(switches: &[SimSwitch], hosts: &[SimHost]) -> (u64, u64) {
    let planes = switches.iter().filter_map(|sw| sw.ib.as_ref());
    let mut forwarded = 0;
    let mut credit_stalls = 0;
    for plane in planes {
        for port in 0..plane.port_count() {
            forwarded += plane.forwarded(port).unwrap_or(0);
            credit_stalls += plane.link(port).map_or(0, stalls);
        }
    }
    credit_stalls += hosts
        .iter()
        .filter_map(|host| host.ib.as_ref())
        .map(|ib| stalls(ib.port.credits()))
        .sum::<u64>();
    (forwarded, credit_stalls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::credits::BLOCK;
    use crate::sim::fabric::tests::{one_write, run_raw, star_spec};
    use crate::sim::fabric::{Fabric, FabricSpec};
    use crate::wire::ib::{ETH_IB, SDP, SLP};
    use proptest::prelude::*;

    const RATE: u64 = 10_000_000_000;
    /// What a host's RNIC receives into per VL (agent_config's HOST_IB_BUFFER).
    const HOST_BUFFER: u64 = 2048 * BLOCK;
    const FRAME: u64 = 1514;

    /// The subnet of [`star_spec`]: hosts LID 1 and 2 behind ports 0 and 1, 4 VLs, SL n on VL n % 4, each
    /// switch VL receiving into `vl_buffer` bytes.
    fn subnet(vl_buffer: u64) -> IbSpec {
        let lids = vec![("10.0.0.1".to_owned(), 1), ("10.0.0.2".to_owned(), 2)];
        let host = |lid| IbHostSpec {
            lid,
            lids: lids.clone(),
            sl: 0,
            vl: 0,
            vls: 4,
            capacity: HOST_BUFFER,
            peer_capacity: vl_buffer,
            frame_bytes: FRAME,
            fc_floor_ns: 500_000,
            reorder: 0,
            reorder_wait_ns: 0,
        };
        IbSpec {
            switches: vec![IbSwitchSpec {
                config: IbPlaneConfig {
                    lft: vec![(1, 0), (2, 1)],
                    sl2vl: (0..16).map(|sl| sl % 4).collect(),
                    vls: 4,
                    vl_buffer,
                    fc_floor: 500_000,
                    ar: Vec::new(),
                },
                ports: vec![(FRAME, HOST_BUFFER); 2],
            }],
            hosts: vec![host(1), host(2)],
        }
    }

    fn ib_star(vl_buffer: u64) -> Fabric {
        Fabric::new(FabricSpec {
            ib: Some(subnet(vl_buffer)),
            ..star_spec()
        })
        .unwrap()
    }

    #[test]
    fn gids_are_dotted_decimal_both_ways() {
        assert_eq!(gid_text([10, 0, 1, 255]), "10.0.1.255");
        assert_eq!(gid_octets("10.0.1.255"), Some([10, 0, 1, 255]));
        for bad in [
            "",
            "10.0.1",
            "10.0.1.2.3",
            "10.0.1.256",
            "10.0..1",
            "a.b.c.d",
        ] {
            assert_eq!(gid_octets(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_write_crosses_the_ib_switch_as_native_ib() {
        let mut fabric = ib_star(16 * FRAME);
        let records = run_raw(&mut fabric, one_write(1024), 1, 0, 1024).unwrap();
        let [(src, step, stamp)] = records[0].1.reports[0].arrivals[..] else {
            panic!("one arrival expected");
        };
        assert_eq!((src, step), (1, 0));
        // One WRITE only with immediate of 1024 B as IB: Ethernet 14, delimiter 1, LRH 8, BTH 12, RETH 16,
        // ImmDt 4, ICRC 4, VCRC 2: 1085 B, on two wires of 1 us (the switch had credit from the start).
        let frame_ns = crate::sim::wire::serialization_ns(1085, RATE);
        assert_eq!(stamp - records[0].0, 2 * (frame_ns + 1000));
        let plane = fabric.switches[0].ib.as_ref().unwrap();
        // the WRITE one way, its ACK back: the plane forwarded them, the MMU nothing
        assert_eq!((plane.forwarded(0), plane.forwarded(1)), (Some(1), Some(1)));
        let totals = fabric.totals();
        assert_eq!(
            (totals.tx_frames, totals.drops, totals.ib_credit_stalls),
            (2, 0, 0)
        );
        assert_eq!(fabric.hosts[0].counters.frames_received, 1);
        assert!(fabric
            .hosts
            .iter()
            .all(|h| h.ib.as_ref().unwrap().port.malformed() == 0));
    }

    #[test]
    fn a_write_larger_than_the_switch_buffer_waits_for_credit() {
        let length = 64 * 1024;
        let roomy = run_raw(&mut ib_star(16 * FRAME), one_write(length), 1, 0, 1024).unwrap();
        let mut tight = ib_star(2048); // 32 blocks: one packet of 17 at a time
        let records = run_raw(&mut tight, one_write(length), 1, 0, 1024).unwrap();
        let arrival =
            |r: &[(u64, crate::sim::fabric::RawIteration)]| r[0].1.reports[0].arrivals[0].2;
        assert_eq!(records[0].1.reports[0].arrivals.len(), 1);
        assert!(tight.totals().ib_credit_stalls > 0);
        assert!(
            tight.hosts[1]
                .ib
                .as_ref()
                .unwrap()
                .port
                .credits()
                .counters(0)
                .unwrap()
                .stalls
                > 0
        );
        assert!(arrival(&records) > arrival(&roomy));
    }

    #[test]
    fn a_path_mtu_the_switch_could_never_credit_is_refused() {
        let mut fabric = ib_star(2048);
        let error = fabric
            .run_collective(one_write(8192), 1, 0, 4096)
            .unwrap_err();
        assert!(error.contains("path MTU 4096 does not fit"), "{error}");
    }

    #[test]
    fn a_subnet_that_is_not_the_fabric_is_refused() {
        let mut spec = subnet(16 * FRAME);
        spec.hosts.pop();
        let error = Fabric::new(FabricSpec {
            ib: Some(spec),
            ..star_spec()
        })
        .unwrap_err();
        assert!(error.contains("1 hosts"), "{error}");
        let mut spec = subnet(16 * FRAME);
        spec.switches[0].config.lft.push((3, 7)); // a port the switch lacks
        assert!(Fabric::new(FabricSpec {
            ib: Some(spec),
            ..star_spec()
        })
        .is_err());
    }

    proptest! {
        #[test]
        fn any_frame_on_the_ib_fabric_is_counted_never_a_panic(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..20),
            delimiter in prop_oneof![Just(SDP), Just(SLP), any::<u8>()],
        ) {
            let mut fabric = ib_star(16 * FRAME);
            prop_assert!(fabric.begin_collective(one_write(4096), 1, 0, 1024, false).is_ok());
            for (i, mut frame) in frames.into_iter().enumerate() {
                if frame.len() > 14 {
                    frame[12..14].copy_from_slice(&ETH_IB);
                    frame[14] = delimiter;
                }
                let wire = (i % 4) as u32;
                fabric.deliver(wire, frame.into());
            }
            let _ = fabric.advance(Some(20_000)); // the write may finish or not: only no panic is asked
        }
    }
}
