import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from quarry.serve.http.tools import FetchRequest, SearchRequest, SubmitAnswerRequest, tool_definitions

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


def _typed_nodes(node):
    if isinstance(node, dict):
        if "type" in node:
            yield node
        for v in node.values():
            yield from _typed_nodes(v)
    elif isinstance(node, list):
        for v in node:
            yield from _typed_nodes(v)


def test_every_string_and_list_is_bounded():
    """Nothing an agent sends is unbounded (count and length)."""
    for tool in tool_definitions(10, 60)["anthropic"]:
        nodes = list(_typed_nodes(tool["input_schema"]))
        # a format: date string is a fixed-width YYYY-MM-DD, checked by its own validator
        strings = [n for n in nodes if n["type"] == "string" and n.get("format") != "date"]
        arrays = [n for n in nodes if n["type"] == "array"]
        assert strings, tool["name"]
        for n in strings:
            assert 0 < n.get("maxLength", 0) <= 2000, (tool["name"], n)
        for n in arrays:
            assert 0 < n.get("maxItems", 0) <= 20, (tool["name"], n)


@pytest.mark.parametrize("body", [
    {"query": "x", "top_k": "5"}, {"query": "x", "top_k": True}, {"query": "x", "candidates": "5"},
    {"query": "x", "valid_at": 0}, {"query": "x", "valid_at": "2026-01-01T00:00:00"}, {"query": "x\x00"},
    {"query": "   "}, {"query": "x", "doc_type": ["policy"] * 17}, {"query": "x", "doc_type": ["Policy"]},
    {"query": "x", "doc_type": []},
])
def test_model_and_schema_refuse_the_same_search_inputs(body):
    from quarry.serve.http.tools import SearchToolRequest

    schema = Draft202012Validator(tool_definitions(10, 60)["anthropic"][0]["input_schema"],
                                  format_checker=Draft202012Validator.FORMAT_CHECKER)
    assert not schema.is_valid(body)
    with pytest.raises(ValidationError):
        SearchToolRequest.model_validate(body)


def test_model_and_schema_accept_the_same_search_inputs():
    from quarry.serve.http.tools import SearchToolRequest

    schema = Draft202012Validator(tool_definitions(10, 60)["anthropic"][0]["input_schema"],
                                  format_checker=Draft202012Validator.FORMAT_CHECKER)
    for body in ({"query": "x", "top_k": 5.0}, {"query": " x\t", "valid_at": "2026-02-28", "doc_type": ["policy"]},
                 {"query": "x", "candidates": None, "valid_at": None, "doc_type": None}):
        assert schema.is_valid(body)
        SearchToolRequest.model_validate(body)


def test_answer_takes_exactly_one_key_and_no_nulls():
    claim = {"statement": "s", "passage_id": "d@1#a", "quote": "one two three four"}
    for bad in ({"claims": None}, {"abstention": None}, {"claims": None, "abstention": {"reason": "r"}},
                {"claims": [claim], "abstention": None}):
        with pytest.raises(ValidationError):
            SubmitAnswerRequest.model_validate(bad)
    schema = tool_definitions()["anthropic"][2]["input_schema"]
    assert "anyOf" not in schema["properties"]["claims"] and schema["properties"]["claims"]["type"] == "array"
