"""Time dilation: a slow emulated link that models a fast real one (sans-I/O).

DieCast (Gupta et al., NSDI 2008): a fabric whose every rate is divided by
D and every time constant multiplied by D behaves as the real fabric does,
D times slower.  fabric-emu emulates at a link rate its machine sustains
(the fidelity monitor says which) and describes the fabric at its real rate,
the *modelled* rate: D = modelled / emulated.

What scales and what does not:

- Times the user writes for the modelled fabric (a link's propagation
  delay) are modelled times: the emulator waits D times as long.
- Sizes and counts do not scale (bytes, frames, PFC quanta, which are bit
  times, credits, ECN thresholds); neither does anything derived from them
  at the emulated rate, such as the RC retransmission timeout (a number of
  windows at the link rate) or the headroom's bytes for the cable.
- The PFC headroom's response allowance is the emulator's own reaction
  time, a property of this machine, so it stays in emulated time (it models
  a reaction D times quicker).
- Measured times (CCT, link-time bound, start skew) are emulated; divided
  by D they are the modelled fabric's.
"""

from __future__ import annotations

from emulator.errors import FabricError
from emulator.units import format_rate

MAX_DILATION = 10**7  # 400 Gbit/s emulated at 40 kbit/s; a second of modelled time would take four months


def dilation(modelled_bps: int, emulated_bps: int) -> float:
    """D = modelled / emulated rate; a modelled rate below the emulated one is refused, as is D above MAX_DILATION."""
    if modelled_bps < emulated_bps:
        raise FabricError(f"modelled rate {format_rate(modelled_bps)} is below the emulated link rate "
                          f"{format_rate(emulated_bps)}: the model is the real (faster) fabric")
    factor = modelled_bps / emulated_bps
    if factor > MAX_DILATION:
        raise FabricError(f"modelled rate {format_rate(modelled_bps)} is {factor:.3g} times the emulated "
                          f"{format_rate(emulated_bps)}: at most {MAX_DILATION:.0e} (raise the link rate)")
    return factor


def emulated_ns(modelled_ns: int, factor: float) -> int:
    """A modelled time constant as the emulator must wait it."""
    return round(modelled_ns * factor)


def modelled_us(emulated_us: float, factor: float) -> float:
    """A measured (emulated) time as the modelled fabric would take it."""
    return emulated_us / factor
