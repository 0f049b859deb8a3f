"""Digests others can verify: RFC 8785 bytes, committed vectors, and the legacy scheme."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fakes.memory_ledger import MemoryLedgerStore
from tests.unit.fake_tool import AddTool, Counters, Tools
from tests.unit.test_canonical import _nested, scalars
from writegate.approval.canonical import (
    DIGEST_SCHEME,
    JCS_SCHEME,
    LEGACY_SCHEME,
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    CanonicalizationError,
    canonical_json,
    check_input,
    digest,
)
from writegate.approval.decisions import Confirm
from writegate.approval.execution import Executor
from writegate.approval.models import Identity
from writegate.approval.service import ApprovalService, Confirmation, Policy

VECTORS = json.loads(
    (Path(__file__).parents[1] / "vectors" / "args_digest.json").read_text(encoding="utf-8")
)["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_every_committed_vector_recomputes_to_its_stored_digest(vector: dict[str, Any]) -> None:
    canonical = vector["canonical"].encode("utf-8")
    assert canonical_json(vector["input"]) == canonical
    assert digest(vector["input"]) == vector["digest"]
    # What another language does with the file: hash the canonical text, nothing more.
    assert vector["digest"] == "sha256:" + hashlib.sha256(canonical).hexdigest()


def test_the_vectors_cover_the_cases_that_trip_implementations() -> None:
    texts = "".join(v["canonical"] for v in VECTORS)
    assert any(ord(c) > 0xFFFF for v in VECTORS for k in v["input"] for c in k)
    assert str(MAX_SAFE_INTEGER) in texts and str(-MAX_SAFE_INTEGER) in texts
    assert all(escape in texts for escape in ('\\"', "\\\\", "\\n", "\\t", "\\r"))
    assert any(isinstance(value, dict) for v in VECTORS for value in v["input"].values())


def test_new_digests_use_jcs_which_orders_astral_keys_by_utf16_code_units() -> None:
    value = {"\uffff": 1, "\U0001f600": 2}
    assert DIGEST_SCHEME == JCS_SCHEME
    assert canonical_json(value) == '{"\U0001f600":2,"\uffff":1}'.encode()
    # The legacy form sorted by code point: the only way the two schemes part.
    assert canonical_json(value, LEGACY_SCHEME) == '{"\uffff":1,"\U0001f600":2}'.encode()
    assert digest(value) != digest(value, LEGACY_SCHEME)


@pytest.mark.parametrize("big", [2**53, -(2**53), 10**30])
def test_an_integer_beyond_2_53_is_refused_before_anything_is_stored(big: int) -> None:
    with pytest.raises(CanonicalizationError) as refused:
        check_input({"amount_minor": big})
    assert refused.value.code == "validation_failed"
    assert "$.amount_minor" in refused.value.message


def test_a_legacy_row_with_a_big_integer_still_recomputes() -> None:
    assert canonical_json({"n": 2**60}, LEGACY_SCHEME) == b'{"n":1152921504606846976}'


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(CanonicalizationError):
        digest({}, "md5-ish")


@pytest.mark.parametrize(
    "bad", [{"r": "nul\u0000"}, {"r": "lone \ud800"}, {"k\n": 1}, {"d": _nested(MAX_DEPTH)}]
)
def test_refusals_run_before_the_jcs_encoder_sees_the_value(
    bad: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr("writegate.approval.canonical.rfc8785.dumps", seen.append)
    with pytest.raises(CanonicalizationError):
        canonical_json(bad)
    assert seen == []


# The accepted value space, keys held to the Basic Multilingual Plane.
_BMP_KEY_CHARS = st.characters(blacklist_categories=("Cc", "Cs"), max_codepoint=0xFFFF)
_ANY_KEY_CHARS = st.characters(blacklist_categories=("Cc", "Cs"))


def _values(key_chars: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(key_chars, max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    )


@given(_values(_BMP_KEY_CHARS))
def test_both_schemes_give_identical_bytes_when_every_key_is_in_the_bmp(value: Any) -> None:
    assert canonical_json(value, JCS_SCHEME) == canonical_json(value, LEGACY_SCHEME)


@given(_values(_ANY_KEY_CHARS))
def test_the_schemes_differ_at_most_in_key_order(value: Any) -> None:
    jcs, legacy = canonical_json(value), canonical_json(value, LEGACY_SCHEME)
    assert json.loads(jcs) == json.loads(legacy) == value
    assert sorted(jcs) == sorted(legacy)


class NoteTool(AddTool):
    """add(counter_id, amount, note): a free-form note, so keys can leave the BMP."""

    def normalize(self, raw: dict[str, Any]) -> dict[str, Any]:
        note = raw.get("note", {})
        return {**super().normalize({k: v for k, v in raw.items() if k != "note"}), "note": note}


def test_a_proposal_written_before_jcs_still_executes_under_its_own_scheme() -> None:
    store = MemoryLedgerStore(conn=Counters())
    service = ApprovalService(store, Tools(NoteTool()), Policy())
    alice = Identity("alice", "t1")
    args = {"counter_id": "c1", "amount": 5, "note": {"\uffff": 1, "\U0001f600": 2}}
    proposal = service.propose(
        alice, thread_id="th1", tool_call_id="c1", tool_name="add", raw_args=args
    )
    assert proposal.digest_scheme == JCS_SCHEME
    # The row as it was stored before the digest scheme existed (migration 9's default).
    old = replace(
        proposal, args_digest=digest(proposal.args, LEGACY_SCHEME), digest_scheme=LEGACY_SCHEME
    )
    assert old.args_digest != proposal.args_digest
    store.state.proposals[proposal.proposal_id] = old
    confirmed = service.decide(alice, Confirm(action="confirm", proposal_id=old.proposal_id))
    assert isinstance(confirmed, Confirmation)
    receipt = Executor(service).execute(alice, confirmed.token, proposal_id=old.proposal_id)
    assert receipt.status == "succeeded"
    execution = next(iter(store.state.executions.values()))
    assert (execution.args_digest, execution.digest_scheme) == (old.args_digest, LEGACY_SCHEME)
