"""SGLang Decode log lines with the SWA pool fields, for the SWA curve, probe and plot tests."""

from __future__ import annotations

# SGLang 0.5.16 hybrid-SWA Decode lines at --decode-log-interval 1 under DFLASH: one line per
# verify round; eviction every 4 rounds (SGLANG_SWA_EVICTION_INTERVAL=4) with a window of 8.
LOG = """\
[2026-11-30 10:00:00] Prefill batch, #new-seq: 1, #new-token: 20, #cached-token: 0, full token usage: 0.01, swa token usage: 0.05, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 410.2
[2026-11-30 10:00:00] Decode batch, #running-req: 1, #full token: 24, full token usage: 0.01, #swa token: 24, swa token usage: 0.06, accept len: 3.00, accept rate: 0.50, cuda graph: False, gen throughput (token/s): 31.0, #queue-req: 0
[2026-11-30 10:00:00] Decode batch, #running-req: 1, #full token: 26, full token usage: 0.01, #swa token: 10, swa token usage: 0.03, accept len: 2.00, accept rate: 0.25, cuda graph: False, gen throughput (token/s): 30.1, #queue-req: 0
[2026-11-30 10:00:00] Decode batch, #running-req: 1, #full token: 30, full token usage: 0.01, #swa token: 14, swa token usage: 0.04, accept len: 4.00, accept rate: 0.75, cuda graph: False, gen throughput (token/s): 33.4, #queue-req: 0
[2026-11-30 10:00:01] Decode batch, #running-req: 1, #full token: 31, full token usage: 0.01, #swa token: 15, swa token usage: 0.04, accept len: 1.00, accept rate: 0.00, cuda graph: False, gen throughput (token/s): 29.9, #queue-req: 0
[2026-11-30 10:00:01] Decode batch, #running-req: 1, #full token: 34, full token usage: 0.01, #swa token: 18, swa token usage: 0.05, accept len: 3.00, accept rate: 0.50, cuda graph: False, gen throughput (token/s): 31.2, #queue-req: 0
[2026-11-30 10:00:01 TP0] Decode batch [41], #running-req: 1, #full token: 37, full token usage: 0.01, #swa token: 11, swa token usage: 0.03, accept len: 3.00, accept rate: 0.50, cuda graph: False, gen throughput (token/s): 31.0, #queue-req: 0
INFO:     127.0.0.1:50112 - "POST /generate HTTP/1.1" 200 OK
[2026-11-30 10:00:01] Decode batch, #running-req: 1, #full token: 39, full token usage: 0.01, #swa token: 13, swa token usage: 0.03, accept len: 2.00, accept rate: 0.25, cuda graph: False, gen throughput (token/s): 30.0, #queue-req: 0
[2026-11-30 10:00:01] Decode batch, #running-req: 1, #full token: 43, full token usage: 0.01, #swa token: 17, swa token usage: 0.04, accept len: 4.00, accept rate: 0.75, cuda graph: False, gen throughput (token/s): 33.0, #queue-req: 0
"""


def plain_log(steps: int, running: int = 2) -> str:
    """Decode lines without speculative decoding or eviction: held grows with every token."""
    return "\n".join(
        f"[t] Decode batch, #running-req: {running}, #full token: {100 + running * i}, "
        f"full token usage: 0.10, #swa token: {60 + running * i}, swa token usage: 0.{20 + i:02d}, "
        f"cuda graph: False, gen throughput (token/s): 10.0, #queue-req: 0"
        for i in range(steps)
    )


PLAIN_LOG = plain_log(6)
