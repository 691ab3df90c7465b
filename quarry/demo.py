"""``quarry demo``: the main job on the embedded defaults.

1. Builds the shipped sample corpus (3 tenants) into per-tenant indexes with the PySpark
   build job (``quarry.jobs.build``), or the in-process build when Spark is unavailable.
2. Starts the Serve application in this process on a free loopback port.
3. Runs a scripted agent over real HTTP (httpx) with a freshly minted token:
   - a run; a search ("Does the Pro plan include SSO?") as a globex all-staff user;
   - it notices the pricing footnote pointing at the Security add-on page and searches
     again, informed by it;
   - it submits an answer whose claims quote the returned excerpts exactly, and shows the
     server's four citation checks (read from the protected trace with an operator token);
   - one honest abstention on a question the corpus cannot answer: the generic message
     to the user, the reason code only in the trace;
   - the Acme question of seed 000 §11.7 as an acme all-staff user: the response's decision
     record (governing, supporting, rejected with the id that defeats each, unresolved), the honest
     answer built from that record alone, and an answer citing the rejected ticket comment,
     which the server refuses with check 5 (``cites_rejected_evidence``, only in the trace).
4. Shuts Serve and Ray down.
"""

from __future__ import annotations

import re
import secrets
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from quarry.core.agent.citations import ABSTENTION_MESSAGE, CHECK_NAMES
from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
from quarry.core.embed.factory import build_embedder
from quarry.core.ingest.pipeline import build_corpus
from quarry.core.ingest.sources import SAMPLE_CORPUS, load_documents
from quarry.core.text.units import split_sentences

DEFAULT_ROOT = "var/demo-index"
TENANT, GROUPS = "globex", ("all-staff",)
QUESTION = "Does the Pro plan include SSO?"
FOLLOW_UP = "Security add-on SSO price"
UNANSWERABLE = "Can Globex settle payouts in Japanese yen (JPY)?"
UNANSWERABLE_RETRY = "JPY yen payout currency"
UNANSWERABLE_TERMS = ("jpy", "yen")  # what an answer would have to mention
ACME_TENANT, ACME_GROUPS = "acme", ("all-staff",)
ACME_QUESTION = "Which settlement cutoff applies to Acme's Monday EUR batch on 19 January?"  # seed 000 §11.7
ACME_VALID_AT = "2026-01-19"
ACME_SUBJECT = "EUR cutoff"  # the phrase a sentence stating the value holds
_TIME = re.compile(r"\b\d{1,2}:\d{2}\b")


def add_arguments(p) -> None:
    p.add_argument("--index-root", default=DEFAULT_ROOT, help=f"where to build the indexes (default {DEFAULT_ROOT})")
    p.add_argument("--embedder", default=None,
                   help="'hashing' (fast, lexical-ish vectors) or a local sentence-transformers dir "
                        "(default: the packaged all-MiniLM-L6-v2)")
    p.add_argument("--build", choices=("auto", "spark", "in-process"), default="auto",
                   help="auto: the Spark build job when pyspark is installed, else the in-process build")
    p.add_argument("--port", type=int, default=0, help="loopback port for the endpoint (default: a free one)")
    p.add_argument("--ray-cpus", type=int, default=2, help="CPUs the in-process Ray may schedule (default 2)")


# ----------------------------------------------------------------------------- printing

def _say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def _step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def _show_search(body: dict[str, Any], width: int = 220) -> None:
    for i, e in enumerate(body["excerpts"], 1):
        text = " ".join(e["text"].split())
        print(f"  [{i}] {e['passage_id']}  ({e['doc_type']}, authority {e['authority']}, trust {e['trust']})")
        print(f"      {e['title']}: " + textwrap.shorten(text, width, placeholder=" ..."))
    if not body["excerpts"]:
        print(f"  (no excerpts) {body['message']}")
    print("  stages: " + ", ".join(f"{s['name']}={s['kept']}" + (f" ({s['note']})" if s["note"] else "")
                                   for s in body["stages"]))
    print(f"  generation {body['generation']}, {body['delivered_tokens']} tokens, "
          f"new passages {len(body['new_passage_ids'])}, searches left: {body['searches_left']}")


