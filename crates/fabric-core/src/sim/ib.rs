//! The `ib` fabric in simulated time: what the plan's IB subnet gives the switches and hosts, and the host's
//! framing of either fabric (the Python backend's `build_sim_fabric` with `fabric="ib"`).
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
/// both ends, the link's longest frame and the switch's `fc_floor`.
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
}

/// How a host's QP frames its packets: RoCEv2 on Ethernet, native IB (the LIDs fixed at connect) on IB.
#[derive(Clone, Debug)]
pub enum QpFramer {
    Roce(Framer),
    Ib { mac: Mac, gateway_mac: Mac, lrh: Lrh },
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

/// Gives every switch its IB plane and every host its IB port, as `build_sim_fabric` does: the hosts' ports
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
                rate_bps: wires.get(port.wire as usize).map_or(0, |wire| wire.rate_bps),
                peer_capacity,
            })
            .collect();
        let plane = IbPlane::new(ports, ib.config)
            .map_err(|error| format!("switch {index}: {error}"))?;
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
        host.attach_ib(index as u32, engine, port);
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

/// The IB counters of a fabric as `sim_fabric.totals` sums them: packets the switches' planes forwarded, and
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
