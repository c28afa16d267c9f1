"""Built-in topologies, in the Mininet ``--custom`` convention.

``topos`` maps the name used in a spec (``fattree,4``) to its ``Topo``
class, exactly like the ``topos`` dict of a file given to ``mn --custom``.
Importing this package only defines classes: no side effects.
"""

from topologies.fabrics import (DumbbellTopo, FatTreeTopo, LeafSpineTopo,
                                RingTopo, StarTopo)

__all__ = ["DumbbellTopo", "FatTreeTopo", "LeafSpineTopo", "RingTopo",
           "StarTopo", "topos"]

topos = {
    "dumbbell": DumbbellTopo,
    "fattree": FatTreeTopo,
    "leafspine": LeafSpineTopo,
    "ring": RingTopo,
    "star": StarTopo,
}
