"""Kernel plumbing: network namespaces, tc qdiscs and pause gates, ethtool, RPS, timerfd, processes."""
