"""The pipeline's stages, one module each, in the order a stage may import them (an earlier
stage never imports a later one: tests/test_layering.py):

    slots, start_order  server slots and which waiting unit starts next (no run state)
    plan                configurations × probes from the suite and the request, units, cell order
    open                `Run`; open_run: everything that fails on bad input, before any launch
    outcome             how one probe ends on one job; each cell recorded as it exists
    steps               one job's JOB_STEPS: reuse → environment → flags → launch → probes
    verify_relaunched   a *different* row's reproducer posted to servers of both sides
    interleave          both jobs of a configuration up at once, rounds alternating; looks
    schedule            every unit of the runs on their slots, in the start order
    finish              compare base vs candidate, results.json

harness.run chains them: execute = open → schedule → verify_relaunched → finish.
"""
