-- Wireshark dissector for fabric-emu's UET frames (Ultra Ethernet Transport over UDP port 4793).
--
-- Why a script: the tshark of Debian 12 (4.0) knows no UET, and fabric-emu's captures are meant to be read
-- in Wireshark.  It decodes what crates/fabric-core/src/wire/uet.rs sends (that file is the truth;
-- docs/uet-wire.md has the tables): a PDS RUD request with its SES standard header, a PDS ACK_CC and a
-- PDS NACK; with receiver credits a PDS RUD_CC request and a PDS CONTROL credit.  Field names follow the
-- public sources (Wireshark's own packet-uet.c, XDP2, Linux's ultraeth.h) under the prefixes uet.pds,
-- uet.ses, uet.ack, uet.nack and uet.control.
--
-- Load it with `tshark -X lua_script:uet.lua` or copy it to ~/.local/lib/wireshark/plugins/.
--
-- Bytes from a capture are anyone's: every header is checked against the frame's reported length before
-- it is read, and one cut short is flagged as malformed (expert info uet.malformed), never a Lua error.

-- A Wireshark that has its own UET dissector (newer than 4.0), or this script loaded twice, already owns
-- the name "uet": step aside with one line on stderr (report_failure would pop up a dialog at every start).
local registered, uet = pcall(Proto, "uet", "Ultra Ethernet Transport (fabric-emu)")
if not registered then
    io.stderr:write("uet.lua: a dissector named uet is already registered; fabric-emu's steps aside\n")
    return
end

