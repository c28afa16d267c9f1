"""Applications on an emulated fabric: the verbs client, perf, iperf3, the JSON-lines channel."""
