"""SGLang log lines → numbers (both the current and the older `Prefill batch.` form)."""

from __future__ import annotations

from harness.client import parse_prometheus
from harness.logparse import Retraction, decode_series, last_exception, parse_batch_lines, retractions

LOG = """\
[2026-11-30 10:00:00] Prefill batch, #new-seq: 1, #new-token: 12, #cached-token: 4, full token usage: 0.00, swa token usage: 0.01, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 123.4
[2026-11-30 10:00:01] Decode batch, #running-req: 1, #full token: 40, full token usage: 0.00, #swa token: 33, swa token usage: 0.02, accept len: 3.25, accept rate: 0.75, cuda graph: True, gen throughput (token/s): 55.1, #queue-req: 0
[2026-11-30 10:00:01 TP0] Decode batch [17], #running-req: 1, #full token: 41, full token usage: 0.00, #swa token: 35, swa token usage: 0.02, cuda graph: True, gen throughput (token/s): 56.0, #queue-req: 0
[2026-11-30 10:00:02] Prefill batch. #new-seq: 2, #new-token: 7, #cached-token: 0, token usage: 0.10, #running-req: 1, #queue-req: 0
unrelated line with #swa token: 999
"""


def test_prefill_and_decode_fields():
    lines = parse_batch_lines(LOG)
    assert [l.kind for l in lines] == ["prefill", "decode", "decode", "prefill"]
    assert lines[0].get("#cached-token") == 4
    assert lines[1].get("accept len") == 3.25
    assert lines[1].get("cuda graph") == 1.0
    assert lines[3].get("#new-seq") == 2


def test_decode_series_ignores_other_lines():
    assert decode_series(LOG, "#swa token") == [33, 35]
    assert decode_series(LOG, "accept len") == [3.25]


def test_prometheus_sums_label_sets():
    text = ('# HELP sglang:cached_tokens_total x\n'
            'sglang:cached_tokens_total{cache_source="device"} 5.0\n'
            'sglang:cached_tokens_total{cache_source="host"} 2.0\n'
            'sglang:swa_used_tokens 381\nother_metric 1\n')
    assert parse_prometheus(text) == {"sglang:cached_tokens_total": 7.0, "sglang:swa_used_tokens": 381.0}


def test_last_exception_names_the_last_typed_error():
    log = ("Traceback (most recent call last):\n"
           "torch.OutOfMemoryError: CUDA out of memory\n"
           "ValueError: first\n"
           "  File \"x.py\", line 3\n"
           "RuntimeError: error encountered during parsing\n")
    assert last_exception(log) == "RuntimeError: error encountered during parsing"


def test_a_bare_exception_with_a_message_is_the_reason():
    # SGLang 0.5.16's CUDA-graph runner wraps a capture failure in a bare Exception.
    log = ("RuntimeError: error encountered during parsing\n"
           "    raise Exception(\n"
           "Exception: Capture cuda graph failed: error encountered during parsing\n")
    assert last_exception(log) == "Exception: Capture cuda graph failed: error encountered during parsing"


def test_a_bare_exception_without_a_message_is_passed_over():
    assert last_exception("KeyError: 0\nException\nError\n") == "KeyError: 0"
    assert last_exception("all fine\n") is None


def test_retractions_carry_the_pools_of_the_decode_line_before_them():
    log = ("[t] Decode batch, #running-req: 8, #full token: 90000, full token usage: 0.23, "
           "#swa token: 39990, swa token usage: 0.99, cuda graph: True, gen throughput (token/s): 900.0\n"
           "[t] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 11000, "
           "#new_token_ratio: 0.3000 -> 0.5000\n"
           "[t] Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 0\n")
    (event,) = retractions(log)
    assert event == Retraction(requests=1, swa_tokens=39990.0, full_tokens=90000.0)
    assert retractions("KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_token_ratio: 0.1 -> 0.3") \
        == [Retraction(2, None, None)]


def test_kv_canary_violations_are_read_line_by_line():
    from harness.logparse import canary_violations

    line = ("kv_canary violation: launch_tag=SWEEP_FULL fail_reason=real_kv_hash slot_idx=86 position=86 "
            "stored_token=165 expected_token=165 stored_chain_hash=0x00016fb5 expected_aux=0x0001a5d6")
    text = f"[2026-12-04 23:03:14 TP0] {line}\n[2026-12-04 23:03:14] Decode batch. #running-req: 1\n" \
           f"[2026-12-04 23:03:15 TP0] {line.replace('86', '87')}\nKV cache canary violation detected (kernel_kind=verify)\n"
    assert canary_violations(text) == [line, line.replace("86", "87")]
    assert canary_violations("install_canary: disaggregation_mode=null config=CanaryConfig(mode=log)") == []


def test_no_canary_violation_falls_between_two_cells(tmp_path):
    # One logged at warm-up or between two probes (after one cell read the log, before the next
    # probe's mark) was read by no cell: a server whose canary fired there passed.
    from harness.pipeline.outcome import unread_canary_violations
    from harness.server import ServerProcess

    log = tmp_path / "server.log"
    log.write_text("another server's line: kv_canary violation: launch_tag=A fail_reason=x\n")
    server = ServerProcess(argv=["-m", "refserver"], env={}, log_path=log, port=1, log_start=log.stat().st_size)
    violation = "kv_canary violation: launch_tag=SWEEP_FULL fail_reason=real_kv_hash slot_idx={} position={}"
    with open(log, "a") as f:
        f.write(f"warm-up\n{violation.format(3, 3)}\n")
    assert unread_canary_violations(server) == [violation.format(3, 3)]  # the first cell: since the start
    with open(log, "a") as f:
        f.write(f"{violation.format(9, 9)}\n")  # after that cell, before the next probe began
    assert unread_canary_violations(server) == [violation.format(9, 9)]
    assert unread_canary_violations(server) == []  # each line in one cell only
