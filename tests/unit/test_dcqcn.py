"""DCQCN's notification and reaction points on a fake clock (emulator._core.dcqcn), and its settings and
``--cc`` option (emulator.model.dcqcn)."""

from __future__ import annotations

import pytest

from emulator._core.dcqcn import NotificationPoint, ReactionPoint
from emulator.errors import FabricError
from emulator.model.dcqcn import DcqcnParams, at_link, check_link, parse_cc

LINE = 40_000_000_000
US = 1000


def test_cnp_at_most_once_per_interval_per_qp():
    np_ = NotificationPoint(interval_ns=50 * US)
    assert np_.on_ce(0, qpn=0x11)
    assert not np_.on_ce(49_999, qpn=0x11)
    assert np_.on_ce(10, qpn=0x12)  # another QP has its own interval
    assert np_.on_ce(50 * US, qpn=0x11)
    assert not np_.on_ce(60 * US, qpn=0x11)
    assert (np_.ce_received, np_.cnps) == (5, 3)
    np_.forget(0x11)
    assert np_.on_ce(61 * US, qpn=0x11)


def test_first_cnp_halves_the_rate_and_keeps_alpha_at_one():
    rp = ReactionPoint(DcqcnParams(), LINE)
    assert not rp.limited and rp.next_deadline() is None and rp.may_send(0)
    rp.on_cnp(1000)
    assert rp.rate_bps == LINE // 2 and rp.target_bps == LINE
    assert rp.alpha == pytest.approx(1.0)
    assert rp.limited and rp.next_deadline() == 1000 + 55 * US


