"""detcheck's parsers on the forms SGLang 0.5.16 really writes (lines taken from the H200 runs
under results/h200/): rank prefixes, zero-token Decode lines after a request finishes,
Prometheus label values holding `}`, absent spec_* keys and null logprobs."""

from __future__ import annotations

from harness.client import Generation, parse_prometheus, parse_prometheus_samples
from harness.logparse import by_dp_rank, decode_series, parse_batch_lines

# results/h200/swa-dflash: the end of one request (two zero-token lines around the answer)
TAIL = """\
[2026-11-30 05:00:47] Decode batch, #running-req: 1, #full token: 3077, full token usage: 0.05, #swa token: 3077, swa token usage: 0.47, accept len: 1.00, accept rate: 0.00, cuda graph: False, gen throughput (token/s): 42.71, #queue-req: 0
[2026-11-30 05:00:47] Decode batch, #running-req: 1, #full token: 0, full token usage: 0.00, #swa token: 0, swa token usage: 0.00, accept len: 1.00, accept rate: 0.00, cuda graph: False, gen throughput (token/s): 36.48, #queue-req: 0
[2026-11-30 05:00:47] INFO:     127.0.0.1:59326 - "POST /generate HTTP/1.1" 200 OK
[2026-11-30 05:00:47] Decode batch, #running-req: 1, #full token: 0, full token usage: 0.00, #swa token: 0, swa token usage: 0.00, accept len: 1.00, accept rate: 0.00, cuda graph: False, gen throughput (token/s): 667.74, #queue-req: 0
[2026-11-30 05:01:53] Decode batch, #running-req: 16, #token: 4962, token usage: 0.08, cuda graph: False, gen throughput (token/s): 187.38, #queue-req: 0
"""

DP = """\
[2026-11-30 06:00:00 DP0 TP0] Decode batch, #running-req: 2, #full token: 90, full token usage: 0.00, #swa token: 40, swa token usage: 0.01, cuda graph: False, gen throughput (token/s): 10.00, #queue-req: 0
[2026-11-30 06:00:00 DP1 TP1] Decode batch, #running-req: 1, #full token: 60, full token usage: 0.00, #swa token: 33, swa token usage: 0.01, cuda graph: False, gen throughput (token/s): 10.00, #queue-req: 0
[2026-11-30 06:00:01 DP0 TP0] Decode batch, #running-req: 2, #full token: 92, full token usage: 0.00, #swa token: 42, swa token usage: 0.01, cuda graph: False, gen throughput (token/s): 10.00, #queue-req: 0
[2026-11-30 06:00:01 DP1 TP1] Prefill batch, #new-seq: 1, #new-token: 5, #cached-token: 0, full token usage: 0.00, swa token usage: 0.00, #running-req: 1, #queue-req: 0, #pending-token: 12, cuda graph: False, input throughput (token/s): 5.00
"""


def test_zero_token_lines_are_marked_released():
    lines = parse_batch_lines(TAIL, include_released=True)
    assert [line.released for line in lines] == [False, True, True, False]
    assert lines[3].held_tokens == 4962  # the plain-pool form (#token)
    assert [line.held_tokens for line in parse_batch_lines(TAIL)] == [3077, 4962]
    assert decode_series(TAIL, "#swa token") == [3077]
    assert decode_series(TAIL, "#swa token", include_released=True) == [3077, 0, 0]


def test_dp_rank_prefixes():
    lines = parse_batch_lines(DP)
    assert [(line.dp_rank, line.tp_rank) for line in lines] == [(0, 0), (1, 1), (0, 0), (1, 1)]
    groups = by_dp_rank(lines)
    assert [line.get("#swa token") for line in groups[0]] == [40, 42]
    assert decode_series(DP, "#swa token", dp_rank=1) == [33]
    assert lines[3].get("#pending-token") == 12
    assert parse_batch_lines(TAIL)[0].dp_rank is None


def test_prometheus_labels_of_sglang_0_5_16():
    text = (
        '# HELP sglang:num_running_reqs The number of running requests.\n'
        '# TYPE sglang:num_running_reqs gauge\n'
        'sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m{1}",'
        'moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.0\n'
        'sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="a \\"q\\" }",'
        'moe_ep_rank="0",pp_rank="0",tp_rank="1"} 1.0\n'
        'sglang:num_retracted_requests_total{model_name="m"} 3.0 1700000000000\n'
    )
    assert parse_prometheus(text) == {"sglang:num_running_reqs": 3.0,
                                      "sglang:num_retracted_requests_total": 3.0}
    samples = parse_prometheus_samples(text)
    assert samples[1][1]["model_name"] == 'a "q" }' and samples[1][1]["dp_rank"] == "1"


def test_generation_without_spec_keys_and_with_null_logprobs():
    g = Generation((5,), {"input_token_logprobs": [[None, 4, None], [-1.5, 5, None]],
                          "output_token_logprobs": [[-0.25, 5, None], [None, 6, None]],
                          "completion_tokens": 1})
    assert g.input_logprobs == [None, -1.5]
    assert g.output_logprobs == [-0.25, None]  # no float(None)
    assert g.spec_verify_ct is None and g.spec_accept_length is None and g.spec_accept_rate is None
    s = Generation((5, 6), {"spec_verify_ct": 2, "spec_accept_length": 1.0})
    assert s.spec_verify_ct == 2 and s.spec_accept_length == 1.0
