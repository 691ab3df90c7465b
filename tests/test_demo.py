"""The main job end to end: `quarry demo` in a subprocess (its own Ray, so it cannot clash
with the tests/serve session), on the fast hashing embedder and the in-process build.
The Spark build's equality with the in-process build is tested in tests/jobs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from quarry.core.agent.citations import ABSTENTION_MESSAGE

pytestmark = [pytest.mark.slow, pytest.mark.serve]


def test_demo_runs_the_scripted_agent_over_http(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "QUARRY_HOME": str(tmp_path / "home")}
    env.pop("RAY_ADDRESS", None)
    p = subprocess.run(
        [sys.executable, "-m", "quarry.cli", "demo", "--embedder", "hashing", "--build", "in-process",
         "--index-root", str(tmp_path / "idx")],
        capture_output=True, text=True, timeout=400, env=env,
    )
    out = p.stdout
    assert p.returncode == 0, out[-4000:] + p.stderr[-4000:]
    assert "(in-process build)" in out and "serving on http://127.0.0.1:" in out
    # the first search finds the footnote, the second search follows it
    assert "globex-pricing-pro@1#features.1 says: 'SSO is available on Pro only with the Security add-on" in out
    assert "search('Security add-on SSO price'" in out
    # every claim passed all four checks on the server
    check_lines = [line for line in out.splitlines() if "checks (from the operator trace)" in line]
    assert len(check_lines) == 2 and all("FAIL" not in line for line in check_lines)
    assert "submit_answer -> status 'answered'" in out
    # the abstention: generic message to the user, reason code only in the trace
    assert f"status 'abstained'; the user sees: {ABSTENTION_MESSAGE!r}" in out
    assert "reason code 'model_abstained' is only in the protected trace" in out
    assert out.count("searches left:") >= 6 and "stages: filter=" in out
    # the Acme question: the decision record, the honest response built from it
    assert "5. relevance is not authority: \"Which settlement cutoff applies to Acme's Monday EUR batch on 19 January?\"" in out
    assert "decision record (valid at " in out and "    governing   settlement-policy@3#" in out
    assert "honest response, from the record alone: 'The " in out
    # policy v3 governs, the superseded runbook and the ended exception are rejected, at the
    # default top_k: the evidence graph follows the links whatever the ranker delivered
    assert "rejected    settlement-runbook@2#" in out and "superseded_by by settlement-policy@3#" in out
    assert "I therefore resolve the cutoff to 15:00" in out
    assert "rejected    ticket-482-comment-17@1#" in out and "condition_ended by deploy-acme-cutover@1#" in out
    assert "the operator trace says 'cites_rejected_evidence'; failed checks [['not_rejected']]" in out
    assert "Serve and Ray stopped" in out
    assert not (tmp_path / "home").exists()  # the demo signs with its own key, writes nothing there
