"""A *different* row's reproducer posted to servers of both sides before it is published.

harness/reproducer.py builds a reproducer from the stored samples alone and shrinks it to what
they suggest suffices (one prompt, the tokens up to the first divergent position). That rests
on an assumption (a position depends only on the tokens before it) that chunked prefill,
long-context RoPE scaling and kernels chosen by length break: a change that bites only above
128 tokens no longer shows in a 2-token cut. So each reproducer is posted to a server of each
side and kept only as far as it still shows the difference:

* the cut the samples suggest (`Form.shortest`) first; if it shows, it is confirmed `repeats`
  times in all;
* if it does not, the whole request as measured (`Form.full`); if that shows, the size is grown
  back by bisection between the two, every cut that no longer shows the difference rejected, and
  the shortest that does confirmed; a request that never shows it is published whole, saying so;
* every request posted (both sides; a reference probe's reproducer goes to the reference
  configuration's server of each side too) counts against `budget`; when it runs out the
  shortest cut that showed the difference so far is kept, and the record says the budget ran out.

Each attempt's answers are read by the reproducer's `Form` (what to compare, and what each side
answered in words): the published expectation is what was observed, never assumed.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Protocol, Sequence

from harness.client import Generation, SGLangClient
from harness.errors import ServerError
from harness.jobs import REPRODUCER_BUDGET
from harness.reproducer import Form, Observed
from harness.results import Reproducer, Request, Role, Verification

# Attempts at the published size: each posts the requests afresh to both sides.
DEFAULT_REPEATS = 2


# One side's answers in request order; for a reference form (`Form.reference`), the pair of
# this configuration's and the reference configuration's; for a form that reads the log
# (`Form.reads_log`), the pair of the answers and the log its server wrote meanwhile.
Answers = (list[Generation | None] | tuple[list[Generation | None], list[Generation | None]]
           | tuple[list[Generation | None], str])


def post_all(client: SGLangClient, requests: Sequence[Request]) -> list[Generation | None]:
    """Each request to one server, in order: a /generate answer (the first of a batch), None
    for a flush; a request that follows an earlier answer carries that answer's own output (a
    replay scores it, a next turn continues it)."""
    answers: list[Generation | None] = []
    for request in requests:
        if request.path == "/flush_cache":
            client.flush_cache()
            answers.append(None)
            continue
        body = request.body or {}
        if request.follows is not None:  # a replay (or a next turn) of what this side's own answer k returned
            k, n = request.follows
            earlier = answers[k]
            # the body holds one side's stored output of request k's max_new_tokens after its first
            # n ids; what comes after that (a next turn's new text) is kept
            stored = int(((requests[k].body or {}).get("sampling_params") or {}).get("max_new_tokens", 0))
            ids = list(body["input_ids"])
            body = {**body, "input_ids": ids[:n] + list(earlier.output_ids if earlier else ()) + ids[n + stored:]}
        ids = body.get("input_ids") or []
        batch = len(ids) if ids and isinstance(ids[0], list) else 1
        answers.append(client.generate_from(body, batch)[0])
    return answers


@dataclasses.dataclass
class _Attempts:
    form: Form
    post: Callable[[Role, Sequence[Request]], Answers]
    budget: int
    calls: int = 0
    tried: list[tuple[int, bool]] = dataclasses.field(default_factory=list)
    seen: dict[int, tuple[Observed, Observed]] = dataclasses.field(default_factory=dict)
    ran_out: bool = False

    def at(self, size: int) -> bool | None:
        """One attempt at `size`: both sides' answers, whether they show the difference (None:
        the budget does not allow it)."""
        requests = self.form.requests(size)
        posts = 2 * self.form.servers_per_side * len(requests)
        if self.calls + posts > self.budget:
            self.ran_out = True
            return None
        self.calls += posts
        base = self.form.read(size, self.post(Role.BASE, requests))
        cand = self.form.read(size, self.post(Role.CANDIDATE, requests))
        shows = self.form.reproduced(base, cand)
        self.tried.append((size, shows))
        # the first attempt at a size is published: what fresh servers answer (`Form.fresh_servers`)
        self.seen.setdefault(size, (base, cand))
        return shows

    def confirm(self, size: int, repeats: int) -> None:
        while sum(s == size for s, _ in self.tried) < repeats and self.at(size) is not None:
            pass

    def count(self, size: int) -> tuple[int, int]:
        at = [shows for s, shows in self.tried if s == size]
        return sum(at), len(at)


def search(form: Form, post: Callable[[Role, Sequence[Request]], Answers], budget: int, repeats: int) -> tuple[int, _Attempts]:
    """The size to publish (the shortest tried that shows the difference, else the whole) and
    the attempts that chose it."""
    tries = _Attempts(form, post, budget)
    shortest, full = form.shortest, max(form.full, form.shortest)
    first = tries.at(shortest)
    if first or shortest == full or first is None:
        tries.confirm(shortest, repeats)
        return shortest, tries
    if not tries.at(full):
        tries.confirm(full, repeats)
        return full, tries
    lo, hi = shortest, full  # lo does not show it, hi does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        shows = tries.at(mid)
        if shows is None:
            break
        lo, hi = (lo, mid) if shows else (mid, hi)
    tries.confirm(hi, repeats)
    return hi, tries


class ServerLog(Protocol):
    """A server's log as verify reads it (harness.server.ServerProcess)."""

    def log_size(self) -> int: ...

    def log_since(self, offset: int) -> str: ...