# ----------------------------------------------------------------------------- build

def build(index_root: str, embedder: str | None, mode: str) -> str:
    """Build and publish the sample corpus; returns which build ran."""
    use_spark = mode == "spark"
    if mode == "auto":
        try:
            import pyspark  # noqa: F401

            from quarry.jobs.build import run_build  # noqa: F401  (needs pyspark: deferred)

            use_spark = True
        except ImportError as e:
            _say(f"Spark build unavailable ({e}); using the in-process build")
    t = time.perf_counter()
    if use_spark:
        from quarry.jobs.build import run_build  # needs pyspark: deferred
        from quarry.jobs.build_settings import BuildSettings

        spec = "hashing" if embedder == "hashing" else (embedder or "default")
        _say(f"building {SAMPLE_CORPUS} with the PySpark build job (local[2], embedder {spec}) ...")
        report = run_build(BuildSettings(source=str(SAMPLE_CORPUS), index_root=index_root, master="local[2]",
                                         embedder=spec, partitions=2, quiet=True))
        gens = {t_: tr.generation for t_, tr in sorted(report.tenants.items())}
        _say(f"Spark build: {report.documents} documents, {report.quarantined} quarantined, {report.passages} passages")
        which = "spark"
    else:
        emb = build_embedder(embedder)
        docs, bad = load_documents(SAMPLE_CORPUS)
        _say(f"building {len(docs)} documents ({len(bad)} quarantined) with the in-process build ...")
        gens = build_corpus(docs, index_root, emb, ExtractiveContextualizer())
        which = "in-process"
    _say(f"published {', '.join(f'{k} gen-{v}' for k, v in gens.items())} under {Path(index_root).resolve()} "
         f"in {time.perf_counter() - t:.1f}s ({which} build)")
    return which


# ----------------------------------------------------------------------------- the agent

def _pieces(text: str) -> list[str]:
    """The sentences of each line of ``text`` (a table row is a line): exact slices, so a
    quote taken from one passes the citation check."""
    return [s for line in text.split("\n") for s in split_sentences(line)]


def _sentence_with(text: str, phrase: str) -> str | None:
    """The sentence (or table row) of ``text`` holding ``phrase``, footnote markers removed."""
    for piece in _pieces(text):
        if phrase.lower() in piece.lower():
            return re.sub(r"^\s*(\[\d+\]\s*)+", "", piece).strip().rstrip(".")
    return None


