"""The agents: one per node (switch, or host with its RNIC), many to a data-plane process, their loop and sockets.

They run the models on real frames; the builder configures them and they import nothing above this layer.
"""