def verify(rep: Reproducer, clients: dict[Role, SGLangClient], servers: str, budget: int = REPRODUCER_BUDGET,
           repeats: int = DEFAULT_REPEATS, reference: dict[Role, SGLangClient] | None = None,
           logs: Mapping[Role, ServerLog] | None = None) -> Reproducer:
    """`rep` as posted to `clients` (a server per side; `servers`: "still up" or "relaunched"):
    its requests at the size that shows the difference, what each side answered there, and the
    record of every attempt. A reproducer without a form (no requests) is returned as it is.
    A reproducer against a reference configuration (`Form.reference`) is posted to that
    configuration's server of each side too (`reference`), each side's answers read as the pair;
    one whose figure is in the server's log (`Form.reads_log`) reads each side's answers with
    what its server (`logs`) wrote while they were posted."""
    form = rep.form
    if form is None or not rep.requests:
        return rep
    if form.reference and reference is None:
        return not_verified(rep, f"no server of the reference configuration {form.reference} was started", servers,
                            budget)
    if form.reads_log and (logs is None or any(role not in logs for role in clients)):
        return not_verified(rep, "what it decided on is in the servers' logs, and no log of both sides' servers "
                                 "was at hand", servers, budget)

    def post(role: Role, requests: Sequence[Request]) -> Answers:
        if form.reference and reference is not None:  # not None: checked above
            return post_all(clients[role], requests), post_all(reference[role], requests)
        if form.reads_log and logs is not None:  # not None: checked above
            mark = logs[role].log_size()
            answers = post_all(clients[role], requests)
            return answers, logs[role].log_since(mark)
        return post_all(clients[role], requests)

    try:
        size, tries = search(form, post, budget, repeats)
    except ServerError as exc:
        return not_verified(rep, f"a request failed: {exc}", servers, budget)
    except (KeyError, IndexError, TypeError) as exc:  # an answer of another shape than the form reads
        return not_verified(rep, f"an answer could not be read: {type(exc).__name__}: {exc}", servers, budget)
    shown, made = tries.count(size)
    if not made:
        if not tries.tried:
            return not_verified(rep, f"the budget of {budget} requests allows no attempt", servers, budget,
                                ran_out=True)
        # The samples' cut was tried and did not show it: never published as a reproducer.
        tried = ", ".join(f"{form.dimension} {n}: {'shows it' if ok else 'does not'}" for n, ok in tries.tried)
        return dataclasses.replace(
            not_verified(rep, f"the budget of {budget} requests ran out ({tried}); the whole request, untried, "
                              f"is kept", servers, budget, tries.calls, tuple(tries.tried), ran_out=True),
            requests=form.requests(size), re_measurements=tries.calls)
    base, cand = tries.seen[size]
    verification = Verification(
        reproduced=shown, attempts=made, observed=form.words(base, cand),
        tried=tuple(tries.tried), dimension=form.dimension, size=size, calls=tries.calls, budget=budget,
        budget_ran_out=tries.ran_out, servers=servers)
    # Where the samples placed a cached state's divergence holds only where their cut showed it.
    span = rep.position_range if verification.shows and size == form.shortest else None
    return dataclasses.replace(rep, requests=form.requests(size), expect=_expect(rep, verification),
                               shrink=_shrink(rep, verification, form), re_measurements=tries.calls,
                               verification=verification, position_range=span)


def not_verified(rep: Reproducer, why: str, servers: str, budget: int, calls: int = 0,
                 tried: tuple[tuple[int, bool], ...] = (), ran_out: bool = False) -> Reproducer:
    """A reproducer no attempt could check (a server that would not start, a request that
    failed, a budget spent first): saying it was not verified and why."""
    return dataclasses.replace(rep, verification=Verification(
        reproduced=0, attempts=0, observed="", tried=tried, dimension=rep.form.dimension if rep.form else "",
        size=0, calls=calls, budget=budget, budget_ran_out=ran_out, servers=servers,
        error=why))


def _expect(rep: Reproducer, v: Verification) -> str:
    said = v.observed
    if v.shows:
        return f"observed on the servers of both sides ({v.reproduced} of {v.attempts} attempts): {said}"
    if v.reproduced:
        return (f"observed on the servers of both sides, in only {v.reproduced} of {v.attempts} attempts: "
                f"{said} (the first attempt)")
    return (f"NOT reproduced on the servers of both sides (0 of {v.attempts} attempts): {said}; what the run "
            f"measured: {rep.expect}")


def _shrink(rep: Reproducer, v: Verification, form: Form) -> str:
    what = form.dimension or "request"
    ran_out = f"; the budget of {v.budget} requests ran out" if v.budget_ran_out else ""
    tried = ", ".join(f"{s} {'shows it' if ok else 'does not'}" for s, ok in v.tried)
    if not v.reproduced:
        kept = f"the whole request kept ({what} {v.size}), unshrunk" if form.dimension else "the request kept whole"
        return f"Not reproduced on the servers ({v.servers}): {kept}; tried {tried}{ran_out}"
    if v.size == form.shortest:
        return f"{rep.shrink}; verified on the servers ({v.servers}): {v.reproduced} of {v.attempts}{ran_out}"
    return (f"{rep.shrink}, which no longer showed the difference on the servers ({v.servers}): {what} grown "
            f"back to {v.size}, the shortest tried that still shows it ({v.reproduced} of {v.attempts}); tried "
            f"{tried}{ran_out}")