def test_second_cnp_cuts_by_half_of_alpha():
    p = DcqcnParams(g=1 / 16)
    rp = ReactionPoint(p, LINE)
    rp.on_cnp(0)
    rp.on_timer(55 * US)  # one alpha period without a CNP, and one increase event (fast recovery)
    alpha = 1 - 1 / 16
    assert rp.alpha == pytest.approx(alpha)
    rate = rp.rate_bps
    assert rate == (LINE + LINE // 2 + 1) // 2
    rp.on_cnp(60 * US)
    assert rp.target_bps == rate
    assert rp.rate_bps == round(rate * (1 - alpha / 2))
    assert rp.alpha == pytest.approx((1 - p.g) * alpha + p.g)


def test_alpha_decays_by_one_minus_g_each_period_without_cnp():
    p = DcqcnParams(g=1 / 256, increase_period_ns=10**12)  # keep the rate limited throughout
    rp = ReactionPoint(p, LINE)
    rp.on_cnp(0)
    rp.on_timer(10 * 55 * US + 1)  # late: ten periods served at once
    assert rp.alpha == pytest.approx((1 - 1 / 256) ** 10)
    assert rp.alpha_deadline == 11 * 55 * US


def test_fast_recovery_halves_the_gap_to_the_target_f_times():
    p = DcqcnParams(fast_recovery=5, byte_counter=1 << 40)
    rp = ReactionPoint(p, LINE)
    rp.on_cnp(0)
    rate = LINE // 2
    for k in range(1, 6):
        rp.on_timer(k * 55 * US)
        rate = (LINE + rate + 1) // 2
        assert (rp.rate_bps, rp.target_bps) == (rate, LINE), k
    assert rp.counters["increases"] == 5


def test_additive_then_hyper_increase():
    p = DcqcnParams(fast_recovery=2, rai_bps=10_000_000, rhai_bps=100_000_000, byte_counter=1000,
                    alpha_period_ns=10**12)
    line = 1_000_000_000
    rp = ReactionPoint(p, line)
    rp.on_cnp(0)
    rp.on_timer(1)  # nothing due
    rp.on_cnp(1)  # a second cut: the target is now below the line rate
    target = rp.target_bps
    assert target < line
    # Timer events only (T = 1, 2: fast recovery; T = 3 with BC = 0: additive).
    for k in (1, 2):
        rp.on_timer(1 + k * 55 * US)
        assert rp.target_bps == target
    rp.on_timer(1 + 3 * 55 * US)
    assert rp.target_bps == target + p.rai_bps
    # Byte events until BC > F too: hyper increase.
    target = rp.target_bps
    for _ in range(4):
        rp.on_sent(2 * 10**6, 1000)
    assert rp.byte_events == 4
    # Counted before each event: (T, BC) = (3, 0), (3, 1), (3, 2) additive; (3, 3), both past F: hyper.
    assert rp.target_bps == target + 3 * p.rai_bps + p.rhai_bps


def test_pacing_follows_the_current_rate():
    rp = ReactionPoint(DcqcnParams(), 1_000_000_000)
    rp.on_sent(0, 1000)
    assert rp.may_send(0)  # not limited: the line's own pace
    rp.on_cnp(0)
    assert rp.rate_bps == 500_000_000
    rp.on_sent(100, 1000)  # 8000 bits at 500 Mbit/s: 16 us
    assert rp.ready_at == 100 + 16_000
    assert not rp.may_send(16_099) and rp.may_send(16_100)
    rp.on_sent(20_000, 500)  # from when it actually left
    assert rp.ready_at == 20_000 + 8_000


def test_the_limiter_lets_go_at_the_line_rate_and_alpha_keeps_decaying():
    p = DcqcnParams(g=1 / 16, fast_recovery=1000)
    rp = ReactionPoint(p, 1_000_000)
    rp.on_cnp(0)
    t = 0
    while rp.limited:
        t += 55 * US
        rp.on_timer(t)
        assert t < 10**9, "never released"
    assert rp.rate_bps == rp.target_bps == 1_000_000
    assert rp.next_deadline() is None and rp.may_send(0) and rp.counters["released"] == 1
    alpha_then = rp.alpha
    since = rp._alpha_since
    rp.on_cnp(since + 7 * 55 * US)  # seven silent periods after the last decay
    assert rp.alpha == pytest.approx(alpha_then * (1 - 1 / 16) ** 7 * (1 - 1 / 16) + 1 / 16)


def test_the_rate_never_falls_below_the_minimum():
    rp = ReactionPoint(DcqcnParams(min_rate_bps=300_000_000, increase_period_ns=10**12), 1_000_000_000)
    for k in range(5):
        rp.on_cnp(k)
    assert rp.rate_bps == 300_000_000


def test_emulated_scales_times_up_and_rates_down():
    p = DcqcnParams().emulated(2000)
    assert (p.cnp_interval_ns, p.alpha_period_ns, p.increase_period_ns) == (100_000_000, 110_000_000, 110_000_000)
    assert (p.rai_bps, p.rhai_bps, p.min_rate_bps, p.reference_bps) == (20_000, 100_000, 500, 20_000_000)
    assert (p.byte_counter, p.g, p.fast_recovery) == (10_000_000, 1 / 256, 5)


def test_parse_cc():
    assert parse_cc("none") is None
    assert parse_cc("dcqcn") == DcqcnParams()
    p = parse_cc("dcqcn, rai=5mbit,rhai=50mbit,cnp_interval=4us,g=0.005,f=1,byte_counter=32767,increase_period=300us")
    assert (p.rai_bps, p.rhai_bps, p.cnp_interval_ns, p.g, p.fast_recovery, p.byte_counter, p.increase_period_ns) == (
        5_000_000, 50_000_000, 4000, 0.005, 1, 32767, 300_000)


@pytest.mark.parametrize("text, message", [
    ("cubic", "unknown congestion control 'cubic'"),
    ("none,g=1", "takes no options"),
    ("dcqcn,x=1", "unknown dcqcn option 'x'"),
    ("dcqcn,g", "expected key=value"),
    ("dcqcn,g=abc", "bad dcqcn g 'abc'"),
    ("dcqcn,g=2", "bad dcqcn g 2.0: expected 1e-06 to 1"),
    ("dcqcn,rai=0", "dcqcn rai: bad rate '0'"),
    ("dcqcn,cnp_interval=2h", "dcqcn cnp_interval: bad time '2h'"),
    ("dcqcn,cnp_interval=100000s", "bad dcqcn cnp_interval_ns 100000000000000: expected 1 to 8.64e"),
    ("dcqcn,f=-1", "bad dcqcn fast_recovery -1"),
    (5, "bad congestion control 5"),
])
def test_parse_cc_refuses_in_one_line(text, message):
    with pytest.raises(FabricError, match=message) as err:
        parse_cc(text)
    assert "\n" not in str(err.value)


def test_a_time_in_range_as_written_but_not_once_dilated_is_one_line():
    """60 s is within a day; waited D = 2000 times it is 33 hours: one line, not the constructor's ValueError."""
    with pytest.raises(FabricError, match=r"^dcqcn cnp_interval 60 s is 120000 s at time dilation D = 2000 \(times x D\), "
                                          r"over the 86400 s a DCQCN time may be: lower it, or D$"):
        parse_cc("dcqcn,cnp_interval=60s").emulated(2000)
    with pytest.raises(FabricError, match="^dcqcn increase_period 86400 s is"):
        at_link(parse_cc("dcqcn,increase_period=86400s"), 20_000_000)  # D = 40 Gbit/s / 20 Mbit/s
    assert parse_cc("dcqcn,cnp_interval=43s").emulated(2000).cnp_interval_ns == 86_000 * 10**9


def test_the_timers_are_at_least_one_frame_of_the_link():
    """A 4,214-byte frame at 20 Mbit/s is 1.69 ms; D = 2000 makes it 843 ns as written."""
    check_link(DcqcnParams(), 20_000_000, 4200)  # the authors' 55 us is 110 ms there
    check_link(parse_cc("dcqcn,alpha_period=843ns,increase_period=843ns,cnp_interval=1ns"), 20_000_000, 4200)
    for key in ("alpha_period", "increase_period"):
        with pytest.raises(FabricError, match=rf"^dcqcn {key} 842 ns is shorter than one 4214-byte frame at the link "
                                              r"rate, 843 ns \(D = 2000: 1.69 ms on the 20 Mbit/s link\); a timer"):
            check_link(parse_cc(f"dcqcn,{key}=842ns"), 20_000_000, 4200)
    # with a modelled rate the fabric's D counts: 400 Gbit/s over 20 Mbit/s, a frame is 85 ns as written
    check_link(parse_cc("dcqcn,alpha_period=85ns"), 20_000_000, 4200, 20_000.0)
    with pytest.raises(FabricError, match="alpha_period 84 ns is shorter"):
        check_link(parse_cc("dcqcn,alpha_period=84ns"), 20_000_000, 4200, 20_000.0)


def test_the_floor_a_refusal_advises_is_accepted():
    """The advice was rounded to two decimals (3.37 us) below the floor it checks (3372 ns), and so refused."""
    with pytest.raises(FabricError) as refused:
        check_link(parse_cc("dcqcn,alpha_period=1ns"), 100_000_000, 4200, 100.0)
    advised = str(refused.value).rsplit("set at least ", 1)[1].replace(" ", "")
    check_link(parse_cc(f"dcqcn,alpha_period={advised}"), 100_000_000, 4200, 100.0)