local UET_PORT = 4793
local EV_PORT_BASE = 49152 -- the fabric's UDP source port of entropy value 0
local TRIMMED_DSCP = 50 -- a switch cut the payload off (fabric-emu's choice of code point)
local RUD_REQ, ACK_CC, NACK, CONTROL, RUD_CC_REQ = 2, 8, 10, 11, 13
local CTL_CREDIT = 7
local SES_STANDARD = 3
local PDS_REQUEST_LEN, SES_LEN, ACK_CC_LEN, NACK_LEN = 12, 44, 32, 16
local PDS_CC_REQUEST_LEN, CONTROL_LEN = 16, 16

local pds_types = {
    [0] = "Reserved", [1] = "TSS", [2] = "RUD request", [3] = "ROD request", [4] = "RUDI request",
    [5] = "RUDI response", [6] = "UUD request", [7] = "ACK", [8] = "ACK_CC", [9] = "ACK_CCX", [10] = "NACK",
    [11] = "Control", [12] = "NACK_CCX", [13] = "RUD_CC request", [14] = "ROD_CC request",
}
local next_headers = {
    [0] = "None", [1] = "SES request small", [2] = "SES request medium", [3] = "SES request standard",
    [4] = "SES response", [5] = "SES response with data", [6] = "SES response with data small",
}
local ses_opcodes = {
    [0x00] = "NO_OP", [0x01] = "WRITE", [0x02] = "READ", [0x03] = "ATOMIC", [0x04] = "FETCHING_ATOMIC",
    [0x05] = "SEND", [0x06] = "RENDEZVOUS_SEND", [0x07] = "DATAGRAM_SEND", [0x08] = "DEFERRABLE_SEND",
    [0x09] = "TAGGED_SEND", [0x0A] = "RENDEZVOUS_TSEND", [0x0B] = "DEFERRABLE_TSEND",
    [0x0C] = "DEFERRABLE_RTR", [0x0D] = "TSEND_ATOMIC", [0x0E] = "TSEND_FETCH_ATOMIC", [0x0F] = "MSG_ERROR",
}
local nack_codes = {
    [0x01] = "TRIMMED", [0x02] = "TRIMMED_LASTHOP", [0x03] = "TRIMMED_ACK", [0x04] = "NO_PDC_AVAIL",
    [0x05] = "NO_CCC_AVAIL", [0x06] = "NO_BITMAP", [0x07] = "NO_PKT_BUFFER", [0x08] = "NO_GTD_DEL_AVAIL",
    [0x09] = "NO_SES_MSG_AVAIL", [0x0A] = "NO_RESOURCE", [0x0B] = "PSN_OOR_WINDOW", [0x0C] = "FIRST_ROD_OOO",
    [0x0D] = "ROD_OOO", [0x0E] = "INV_DPDCID", [0x0F] = "PDC_HDR_MISMATCH", [0x10] = "CLOSING",
    [0x11] = "CLOSING_IN_ERR", [0x12] = "PKT_NOT_RCVD", [0x13] = "GTD_RESP_UNAVAIL", [0x14] = "ACK_WITH_DATA",
    [0x15] = "INVALID_SYN", [0x16] = "PDC_MODE_MISMATCH", [0x17] = "NEW_START_PSN",
    [0x18] = "RCVD_SES_PROCG", [0x19] = "UNEXP_EVENT", [0x1A] = "RCVR_INFER_LOSS",
    [0xFD] = "EXP_FD", [0xFE] = "EXP_FE", [0xFF] = "EXP_FF",
}
local cc_types = { [0] = "NSCC", [1] = "Credit" }
local control_types = {
    [0] = "Noop", [1] = "ACK request", [2] = "Clear", [3] = "Clear request", [4] = "Close",
    [5] = "Close request", [6] = "Probe", [7] = "Credit", [8] = "Credit request", [9] = "Negotiation",
}
local ack_requests = { [0] = "None", [1] = "Clear", [2] = "Close", [3] = "Reserved" }

local f = {
    ev = ProtoField.uint16("uet.ev", "Entropy value", base.DEC, nil, nil,
        "The UDP source port less 49152: fabric-emu carries the EV there, for the switches' ECMP hash"),
    trimmed = ProtoField.bool("uet.trimmed", "Trimmed", base.NONE, nil, nil,
        "The IP DSCP is 50: a switch cut this request to its headers"),

    pds = ProtoField.bytes("uet.pds", "PDS"),
    pds_type = ProtoField.uint16("uet.pds.type", "Type", base.DEC, pds_types, 0xF800),
    pds_next_hdr = ProtoField.uint16("uet.pds.next_hdr", "Next header", base.DEC, next_headers, 0x0780),
    pds_flags = ProtoField.uint16("uet.pds.flags", "Flags", base.HEX, nil, 0x007F),
    flag_m = ProtoField.bool("uet.pds.flags.m", "ECN marked (M)", 16, nil, 0x0020),
    flag_retx = ProtoField.bool("uet.pds.flags.retx", "Retransmitted (RETX)", 16, nil, 0x0010),
    flag_ar = ProtoField.bool("uet.pds.flags.ar", "ACK request (AR)", 16, nil, 0x0008),
    flag_p = ProtoField.bool("uet.pds.flags.p", "Probe (P)", 16, nil, 0x0008),
    flag_nt = ProtoField.bool("uet.pds.flags.nt", "NACK type RUDI (NT)", 16, nil, 0x0008),
    flag_syn = ProtoField.bool("uet.pds.flags.syn", "New PDC (SYN)", 16, nil, 0x0004),
    flag_req = ProtoField.uint16("uet.pds.flags.req", "Request (REQ)", base.DEC, ack_requests, 0x0006),
    clear_psn_offset = ProtoField.int16("uet.pds.clear_psn_offset", "Clear PSN offset"),
    psn = ProtoField.uint32("uet.pds.psn", "PSN"),
    spdcid = ProtoField.uint16("uet.pds.spdcid", "Source PDC ID"),
    dpdcid = ProtoField.uint16("uet.pds.dpdcid", "Destination PDC ID"),

    ses = ProtoField.bytes("uet.ses", "SES standard request"),
    opcode = ProtoField.uint8("uet.ses.opcode", "Opcode", base.HEX, ses_opcodes, 0x3F),
    ses_flags = ProtoField.uint8("uet.ses.flags", "Flags", base.HEX),
    version = ProtoField.uint8("uet.ses.version", "Version", base.DEC, nil, 0xC0),
    flag_dc = ProtoField.bool("uet.ses.flags.dc", "Delivery complete (DC)", 8, nil, 0x20),
    flag_ie = ProtoField.bool("uet.ses.flags.ie", "Initiator error (IE)", 8, nil, 0x10),
    flag_rel = ProtoField.bool("uet.ses.flags.rel", "Relative addressing (REL)", 8, nil, 0x08),
    flag_hd = ProtoField.bool("uet.ses.flags.hd", "Header data present (HD)", 8, nil, 0x04),
    flag_eom = ProtoField.bool("uet.ses.flags.eom", "End of message (EOM)", 8, nil, 0x02),
    flag_som = ProtoField.bool("uet.ses.flags.som", "Start of message (SOM)", 8, nil, 0x01),
    message_id = ProtoField.uint16("uet.ses.message_id", "Message ID"),
    ri_generation = ProtoField.uint8("uet.ses.ri_generation", "Resource index generation"),
    job_id = ProtoField.uint24("uet.ses.job_id", "Job ID"),
    pid_on_fep = ProtoField.uint16("uet.ses.pid_on_fep", "PID on FEP", base.DEC, nil, 0x0FFF),
    resource_index = ProtoField.uint16("uet.ses.resource_index", "Resource index", base.DEC, nil, 0x0FFF),
    buffer_offset = ProtoField.uint64("uet.ses.buffer_offset", "Buffer offset", base.HEX, nil, nil,
        "fabric-emu: the message's target address"),
    initiator = ProtoField.uint32("uet.ses.initiator", "Initiator", base.HEX),
    memory_key = ProtoField.uint64("uet.ses.memory_key", "Memory key / match bits", base.HEX, nil, nil,
        "fabric-emu: the target region's rkey"),
    header_data = ProtoField.uint64("uet.ses.header_data", "Header data", base.HEX, nil, nil,
        "On the first packet of a message (SOM); fabric-emu: the immediate, when HD is set"),
    payload_length = ProtoField.uint32("uet.ses.payload_length", "Payload length", base.DEC, nil, 0x3FFF),
    message_offset = ProtoField.uint32("uet.ses.message_offset", "Message offset"),
    request_length = ProtoField.uint32("uet.ses.request_length", "Request length", base.DEC, nil, nil,
        "The whole message's length"),

    ack_psn_offset = ProtoField.int16("uet.ack.ack_psn_offset", "ACK PSN offset"),
    probe_opaque = ProtoField.uint16("uet.ack.probe_opaque", "Probe opaque", base.HEX),
    ack_psn = ProtoField.uint32("uet.ack.ack_psn", "ACK PSN", base.DEC, nil, nil,
        "Cumulative ACK PSN + ACK PSN offset: the packet this ACK answers"),
    cack_psn = ProtoField.uint32("uet.ack.cack_psn", "Cumulative ACK PSN", base.DEC, nil, nil,
        "fabric-emu: the last PSN of the unbroken run received"),
    cc_type = ProtoField.uint8("uet.ack.cc_type", "CC type", base.DEC, cc_types, 0xF0),
    cc_flags = ProtoField.uint8("uet.ack.cc_flags", "CC flags", base.HEX, nil, 0x0F),
    mpr = ProtoField.uint8("uet.ack.mpr", "Maximum PSN range (MPR)"),
    sack_psn_offset = ProtoField.int16("uet.ack.sack_psn_offset", "SACK PSN offset"),
    sack_base = ProtoField.uint32("uet.ack.sack_base", "SACK base PSN", base.DEC, nil, nil,
        "Cumulative ACK PSN + SACK PSN offset: the PSN of the bitmap's bit 0"),
    sack_bitmap = ProtoField.uint64("uet.ack.sack_bitmap", "SACK bitmap", base.HEX, nil, nil,
        "Bit i (LSB first) set: PSN SACK base + i arrived"),
    sack_psn = ProtoField.uint32("uet.ack.sack_psn", "SACKed PSN"),
    service_time = ProtoField.uint16("uet.ack.service_time", "Service time"),
    restore_cwnd = ProtoField.bool("uet.ack.restore_cwnd", "Restore cwnd", 8, nil, 0x80),
    rcv_cwnd_pend = ProtoField.uint8("uet.ack.rcv_cwnd_pend", "Receiver cwnd penalty", base.DEC, nil, 0x7F),
    rcvd_bytes = ProtoField.uint24("uet.ack.rcvd_bytes", "Received bytes (low 24 bits)"),
    credit = ProtoField.uint24("uet.ack.credit", "Credit"),
    ooo_count = ProtoField.uint16("uet.ack.ooo_count", "Out-of-order count"),

    ccc_id = ProtoField.uint8("uet.pds.ccc_id", "Congestion control context ID"),
    credit_target = ProtoField.uint24("uet.pds.credit_target", "Credit target (256-byte units, cumulative)"),
    ctl_type = ProtoField.uint16("uet.control.type", "Control type", base.DEC, control_types, 0x0780),
    control_psn = ProtoField.uint32("uet.control.psn", "PSN"),
    control_payload = ProtoField.uint32("uet.control.payload", "Payload"),
    granted = ProtoField.uint32("uet.control.credit", "Credit granted (256-byte units, cumulative)"),
    nack_code = ProtoField.uint8("uet.nack.code", "NACK code", base.HEX, nack_codes),
    vendor_code = ProtoField.uint8("uet.nack.vendor_code", "Vendor code", base.HEX),
    nack_psn = ProtoField.uint32("uet.nack.psn", "NACK PSN"),
    nack_payload = ProtoField.uint32("uet.nack.payload", "Payload", base.DEC, nil, nil,
        "fabric-emu: the receiver's next expected PSN (Wireshark's packet-uet.c: max received PSN + 1)"),
}
local field_list = {}
for _, field in pairs(f) do
    field_list[#field_list + 1] = field
end
uet.fields = field_list

local ei = {
    short = ProtoExpert.new("uet.malformed", "UET header cut short", expert.group.MALFORMED,
        expert.severity.ERROR),
    snapped = ProtoExpert.new("uet.snapped", "UET header cut by the capture's snap length",
        expert.group.UNDECODED, expert.severity.NOTE),
    undecoded = ProtoExpert.new("uet.undecoded", "Not a header fabric-emu sends: left undecoded",
        expert.group.UNDECODED, expert.severity.NOTE),
    not_ev = ProtoExpert.new("uet.not_ev", "UDP source port is not an entropy value (49152 and up)",
        expert.group.PROTOCOL, expert.severity.NOTE),
}
uet.experts = { ei.short, ei.snapped, ei.undecoded, ei.not_ev }

local ip_dscp = Field.new("ip.dsfield.dscp")
local data = Dissector.get("data")

local function set(value, mask)
    return bit32.band(value, mask) ~= 0
end

local function wrap32(n)
    return n % 4294967296
end

-- Why `n` bytes at `at` cannot be read, for the info column, or nil if they can.  The frame itself too
-- short is malformed; a frame whole on the wire but cut by the capture's snap length only gets a note.
local function missing(tvb, at, n, tree, what)
    local reported = math.max(tvb:reported_length_remaining(at), 0)
    if reported < n then
        tree:add_proto_expert_info(ei.short, string.format("%s needs %d bytes, %d left", what, n, reported))
        return "[malformed]"
    end
    local captured = math.max(tvb:len() - at, 0)
    if captured < n then
        tree:add_proto_expert_info(ei.snapped, string.format("%s: %d bytes captured of %d", what, captured, n))
        return "[cut by the snap length]"
    end
    return nil
end

-- The innermost IPv4 header's DSCP (the one in front of this UDP datagram), or nil.
local function dscp()
    local all = { ip_dscp() }
    local last = all[#all]
    return last and last.value
end

local function add_ses(tvb, at, tree, info)
    local ses = tree:add(f.ses, tvb(at, SES_LEN))
    ses:set_text("SES standard request")
    local opcode = bit32.band(tvb(at, 1):uint(), 0x3F)
    local flags = tvb(at + 1, 1):uint()
    local som, eom = set(flags, 0x01), set(flags, 0x02)
    ses:add(f.opcode, tvb(at, 1))
    local flag_tree = ses:add(f.ses_flags, tvb(at + 1, 1))
    for _, field in ipairs({ f.version, f.flag_dc, f.flag_ie, f.flag_rel, f.flag_hd, f.flag_eom, f.flag_som }) do
        flag_tree:add(field, tvb(at + 1, 1))
    end
    ses:add(f.message_id, tvb(at + 2, 2))
    ses:add(f.ri_generation, tvb(at + 4, 1))
    ses:add(f.job_id, tvb(at + 5, 3))
    ses:add(f.pid_on_fep, tvb(at + 8, 2))
    ses:add(f.resource_index, tvb(at + 10, 2))
    ses:add(f.buffer_offset, tvb(at + 12, 8))
    ses:add(f.initiator, tvb(at + 20, 4))
    ses:add(f.memory_key, tvb(at + 24, 8))
    if som then
        ses:add(f.header_data, tvb(at + 32, 8))
    else
        ses:add(f.payload_length, tvb(at + 32, 4))
        ses:add(f.message_offset, tvb(at + 36, 4))
    end
    ses:add(f.request_length, tvb(at + 40, 4))
    info[#info + 1] = ses_opcodes[opcode] or string.format("opcode 0x%02x", opcode)
    info[#info + 1] = "msg " .. tvb(at + 2, 2):uint()
    info[#info + 1] = som and "SOM" or ("off " .. tvb(at + 36, 4):uint())
    if eom then
        info[#info + 1] = "EOM"
    end
end

-- A RUD request (`pds_len` 12) or a RUD_CC request (16: with its credit target).
local function add_request(tvb, pds, tree, next_hdr, flags, info, pds_len)
    pds:add(f.clear_psn_offset, tvb(2, 2))
    pds:add(f.psn, tvb(4, 4))
    pds:add(f.spdcid, tvb(8, 2))
    pds:add(f.dpdcid, tvb(10, 2))
    info[#info + 1] = "RUD req PSN " .. tvb(4, 4):uint()
    if pds_len == PDS_CC_REQUEST_LEN then
        pds:add(f.ccc_id, tvb(12, 1))
        pds:add(f.credit_target, tvb(13, 3))
        info[#info + 1] = "target " .. tvb(13, 3):uint()
    end
    if set(flags, 0x10) then
        info[#info + 1] = "RETX"
    end
    if next_hdr ~= SES_STANDARD then
        pds:add_proto_expert_info(ei.undecoded, "next header " .. next_hdr .. ": not the SES standard header")
        return pds_len
    end
    local problem = missing(tvb, pds_len, SES_LEN, tree, "SES standard request header")
    if problem then
        info[#info + 1] = problem
        return nil
    end
    add_ses(tvb, pds_len, tree, info)
    return pds_len + SES_LEN
end

-- A CONTROL packet: fabric-emu sends the credit type only (a receiver's grant).
local function add_control(tvb, pds, ctl_type, info)
    pds:add(f.ctl_type, tvb(0, 2))
    pds:add(f.probe_opaque, tvb(2, 2))
    pds:add(f.control_psn, tvb(4, 4))
    pds:add(f.spdcid, tvb(8, 2))
    pds:add(f.dpdcid, tvb(10, 2))
    if ctl_type == CTL_CREDIT then
        pds:add(f.granted, tvb(12, 4))
        info[#info + 1] = "Credit " .. tvb(12, 4):uint()
    else
        pds:add(f.control_payload, tvb(12, 4))
        info[#info + 1] = "Control " .. (control_types[ctl_type] or ctl_type)
    end
end

local function add_ack(tvb, pds, flags, info)
    local cack = tvb(4, 4):uint()
    local probe = set(flags, 0x08)
    if probe then
        pds:add(f.probe_opaque, tvb(2, 2))
    else
        pds:add(f.ack_psn_offset, tvb(2, 2))
    end
    pds:add(f.cack_psn, tvb(4, 4))
    local ack_psn = wrap32(cack + tvb(2, 2):int())
    if not probe then
        pds:add(f.ack_psn, tvb(2, 2), ack_psn):set_generated()
    end
    pds:add(f.spdcid, tvb(8, 2))
    pds:add(f.dpdcid, tvb(10, 2))
    local cc_type = bit32.rshift(tvb(12, 1):uint(), 4)
    pds:add(f.cc_type, tvb(12, 1))
    pds:add(f.cc_flags, tvb(12, 1))
    pds:add(f.mpr, tvb(13, 1))
    pds:add(f.sack_psn_offset, tvb(14, 2))
    local base = wrap32(cack + tvb(14, 2):int())
    pds:add(f.sack_base, tvb(14, 2), base):set_generated()
    local bitmap = tvb(16, 8):uint64()
    local sack = pds:add(f.sack_bitmap, tvb(16, 8))
    for i = 0, 63 do
        if bitmap:rshift(i):band(1) == UInt64(1) then
            sack:add(f.sack_psn, tvb(16, 8), wrap32(base + i)):set_generated()
        end
    end
    if cc_type == 1 then
        pds:add(f.credit, tvb(24, 3))
    else
        pds:add(f.service_time, tvb(24, 2))
        pds:add(f.restore_cwnd, tvb(26, 1))
        pds:add(f.rcv_cwnd_pend, tvb(26, 1))
        pds:add(f.rcvd_bytes, tvb(27, 3))
    end
    pds:add(f.ooo_count, tvb(30, 2))
    info[#info + 1] = string.format("ACK cack %d ack %s sack 0x%s", cack, probe and "probe" or ack_psn,
        bitmap:tohex())
    if set(flags, 0x20) then
        info[#info + 1] = "ECN"
    end
end

local function add_nack(tvb, pds, flags, info)
    local code = tvb(2, 1):uint()
    pds:add(f.nack_code, tvb(2, 1))
    pds:add(f.vendor_code, tvb(3, 1))
    pds:add(f.nack_psn, tvb(4, 4))
    pds:add(f.spdcid, tvb(8, 2))
    pds:add(f.dpdcid, tvb(10, 2))
    pds:add(f.nack_payload, tvb(12, 4))
    info[#info + 1] = string.format("NACK %s psn %d", nack_codes[code] or string.format("0x%02x", code),
        tvb(4, 4):uint())
    if set(flags, 0x20) then
        info[#info + 1] = "ECN"
    end
end

-- The PDS flags of `pds_type`, as the three public sources name them.
local type_flags = {
    [RUD_REQ] = { f.flag_retx, f.flag_ar, f.flag_syn },
    [RUD_CC_REQ] = { f.flag_retx, f.flag_ar, f.flag_syn },
    [ACK_CC] = { f.flag_m, f.flag_retx, f.flag_p, f.flag_req },
    [NACK] = { f.flag_m, f.flag_retx, f.flag_nt },
    [CONTROL] = { f.flag_retx, f.flag_ar, f.flag_syn },
}
local header_len = {
    [RUD_REQ] = PDS_REQUEST_LEN, [RUD_CC_REQ] = PDS_CC_REQUEST_LEN, [ACK_CC] = ACK_CC_LEN, [NACK] = NACK_LEN,
    [CONTROL] = CONTROL_LEN,
}

-- The EV and the trim, from the headers below UET (the fabric's conventions, not UET's).
local function add_below(root, pinfo)
    if pinfo.dst_port == UET_PORT then
        if pinfo.src_port >= EV_PORT_BASE then
            root:add(f.ev, pinfo.src_port - EV_PORT_BASE):set_generated()
        else
            root:add_proto_expert_info(ei.not_ev)
        end
    end
    local code = dscp()
    local is_trimmed = code == TRIMMED_DSCP
    if code ~= nil then
        root:add(f.trimmed, is_trimmed):set_generated()
    end
    return is_trimmed
end

function uet.dissector(tvb, pinfo, tree)
    pinfo.cols.protocol = "UET"
    local root = tree:add(uet, tvb())
    local is_trimmed = add_below(root, pinfo)
    local info = {}
    -- The info column and the data after the headers (`used` bytes of them; nil when they were cut short).
    local function finish(used)
        if is_trimmed then
            info[#info + 1] = "[trimmed]"
        end
        local text = table.concat(info, " ")
        pinfo.cols.info = text
        root:append_text(", " .. text)
        if used ~= nil and used < tvb:len() then
            data:call(tvb(used):tvb(), pinfo, root)
        end
        return tvb:len()
    end
    local problem = missing(tvb, 0, 2, root, "PDS prologue")
    if problem then
        info[1] = "PDS " .. problem
        return finish(nil)
    end
    local word = tvb(0, 2):uint()
    local pds_type = bit32.rshift(word, 11)
    local next_hdr = bit32.band(bit32.rshift(word, 7), 0x0F)
    local flags = bit32.band(word, 0x7F)
    local len = header_len[pds_type]
    local pds = root:add(f.pds, tvb(0, math.min(len or 2, tvb:len())))
    pds:set_text("PDS " .. (pds_types[pds_type] or ("type " .. pds_type)))
    pds:add(f.pds_type, tvb(0, 2))
    if pds_type ~= CONTROL then -- a CONTROL packet's slot holds its control type
        pds:add(f.pds_next_hdr, tvb(0, 2))
    end
    local flag_tree = pds:add(f.pds_flags, tvb(0, 2))
    for _, field in ipairs(type_flags[pds_type] or {}) do
        flag_tree:add(field, tvb(0, 2))
    end
    if len == nil then
        info[#info + 1] = "PDS " .. (pds_types[pds_type] or ("type " .. pds_type))
        pds:add_proto_expert_info(ei.undecoded, "PDS type " .. pds_type .. ": fabric-emu sends types 2, 8, 10, 11 and 13")
        return finish(2)
    end
    problem = missing(tvb, 0, len, pds, "PDS " .. pds_types[pds_type] .. " header")
    if problem then
        info[#info + 1] = pds_types[pds_type] .. " " .. problem
        return finish(nil)
    end
    if pds_type == RUD_REQ or pds_type == RUD_CC_REQ then
        return finish(add_request(tvb, pds, root, next_hdr, flags, info, len))
    elseif pds_type == ACK_CC then
        add_ack(tvb, pds, flags, info)
    elseif pds_type == CONTROL then
        add_control(tvb, pds, next_hdr, info)
    else
        add_nack(tvb, pds, flags, info)
    end
    return finish(len)
end

DissectorTable.get("udp.port"):add(UET_PORT, uet)
