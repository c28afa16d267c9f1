"""The agents: one process per node (switch, or host with its RNIC), their event loop and sockets.

They run the models on real frames; the builder configures them and they import nothing above this layer.
"""
