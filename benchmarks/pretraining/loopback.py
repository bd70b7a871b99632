"""A MultiWorkerMirrored cluster of worker processes on 127.0.0.1, for the benchmarks."""

from __future__ import annotations

import socket
from typing import Dict, List


def cluster(num_workers: int) -> Dict[str, List[str]]:
    """{"worker": ["127.0.0.1:port", ...]} with free ports (picked now, bound by the workers)."""
    ports = []
    for _ in range(num_workers):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    return {"worker": [f"127.0.0.1:{p}" for p in ports]}