class Agent:
    """A scripted agent: the decisions an LLM would make, written as code so the demo is
    deterministic. It only sees what the HTTP API returns."""

    def __init__(self, http, token: str, operator_token: str):
        self.http, self.token, self.op = http, token, operator_token

    def _h(self, run: str | None = None) -> dict[str, str]:
        h = {"Authorization": f"Bearer {self.token}"}
        if run:
            h["X-Quarry-Run"] = run
        return h

    def new_run(self) -> str:
        r = self.http.post("/v1/runs", headers=self._h())
        r.raise_for_status()
        body = r.json()
        print(f"  run {body['run_id']} (budget {body['budget']}, searches left: {body['searches_left']})")
        return body["run_id"]

    def search(self, run: str, query: str, top_k: int = 4, valid_at: str | None = None) -> dict[str, Any]:
        print(f"  search({query!r}, top_k={top_k}" + (f", valid_at={valid_at!r})" if valid_at else ")"))
        body = {"query": query, "top_k": top_k, **({"valid_at": valid_at} if valid_at else {})}
        r = self.http.post("/v1/search", headers=self._h(run), json=body)
        r.raise_for_status()
        body = r.json()
        _show_search(body)
        return body

    def answer(self, run: str, payload: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post("/v1/answer", headers=self._h(run), json=payload)
        r.raise_for_status()
        return r.json()

    def fetch(self, run: str, id_: str) -> dict[str, Any] | None:
        r = self.http.post("/v1/fetch", headers=self._h(run), json={"id": id_})
        return r.json() if r.status_code == 200 else None

    def trace(self, trace_id: str) -> dict[str, Any]:
        r = self.http.get(f"/v1/trace/{trace_id}", headers={"Authorization": f"Bearer {self.op}"})
        r.raise_for_status()
        return r.json()


def show_decision(decision: dict[str, Any]) -> None:
    print(f"  decision record (valid at {decision['valid_at']}):")
    for x in decision["governing"]:
        print(f"    governing   {x['passage_id']}  ({x['reason']})")
    for x in decision["supporting"]:
        print(f"    supporting  {x['passage_id']}  ({x['reason']})")
    for x in decision["rejected"]:
        print(f"    rejected    {x['passage_id']}  {x['reason']}" + (f" by {x['by']}" if x["by"] else ""))
    for x in decision["unresolved"]:
        print(f"    unresolved  {' vs '.join(x['passage_ids'])}  ({x['reason']})")
    if not decision["unresolved"]:
        print("    unresolved  none")


def _value(text: str, *phrases: str) -> str | None:
    """The time stated in the sentence of ``text`` that holds one of ``phrases``."""
    pieces = _pieces(text)
    for ph in phrases:
        for piece in pieces:
            m = _TIME.search(piece) if ph.lower() in piece.lower() else None
            if m:
                return m.group(0)
    return None


def honest_response(decision: dict[str, Any], passages: dict[str, dict[str, Any]]) -> str | None:
    """The seed's honest answer, built from the decision record alone: each rejected source
    with what it claimed and what defeats it, then the governing value. ``passages`` maps the
    record's ids to what the agent read (the excerpts, or a fetch for a follow-up's id)."""
    stating = [x for x in decision["governing"] if _value(passages.get(x["passage_id"], {}).get("text", ""),
                                                           ACME_SUBJECT)]
    if not stating:
        return None
    best = min(stating, key=lambda x: -passages[x["passage_id"]]["authority_rank"])  # the higher authority
    gov = passages[best["passage_id"]]
    value = _value(gov["text"], ACME_SUBJECT)
    parts = []
    for x in decision["rejected"]:
        p, by = passages.get(x["passage_id"]), passages.get(x["by"] or "")
        claimed = _value(p["text"], "until", "cutoff") if p else None
        if p is None or claimed is None:
            continue
        if x["reason"] == "condition_ended" and by is not None:
            events = by.get("events") or []
            proof = (f"says {events[0]['what']} on {events[0]['on']}" if events else
                     f"says: {_sentence_with(by['text'], 'completed') or 'the condition ended'}")
            parts.append(f"the {p['title']} says {claimed} {p.get('condition') or 'under a condition'}, "
                         f"while the {by['title']} {proof}")
        elif x["reason"] == "superseded_by" and by is not None:
            parts.append(f"the {p['title']} says {claimed} but is superseded by the {by['title']}")
        else:
            parts.append(f"the {p['title']} says {claimed} but was rejected ({x['reason']})")
    if not parts:
        return f"The {gov['title']} sets {value}; no source in this search contradicts it."
    said = "; ".join(parts)
    return (f"{said[0].upper()}{said[1:]}; and the {gov['title']} sets {value}. I therefore resolve the cutoff "
            f"to {value}; confirm whether the rollout record is authoritative before executing.")


def acme_case(agent: "Agent") -> dict[str, Any]:
    """The Acme question: the decision record, the honest answer, a rejected citation."""
    out: dict[str, Any] = {}
    run = agent.new_run()
    body = agent.search(run, ACME_QUESTION, valid_at=ACME_VALID_AT)  # the default top_k: links, not ranks
    decision = body["decision"]
    out["decision"] = decision
    show_decision(decision)
    read = {e["passage_id"]: e for e in body["excerpts"]}
    for x in decision["rejected"]:  # a defeating id may come from the contradiction search: read it
        for pid in (x["passage_id"], x["by"]):
            if pid and pid not in read:
                got = agent.fetch(run, pid)
                if got and got.get("passages"):
                    read[pid] = got["passages"][0]
    honest = honest_response(decision, read)
    out["honest"] = honest
    print(f"  honest response, from the record alone: {honest!r}")
    target = next((x["passage_id"] for x in decision["rejected"] if x["passage_id"] in read
                   and _sentence_with(read[x["passage_id"]]["text"], "until")), None)
    if target is None:
        print("  (nothing in this search was rejected, so there is no rejected citation to attempt)")
        return out
    quote = _sentence_with(read[target]["text"], "until")
    claim = {"statement": f"Acme's EUR cutoff is {_value(quote, 'until')}.", "passage_id": target, "quote": quote}
    print(f"  a careless answer cites the rejected {target}: quote {quote!r}")
    ans = agent.answer(run, {"claims": [claim]})
    out["rejected_attempt"] = ans
    trace = agent.trace(ans["trace_id"])
    out["rejected_reason"] = trace.get("reason")
    failed = [c["failed"] for c in trace.get("checks", [])]
    print(f"  submit_answer -> status {ans['status']!r}; the user sees: {ans['message']!r}")
    print(f"  the operator trace says {trace.get('reason')!r}; failed checks {failed}")
    return out


def scripted_agent(base_url: str, secret: str) -> dict[str, Any]:
    """Run the scripted agent; returns what happened (for tests)."""
    import httpx

    from quarry.serve.http.auth import mint_token  # the serve extra (jwt): deferred

    out: dict[str, Any] = {}
    token = mint_token(TENANT, "demo-agent", GROUPS, secret=secret, ttl_s=900)
    op = mint_token(TENANT, "demo-operator", (), secret=secret, ttl_s=900, scope="operator")
    _say(f"minted a token for {TENANT}/demo-agent groups={list(GROUPS)}; the tools never take a tenant or group")
    with httpx.Client(base_url=base_url, timeout=120) as http:
        agent = Agent(http, token, op)
        tools = http.get("/v1/tools").json()
        print("  tools: " + ", ".join(t["name"] for t in tools["anthropic"]))

        _step(f"1. search as {TENANT} all-staff: {QUESTION!r}")
        run = agent.new_run()
        first = agent.search(run, QUESTION, top_k=3)
        out["first"] = first

        _step("2. read the evidence: does an excerpt point elsewhere?")
        footnote = None
        for e in first["excerpts"]:
            s = _sentence_with(e["text"], "Security add-on")
            if s:
                footnote = (e, s)
                break
        if footnote is None:
            raise RuntimeError("the first search did not return the pricing footnote")
        print(f"  {footnote[0]['passage_id']} says: {footnote[1]!r}")
        print(f"  -> the answer depends on the Security add-on page; search again with its words")
        second = agent.search(run, FOLLOW_UP, top_k=3)
        out["second"] = second

        _step("3. answer with claims that quote the retrieved passages exactly")
        # The footnote named "the Security add-on page": prefer the excerpt titled so, and
        # only a price written on an add-on page (the older "security bundle" FAQ differs).
        priced = []
        for e in second["excerpts"]:
            m = re.search(r"EUR\s+\d+(?:\.\d+)?\s+per seat per month", e["text"])
            if m and "security add-on" in (e["title"] + " " + e["text"]).lower():
                priced.append((e["title"].strip().lower() != "security add-on", e, m.group(0)))
        price = min(priced, key=lambda t: t[0])[1:] if priced else None
        claims = [{"statement": "On the Pro plan, SSO is available only with the Security add-on.",
                   "passage_id": footnote[0]["passage_id"], "quote": footnote[1]}]
        if price is not None:
            claims.append({"statement": f"The Security add-on costs {price[1]} on the Pro plan.",
                           "passage_id": price[0]["passage_id"], "quote": price[1]})
        for c in claims:
            print(f"  claim: {c['statement']}\n         cites {c['passage_id']}, quote {c['quote']!r}")
        ans = agent.answer(run, {"claims": claims})
        out["answer"] = ans
        print(f"  submit_answer -> status {ans['status']!r}")
        checks = agent.trace(ans["trace_id"]).get("checks", [])
        out["checks"] = checks
        for c in checks:
            verdicts = ", ".join(f"{n}={'pass' if c[n] else 'FAIL'}" for n in CHECK_NAMES)
            print(f"  checks (from the operator trace) for {c['passage_id']}: {verdicts}")

        _step(f"4. an honest abstention: {UNANSWERABLE!r}")
        run2 = agent.new_run()
        evidence = []
        for q in (UNANSWERABLE, UNANSWERABLE_RETRY):
            body = agent.search(run2, q, top_k=3)
            hits = [e["passage_id"] for e in body["excerpts"]
                    if any(re.search(rf"\b{t}\b", e["text"].lower()) for t in UNANSWERABLE_TERMS)]
            print(f"  excerpts mentioning {'/'.join(UNANSWERABLE_TERMS)}: {hits or 'none'}")
            evidence += hits
            if hits or body["searches_left"] == 0:
                break
        out["abstention_evidence"] = evidence
        if evidence:
            raise RuntimeError(f"the corpus was not expected to answer {UNANSWERABLE!r}: {evidence}")
        print("  -> nothing retrieved says anything about JPY: abstain instead of guessing")
        abst = agent.answer(run2, {"abstention": {"reason": "No retrieved passage mentions JPY or yen."}})
        out["abstention"] = abst
        print(f"  submit_answer -> status {abst['status']!r}; the user sees: {abst['message']!r}")
        reason = agent.trace(abst["trace_id"]).get("reason")
        out["abstention_reason"] = reason
        print(f"  the reason code {reason!r} is only in the protected trace "
              f"(generic message: {abst['message'] == ABSTENTION_MESSAGE})")

    _step(f"5. relevance is not authority: {ACME_QUESTION!r} as {ACME_TENANT} all-staff")
    acme_tok = mint_token(ACME_TENANT, "demo-agent", ACME_GROUPS, secret=secret, ttl_s=900)
    acme_op = mint_token(ACME_TENANT, "demo-operator", (), secret=secret, ttl_s=900, scope="operator")
    with httpx.Client(base_url=base_url, timeout=120) as http:
        out["acme"] = acme_case(Agent(http, acme_tok, acme_op))
    return out


# ----------------------------------------------------------------------------- main

def run(args) -> int:
    from quarry.serve import launch  # the serve extra (ray): deferred
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = launch.absolute_root(args.index_root)
    t0 = time.perf_counter()
    _step("build the sample corpus")
    build(root, args.embedder, args.build)

    _step("start the Serve endpoint in this process")
    secret = secrets.token_urlsafe(48)  # this demo's own signing key; nothing is written to ~/.quarry
    port = args.port or launch.free_port()
    settings = ServeSettings(index_root=root, auth=AuthSettings(hs256_secret=secret), ray_namespace="quarry-demo",
                             store_name_prefix="quarry-demo")
    ok = False
    try:
        base = launch.start(settings, "127.0.0.1", port, ray_init={
            "num_cpus": args.ray_cpus, "include_dashboard": False, "log_to_driver": False,
            "configure_logging": False})
        _say(f"serving on {base} (OpenAPI docs {base}/docs) after {time.perf_counter() - t0:.1f}s")
        out = scripted_agent(base, secret)
        ok = out["answer"]["status"] == "answered" and all(
            all(c[n] for n in ("retrieved", "quote_length", "quote_match", "numbers")) for c in out["checks"])
        ok = ok and out["abstention"]["status"] == "abstained"
        attempt = out["acme"].get("rejected_attempt")  # present whenever resolution rejected a source
        ok = ok and (attempt is None or (attempt["status"] == "abstained"
                                         and out["acme"]["rejected_reason"] == "cites_rejected_evidence"))
    finally:
        _step("shut down")
        launch.stop()
        _say(f"Serve and Ray stopped; total {time.perf_counter() - t0:.1f}s")
    if not ok:
        print("[demo] FAILED: the answer did not pass its citation checks or the abstention did not hold",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from quarry.cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))
