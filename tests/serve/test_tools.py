import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from quarry.serve.tools import FetchRequest, SearchRequest, SubmitAnswerRequest, tool_definitions

pytestmark = pytest.mark.unit

FORBIDDEN = {"tenant", "user", "group", "groups", "subject", "sub", "principal", "user_id", "tenant_id"}


def _properties(node, path=""):
    """Every (path, name, schema) of a property anywhere in the schema."""
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            yield f"{path}.{name}", name, sub
        for k, v in node.items():
            yield from _properties(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _properties(v, f"{path}[{i}]")


def test_schemas_validate_and_every_field_is_described():
    defs = tool_definitions()
    assert [t["function"]["name"] for t in defs["openai"]] == ["search", "fetch", "submit_answer"]
    assert [t["name"] for t in defs["anthropic"]] == ["search", "fetch", "submit_answer"]
    for o, a in zip(defs["openai"], defs["anthropic"]):
        assert o["function"]["parameters"] == a["input_schema"]
        assert len(a["description"]) > 80
        schema = a["input_schema"]
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert "$ref" not in str(schema)
        props = list(_properties(schema))
        assert props
        for path, name, sub in props:
            assert name.lower() not in FORBIDDEN, path
            assert "tenant" not in name.lower() and "group" not in name.lower(), path
            assert sub.get("description"), f"{a['name']}{path} has no description"


def test_schemas_accept_and_reject_like_the_models():
    by_name = {t["name"]: Draft202012Validator(t["input_schema"]) for t in tool_definitions()["anthropic"]}
    good = {"claims": [{"statement": "s", "passage_id": "d@1#a", "quote": "one two three four"}]}
    assert by_name["submit_answer"].is_valid(good)
    assert not by_name["search"].is_valid({"query": "x", "tenant": "globex"})
    assert by_name["search"].is_valid({"query": "x", "top_k": 3, "doc_type": ["policy"], "valid_at": "2026-01-01"})
    assert not by_name["fetch"].is_valid({"id": "x", "groups": ["hr"]})


def test_models_forbid_extra_fields_and_need_exactly_one_answer_form():
    with pytest.raises(ValidationError):
        SearchRequest(query="pay bands", tenant="globex")
    with pytest.raises(ValidationError):
        FetchRequest(id="x", user="u")
    with pytest.raises(ValidationError):
        SubmitAnswerRequest()
    with pytest.raises(ValidationError):
        SubmitAnswerRequest(claims=[], abstention=None)
    claim = {"statement": "s", "passage_id": "d@1#a", "quote": "one two three four"}
    with pytest.raises(ValidationError):
        SubmitAnswerRequest(claims=[claim], abstention={"reason": "r"})
    assert SubmitAnswerRequest(abstention={"reason": "nothing relevant"}).claims is None
    assert SubmitAnswerRequest(claims=[claim]).claims[0].passage_id == "d@1#a"


def test_server_ceilings_are_in_the_search_schema():
    defs = tool_definitions(top_k_ceiling=10, candidates_ceiling=60)
    search = defs["anthropic"][0]["input_schema"]
    Draft202012Validator.check_schema(search)
    v = Draft202012Validator(search)
    assert v.is_valid({"query": "x", "top_k": 10, "candidates": 60})
    assert not v.is_valid({"query": "x", "top_k": 11}) and not v.is_valid({"query": "x", "candidates": 61})
    assert "At most 10" in search["properties"]["top_k"]["description"]
    assert defs["openai"][0]["function"]["parameters"] == search
    # the module-level definitions are not mutated by a server's ceilings
    assert tool_definitions()["anthropic"][0]["input_schema"]["properties"]["top_k"]["maximum"] == 50
