"""Every policy declares itself once (``POLICY``, policies/base.py): the router reads the declaration, and every
guarantee it declares holds on random problems without demand caps (hypothesis, the strategies of
test_properties.py)."""

from __future__ import annotations

import inspect

import pytest
from hypothesis import given

from slurm_fair import catalog, fairness, policies
from slurm_fair.config import PolicyConfig
from slurm_fair.errors import InputError
from slurm_fair.policies.base import PROPERTIES, Policy

from tests.conftest import SETTINGS, problems

NAMES = list(catalog.POLICIES)


@pytest.mark.parametrize("name", NAMES)
def test_each_module_declares_its_policy_and_the_declaration_matches_its_solve(name):
    p = policies.policy(name)
    assert isinstance(p, Policy) and p.name == name and p.claim
    params = inspect.signature(p.solve).parameters
    assert set(p.options) <= set(params), name  # a declared knob is a keyword of solve
    assert p.warm == ("warm" in params), name
    assert set(p.options) <= set(PolicyConfig().options()), name  # and one the config hands out


def test_the_router_passes_only_declared_knobs_and_warm_starts():
    seen = {}

    def fake(problem, solver=None, **kw):
        seen.update(kw, solver=solver)
        return "alloc"

    p = Policy("x", fake, options=("f",), warm=False)
    assert p("problem", solver="ECOS", warm=[1], options={"f": 0.5, "lease_s": 9}) == "alloc"
    assert seen == {"f": 0.5, "solver": "ECOS"}  # no lease_s (not its knob), no warm (it takes none)
    with pytest.raises(ValueError, match="unknown property"):
        Policy("y", fake, guarantees=("fast",))
    with pytest.raises(InputError, match="unknown policy"):
        policies.policy("nope")


DECLARED = [(n, g) for n in NAMES for g in policies.policy(n).guarantees if g != "strategy_proof_probe"]


def test_some_policies_declare_guarantees():
    assert {g for _, g in DECLARED} <= set(PROPERTIES) and len(DECLARED) >= 8


@pytest.mark.parametrize("name,prop", DECLARED)
@SETTINGS
@given(p=problems(max_n=4, max_classes=2))
def test_every_declared_guarantee_holds_without_demand_caps(name, prop, p):
    alloc = policies.solve(name, p)
    result = getattr(fairness, prop)(alloc)
    assert result.value is True, f"{name} declares {prop}: {result.detail}"
